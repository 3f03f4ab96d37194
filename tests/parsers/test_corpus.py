"""The conformance corpus, in-process: every case parsed whole and in 1/3/7-character chunks.

`run_corpus.py` runs the same cases through the `vllm-mlx parse --jsonl` CLI and prints
per-family counts; this test drives the same parsers directly (`chat.parse_cli.run_parsers`)
so the corpus is part of the suite. A case passes when every mode gives the expected message
(`run_corpus.compare`) and every streamed result equals the whole one.

Cases of families that do not exist yet are skipped with the reason "family not implemented"
(`NOT_IMPLEMENTED`); cases we could not fix are listed in `KNOWN_FAILURES` with the reason,
as strict xfails, so fixing one fails the test until it is taken off the list.
"""

from __future__ import annotations

import pytest
from run_corpus import CORPUS, _shape, compare, load_cases

from vllm_mlx.chat.parse_cli import run_parsers

CHUNKS = (None, 1, 3, 7)

# Parser names of families not implemented yet (issue 11's new families, being added on
# another branch): their cases are skipped. Names of existing families are never here.
NOT_IMPLEMENTED = {
    # tool-call
    "apertus",
    "apriel",
    "cohere",
    "cohere_command3",
    "command_r",
    "deepseek32",
    "deepseek_v32",
    "deepseek_v4",
    "functionary",
    "functionary_v3",
    "json",
    "kimi_k3",
    "lfm2",
    "meetkai",
    "minimax_m3",
    "nemotron_json",
    "phi4_mini",
    "phi4_mini_json",
    "poolside_v1",
    "seed_oss",
    "step3",
    "xlam",
    # reasoning
    "cohere_cmd",
    "granite",
}
# reasoning names that exist as tool-call names (or the other way round) are told apart
NOT_IMPLEMENTED_REASONING = NOT_IMPLEMENTED - {"seed_oss"}
NOT_IMPLEMENTED_TOOL = NOT_IMPLEMENTED - {"granite"}

# Cases we could not fix, with the reason. Strict: a case that starts passing must leave.
KNOWN_FAILURES: dict[str, str] = {}


def _cases() -> list:
    params = []
    for case in load_cases(CORPUS, None):
        marks = []
        tool, reasoning = case.get("tool_call_parser"), case.get("reasoning_parser")
        if tool in NOT_IMPLEMENTED_TOOL or reasoning in NOT_IMPLEMENTED_REASONING:
            marks.append(pytest.mark.skip(reason="family not implemented"))
        elif case["id"] in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(reason=KNOWN_FAILURES[case["id"]], strict=True))
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


def _parse(case: dict, chunk_size: int | None) -> dict:
    message = run_parsers(
        case["text"],
        tool_call_parser=case.get("tool_call_parser"),
        reasoning_parser=case.get("reasoning_parser"),
        tools=case.get("tools"),
        prompt_tail=case.get("prompt_tail") or "",
        chunk_size=chunk_size,
    )
    return message.to_openai()


@pytest.mark.parametrize("case", _cases())
def test_corpus_case(case: dict) -> None:
    results = {size: _parse(case, size) for size in CHUNKS}
    whole = results[None]
    for size, got in results.items():
        assert _shape(got) == _shape(whole), f"chunks of {size} differ from the whole parse"
        verdict = compare(case["expected"], got)
        assert verdict is None, f"{'whole' if size is None else f'chunks of {size}'}: {verdict}"


def test_known_failures_name_real_cases() -> None:
    ids = {c["id"] for c in load_cases(CORPUS, None)}
    assert set(KNOWN_FAILURES) <= ids
