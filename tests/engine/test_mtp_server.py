"""`--mtp` through the real CLI server and the OpenAI SDK, on tiny MiMo and Qwen3-Next
checkpoints that carry their MTP head: `on` answers greedy and seeded requests exactly as
`off` does, and /metrics counts the head's drafts only when it is on."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from servers import cli_server
from tiny_mtp import write_mtp_folder

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module", params=["mimo", "qwen3_next"])
def servers(request, tmp_path_factory):
    arch = request.param
    tmp = tmp_path_factory.mktemp("mtp")
    folder = str(write_mtp_folder(tmp / arch, arch, seed=2))
    flags = ("--cpu-weights", "float32", "--prompt-lookup", "off", "--prefix-cache-mb", "0")
    with (
        cli_server(
            folder, *flags, "--mtp", "on", "--mtp-tokens", "2", log_path=tmp / "on.log"
        ) as on,
        cli_server(folder, *flags, "--mtp", "off", log_path=tmp / "off.log") as off,
    ):
        assert f"MTP head: {arch} layout" in (tmp / "on.log").read_text()
        yield on, off


def drafts(base: str) -> tuple[float, float]:
    text = httpx.get(f"{base}/metrics").text
    read = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))  # noqa: E731
    return read("vllm_mlx_spec_draft_tokens_total"), read("vllm_mlx_spec_accepted_tokens_total")


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}])
def test_on_answers_as_off_does(servers, sampling):
    answers = []
    for base in servers:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        reply = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=16, logprobs=True, **sampling
        )
        choice = reply.choices[0]
        answers.append((choice.message.content, [t.logprob for t in choice.logprobs.content]))
    assert answers[0][0] == answers[1][0]
    assert answers[0][1] == pytest.approx(answers[1][1], abs=1e-4)
    on, off = servers
    assert drafts(on)[0] > 0
    assert drafts(off) == (0.0, 0.0)


def test_concurrent_requests_answer_as_off_does(servers):
    """Several requests at once: the head drafts for each row of the batch."""
    questions = ["Name three colours.", "Count to five.", "Say hello in French.", "Why?"]

    def answers(base: str) -> list[str | None]:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)

        def ask(question: str) -> str | None:
            messages = [{"role": "user", "content": question}]
            reply = client.chat.completions.create(
                model="m", messages=messages, max_tokens=24, temperature=0
            )
            return reply.choices[0].message.content

        with ThreadPoolExecutor(len(questions)) as pool:
            return list(pool.map(ask, questions))

    on, off = servers
    before = drafts(on)[0]
    assert answers(on) == answers(off)
    assert drafts(on)[0] > before
