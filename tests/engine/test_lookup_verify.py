"""Prompt lookup inside the continuous batch: greedy and seeded outputs identical to decoding
without it (several concurrent requests, with and without hits, with processors), unseeded
sampling distributed exactly as plain sampling, the throttle turning it off, and on the
default model's native kernels the verified log-probabilities equal to plain decoding's."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np
import pytest
from same_numbers import drain
from tiny_models import build_tiny_model

from vllm_mlx import native
from vllm_mlx.constrained import Constraint, build_logits_processors
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.sampling import SamplingParams, make_penalty_processors, make_sampler
from vllm_mlx.engine.sources import ModelBatchSource
from vllm_mlx.protocols import LogitsProcessor

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
Request = tuple[list[int], dict, Callable[[], list[LogitsProcessor]]]


def run_batch(source: ModelBatchSource, requests: list[Request], max_tokens: int) -> list:
    """Every request's (tokens, log-probabilities), all inserted before the first step."""
    out: dict[int, tuple[list[int], list[np.ndarray]]] = {}
    for prompt, params, processors in requests:
        sampler = make_sampler(SamplingParams(**params))
        uid, _ = source.insert(
            prompt, sampler=sampler, processors=processors(), max_tokens=max_tokens
        )
        out[uid] = ([], [])
    return drain(source, out)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(tokenizer, seed=5, arch="llama")


def batch_requests(tokenizer, sampling: dict) -> list[Request]:
    code = "def f(x):\n    return x + 1\n" * 6
    return [
        (tokenizer.encode(code), sampling, lambda: []),
        (tokenizer.encode("hello there, how are you?"), sampling, lambda: []),
        (
            tokenizer.encode(code + "def g"),
            {**sampling, "repetition_penalty": 1.2},
            lambda: make_penalty_processors(SamplingParams(repetition_penalty=1.2)),
        ),
        (
            tokenizer.encode('{"n": 1} {"n": 1} {"n": 1} '),
            sampling,
            lambda: build_logits_processors(
                tokenizer, constraint=Constraint("json_schema", SCHEMA, "response_format")
            ),
        ),
    ]


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}])
def test_outputs_in_a_batch_are_those_without_lookup(model, tokenizer, sampling):
    """Four requests at once (repeated code, a chat, penalties, a JSON schema): lookup on
    verifies proposals for the batch (when every row has one) and changes no token."""
    requests = batch_requests(tokenizer, sampling)
    plain = run_batch(ModelBatchSource(model), requests, 40)
    looked = ModelBatchSource(model, drafting=Drafting(prompt_lookup="on", prompt_lookup_tokens=4))
    got = run_batch(looked, requests, 40)
    assert [tokens for tokens, _ in got] == [tokens for tokens, _ in plain]
    if sampling["temperature"] == 0:  # a random model's sampled text seldom repeats
        assert looked.lookup is not None and looked.lookup.verifies > 0
        drafted, accepted = looked.spec_counts
        assert drafted > accepted > 0


def test_each_request_alone_is_unchanged_by_lookup_and_its_neighbours(model, tokenizer):
    requests = batch_requests(tokenizer, {"temperature": 0})
    together = run_batch(
        ModelBatchSource(model, drafting=Drafting(prompt_lookup="on")), requests, 30
    )
    for request, (tokens, _) in zip(requests, together, strict=True):
        alone = run_batch(
            ModelBatchSource(model, drafting=Drafting(prompt_lookup="on")), [request], 30
        )
        assert alone[0][0] == tokens


class MarkovModel:
    """Logits at a position depend on its input token only: a Markov chain over a small
    vocabulary, whose exact sequence probabilities a test can write down."""

    layers: list = []  # no cache

    def __init__(self, log_weights: np.ndarray):
        self.table = mx.array(log_weights.astype(np.float32))

    def __call__(self, inputs: mx.array, cache=None) -> mx.array:
        return self.table[inputs]


def cycle_chain(vocab: int, stay: float) -> np.ndarray:
    """From token a, a + 1 (mod vocab) with probability ``stay``, the others evenly."""
    probs = np.full((vocab, vocab), (1 - stay) / (vocab - 1))
    for a in range(vocab):
        probs[a, (a + 1) % vocab] = stay
    return np.log(probs)


