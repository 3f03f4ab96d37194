"""The Ollama API surface: /api/chat, /api/generate, /api/tags, /api/show, /api/ps."""
