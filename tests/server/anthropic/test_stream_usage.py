"""Anthropic streams report one input split: ``message_start.usage`` carries the same
uncached ``input_tokens`` and ``cache_read_input_tokens`` as ``message_delta``, as
Anthropic's own API does (official SDK, replay server whose source reports a cache hit)."""

from __future__ import annotations

import anthropic
from servers import replay_server

HI = [{"role": "user", "content": "Hi"}]


def test_message_start_and_delta_agree():
    with replay_server("Hello there.") as (base, runtime):
        source = runtime.engine.source
        insert = source.insert

        def cached_insert(prompt, **kwargs):
            uid, _ = insert(prompt, **kwargs)
            return uid, 4  # as if four prompt tokens came from the prefix cache

        source.insert = cached_insert
        client = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        with client.messages.stream(model="m", max_tokens=20, messages=HI) as stream:
            events = list(stream)
        whole = client.messages.create(model="m", max_tokens=20, messages=HI)
    (start,) = [e for e in events if e.type == "message_start"]
    (delta,) = [e for e in events if e.type == "message_delta"]
    begun, ended = start.message.usage, delta.usage
    assert begun.cache_read_input_tokens == ended.cache_read_input_tokens == 4
    assert begun.input_tokens == ended.input_tokens == whole.usage.input_tokens
    assert begun.cache_creation_input_tokens == ended.cache_creation_input_tokens == 0
    assert ended.output_tokens == whole.usage.output_tokens > 0
