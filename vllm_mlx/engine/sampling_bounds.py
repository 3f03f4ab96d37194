"""The ranges of the sampling fields, declared once: every surface's request body
(`server/sampling_fields`), ``serve``'s flags and a ``models.toml`` entry's settings read
these bounds, so a value one of them refuses no other lets through to the sampler.

No MLX here (``serve --help`` reads it); the bounds are `annotated_types` intervals, which
pydantic reads from an ``Annotated`` type and the flags turn into click ranges.
"""

from __future__ import annotations

from typing import Annotated

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
