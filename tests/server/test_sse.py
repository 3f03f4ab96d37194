"""SSE frames cannot fail to encode what they echo: a lone surrogate in a client's field
still makes a valid UTF-8 frame."""

from __future__ import annotations

import json

from vllm_mlx.server.sse import sse_data


def test_a_frame_with_a_lone_surrogate_still_encodes():
    frame = sse_data({"type": "response.completed", "instructions": "a\ud800b"}, "x")
    frame.encode("utf-8")  # what starlette does with every frame; must not raise
    payload = frame.split("data: ", 1)[1]
    assert json.loads(payload)["instructions"] == "a\ud800b"  # the escape round-trips
    assert sse_data("[DONE]\udfff").encode("utf-8")
    assert sse_data({"t": "ünï"}) == 'data: {"t":"ünï"}\n\n'  # ordinary text stays as is
