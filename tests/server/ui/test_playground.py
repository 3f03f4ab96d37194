"""The playground in a real browser (Debian's chromium via playwright) against the real app
replaying a chosen model output: reasoning apart from the answer, tool calls as cards while
their arguments stream, the request the controls make, stop cancelling on the server, the
conversation surviving a reload, and no console errors or outside requests on any page."""

from __future__ import annotations

import json
import time

import httpx
from servers import paced_replay_server

THINK = "The user wants the weather in Paris. I should call the weather tool."
ANSWER = "Let me look that up."
ARGS = {"city": "Paris", "days": 2}
REPLAY = (
    f"<think>\n{THINK}\n</think>\n{ANSWER}<tool_call>\n"
    + json.dumps({"name": "get_weather", "arguments": ARGS})
    + "\n</tool_call>"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]


# records every text a tool card's arguments show, as the stream updates them
WATCH_ARGUMENTS = """() => {
  window.seenArguments = [];
  new MutationObserver(() => {
    const args = document.querySelector('[data-role=assistant] .tool-args');
    const text = args && args.textContent;
    if (text && text !== window.seenArguments.at(-1)) window.seenArguments.push(text);
  }).observe(document.getElementById('messages'),
             {subtree: true, childList: true, characterData: true});
}"""


def test_reasoning_answer_and_tool_card_land_in_their_places(tab):
    with paced_replay_server(REPLAY, delay=0.03) as (base, _, _), tab(base) as t:
        t.open()
        t.page.fill("#tools", json.dumps(TOOLS))
        t.page.evaluate(WATCH_ARGUMENTS)
        t.ask("Weather in Paris?")
        reply = t.last_reply()
        card = reply.locator('[data-part="tool-call"]')
        t.wait_done()
        final = card.locator(".tool-args").inner_text()
        assert json.loads(final) == ARGS
        # the card was shown while the reply streamed, its arguments growing piece by piece
        seen = t.page.evaluate("window.seenArguments")
        assert len(seen) >= 3 and seen[-1] == final, seen
        assert all(not s.endswith("}") for s in seen[:-2]), seen
        assert card.locator(".tool-name").inner_text() == "get_weather"
        assert card.count() == 1
        reasoning = reply.locator('[data-part="reasoning"]')
        assert reasoning.locator(".reasoning-text").text_content().strip() == THINK
        assert reasoning.get_attribute("open") is None  # folded once the answer began
        assert reply.locator('[data-part="content"]').inner_text() == ANSWER
        assert "Paris. I should" not in reply.locator('[data-part="content"]').inner_text()
        stats = reply.locator('[data-part="stats"]').inner_text()
        assert "completion" in stats and "reasoning" in stats and "tok/s" in stats, stats
        assert "tool_calls" in stats
        # the request: streamed with usage, the tools given
        body = t.bodies[-1]
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["tools"] == TOOLS and body["messages"][-1]["content"] == "Weather in Paris?"

        # the conversation is kept in the browser: a reload shows the same reply
        t.open()
        again = t.last_reply()
        assert again.locator('[data-part="content"]').inner_text() == ANSWER
        assert json.loads(again.locator(".tool-args").inner_text()) == ARGS
        assert again.locator(".reasoning-text").text_content().strip() == THINK
        assert again.locator('[data-part="stats"]').inner_text() == stats


def test_enter_sends_and_shift_enter_is_a_newline(tab):
    with paced_replay_server(ANSWER) as (base, _, _), tab(base) as t:
        t.open()
        t.page.click("#prompt")
        t.page.keyboard.type("first line")
        t.page.keyboard.press("Shift+Enter")
        t.page.keyboard.type("second line")
        assert t.page.input_value("#prompt") == "first line\nsecond line"
        assert t.page.locator('[data-role="user"]').count() == 0
        t.page.keyboard.press("Enter")
        t.wait_done()
        sent = t.page.locator('[data-role="user"] [data-part="content"]').last.inner_text()
        assert sent == "first line\nsecond line"
        assert t.page.input_value("#prompt") == ""
        assert t.last_reply().locator('[data-part="content"]').inner_text() == ANSWER
        # no reasoning in this reply: its block stays hidden
        assert not t.last_reply().locator('[data-part="reasoning"]').is_visible()


def test_controls_become_request_fields(tab):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    with paced_replay_server('{"answer": "yes"}') as (base, _, _), tab(base) as t:
        t.open()
        assert t.page.locator("#model option").all_inner_texts() == ["replay"]
        for field, value in [("#temperature", "0.3"), ("#top_p", "0.9"), ("#top_k", "20")]:
            t.page.fill(field, value)
        t.page.fill("#max_tokens", "64")
        t.page.fill("#seed", "7")
        t.page.fill("#system", "Be brief.")
        t.page.select_option("#thinking", "on")
        t.page.fill("#thinking_budget", "128")
        t.page.fill("#schema", "{not json")
        t.ask("Yes or no?")
        # an invalid schema is shown next to its box and nothing is sent
        assert t.page.inner_text("#schema-error")
        assert t.bodies == [] and t.page.locator('[data-role="user"]').count() == 0
        t.page.fill("#schema", json.dumps(schema))
        t.ask("Yes or no?")
        t.wait_done()
        body = t.bodies[-1]
        assert body["model"] == "replay"
        assert (body["temperature"], body["top_p"], body["top_k"]) == (0.3, 0.9, 20)
        assert (body["max_tokens"], body["seed"]) == (64, 7)
        assert body["reasoning_effort"] == "high" and body["thinking_token_budget"] == 128
        assert body["response_format"]["json_schema"]["schema"] == schema
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert t.last_reply().locator('[data-part="content"]').inner_text() == '{"answer": "yes"}'
        # thinking off drops the budget; the settings survive a reload
        t.page.select_option("#thinking", "off")
        t.open()
        assert t.page.input_value("#thinking") == "off"
        assert t.page.input_value("#temperature") == "0.3"
        t.ask("Again?")
        t.wait_done()
        body = t.bodies[-1]
        assert body["reasoning_effort"] == "none" and "thinking_token_budget" not in body
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "user"]


