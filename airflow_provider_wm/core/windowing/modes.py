"""How a window's panes accumulate and when they fire: the modes of rules 5 and 6 (see the package docstring)."""

from __future__ import annotations

import enum

__all__ = ["Accumulation", "Timing"]


class Accumulation(enum.StrEnum):
    DISCARDING = "DISCARDING"
    ACCUMULATING = "ACCUMULATING"
    ACCUMULATING_AND_RETRACTING = "ACCUMULATING_AND_RETRACTING"


class Timing(enum.StrEnum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"
