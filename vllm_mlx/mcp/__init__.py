"""MCP: configured tool servers, discovered, executed safely, and looped server-side.

Modules (import them directly; this package imports nothing so ``vllm_mlx`` stays light):
``config`` (load_config/parse_config -> MCPConfig), ``security`` (validate_config,
child_environment, is_high_risk_tool), ``connection`` (one server's session), ``catalog``
(aggregated, namespaced tools), ``content`` (results as text), ``executor`` (ToolResult),
``manager`` (MCPManager) and ``loop`` (run_tool_loop: the events of every turn and call,
then its LoopResult).
"""