def _status(base: str) -> dict:
    return httpx.get(f"{base}/v1/status", timeout=10).json()


def _wait(condition, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_stop_aborts_the_request_and_the_server_cancels_the_generation(tab):
    long_text = "The lighthouse keeper climbed the stairs at dusk. " * 40
    with paced_replay_server(long_text, delay=0.05) as (base, source, _), tab(base) as t:
        t.open()
        t.ask("Tell me a long story.")
        content = t.last_reply().locator('[data-part="content"]')
        t.page.wait_for_function(
            "() => document.querySelector('[data-role=assistant] [data-part=content]')"
            ".textContent.length > 20"
        )
        assert _status(base)["running"] == 1
        t.page.click("#stop")
        t.wait_done()
        stats = t.last_reply().locator('[data-part="stats"]').inner_text()
        assert "stopped" in stats
        shown = content.inner_text()
        assert 20 < len(shown) < len(long_text)
        assert t.page.is_enabled("#send") and not t.page.is_enabled("#stop")
        # the server noticed the client leaving and dropped the generation
        _wait(lambda: _status(base)["running"] == 0, "the generation leaving the engine")
        produced = source.produced
        time.sleep(0.5)
        assert source.produced == produced, "the generation went on after the stop"
        total = len(source.inner.token_ids)
        assert produced < total / 2
        status = _status(base)
        assert status["requests_in_flight"] == 1  # only this status request
        # a cancelled stream is counted with the tokens it had made
        assert 0 < status["completion_tokens"] <= produced


def test_the_key_is_asked_for_and_sent(tab):
    key = "playground-key-42"
    with paced_replay_server(ANSWER, api_key=key) as (base, _, _), tab(base) as t:
        assert httpx.get(f"{base}/", headers={"accept": "text/html"}).status_code == 200
        assert httpx.get(f"{base}/v1/models").status_code == 401
        t.page.goto(base + "/")
        dialog = t.page.locator("#key-dialog")
        dialog.wait_for(state="visible")
        t.page.fill("#key-input", key)
        t.page.click("#key-form button[type=submit]")
        t.page.wait_for_selector("body[data-ready='1']")
        assert t.page.locator("#model option").all_inner_texts() == ["replay"]
        with t.page.expect_request("**/v1/chat/completions") as sent:
            t.ask("Hi")
        assert sent.value.headers["authorization"] == f"Bearer {key}"
        t.wait_done()
        assert t.last_reply().locator('[data-part="content"]').inner_text() == ANSWER
        # the status view uses the same stored key
        t.open("/status")
        t.page.wait_for_function("() => document.getElementById('s-finished').textContent === '1'")


def test_a_refused_request_shows_the_servers_error(tab):
    # a schema the server rejects (not valid against the metaschema): a 400 in OpenAI's shape
    with paced_replay_server(ANSWER) as (base, _, _), tab(base, allow_errors=True) as t:
        t.open()
        t.page.fill("#schema", json.dumps({"type": 5}))
        t.ask("Hi")
        t.wait_done()
        reply = t.last_reply()
        assert "schema" in reply.locator('[data-part="error"]').inner_text().lower()
        assert reply.locator('[data-part="content"]').inner_text() == ""
        assert t.page.is_enabled("#send")
        # the only console line is the browser's own note of the 400 response
        assert t.errors and all("400" in e for e in t.errors), t.errors


def test_a_tool_result_typed_into_the_card_continues_the_conversation(tab):
    with paced_replay_server(REPLAY) as (base, _, _), tab(base) as t:
        t.open()
        t.page.fill("#tools", json.dumps(TOOLS))
        t.ask("Weather in Paris?")
        t.wait_done()
        card = t.last_reply().locator('[data-part="tool-call"]')
        card.locator(".tool-result textarea").fill('{"forecast": "sunny"}')
        card.locator(".tool-result button").click()
        t.wait_done()
        assert t.page.locator('[data-role="assistant"]').count() == 2
        assert t.page.locator('[data-role="tool"] [data-part="content"]').inner_text() == (
            '{"forecast": "sunny"}'
        )
        messages = t.bodies[-1]["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
        call = messages[1]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == ARGS
        assert messages[2] == {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": '{"forecast": "sunny"}',
        }
        # kept too: after a reload the tool turn is still there, and no stale result form
        t.open()
        assert t.page.locator('[data-role="tool"]').count() == 1
        assert t.page.locator('[data-role="assistant"]').first.locator(".tool-result").count() == 0
