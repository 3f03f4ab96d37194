"""The OpenAI Responses surface: /v1/responses, its store and its MCP tools."""