def test_unseeded_sampling_with_lookup_draws_the_chains_distribution():
    """The joint law of three generated tokens, each after a verified position (rows of a
    batch of three, cut to the shortest), against the chain's exact probabilities."""
    vocab, draws, rows = 3, 1500, 3
    log_weights = cycle_chain(vocab, stay=0.7)
    probs = np.exp(log_weights)
    model = MarkovModel(log_weights)
    prompt = [0, 1, 2] * 4  # proposals follow the cycle: often accepted, sometimes not
    mx.random.seed(0)
    counts = np.zeros((vocab,) * 3)
    source = ModelBatchSource(
        model, max_num_seqs=rows, drafting=Drafting(prompt_lookup="on", prompt_lookup_tokens=3)
    )
    request: Request = (prompt, {"temperature": 1.0}, lambda: [])
    for _ in range(draws // rows):
        for tokens, _ in run_batch(source, [request] * rows, 4):
            counts[tuple(tokens[1:])] += 1
    assert source.lookup is not None and source.lookup.accepted > 0
    # tokens[1:] are t1..t3; t0 follows the prompt's last token (2), and is summed out
    law = np.einsum("a,ab,bc,cd->bcd", probs[2], probs, probs, probs)
    total = counts.sum()
    chi2 = float((((counts - total * law) ** 2) / (total * law)).sum())
    assert chi2 < 54.05  # chi-square, 26 degrees of freedom, p = 0.001


def test_seeded_sampling_gives_the_same_tokens_with_and_without_lookup():
    model = MarkovModel(cycle_chain(5, stay=0.6))
    prompt = [0, 1, 2, 3, 4] * 3
    requests: list[Request] = [
        (prompt, {"temperature": 1.0, "seed": seed}, lambda: []) for seed in (1, 2, 3)
    ]
    plain = run_batch(ModelBatchSource(model), requests, 30)
    source = ModelBatchSource(model, drafting=Drafting(prompt_lookup="on"))
    looked = run_batch(source, requests, 30)
    assert [t for t, _ in looked] == [t for t, _ in plain]
    assert source.spec_counts[1] > 0
    again = run_batch(ModelBatchSource(model, drafting=Drafting(prompt_lookup="on")), requests, 30)
    assert [t for t, _ in again] == [t for t, _ in looked]


def test_auto_stops_verifying_a_request_whose_proposals_are_rejected():
    """The chain's argmax after a is a + 1; the prompt's n-grams say otherwise, so every
    proposal is rejected: ``on`` verifies every step, ``auto`` a few times before pausing."""
    vocab = 64
    log_weights = cycle_chain(vocab, stay=0.9)
    prompt = [t for a in range(vocab) for t in (a, (a + 1) % vocab, (a + 7) % vocab)]
    request: Request = (prompt, {"temperature": 0}, lambda: [])
    model = MarkovModel(log_weights)
    sources = {
        mode: ModelBatchSource(model, drafting=Drafting(prompt_lookup=mode))
        for mode in ("on", "auto")
    }
    outputs = {mode: run_batch(s, [request], 50)[0][0] for mode, s in sources.items()}
    plain = run_batch(ModelBatchSource(model), [request], 50)[0][0]
    assert outputs["on"] == outputs["auto"] == plain
    on, auto = (sources[m].lookup for m in ("on", "auto"))
    assert on is not None and auto is not None
    assert on.accepted == auto.accepted == 0
    assert on.verifies >= 45 and on.drafted >= 200
    assert auto.verifies <= 10 and auto.drafted <= 15


def test_off_does_not_look_up(model):
    assert ModelBatchSource(model).lookup is None
    assert ModelBatchSource(model, drafting=Drafting(prompt_lookup="off")).lookup is None


@pytest.mark.slow
@pytest.mark.skipif(not native.available(), reason="vllm_mlx.native is not built")
def test_on_the_native_kernels_verified_log_probabilities_are_plain_decodings_bits(loaded):
    """The default model (int16 products, float16 KV cache): a row of a verify block has the
    one-token decode step's bits, so greedy tokens and every log-probability match."""
    tok = loaded.tokenizer
    code = "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    chat = tok.apply_chat_template
    requests: list[Request] = [
        (
            chat(
                [{"role": "user", "content": f"Repeat this code exactly:\n{code}"}],
                add_generation_prompt=True,
            ),
            {"temperature": 0},
            lambda: [],
        ),
        (
            chat([{"role": "user", "content": f"Copy:\n{code}"}], add_generation_prompt=True),
            {"temperature": 0.7, "seed": 3},
            lambda: [],
        ),
    ]
    plain = run_batch(ModelBatchSource(loaded.model), requests, 40)
    source = ModelBatchSource(loaded.model, drafting=Drafting(prompt_lookup="on"))
    looked = run_batch(source, requests, 40)
    assert source.spec_counts[1] > 0
    for (tokens, logprobs), (want, want_logprobs) in zip(looked, plain, strict=True):
        assert tokens == want
        assert all(np.array_equal(a, b) for a, b in zip(logprobs, want_logprobs, strict=True))
