"""The browser UI: a playground at ``/`` and a status view at ``/status`` (docs/playground.md).

Static pages served by the server itself; everything they show comes from the public API
(``/v1/chat/completions``, ``/v1/models``, ``/v1/mcp/tools``) and ``/v1/status``.
"""
