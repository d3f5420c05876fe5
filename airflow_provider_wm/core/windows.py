"""Event-time window assigners (Apache Apex / Beam): which windows an event at time ``t`` belongs to.

Windows are half-open ``[start, end)`` in UTC epoch milliseconds. Four kinds:

- :class:`Tumbling` ``(size, offset)``: ``[k*size + offset, (k+1)*size + offset)``, one window per event.
- :class:`Sliding` ``(size, slide, offset)``: every window ``[k*slide + offset, k*slide + offset + size)``
  that contains ``t``; ``size`` must be a multiple of ``slide`` (``size / slide`` windows per event).
- :class:`Session` ``(gap)``: an event opens ``[t, t + gap)``; sessions of one key that overlap or touch
  merge into one (:func:`merge_sessions`; Spark's ``session_window`` rule). Keyed only.
- :class:`Global`: one window over all time; it is never complete, so it fires only early panes.

Constructors validate: a bad argument raises ``ValueError`` naming the argument and the value, so a DAG
with a bad window fails when it is parsed.

>>> Tumbling(1000).assign(1500)
[Window(start=1000, end=2000)]
>>> Sliding(600_000, 300_000).assign(420_000)
[Window(start=300000, end=900000), Window(start=0, end=600000)]
>>> merge_sessions([Window(1100, 4000), Window(5000, 7000), Window(3500, 5500)])
[(Window(start=1100, end=7000), [0, 2, 1])]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "GLOBAL_END",
    "GLOBAL_START",
    "Global",
    "Session",
    "Sliding",
    "Tumbling",
    "Window",
    "WindowFn",
    "merge_sessions",
    "window_from_json",
]

GLOBAL_START = -(2**63)
GLOBAL_END = 2**63 - 1
"""The bounds of the global window: the range of a Spark ``bigint``."""


@dataclass(frozen=True, order=True)
class Window:
    """``[start, end)`` in epoch milliseconds."""

    start: int
    end: int

    def contains(self, t: int) -> bool:
        return self.start <= t < self.end


def _positive(value: Any, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"window {argument}={value!r} must be a positive number of milliseconds")
    return value


def _offset(value: Any, modulus: int, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < modulus:
        raise ValueError(f"window {argument}={value!r} must be milliseconds in [0, {modulus})")
    return value


class WindowFn(ABC):
    """Assigns windows to event times. ``merging`` window functions (sessions) merge windows afterwards."""

    kind: ClassVar[str]
    merging: ClassVar[bool] = False

    @abstractmethod
    def assign(self, t: int) -> list[Window]:
        """The windows that contain an event at ``t``."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """``{"kind": ..., <arguments in ms>}``: what the operator passes to the Spark job."""

    def output_watermark(self, watermark_ms: int) -> int | None:
        """The watermark of the panes an aggregate emits at input watermark ``W``: the last window end at or
        before ``W``. Every window ending there or earlier is complete and has fired ON_TIME; every later
        ON_TIME pane belongs to a window that ends after ``W`` (Jet: an operator forwards the watermark, held
        back to what it has really emitted). ``None``: no window ever completes (global).

        >>> Tumbling(300_000).output_watermark(1_000_000), Session(60_000).output_watermark(1_000_000)
        (900000, 1000000)
        """
        return watermark_ms


@dataclass(frozen=True)
class Tumbling(WindowFn):
    """``[k*size + offset, (k+1)*size + offset)``: ``start = t - (t - offset) mod size``.

    >>> Tumbling(300_000, offset_ms=60_000).assign(59_999)
    [Window(start=-240000, end=60000)]
    """

    size_ms: int
    offset_ms: int = 0
    kind: ClassVar[str] = "tumbling"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "size_ms")
        _offset(self.offset_ms, self.size_ms, "offset_ms")

    def assign(self, t: int) -> list[Window]:
        start = t - (t - self.offset_ms) % self.size_ms
        return [Window(start, start + self.size_ms)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "size_ms": self.size_ms, "offset_ms": self.offset_ms}

    def output_watermark(self, watermark_ms: int) -> int | None:
        return watermark_ms - (watermark_ms - self.offset_ms) % self.size_ms


@dataclass(frozen=True)
class Sliding(WindowFn):
    """Windows of ``size`` every ``slide``: the latest starts at ``t - (t - offset) mod slide``, and each of
    the ``size / slide`` windows is ``slide`` earlier than the next.

    >>> Sliding(10, 5).assign(12)
    [Window(start=10, end=20), Window(start=5, end=15)]
    >>> Sliding(10, 3)
    Traceback (most recent call last):
    ...
    ValueError: window size_ms=10 must be a multiple of slide_ms=3
    """

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    kind: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        _positive(self.size_ms, "size_ms")
        _positive(self.slide_ms, "slide_ms")
        if self.size_ms % self.slide_ms:
            raise ValueError(f"window size_ms={self.size_ms} must be a multiple of slide_ms={self.slide_ms}")
        _offset(self.offset_ms, self.slide_ms, "offset_ms")

    @property
    def windows_per_event(self) -> int:
        return self.size_ms // self.slide_ms

    def assign(self, t: int) -> list[Window]:
        last = t - (t - self.offset_ms) % self.slide_ms
        starts = (last - k * self.slide_ms for k in range(self.windows_per_event))
        return [Window(s, s + self.size_ms) for s in starts]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "size_ms": self.size_ms, "slide_ms": self.slide_ms, "offset_ms": self.offset_ms}

    def output_watermark(self, watermark_ms: int) -> int | None:
        return watermark_ms - (watermark_ms - self.offset_ms) % self.slide_ms  # size is a multiple of slide


@dataclass(frozen=True)
class Session(WindowFn):
    """An event at ``t`` opens ``[t, t + gap)``; sessions of a key that overlap or touch merge
    (:func:`merge_sessions`): two events of a key are in one session when they are at most ``gap`` apart."""

    gap_ms: int
    kind: ClassVar[str] = "session"
    merging: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _positive(self.gap_ms, "gap_ms")

    def assign(self, t: int) -> list[Window]:
        return [Window(t, t + self.gap_ms)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "gap_ms": self.gap_ms}


@dataclass(frozen=True)
class Global(WindowFn):
    """One window, ``[GLOBAL_START, GLOBAL_END)``: never complete; use it with early firing."""

    kind: ClassVar[str] = "global"

    def assign(self, t: int) -> list[Window]:
        return [Window(GLOBAL_START, GLOBAL_END)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def output_watermark(self, watermark_ms: int) -> int | None:
        return None


def merge_sessions(windows: Sequence[Window]) -> list[tuple[Window, list[int]]]:
    """Connected groups of overlapping or touching windows: each merged window with its members' indexes.

    Sorted by start, a window joins the current group when it starts at or before the group's end so far
    (as Spark's ``session_window``: events exactly ``gap`` apart share a session).

    >>> merge_sessions([Window(0, 10), Window(12, 20), Window(5, 12)])
    [(Window(start=0, end=20), [0, 2, 1])]
    >>> merge_sessions([Window(0, 10), Window(11, 20)])
    [(Window(start=0, end=10), [0]), (Window(start=11, end=20), [1])]
    """
    groups: list[tuple[Window, list[int]]] = []
    for index in sorted(range(len(windows)), key=lambda i: (windows[i].start, windows[i].end)):
        window = windows[index]
        if groups and window.start <= groups[-1][0].end:
            merged, members = groups[-1]
            groups[-1] = (Window(merged.start, max(merged.end, window.end)), [*members, index])
        else:
            groups.append((window, [index]))
    return groups


_KINDS: dict[str, type[WindowFn]] = {cls.kind: cls for cls in (Tumbling, Sliding, Session, Global)}


def window_from_json(data: Mapping[str, Any]) -> WindowFn:
    """The inverse of ``to_json``.

    >>> window_from_json({"kind": "sliding", "size_ms": 10, "slide_ms": 5})
    Sliding(size_ms=10, slide_ms=5, offset_ms=0)
    """
    if not isinstance(data, Mapping) or data.get("kind") not in _KINDS:
        raise ValueError(f"window={data!r} must have a kind among {sorted(_KINDS)}")
    arguments = {k: v for k, v in data.items() if k != "kind"}
    try:
        return _KINDS[data["kind"]](**arguments)
    except TypeError as exc:
        raise ValueError(f"window={dict(data)!r}: {exc}") from None
