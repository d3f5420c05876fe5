"""How a window's panes accumulate and when they fire: the modes of rules 5 and 6 (see the package docstring)."""

from __future__ import annotations

import enum
from typing import TypeVar

__all__ = ["Accumulation", "Timing", "enum_member"]


E = TypeVar("E", bound=enum.Enum)


class Accumulation(enum.StrEnum):
    DISCARDING = "DISCARDING"
    ACCUMULATING = "ACCUMULATING"
    ACCUMULATING_AND_RETRACTING = "ACCUMULATING_AND_RETRACTING"


def enum_member(value: object, kind: type[E], argument: str) -> E:
    """``value`` as a member of ``kind``: the member itself, or its name or value in any case, else an error naming
    ``argument`` and the value.

    >>> enum_member("accumulating_and_retracting", Accumulation, "accumulation")
    <Accumulation.ACCUMULATING_AND_RETRACTING: 'ACCUMULATING_AND_RETRACTING'>
    >>> enum_member(None, Accumulation, "upstream.accumulation")
    Traceback (most recent call last):
    ...
    ValueError: upstream.accumulation=None must be one of ['DISCARDING', 'ACCUMULATING', 'ACCUMULATING_AND_RETRACTING']
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        for member in kind:
            if text in (member.name.lower(), str(member.value).lower()):
                return member
    raise ValueError(f"{argument}={value!r} must be one of {[member.value for member in kind]}")


class Timing(enum.StrEnum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
