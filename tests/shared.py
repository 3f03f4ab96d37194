"""The test data every server test shares: prompts, the weather tool in each API's form, an
OpenAI client's history after a tool call, and the Hermes call to the toolbox MCP server's
echo tool."""

from __future__ import annotations

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
HELLO = [{"role": "user", "content": "Hello"}]
# anthropic 2.x dropped sampling arguments from messages.create; the API still has them
GREEDY = {"temperature": 0}

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
WEATHER_DESCRIPTION = "Current weather for a city"
WEATHER_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER_DESCRIPTION,
        "parameters": WEATHER_PARAMETERS,
    },
}
WEATHER_ANTHROPIC = {
    "name": "get_weather",
    "description": WEATHER_DESCRIPTION,
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **WEATHER_PARAMETERS,
    },
}
WEATHER_RESPONSES = {
    "type": "function",
    "name": "get_weather",
    "description": WEATHER_DESCRIPTION,
    "parameters": WEATHER_PARAMETERS,
}

# The one-parameter weather tool the template tests render, and the history an OpenAI client
# sends after calling it: content null on the call turn, the client's own id.
CITY_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": WEATHER_DESCRIPTION,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def tool_history(call_id: str = "call_1") -> list[dict]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "18C, sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]


# A replayed model turn calling the toolbox MCP server's echo tool (Hermes format).
ECHO_CALL = '<tool_call>\n{"name": "echo", "arguments": {"text": "ping"}}\n</tool_call>'
