"""The Anthropic Messages surface: /v1/messages and /v1/messages/count_tokens."""
