"""The ranges of the sampling fields, declared once: every surface's request body
(`server/sampling_fields`), ``serve``'s flags, a ``models.toml`` entry's settings and the
Python API (`out_of_bounds`) read these bounds, so a value one of them refuses no other
lets through to the sampler.

No MLX here (``serve --help`` reads it); the bounds are `annotated_types` intervals, which
pydantic reads from an ``Annotated`` type and the flags turn into click ranges.
"""

from __future__ import annotations

from typing import Annotated, cast

from annotated_types import Interval

INT32_MAX = 2**31 - 1

TEMPERATURE = Interval(ge=0, le=2)
TOP_P = Interval(gt=0, le=1)
TOP_K = Interval(ge=-1, le=INT32_MAX)  # -1 and 0: no top-k filter
MIN_P = Interval(ge=0, le=1)
REPETITION_PENALTY = Interval(gt=0, le=10)  # multiplicative: 1 is none
PENALTY = Interval(ge=-2, le=2)  # presence and frequency penalties: additive, 0 is none
MAX_STOPS = 16  # stop sequences in one request

Temperature = Annotated[float, TEMPERATURE]
TopP = Annotated[float, TOP_P]
TopK = Annotated[int, TOP_K]
MinP = Annotated[float, MIN_P]
RepetitionPenalty = Annotated[float, REPETITION_PENALTY]
Penalty = Annotated[float, PENALTY]

# each field a client names alike, by its `request.Sampling` name
BOUNDS: dict[str, Interval] = {
    "temperature": TEMPERATURE,
    "top_p": TOP_P,
    "top_k": TOP_K,
    "min_p": MIN_P,
    "repetition_penalty": REPETITION_PENALTY,
    "presence_penalty": PENALTY,
    "frequency_penalty": PENALTY,
}


def limits(bounds: Interval) -> tuple[float, float, bool]:
    """(low, high, whether low itself is excluded) of one of the intervals above."""
    # they are all numbers with a lower and an upper end; annotated_types types them as
    # comparables
    low = bounds.ge if bounds.gt is None else bounds.gt
    return cast(float, low), cast(float, bounds.le), bounds.gt is not None


def out_of_bounds(name: str, value: float) -> str | None:
    """Why ``value`` is not a ``name`` the sampler takes (None: it is, or ``name`` has no
    bounds here)."""
    if name not in BOUNDS:
        return None
    low, high, low_open = limits(BOUNDS[name])
    if (value > low if low_open else value >= low) and value <= high:
        return None
    return f"{name} must be in {'(' if low_open else '['}{low}, {high}], not {value}"
