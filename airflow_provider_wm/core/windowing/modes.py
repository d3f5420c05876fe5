"""How a window's panes accumulate and when they fire: the modes of rules 5 and 6 (see the package docstring)."""

from __future__ import annotations

import enum

__all__ = ["Accumulation", "Timing", "parse_accumulation"]


class Accumulation(enum.StrEnum):
    DISCARDING = "DISCARDING"
    ACCUMULATING = "ACCUMULATING"
    ACCUMULATING_AND_RETRACTING = "ACCUMULATING_AND_RETRACTING"


def parse_accumulation(value: object, argument: str) -> Accumulation:
    """An :class:`Accumulation` or its value in any case, else an error naming ``argument`` and the value.

    >>> parse_accumulation("accumulating_and_retracting", "accumulation")
    <Accumulation.ACCUMULATING_AND_RETRACTING: 'ACCUMULATING_AND_RETRACTING'>
    >>> parse_accumulation(None, "upstream.accumulation")
    Traceback (most recent call last):
    ...
    ValueError: upstream.accumulation=None must be one of ['DISCARDING', 'ACCUMULATING', 'ACCUMULATING_AND_RETRACTING']
    """
    if isinstance(value, Accumulation):
        return value
    if isinstance(value, str) and value.strip().upper() in Accumulation.__members__:
        return Accumulation[value.strip().upper()]
    raise ValueError(f"{argument}={value!r} must be one of {[a.value for a in Accumulation]}")


class Timing(enum.StrEnum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
