"""The conformance corpus stays well-formed: every case can be fed to `vllm-mlx parse --jsonl`.

This checks the data only (ids, sources, shapes); running the cases through the parsers is
`tests/tool_parsers/run_corpus.py` (per-family counts) and `test_corpus.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).with_name("corpus")
CASES = [
    (path.stem, json.loads(line))
    for path in sorted(CORPUS.glob("*.jsonl"))
    for line in path.read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def test_corpus_is_not_empty_and_ids_are_unique():
    ids = [case["id"] for _, case in CASES]
    assert len(ids) > 500
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("family,case", CASES, ids=[case["id"] for _, case in CASES])
def test_case_shape(family: str, case: dict):
    assert case["id"].startswith(family + "-")
    assert isinstance(case["source"], str) and case["source"]
    assert isinstance(case["text"], str)
    for key in ("tool_call_parser", "reasoning_parser", "prompt_tail"):
        assert case[key] is None or isinstance(case[key], str)
    assert case["tools"] is None or all(t["function"]["name"] for t in case["tools"])
    expected = case["expected"]
    for key in ("content", "reasoning_content"):
        assert expected[key] is None or (isinstance(expected[key], str) and expected[key])
    for call in expected["tool_calls"]:
        assert isinstance(call["name"], str) and call["name"]
        assert isinstance(call["arguments"], dict)
        json.dumps(call["arguments"], allow_nan=False)
