"""What earlier runs did (:class:`PartitionState`): per unit, the runs of partitions and their status, and the
high watermark of each partition, compact enough for one Variable."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = ["History", "PartitionState", "Run", "UnitResult", "UnitStatus"]


class UnitStatus(StrEnum):
    SUCCEEDED = "s"
    FAILED = "f"


class Run(NamedTuple):
    """Consecutive partitions of one unit with the same last status.

    ``high_watermark_ms=None`` means: for succeeded runs, each partition's high watermark is its end
    (clipped to the run's end: a partial partition that grew since); for failed runs, no successful
    history. An explicit value is one partition's high watermark (a failure after a success).
    """

    start: int
    end: int
    status: UnitStatus
    high_watermark_ms: int | None


class History(NamedTuple):
    high_watermark_ms: int | None
    status: UnitStatus


class UnitResult(NamedTuple):
    """What one work unit's execution did: its partition, unit, and outcome (high watermark = range end)."""

    partition_start: int
    partition_end: int
    unit: str
    status: UnitStatus


@dataclass(frozen=True)
class PartitionState:
    """Per-unit runs of consecutive partitions with equal status: compact (ten years of hourly
    partitions that all succeeded is one run per unit), and JSON-serialisable for one Variable.

    >>> s = PartitionState.empty().apply([UnitResult(0, 10, "", UnitStatus.SUCCEEDED),
    ...                                   UnitResult(10, 20, "", UnitStatus.SUCCEEDED)])
    >>> s.runs[""]
    (Run(start=0, end=20, status=<UnitStatus.SUCCEEDED: 's'>, high_watermark_ms=None),)
    >>> s.history("", 10, 20).high_watermark_ms
    20
    """

    runs: Mapping[str, tuple[Run, ...]] = field(default_factory=dict)
    _starts: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def empty(cls) -> PartitionState:
        return cls({})

    def history(self, unit: str, start: int, end: int) -> History | None:
        """The history of the unit's partition starting at ``start`` (None: never executed)."""
        runs = self.runs.get(unit)
        if not runs:
            return None
        starts = self._starts.get(unit)
        if starts is None:
            starts = self._starts[unit] = [r.start for r in runs]
        index = bisect.bisect_right(starts, start) - 1
        if index < 0 or runs[index].end <= start:
            return None
        run = runs[index]
        if run.high_watermark_ms is not None:
            return History(run.high_watermark_ms, run.status)
        if run.status is UnitStatus.FAILED:
            return History(None, run.status)
        return History(min(end, run.end), run.status)

    def max_high_watermark(self) -> int | None:
        """The largest high watermark of all work units (None without a successful one)."""
        best: int | None = None
        for runs in self.runs.values():
            for run in runs:
                value = (
                    run.high_watermark_ms
                    if run.high_watermark_ms is not None
                    else (run.end if run.status is UnitStatus.SUCCEEDED else None)
                )
                if value is not None and (best is None or value > best):
                    best = value
        return best

    def apply(self, results: Iterable[UnitResult]) -> PartitionState:
        """The state after ``results``: a success sets the work unit's high watermark to its partition end
        (never lowering it), a failure keeps its high watermark and marks it failed."""
        by_unit: dict[str, list[Run]] = {}
        for result in results:
            previous = self.history(result.unit, result.partition_start, result.partition_end)
            old_hw = previous.high_watermark_ms if previous else None
            if result.status is UnitStatus.SUCCEEDED:
                hw = None if old_hw is None or old_hw <= result.partition_end else old_hw
            else:
                hw = old_hw
            status = UnitStatus(result.status)
            by_unit.setdefault(result.unit, []).append(Run(result.partition_start, result.partition_end, status, hw))
        runs = dict(self.runs)
        for unit, new in by_unit.items():
            new.sort()
            runs[unit] = _merge(_subtract(self.runs.get(unit, ()), new) + new)
        return PartitionState(runs)

    def size(self) -> int:
        return sum(len(r) for r in self.runs.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "units": {
                unit: [[r.start, r.end, r.status.value, r.high_watermark_ms] for r in runs]
                for unit, runs in self.runs.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> PartitionState:
        if not data:
            return cls.empty()
        if data.get("version") != 1:
            raise ValueError(f"partition state version {data.get('version')!r} is not supported (expected 1)")
        return cls(
            {
                str(unit): tuple(
                    Run(int(a), int(b), UnitStatus(s), None if hw is None else int(hw)) for a, b, s, hw in runs
                )
                for unit, runs in data["units"].items()
            }
        )


def _subtract(runs: Sequence[Run], cuts: Sequence[Run]) -> list[Run]:
    """``runs`` minus the time ranges of the (sorted, disjoint) ``cuts``; two pointers, O(len + len)."""
    kept: list[Run] = []
    j = 0
    for run in runs:
        start = run.start
        while j < len(cuts) and cuts[j].end <= start:
            j += 1
        k = j
        while start < run.end:
            if k >= len(cuts) or cuts[k].start >= run.end:
                kept.append(run._replace(start=start))
                break
            if cuts[k].start > start:
                kept.append(run._replace(start=start, end=cuts[k].start))
            start = max(start, cuts[k].end)
            k += 1
    return kept


def _merge(runs: list[Run]) -> tuple[Run, ...]:
    runs.sort()
    merged: list[Run] = []
    for run in runs:
        if merged:
            last = merged[-1]
            if (
                last.end == run.start
                and last.status is run.status
                and last.high_watermark_ms is None
                and run.high_watermark_ms is None
            ):
                merged[-1] = last._replace(end=run.end)
                continue
        merged.append(run)
    return tuple(merged)
