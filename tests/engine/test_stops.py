"""StopMatcher alone: a stop string never reaches the client whatever the chunking, text
that might begin one is held only until it is decided, and the earliest stop wins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_mlx.engine.stops import StopMatcher


def feed_all(stops: list[str], pieces: list[str]) -> tuple[str, str | None]:
    """What a client receives for ``pieces``, and the stop that ended it (None: flushed)."""
    matcher = StopMatcher(stops)
    out = ""
    for piece in pieces:
        text, hit = matcher.feed(piece)
        out += text
        if hit is not None:
            return out, hit
    return out + matcher.flush(), None


def test_a_stop_spanning_pieces_is_never_emitted():
    matcher = StopMatcher(["END"])
    assert matcher.feed("abc E") == ("abc ", None)  # "E" may begin the stop: held
    assert matcher.feed("N") == ("", None)
    assert matcher.feed("D and more") == ("", "END")


def test_held_text_is_released_once_it_cannot_be_a_stop():
    matcher = StopMatcher(["END"])
    assert matcher.feed("xE") == ("x", None)
    assert matcher.feed("Nx") == ("ENx", None)
    assert matcher.feed("EN") == ("", None)
    assert matcher.flush() == "EN"  # generation ended: it never became a stop
    assert matcher.flush() == ""


def test_the_earliest_stop_wins_and_the_longest_prefix_is_held():
    assert feed_all(["world", "lo"], ["hello world"]) == ("hel", "lo")
    matcher = StopMatcher(["abcd", "bx"])
    assert matcher.feed("zab") == ("z", None)  # "ab" may begin "abcd"
    assert matcher.feed("x") == ("a", "bx")


def test_no_stops_or_empty_stops_pass_everything_through():
    for stops in ([], [""]):
        matcher = StopMatcher(stops)
        assert matcher.feed("a\nb") == ("a\nb", None)
        assert matcher.flush() == ""


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    text=st.text(alphabet="abE<\n", max_size=30),
    stops=st.lists(st.text(alphabet="abE<", min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
)
def test_any_chunking_emits_exactly_the_text_before_the_first_stop(text, stops, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    found = [(at, stop) for stop in stops if (at := text.find(stop)) != -1]
    out, hit = feed_all(stops, pieces)
    if not found:
        assert (out, hit) == (text, None)
    else:
        at = min(at for at, _ in found)
        assert out == text[:at]
        assert hit is not None and text[at:].startswith(hit)
