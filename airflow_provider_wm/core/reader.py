"""A reader's time window (Pravega ``getCurrentTimeWindow``): where a stream position lies between watermarks.

A reader's *position* is a stream cut (segment id -> offset, ``-1`` = the end of the segment). The stream's
watermark log holds, oldest first, watermarks ``(cut, lower_ms, upper_ms)``: "until ``cut``, all data up to
``lower_ms`` has been written, and nothing before ``cut`` is later than ``upper_ms``".

The position is compared with a watermark's cut segment by segment, for every pair (position segment ``p``,
cut segment ``c``) whose key ranges overlap: ``p`` is *behind* there when ``p.segment_id < c.segment_id``
(still on a predecessor), *ahead* when it is greater (already on a successor), and for the same segment the
offsets decide (``-1``, the end of the segment, is greater than any offset; equal offsets are neither).

- the position has *passed* the cut when no segment is behind it (exactly at the cut counts as passed);
- it is *entirely behind* the cut when no segment is ahead and at least one is behind;
- otherwise the relation is *mixed*.

Key ranges covered by only one side (the position does not cover a key range of the cut, or the cut does
not cover one of the position) are *unknown*: the position could be anywhere there, so the relation is
mixed; the watermark then gives neither bound. A position cannot be said to have passed a cut, nor to be
behind it, where it says nothing. (Key ranges no segment covers hold no data and do not count.)

The window:

- ``lower`` = the lower time of the *last* watermark whose cut the position has passed (``None`` near the
  head of the stream, before the first watermark's cut);
- ``upper`` = the upper time of the *first later* watermark that the position is entirely behind
  (``None`` when there is none: near the tail, or only mixed ones follow; an upper bound must be safe).

Worked example: two segments ``0:[0, .5)`` and ``1:[.5, 1)`` of one epoch; watermarks ``m1 = ({0: 0, 1: 0},
10..19)``, ``m2 = ({0: 2, 1: 0}, 20..29)``, ``m3 = ({0: 2, 1: 2}, 30..39)``. The position ``{0: 1, 1: 0}``
has passed m1 and is entirely behind m2; ``{0: 3, 1: 1}`` has passed m2 but is ahead of m3 on segment 0
and behind it on segment 1 (mixed), so it has no safe upper bound::

    >>> segs = segment_map([Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0)])
    >>> log = [({0: 0, 1: 0}, 10, 19), ({0: 2, 1: 0}, 20, 29), ({0: 2, 1: 2}, 30, 39)]
    >>> time_window({0: 1, 1: 0}, log, segs)
    TimeWindow(lower_ms=10, upper_ms=29)
    >>> time_window({0: 2, 1: 1}, log, segs)
    TimeWindow(lower_ms=20, upper_ms=39)
    >>> time_window({0: 3, 1: 1}, log, segs)
    TimeWindow(lower_ms=20, upper_ms=None)
    >>> compare({0: 3, 1: 1}, {0: 2, 1: 2}, segs).value
    'mixed'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from airflow_provider_wm.core.segments import Segment, missing_ranges, segment_map  # noqa: F401 (doctests)

__all__ = [
    "END_OF_SEGMENT",
    "LoggedWatermark",
    "Relation",
    "TimeWindow",
    "compare",
    "time_window",
    "validate_cut",
]

END_OF_SEGMENT = -1
"""The offset that stands for the end of a segment: greater than any real offset."""


class TimeWindow(NamedTuple):
    """The time range a reader is currently reading: ``lower_ms <= any time noted at its position``, and
    ``upper_ms >= any time noted before it``. Either bound is ``None`` when it cannot be established."""

    lower_ms: int | None
    upper_ms: int | None


class LoggedWatermark(NamedTuple):
    """One entry of a stream's watermark log: its stream cut and its time bounds (epoch ms)."""

    cut: Mapping[int, int]
    lower_ms: int
    upper_ms: int


class Relation(StrEnum):
    """Where a position lies relative to a stream cut."""

    PASSED = "passed"
    """No segment of the position is behind the cut (being exactly at the cut counts)."""
    BEHIND = "behind"
    """No segment is ahead of the cut and at least one is behind it."""
    MIXED = "mixed"
    """Ahead somewhere and behind elsewhere, or a key range only one side covers."""


