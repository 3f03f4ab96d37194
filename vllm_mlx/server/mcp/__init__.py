"""MCP on the server: the HTTP routes (/v1/mcp/...) and the one tool loop every surface
renders."""
