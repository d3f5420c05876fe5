"""Segments and stream cuts (Pravega).

A stream is split into *segments*. Each segment owns a half-open routing-key range ``[key_start, key_end)``
inside ``[0, 1)`` and an id whose high 32 bits are the *epoch* that created it. When a stream scales, the
segments of some key range are sealed and replaced by new ones of a later epoch: a segment ``t`` is a
*successor* of ``s`` when their key ranges overlap and ``t.segment_id > s.segment_id``.

A *stream cut* maps segment ids to offsets and says how far into the stream a position is, for every
routing key. The controller's cut is the least upper bound of its writers' positions:

- per segment, the highest offset any position reports;
- a segment with a successor among the reported segments is dropped: its successor is further along;
- key ranges left uncovered are filled with the segments of the newest epoch in the cut, at offset 0.

Worked example, three segments ``0:[0,1/3) 1:[1/3,2/3) 2:[2/3,1)`` of epoch 0::

    >>> segs = segment_map([Segment(0, 0.0, 1/3), Segment(1, 1/3, 2/3), Segment(2, 2/3, 1.0)])
    >>> stream_cut([{0: 100, 1: 200}, {1: 100, 2: 200}, {2: 100, 0: 200}], None, segs)
    ({0: 200, 1: 200, 2: 200}, True)

This module is the reference; ``spark_jobs/controller/`` expresses the same rules as
DataFrame operations and a differential test binds the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Segment",
    "StreamCut",
    "active_segments_at_epoch",
    "complete_cut",
    "cut_position_at",
    "epoch_of",
    "missing_ranges",
    "overlapping_in_epoch",
    "segment_map",
    "stream_cut",
    "upper_bound",
]

StreamCut = dict[int, int]


def epoch_of(segment_id: int) -> int:
    """The epoch that created a segment: the high 32 bits of its id. ``epoch_of((3 << 32) | 7) == 3``."""
    return segment_id >> 32


@dataclass(frozen=True, order=True)
class Segment:
    """One segment: ``segment_id`` (epoch in the high 32 bits) and its key range ``[key_start, key_end)``."""

    segment_id: int
    key_start: float
    key_end: float

    def __post_init__(self) -> None:
        if self.segment_id < 0:
            raise ValueError(f"segment_id must be >= 0, got {self.segment_id!r}")
        if not (0.0 <= self.key_start < self.key_end <= 1.0):
            raise ValueError(
                f"segment {self.segment_id}: key range must satisfy 0 <= key_start < key_end <= 1, "
                f"got [{self.key_start!r}, {self.key_end!r})"
            )

    @property
    def epoch(self) -> int:
        return epoch_of(self.segment_id)

    def overlaps(self, other: Segment) -> bool:
        """Half-open key ranges intersect."""
        return other.key_start < self.key_end and other.key_end > self.key_start

    def is_successor_of(self, other: Segment) -> bool:
        """``self`` replaced (part of) ``other``: overlapping key ranges and a higher id."""
        return self.segment_id > other.segment_id and self.overlaps(other)


def segment_map(segments: Iterable[Segment]) -> dict[int, Segment]:
    """Index segments by id; a duplicate id with a different range is an error."""
    out: dict[int, Segment] = {}
    for seg in segments:
        known = out.get(seg.segment_id)
        if known is not None and known != seg:
            raise ValueError(f"segment id {seg.segment_id} is defined twice: {known} and {seg}")
        out[seg.segment_id] = seg
    return out


def overlapping_in_epoch(segments: Iterable[Segment]) -> set[int]:
    """The ids of segments whose key range overlaps another segment of the same epoch. A stream's segments of one
    epoch split its key space without overlap (a scaling starts a new epoch), so such a pair is conflicting input:
    neither can be trusted, and :meth:`Segment.is_successor_of` would silently drop the lower id from every cut.

    >>> overlapping_in_epoch([Segment(0, 0.0, 0.6), Segment(1, 0.5, 1.0), Segment(2**32, 0.0, 1.0)])
    {0, 1}
    """
    by_epoch: dict[int, list[Segment]] = {}
    for segment in segments:
        by_epoch.setdefault(segment.epoch, []).append(segment)
    found: set[int] = set()
    for group in by_epoch.values():
        group.sort(key=lambda segment: segment.key_start)
        for index, segment in enumerate(group):
            for later in group[index + 1 :]:  # sorted by start: only the next ones can start before this one ends
                if later.key_start >= segment.key_end:
                    break
                found.update((segment.segment_id, later.segment_id))
    return found


def upper_bound(positions: Iterable[Mapping[int, int]], segments: Mapping[int, Segment]) -> StreamCut:
    """Least upper bound of positions: highest offset per segment, minus segments that have a successor.

    The rule is order-independent (Pravega folds writers one by one, which can keep a segment whose
    successor arrives later through a third, non-overlapping segment; we drop it in every order).

    >>> segs = segment_map([Segment(0, 0.0, 1.0), Segment(1 << 32, 0.0, 0.5), Segment((1 << 32) | 1, 0.5, 1.0)])
    >>> upper_bound([{0: 70}, {1 << 32: 5}], segs)
    {4294967296: 5}
    """
    highest: StreamCut = {}
    for position in positions:
        for segment_id, offset in position.items():
            if segment_id not in segments:
                raise KeyError(f"unknown segment {segment_id}")
            if offset > highest.get(segment_id, -1):
                highest[segment_id] = offset
    present = [segments[s] for s in highest]
    return {
        seg.segment_id: highest[seg.segment_id]
        for seg in present
        if not any(other.is_successor_of(seg) for other in present)
    }


def missing_ranges(cut: Mapping[int, int], segments: Mapping[int, Segment]) -> list[tuple[float, float]]:
    """Key ranges of ``[0, 1)`` that no segment of ``cut`` covers, in key order."""
    ranges = sorted((segments[s].key_start, segments[s].key_end) for s in cut)
    gaps: list[tuple[float, float]] = []
    reached = 0.0
    for start, end in ranges:
        if start > reached:
            gaps.append((reached, start))
        reached = max(reached, end)
    if reached < 1.0:
        gaps.append((reached, 1.0))
    return gaps


def active_segments_at_epoch(epoch: int, segments: Mapping[int, Segment]) -> list[Segment]:
    """Segments that exist in ``epoch``: created at or before it and not yet replaced by a successor."""
    born = [s for s in segments.values() if s.epoch <= epoch]
    return [s for s in born if not any(t.is_successor_of(s) for t in born)]


def complete_cut(cut: Mapping[int, int], segments: Mapping[int, Segment]) -> tuple[StreamCut, bool]:
    """Fill uncovered key ranges with the newest epoch's segments at offset 0.

    The newest epoch is the highest epoch present in the cut (the oldest epoch of the stream when the cut
    is empty). Returns the cut and whether it now covers ``[0, 1)``; it cannot when the segments
    themselves leave a gap.
    """
    result: StreamCut = dict(cut)
    for _ in range(len(segments) + 1):
        gaps = missing_ranges(result, segments)
        if not gaps:
            return result, True
        if result:
            epoch = max(epoch_of(s) for s in result)
        elif segments:
            epoch = min(s.epoch for s in segments.values())
        else:
            return result, False
        fill = [
            s
            for s in active_segments_at_epoch(epoch, segments)
            if s.segment_id not in result and any(s.key_start < hi and s.key_end > lo for lo, hi in gaps)
        ]
        if not fill:
            return result, False
        result = upper_bound([result, {s.segment_id: 0 for s in fill}], segments)
    return result, not missing_ranges(result, segments)


def stream_cut(
    positions: Iterable[Mapping[int, int]],
    previous: Mapping[int, int] | None,
    segments: Mapping[int, Segment],
) -> tuple[StreamCut, bool]:
    """The watermark's cut: upper bound of the positions merged with the previous cut, then completed.

    A segment that ``segments`` no longer holds (excluded as invalid, or removed) but that the previous cut or a
    writer's stored position names keeps its highest offset in the cut, which is then not complete: dropped, the
    cut would move back over that segment's key range, which no known segment covers.

    >>> thirds = segment_map([Segment(0, 0.0, 1 / 3), Segment(2, 2 / 3, 1.0)])  # segment 1 is gone
    >>> stream_cut([{0: 20}], {0: 10, 1: 10, 2: 10}, thirds)
    ({0: 20, 2: 10, 1: 10}, False)
    """
    known: list[dict[int, int]] = []
    unknown: StreamCut = {}
    for position in [*positions, previous or {}]:
        known.append({segment_id: offset for segment_id, offset in position.items() if segment_id in segments})
        for segment_id, offset in position.items():
            if segment_id not in segments and offset > unknown.get(segment_id, -1):
                unknown[segment_id] = offset
    cut, complete = complete_cut(upper_bound(known, segments), segments)
    return {**cut, **unknown}, complete and not unknown


def cut_position_at(cut: Mapping[int, int], segments: Mapping[int, Segment], key: float) -> tuple[int, int]:
    """``(segment_id, offset)`` of the cut at routing key ``key``; ``(-1, -1)`` if no segment covers it.

    Comparing these tuples key by key (segment id first, then offset) is how "the cut never goes
    backwards" is checked.
    """
    for segment_id, offset in cut.items():
        seg = segments[segment_id]
        if seg.key_start <= key < seg.key_end:
            return segment_id, offset
    return -1, -1