def validate_cut(cut: Mapping[int, int], segments: Mapping[int, Segment], argument: str) -> None:
    """Every segment of ``cut`` is known and every offset is an int ``>= -1``; errors name ``argument``."""
    for segment_id, offset in cut.items():
        if segment_id not in segments:
            hint = " (segment ids are ints, not strings)" if isinstance(segment_id, str) else ""
            raise ValueError(f"{argument} has unknown segment {segment_id!r}{hint}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"{argument}[{segment_id}]={offset!r}: an offset must be an int (-1 = end of segment)")
        if offset < END_OF_SEGMENT:
            raise ValueError(f"{argument}[{segment_id}]={offset!r}: an offset must be >= -1 (-1 = end of segment)")


def _rank(offset: int) -> float:
    return float("inf") if offset == END_OF_SEGMENT else offset


def _by_start(cut: Mapping[int, int], segments: Mapping[int, Segment]) -> list[tuple[Segment, float]]:
    return sorted(((segments[s], _rank(o)) for s, o in cut.items()), key=lambda e: e[0].key_start)


def _overlapping_pairs(
    position: Sequence[tuple[Segment, float]], cut: Sequence[tuple[Segment, float]]
) -> Iterable[tuple[tuple[Segment, float], tuple[Segment, float]]]:
    """Every (position entry, cut entry) pair whose key ranges overlap; both inputs sorted by ``key_start``.

    A sweep over key starts: each interval, when it starts, meets the intervals of the other side still
    open there. O((n + m) + pairs) for cuts whose segments do not overlap each other.
    """
    open_p: list[tuple[Segment, float]] = []
    open_c: list[tuple[Segment, float]] = []
    i = j = 0
    while i < len(position) or j < len(cut):
        take_p = j >= len(cut) or (i < len(position) and position[i][0].key_start <= cut[j][0].key_start)
        entry = position[i] if take_p else cut[j]
        start = entry[0].key_start
        open_p[:] = [e for e in open_p if e[0].key_end > start]
        open_c[:] = [e for e in open_c if e[0].key_end > start]
        if take_p:
            i += 1
            open_p.append(entry)
            for other in open_c:
                yield entry, other
        else:
            j += 1
            open_c.append(entry)
            for other in open_p:
                yield other, entry


def _relation(
    position: Sequence[tuple[Segment, float]],
    position_gaps: list[tuple[float, float]],
    cut: Mapping[int, int],
    segments: Mapping[int, Segment],
) -> Relation:
    if missing_ranges(cut, segments) != position_gaps:
        return Relation.MIXED  # a key range only one side covers: unknown there
    ahead = behind = False
    for (p, p_offset), (c, c_offset) in _overlapping_pairs(position, _by_start(cut, segments)):
        if p.segment_id != c.segment_id:
            is_behind = p.segment_id < c.segment_id
        elif p_offset == c_offset:
            continue
        else:
            is_behind = p_offset < c_offset
        behind = behind or is_behind
        ahead = ahead or not is_behind
        if ahead and behind:
            return Relation.MIXED
    if not behind:
        return Relation.PASSED
    return Relation.BEHIND if not ahead else Relation.MIXED


def compare(position: Mapping[int, int], cut: Mapping[int, int], segments: Mapping[int, Segment]) -> Relation:
    """Where ``position`` lies relative to ``cut`` (see the module docstring for the rule).

    >>> segs = segment_map([Segment(1, 0.0, 1.0), Segment(1 << 32, 0.0, 0.5), Segment((1 << 32) | 1, 0.5, 1.0)])
    >>> compare({1: -1}, {1 << 32: 0, (1 << 32) | 1: 0}, segs).value  # still on the predecessor
    'behind'
    """
    _validate_position(position, segments)
    validate_cut(cut, segments, "cut")
    return _relation(_by_start(position, segments), missing_ranges(position, segments), cut, segments)


def _validate_position(position: Mapping[int, int], segments: Mapping[int, Segment]) -> None:
    if not isinstance(position, Mapping) or not position:
        raise ValueError(f"position={position!r} must be a non-empty mapping segment id -> offset")
    validate_cut(position, segments, "position")


def time_window(
    position: Mapping[int, int],
    watermarks: Sequence[LoggedWatermark | tuple[Mapping[int, int], int, int]],
    segments: Mapping[int, Segment],
) -> TimeWindow:
    """The reader's :class:`TimeWindow` at ``position`` given the stream's watermark log (oldest first).

    The log is scanned from the newest watermark back to the last one the position has passed; the cuts of
    older watermarks are not needed and not read.

    >>> segs = segment_map([Segment(0, 0.0, 1.0)])
    >>> time_window({0: 5}, [], segs), time_window({0: 5}, [({0: 7}, 10, 19)], segs)
    (TimeWindow(lower_ms=None, upper_ms=None), TimeWindow(lower_ms=None, upper_ms=19))
    """
    _validate_position(position, segments)
    ordered = _by_start(position, segments)
    gaps = missing_ranges(position, segments)
    later: list[tuple[Relation, int]] = []  # (relation, upper_ms) of the watermarks after the lower one, newest first
    lower: int | None = None
    for index in range(len(watermarks) - 1, -1, -1):
        cut, lower_ms, upper_ms = _unpack(watermarks[index], index)
        validate_cut(cut, segments, f"watermarks[{index}].cut")
        relation = _relation(ordered, gaps, cut, segments)
        if relation is Relation.PASSED:
            lower = lower_ms
            break
        later.append((relation, upper_ms))
    upper = next((upper_ms for relation, upper_ms in reversed(later) if relation is Relation.BEHIND), None)
    return TimeWindow(lower, upper)


def _unpack(watermark: Any, index: int) -> tuple[Mapping[int, int], int, int]:
    try:
        cut, lower_ms, upper_ms = watermark
    except (TypeError, ValueError):
        raise ValueError(f"watermarks[{index}]={watermark!r} must be (cut, lower_ms, upper_ms)") from None
    if not isinstance(cut, Mapping):
        raise ValueError(f"watermarks[{index}].cut={cut!r} must be a mapping segment id -> offset")
    for name, value in (("lower_ms", lower_ms), ("upper_ms", upper_ms)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"watermarks[{index}].{name}={value!r} must be an int of epoch milliseconds")
    return cut, lower_ms, upper_ms
