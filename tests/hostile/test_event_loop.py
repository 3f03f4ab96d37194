"""A huge request is decoded, rendered and tokenized off the event loop,
so /health (and every stream) keeps answering while it is processed; oversized requests
are refused by counting, before any rendering."""

from __future__ import annotations

import threading
import time

from .hostile import HealthProbe, check_answer, error_param, post, raw

# 1.9 M characters: under the 2 M default bound, so the server decodes 1.9 MB of JSON,
# renders it through the template and tokenizes it (then finds it too long for the context).
WORDS = "word " * 380_000
BIG = raw({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": WORDS}]})
BIG_RESPONSES = raw({"model": "m", "max_output_tokens": 4, "input": WORDS})


def _timed(base: str, path: str, body: bytes, out: dict) -> None:
    out["start"] = time.monotonic()
    out["reply"] = post(base, path, body, timeout=300)
    out["end"] = time.monotonic()


def test_health_answers_while_a_huge_prompt_is_prepared(replay_cli):
    results: list[dict] = [{} for _ in range(3)]
    with HealthProbe(replay_cli, interval=0.02) as probe:
        time.sleep(0.2)
        workers = [
            threading.Thread(target=_timed, args=(replay_cli, path, body, out))
            for (path, body), out in zip(
                (
                    ("/v1/chat/completions", BIG),
                    ("/v1/messages/count_tokens", BIG),
                    ("/v1/responses", BIG_RESPONSES),
                ),
                results,
                strict=True,
            )
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=300)
    assert not probe.failures()
    start = min(r["start"] for r in results)
    end = max(r["end"] for r in results)
    # health was answered (request sent and answer received) while the big ones were in flight
    assert probe.answered_within(start, end) >= 2, (end - start, probe.samples[-5:])
    chat, count, responses = (r["reply"] for r in results)
    assert chat.status_code == 400 and error_param(chat) == "messages"  # the context is 8k
    assert count.status_code == 200 and count.json()["input_tokens"] > 300_000
    assert responses.status_code == 400 and error_param(responses) == "input"


def test_oversized_requests_are_refused_before_rendering(replay_cli):
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}] * 10_001}),
        ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "x" * 2_000_001}]}),
        ("/v1/completions", {"prompt": "x" * 2_000_001}),
    ]
    for path, fields in cases:
        reply = post(replay_cli, path, raw({"model": "m", "max_tokens": 4, **fields}))
        assert reply.status_code == 400, reply.text[:200]
        check_answer(path, reply)
        message = reply.json()["error"]["message"]
        assert "--max-messages" in message or "--max-prompt-chars" in message, message
