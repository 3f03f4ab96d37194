"""Property test over every parser pair: any text, any chunking.

Texts are drawn from a grammar of the family's own marker fragments (whole and cut), rendered
calls, reasoning delimiters and random text, so the markers are actually hit. For each text
and chunking: no exception, every field of every partial message is a prefix of the same
field at the end, and the joined deltas equal the non-streaming result.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parser_cases import WEATHER_TOOLS, open_stream, parse, shape

from vllm_mlx.chat.parse_cli import join_deltas
from vllm_mlx.families.catalog import REASONING_FORMATS, TOOL_CALL_FORMATS
from vllm_mlx.families.dialects import Xml

PAIRS = [(t, r) for t in TOOL_CALL_FORMATS for r in ("qwen3",)] + [
    ("harmony", "harmony"),
    (None, "deepseek_r1"),
    (None, "mistral"),
    (None, "gemma4"),
    (None, "seed_oss"),
    (None, "glm45"),
    (None, None),
]
PAIRS += [(None, r) for r in REASONING_FORMATS if (None, r) not in PAIRS and r != "harmony"]


def _fragments(tool: str | None, reasoning: str | None) -> list[str]:
    frags = ["\n", " ", "{", "}", "[", "]", '"', ",", ":", "1", "(", ")", "=", "<", ">"]
    # separators and the whitespace real models write between and inside markers; invalid
    # JSON values; a JSON-string arguments value
    frags += [";", ";\n", ", ", "\n\n", " \n ", "NaN", "True", "None", "108.", '"{\\"a\\": 1}"']
    if tool:
        for fmt in (TOOL_CALL_FORMATS[tool], *TOOL_CALL_FORMATS[tool].variants):
            call = fmt.render_call("get_weather", {"city": 'a"b', "days": 2})
            frags += [call, _spaced(call), fmt.section_start + " \n", *fmt.dropped]
            frags += [fmt.render_call("noop", {}), fmt.separator, fmt.prompt_opens]
            frags += [m for d in fmt.dropped for m in (d, d[: len(d) // 2])]
            for lit in (
                fmt.section_start,
                fmt.call_start,
                fmt.name_end,
                fmt.call_end,
                fmt.section_end,
                fmt.args_end,
            ):
                frags += [lit, lit[: len(lit) // 2]]
            if isinstance(fmt.dialect, Xml):
                xml = fmt.dialect
                frags += [xml.key_start, xml.key_end, xml.value_end]
    if reasoning:
        fmt = REASONING_FORMATS[reasoning]
        frags += [fmt.start, fmt.end, fmt.end[:3]]
    if "harmony" in (tool, reasoning):
        frags += [
            "<|start|>assistant",
            "<|channel|>",
            "analysis",
            "final",
            "commentary",
            " to=functions.f",
            "<|message|>",
            "<|end|>",
            "<|call|>",
            "<|constrain|>json",
        ]
    return [f for f in frags if f]


def _spaced(text: str) -> str:
    """``text`` with a space and a newline at every marker boundary (``><``, ``][``)."""
    return text.replace("><", "> \n<").replace("][", "] [").replace("|>{", "|> {")


@st.composite
def cases(draw):
    tool, reasoning = draw(st.sampled_from(PAIRS))
    piece = st.one_of(st.sampled_from(_fragments(tool, reasoning)), st.text(max_size=4))
    text = "".join(draw(st.lists(piece, max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    tail = draw(st.sampled_from(["", "<think>\n", "<|start|>assistant", "</think>"]))
    return tool, reasoning, text, cuts, tail


def _is_prefix(part, whole) -> bool:
    p_r, p_c, p_calls = shape(part)
    w_r, w_c, w_calls = shape(whole)
    if not (w_r or "").startswith(p_r or "") or not (w_c or "").startswith(p_c or ""):
        return False
    if len(p_calls) > len(w_calls):
        return False
    return all(
        wn == pn and wa.startswith(pa) for (pn, pa), (wn, wa) in zip(p_calls, w_calls, strict=False)
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_any_text_any_chunking(case):
    tool, reasoning, text, cuts, tail = case
    kw = dict(tools=WEATHER_TOOLS, prompt_tail=tail)
    whole = parse(text, tool, reasoning, **kw)
    stream = open_stream(tool, reasoning, **kw)
    deltas, snapshots, start = [], [], 0
    for cut in [*cuts, len(text)]:
        deltas.append(stream.feed(text[start:cut]))
        snapshots.append(stream.message)
        start = cut
    deltas.append(stream.finish())
    assert shape(join_deltas(deltas)) == shape(whole)
    assert shape(stream.message) == shape(whole)
    assert all(_is_prefix(s, whole) for s in snapshots)
