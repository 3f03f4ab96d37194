"""`--prompt-lookup` through the real CLI server and the OpenAI SDK: answers that copy their
prompt, alone and several at once, greedy and seeded, equal a `--prompt-lookup off`
server's (text and every token's log-probability), and /metrics counts the accepted drafts."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from servers import cli_server

pytestmark = pytest.mark.slow

CODE = "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
ASKS = [
    ({"temperature": 0}, f"Repeat this code exactly:\n{CODE}"),
    ({"temperature": 0.7, "seed": 5}, f"Copy this:\n{CODE}"),
    ({"temperature": 0}, "Name three colours."),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("lookup")
    with (
        cli_server("--prompt-lookup", "on", log_path=logs / "on.log") as on,
        cli_server("--prompt-lookup", "off", log_path=logs / "off.log") as off,
    ):
        yield on, off


def answer(base: str, sampling: dict, text: str) -> tuple[str, list[float]]:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
    choice = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        max_tokens=40,
        logprobs=True,
        **sampling,
    ).choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    return choice.message.content or "", [t.logprob for t in choice.logprobs.content]


def counter(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match is not None
    return float(match.group(1))


def test_answers_in_one_batch_equal_the_server_without_lookup(servers):
    on, off = servers
    with ThreadPoolExecutor(len(ASKS)) as pool:
        got = list(pool.map(lambda ask: answer(on, *ask), ASKS))
    assert got == [answer(off, *ask) for ask in ASKS]
    assert counter(off, "vllm_mlx_spec_draft_tokens_total") == 0


def test_a_copying_answer_alone_uses_its_drafts_and_equals_the_server_without_lookup(servers):
    """Alone (a batch verifies only when every row proposes: the chat above seldom does)."""
    on, off = servers
    before = counter(on, "vllm_mlx_spec_accepted_tokens_total")
    for ask in ASKS[:2]:
        assert answer(on, *ask) == answer(off, *ask)
    assert counter(on, "vllm_mlx_spec_accepted_tokens_total") > before
