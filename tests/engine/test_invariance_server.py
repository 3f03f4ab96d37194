"""Same request, same answer, through the real server and the official SDKs on every
surface: with the default switches (float16 KV cache, int16 products, prefix cache on) an
answer equals a cold server's (``--prefix-cache-mb 0 --prompt-lookup off``) after
requests sharing its prefix, from a full hit, streamed, batched with neighbours and as the
next turn over the cached earlier one — its text, and on the OpenAI surfaces each token's
log-probability; greedy, and seeded where the API has a seed; and the
same on a ``--kv-bits 8`` server and a draft-model server against their own cold answers.
Prefill chunk sizes: ``test_invariance.py`` (the engine's source, in-process)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest
from servers import cli_server

pytestmark = pytest.mark.slow

SYSTEM = "You are a helpful assistant who answers briefly."
QUESTION = "Say hello."
NEIGHBOURS = ["Name three colours.", "Count to five.", "What is a cat?"]
TOKENS = 12
GREEDY: dict[str, Any] = {"temperature": 0}
SEEDED: dict[str, Any] = {"temperature": 0.9, "seed": 1234}
Messages = list[dict[str, str]]


def openai_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)


def with_logprobs(text: str, logprobs: list[float]) -> str:
    """The text and each token's log-probability (float32 bits survive JSON's doubles), so
    a difference in the numbers shows even where it flips no token."""
    return f"{text} {logprobs}"


def chat(base: str, messages: Messages, sampling: dict, stream: bool) -> str:
    client = openai_client(base)
    params = dict(model="m", messages=[{"role": "system", "content": SYSTEM}, *messages])
    params.update(max_tokens=TOKENS, logprobs=True, **sampling)
    if not stream:
        choice = client.chat.completions.create(**params).choices[0]
        logprobs = [t.logprob for t in (choice.logprobs.content or [])] if choice.logprobs else []
        return with_logprobs(choice.message.content or "", logprobs)
    text, logprobs = "", []
    for chunk in client.chat.completions.create(**params, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            if chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
                logprobs += [t.logprob for t in chunk.choices[0].logprobs.content]
    return with_logprobs(text, logprobs)


def completions(base: str, messages: Messages, sampling: dict, stream: bool) -> str:
    client = openai_client(base)
    prompt = "\n".join([SYSTEM, *(m["content"] for m in messages)]) + "\n"
    params = dict(model="m", prompt=prompt, max_tokens=TOKENS, logprobs=0, **sampling)
    if not stream:
        choice = client.completions.create(**params).choices[0]
        assert choice.logprobs is not None
        return with_logprobs(choice.text, list(choice.logprobs.token_logprobs or []))
    text, logprobs = "", []
    for chunk in client.completions.create(**params, stream=True):
        text += chunk.choices[0].text
        if chunk.choices[0].logprobs:
            logprobs += list(chunk.choices[0].logprobs.token_logprobs or [])
    return with_logprobs(text, logprobs)


def messages(base: str, turns: Messages, sampling: dict, stream: bool) -> str:
    client = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0, timeout=300)
    params = dict(model="m", system=SYSTEM, messages=turns, max_tokens=TOKENS)
    params["extra_body"] = sampling  # this SDK's create() has no temperature argument
    if not stream:
        reply = client.messages.create(**params)
        return "".join(b.text for b in reply.content if b.type == "text")
    with client.messages.stream(**params) as events:
        return events.get_final_text()


def responses(base: str, turns: Messages, sampling: dict, stream: bool) -> str:
    client = openai_client(base)
    params = dict(model="m", instructions=SYSTEM, input=turns, max_output_tokens=TOKENS)
    params.update(store=False, **sampling)
    if not stream:
        return client.responses.create(**params).output_text
    events = client.responses.create(**params, stream=True)
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


Surface = Callable[[str, Messages, dict, bool], str]
# the seed is an OpenAI field; Anthropic's and the Responses API's bodies have none
# Two cases run on the Mac lane too (scripts/test_mac_path.sh: MLX's own kernels, no
# native extension): a seeded OpenAI answer with its log-probabilities, a streamed Anthropic one.
CASES = [
    pytest.param(chat, GREEDY, id="chat-greedy"),
    pytest.param(chat, SEEDED, id="chat-seeded", marks=pytest.mark.mac_path),
    pytest.param(completions, GREEDY, id="completions-greedy"),
    pytest.param(completions, SEEDED, id="completions-seeded"),
    pytest.param(messages, GREEDY, id="messages-greedy", marks=pytest.mark.mac_path),
    pytest.param(responses, GREEDY, id="responses-greedy"),
]


@pytest.fixture(scope="module")
def cold_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("cold") / "server.log"
    with cli_server("--prefix-cache-mb", "0", "--prompt-lookup", "off", log_path=log) as base:
        yield base


def user(text: str) -> Messages:
    return [{"role": "user", "content": text}]


def assert_every_state_gives(surface: Surface, base: str, sampling: dict, want: str) -> None:
    """On ``base`` (prefix cache on): after a request sharing the system prompt, from a full
    hit, streamed, and batched with neighbours, the answer is ``want``."""
    ask = lambda text, stream=False: surface(base, user(text), sampling, stream)  # noqa: E731
    ask(NEIGHBOURS[0])  # a partial hit: the system prompt
    assert ask(QUESTION) == want, "after a request sharing the prefix"
    assert ask(QUESTION) == want, "from a full hit"
    assert ask(QUESTION, True) == want, "streamed"
    with ThreadPoolExecutor(len(NEIGHBOURS) + 1) as pool:
        answers = list(pool.map(ask, [*NEIGHBOURS[1:], QUESTION, NEIGHBOURS[0]]))
    assert answers[len(NEIGHBOURS) - 1] == want, "batched with neighbours"


def reply_text(answer: str) -> str:
    """The reply without the log-probabilities ``with_logprobs`` appends."""
    return answer.rsplit(" [", 1)[0] if answer.endswith("]") else answer


def next_turn(first: str) -> Messages:
    return [*user(QUESTION), {"role": "assistant", "content": first}, *user("And one more?")]


@pytest.mark.parametrize(("surface", "sampling"), CASES)
def test_cache_states_batches_and_streams_give_the_cold_answer(
    surface: Surface, sampling: dict, real_server: str, cold_server: str
) -> None:
    want = surface(cold_server, user(QUESTION), sampling, False)
    assert want
    assert_every_state_gives(surface, real_server, sampling, want)
    # the next turn, its earlier turn cached (generated tokens included) vs cold
    turn = next_turn(reply_text(surface(real_server, user(QUESTION), sampling, False)))
    cold = surface(cold_server, turn, sampling, False)
    assert surface(real_server, turn, sampling, False) == cold, "over the cached earlier turn"


@pytest.fixture(scope="module", params=["kv_bits_8", "draft"])
def other_server(request, tmp_path_factory):
    args = {
        "kv_bits_8": ["--kv-bits", "8"],
        "draft": ["--draft-model", "default", "--num-draft-tokens", "3"],
    }[request.param]
    log = tmp_path_factory.mktemp(request.param) / "server.log"
    with cli_server(*args, log_path=log) as base:
        # a draft's verification normalizes each row as plain decoding does: the tokens and
        # their log-probabilities are the same alone (speculating) and batched (not)
        yield base


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_quantized_kv_and_a_draft_model_give_their_cold_answer(
    other_server: str, sampling: dict
) -> None:
    """The server's first answer to this question is cold (nothing shares its prefix yet)."""
    base = other_server
    question = [{"role": "system", "content": f"{SYSTEM} ({sampling['temperature']})"}]
    params = dict(model="m", max_tokens=TOKENS, logprobs=True, **sampling)
    client = openai_client(base)

    def ask(text: str) -> str:
        reply = client.chat.completions.create(messages=[*question, *user(text)], **params)
        choice = reply.choices[0]
        logprobs = [t.logprob for t in (choice.logprobs.content or [])] if choice.logprobs else []
        return with_logprobs(choice.message.content or "", logprobs)

    want = ask(QUESTION)
    ask(NEIGHBOURS[0])
    assert ask(QUESTION) == want, "after a request sharing the prefix"
    assert ask(QUESTION) == want, "from a full hit"
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(ask, [NEIGHBOURS[1], QUESTION, NEIGHBOURS[2]]))[1] == want
