"""The MTP head drafting inside the continuous batch: every row keeps plain decoding's
tokens (greedy, penalties, seeded), a right head's drafts are all accepted in the batch,
and a row's head reads the positions its cache kept."""

from __future__ import annotations

import pytest
from same_numbers import run as schedule
from same_numbers import together
from tiny_mtp import RowOracleHeads, loaded_with_heads, write_mtp_folder

from vllm_mlx.engine import lookup_verify
from vllm_mlx.engine.drafting import Drafting
from vllm_mlx.engine.mtp_batch import MtpDrafter
from vllm_mlx.engine.sources import ModelBatchSource

PROMPTS = (
    "<|im_start|>user\nWrite a haiku about rivers<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName a colour<|im_end|>\n",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCount to five<|im_end|>\n",
)


@pytest.fixture(scope="module", params=("glm4_moe", "mimo", "qwen3_next"))
def checkpoint(request, tmp_path_factory):
    folder = write_mtp_folder(tmp_path_factory.mktemp(request.param), request.param, seed=4)
    return loaded_with_heads(folder)


def run(source: ModelBatchSource, prompts: list[list[int]], params: dict, max_tokens: int):
    """Every prompt's tokens, all inserted before the first step (the first starts alone
    and moves into the batch when the second arrives)."""
    return [tokens for tokens, _ in together(source, prompts, params, max_tokens)]


def prompts_of(loaded) -> list[list[int]]:
    return [loaded.tokenizer.encode(p) for p in PROMPTS]


@pytest.mark.parametrize(
    "params, mtp_tokens",
    [
        ({"temperature": 0}, 1),
        ({"temperature": 0}, 3),
        ({"temperature": 0, "repetition_penalty": 1.3}, 2),
        ({"temperature": 0.9, "seed": 11}, 2),
        ({"temperature": 0.7, "top_k": 20, "seed": 5}, 3),
    ],
    ids=["greedy", "greedy chained", "penalty", "seeded", "seeded top-k"],
)
def test_rows_in_the_batch_keep_plain_decoding_tokens(checkpoint, params, mtp_tokens):
    loaded, heads = checkpoint
    prompts = prompts_of(loaded)
    expected = run(ModelBatchSource(loaded.model), prompts, params, 20)
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=heads, mtp="on", mtp_tokens=mtp_tokens)
    )
    assert isinstance(source.lookup.drafter, MtpDrafter)
    assert run(source, prompts, params, 20) == expected
    assert source.handovers == 1  # the first request started alone
    assert source.lookup.verifies > 0  # drafts verified in the batch, not only alone


@pytest.mark.parametrize("mtp_tokens", [1, 3])
def test_a_right_heads_drafts_are_accepted_in_the_batch(checkpoint, mtp_tokens):
    loaded, heads = checkpoint
    prompts = prompts_of(loaded)
    expected = run(ModelBatchSource(loaded.model), prompts, {"temperature": 0}, 24)
    sequences = [p + e + [0] * 8 for p, e in zip(prompts, expected, strict=True)]
    # a row's head starts at its first decode step: the first generated token (the prompt's
    # last call gave it), followed by the second
    oracle = RowOracleHeads(heads, sequences, [len(p) + 1 for p in prompts])
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=oracle, mtp="on", mtp_tokens=mtp_tokens)
    )
    assert run(source, prompts, {"temperature": 0}, 24) == expected
    lookup = source.lookup
    assert lookup.verifies > 0 and lookup.drafted > 0
    assert lookup.accepted == lookup.drafted
    # fewer steps than tokens: the batch's rows took several a step
    assert lookup.verifies < 24 - 1


def test_chains_kept_in_part_leave_every_row_on_plain_decoding(checkpoint):
    """Verifies that keep some of each chain: the rows' caches are taken back past the
    rejected positions (Qwen3-Next's recurrent states restored and the kept tokens run
    again), so later tokens are still plain decoding's."""
    loaded, heads = checkpoint
    prompts = prompts_of(loaded)
    expected = run(ModelBatchSource(loaded.model), prompts, {"temperature": 0}, 30)
    sequences = [p + e + [0] * 8 for p, e in zip(prompts, expected, strict=True)]
    oracle = RowOracleHeads(heads, sequences, [len(p) + 1 for p in prompts], miss=3)
    drafting = Drafting(mtp_heads=oracle, mtp="on", mtp_tokens=3)
    source = ModelBatchSource(loaded.model, drafting=drafting)
    assert run(source, prompts, {"temperature": 0}, 30) == expected
    lookup = source.lookup
    assert 0 < lookup.accepted < lookup.drafted


def test_auto_pauses_a_wrong_head_in_the_batch(checkpoint):
    loaded, heads = checkpoint
    prompts = prompts_of(loaded)
    expected = run(ModelBatchSource(loaded.model), prompts, {"temperature": 0}, 40)
    source = ModelBatchSource(
        loaded.model, drafting=Drafting(mtp_heads=heads, mtp="auto", mtp_tokens=2)
    )
    assert run(source, prompts, {"temperature": 0}, 40) == expected
    on = ModelBatchSource(loaded.model, drafting=Drafting(mtp_heads=heads, mtp="on", mtp_tokens=2))
    run(on, prompts, {"temperature": 0}, 40)
    assert source.lookup.drafted < on.lookup.drafted / 2


@pytest.mark.parametrize(
    "limits, admitted_after",
    [((24, 24, 24), (0, 0, 6)), ((24, 10, 24), (0, 0, 0))],
    ids=["a newcomer", "a row at its last token"],
)
def test_heads_move_with_their_rows_between_the_batches(checkpoint, limits, admitted_after):
    """Rows that draft move into the generator's second batch beside a row that does not
    (a newcomer with no head yet, or a row at its last token), their head rows with them
    (a filtered copy of the group's cache): a right head's drafts are still all accepted,
    which they are only if every row's head kept its own positions through the moves."""
    loaded, heads = checkpoint
    prompts = prompts_of(loaded)
    greedy = {"temperature": 0}
    plain = schedule(ModelBatchSource(loaded.model), prompts, greedy, limits, admitted_after)
    expected = [r[1] for r in plain]
    sequences = [p + e + [0] * 8 for p, e in zip(prompts, expected, strict=True)]
    oracle = RowOracleHeads(heads, sequences, [len(p) + 1 for p in prompts])
    source = ModelBatchSource(loaded.model, drafting=Drafting(mtp_heads=oracle, mtp="on"))
    moved: list[int] = []
    real_move = lookup_verify.move_rows

    def counted(gen, rows, to_drafting):
        moved.extend([len(rows)] if rows and to_drafting else [])
        return real_move(gen, rows, to_drafting)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lookup_verify, "move_rows", counted)
        got = [r[1] for r in schedule(source, prompts, greedy, limits, admitted_after)]
    assert got == expected
    assert moved  # rows moved into the drafting batch
    lookup = source.lookup
    assert lookup.drafted > 0 and lookup.accepted == lookup.drafted
