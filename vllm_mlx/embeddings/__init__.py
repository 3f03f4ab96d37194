"""Embeddings and reranking: encoder models through mlx-embeddings, decoder models pooled,
cross-encoders and yes/no decoder rerankers; protocol-neutral (no HTTP)."""
