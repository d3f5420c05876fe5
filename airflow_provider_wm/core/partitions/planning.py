"""A run's plan (:func:`plan`): which work units execute and why (new, failed before, within grace, backfill),
which are skipped and why."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from airflow_provider_wm.core.partitions.spec import DEFAULT_UNIT, PartitionSpec
from airflow_provider_wm.core.partitions.state import History, PartitionState, UnitResult, UnitStatus
from airflow_provider_wm.core.partitions.timebounds import format_day

__all__ = ["EXECUTING_REASONS", "REASON_TEXT", "Plan", "PlannedUnit", "Reason", "SkippedRange", "plan", "succeeded"]


class Reason(StrEnum):
    NEW = "new"
    FAILED_BEFORE = "failed before"
    WITHIN_GRACE = "within grace"
    NEW_TIME = "new time"
    BACKFILL = "backfill"
    UP_TO_DATE = "up to date"
    EMPTY_RANGE = "empty range"
    CAPPED = "capped"


EXECUTING_REASONS = frozenset({Reason.NEW, Reason.FAILED_BEFORE, Reason.WITHIN_GRACE, Reason.NEW_TIME, Reason.BACKFILL})

REREADS = frozenset({Reason.WITHIN_GRACE, Reason.NEW_TIME})
"""Reasons to execute a unit that succeeded before (re-reading late or new rows): under ``max_work_units`` they
come after the units never done (new, failed, backfilled), so re-reads cannot fill every run's cap and stall the
pipeline."""

REASON_TEXT = {
    Reason.NEW: "no successful history: the whole partition",
    Reason.FAILED_BEFORE: "its last execution failed: the whole partition again",
    Reason.WITHIN_GRACE: "partition end after the cut-off: re-reads the grace period for late updates",
    Reason.NEW_TIME: "the partition grew past its high watermark",
    Reason.BACKFILL: "overlaps the requested backfill: the whole partition",
    Reason.UP_TO_DATE: "partition end at or before the cut-off",
    Reason.EMPTY_RANGE: "the abstinent period leaves an empty range",
    Reason.CAPPED: "over max_work_units this run: waits for the next run",
}


class PlannedUnit(NamedTuple):
    partition_start: int
    partition_end: int
    unit: str
    reason: Reason
    range_start: int | None
    range_end: int | None
    high_watermark_ms: int | None

    @property
    def executes(self) -> bool:
        return self.reason in EXECUTING_REASONS


class SkippedRange(NamedTuple):
    """``partitions`` consecutive partitions of one unit that do not execute, for the same reason."""

    unit: str
    first_start: int
    last_end: int
    partitions: int
    reason: Reason


@dataclass(frozen=True)
class Plan:
    """The decision for every work unit: executing (and capped) ones one by one, skipped ones as ranges
    (ten years of up-to-date hourly partitions are one range), so a plan stays small and fast."""

    now_ms: int
    cutoff_ms: int | None
    unit_keys: tuple[str, ...]
    active: tuple[PlannedUnit, ...]
    skipped: tuple[SkippedRange, ...]
    starts: tuple[int, ...] = field(repr=False)
    ends: tuple[int, ...] = field(repr=False)

    def executing(self) -> list[PlannedUnit]:
        return [u for u in self.active if u.executes]

    @property
    def units(self) -> list[PlannedUnit]:
        """Every work unit's decision, oldest first (skipped ranges expanded)."""
        order = {unit: i for i, unit in enumerate(self.unit_keys)}
        result = list(self.active)
        for block in self.skipped:
            first = bisect.bisect_left(self.starts, block.first_start)
            for i in range(first, first + block.partitions):
                result.append(PlannedUnit(self.starts[i], self.ends[i], block.unit, block.reason, None, None, None))
        result.sort(key=lambda u: (u.partition_start, order[u.unit]))
        return result

    def summary(self) -> list[tuple[str, str, str, int, str]]:
        """Rows ``(partitions, executes|skipped, unit, count, reason: explanation)``, by unit and time."""
        entries: list[tuple[str, int, tuple[str, str, str, int, str]]] = []
        for u in self.active:
            detail = REASON_TEXT[u.reason]
            if u.range_start is not None and u.range_start != u.partition_start:
                detail += f" (from {format_day(u.range_start)})"
            label = f"{format_day(u.partition_start)}..{format_day(u.partition_end)}"
            verdict = "executes" if u.executes else "skipped"
            entries.append(
                (u.unit, u.partition_start, (label, verdict, u.unit or "-", 1, f"{u.reason.value}: {detail}"))
            )
        for b in self.skipped:
            label = f"{format_day(b.first_start)}..{format_day(b.last_end)}"
            row = (label, "skipped", b.unit or "-", b.partitions, f"{b.reason.value}: {REASON_TEXT[b.reason]}")
            entries.append((b.unit, b.first_start, row))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [row for _, _, row in entries]


def plan(
    spec: PartitionSpec,
    state: PartitionState,
    now_ms: int,
    *,
    units: Sequence[str] = (),
    grace_ms: int = 0,
    abstinent_ms: int = 0,
    backfill: tuple[int, int] | None = None,
    max_work_units: int | None = None,
) -> Plan:
    """Decide, for every work unit (partition x unit, oldest first), whether and over which range it runs.

    Example (DIL, no partitioning, abstinent 1 day): from 2020-01-01 to P0D, extracted up to 01-15; on
    01-16 C = 01-16 and the partition [01-01, 01-16) does not execute; on 01-17 it executes over
    [01-16, 01-17). A first run plans every partition up to now as new:

    >>> from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState, format_day, iso_ms
    >>> spec = PartitionSpec.build({"from": "2026-01-01", "to": "P0D"}, "daily")
    >>> first = plan(spec, PartitionState.empty(), iso_ms("2026-01-03"))
    >>> [(format_day(u.range_start), u.reason.value) for u in first.executing()]
    [('2026-01-01', 'new'), ('2026-01-02', 'new')]
    """
    if grace_ms < 0 or abstinent_ms < 0:
        raise ValueError(f"grace_ms={grace_ms} and abstinent_ms={abstinent_ms} must not be negative")
    if max_work_units is not None and max_work_units < 1:
        raise ValueError(f"max_work_units={max_work_units!r} must be a positive number")
    unit_keys = tuple(units) or (DEFAULT_UNIT,)
    if len(set(unit_keys)) != len(unit_keys):
        raise ValueError(f"units={list(units)!r} has duplicates")
    best = state.max_high_watermark()
    cutoff = None if best is None else best + abstinent_ms - grace_ms
    starts, ends = spec.bounds(now_ms)
    count = len(starts)
    if backfill is not None:  # partitions [backfill_first, backfill_last) overlap the backfill
        backfill_first = bisect.bisect_right(ends, backfill[0])
        backfill_last = bisect.bisect_left(starts, backfill[1])
    else:
        backfill_first = backfill_last = count
    active: list[tuple[int, int, PlannedUnit]] = []
    skipped: list[SkippedRange] = []
    for order, unit in enumerate(unit_keys):
        runs = state.runs.get(unit, ())
        r = 0
        i = 0
        while i < count:
            start, end = starts[i], ends[i]
            while r < len(runs) and runs[r].end <= start:
                r += 1
            run = runs[r] if r < len(runs) and runs[r].start <= start else None
            in_backfill = backfill_first <= i < backfill_last
            if (
                run is not None
                and run.status is UnitStatus.SUCCEEDED
                and run.high_watermark_ms is None
                and cutoff is not None
                and not in_backfill
            ):
                # a stretch of succeeded partitions that end at or before the cut-off: one skipped range
                stop = min(bisect.bisect_left(starts, run.end, i), bisect.bisect_right(ends, cutoff, i))
                if i < backfill_first:
                    stop = min(stop, backfill_first)
                if stop > i:
                    _skip(skipped, unit, start, ends[stop - 1], stop - i, Reason.UP_TO_DATE)
                    i = stop
                    continue
            history = (
                None
                if run is None
                else (
                    History(run.high_watermark_ms, run.status)
                    if run.high_watermark_ms is not None or run.status is UnitStatus.FAILED
                    else History(min(end, run.end), run.status)
                )
            )
            hw = history.high_watermark_ms if history else None
            if in_backfill:
                reason, range_start = Reason.BACKFILL, start
            elif history is None:
                reason, range_start = Reason.NEW, start
            elif history.status is UnitStatus.FAILED or hw is None:
                reason, range_start = Reason.FAILED_BEFORE, start
            elif cutoff is not None and end > cutoff:
                assert hw is not None
                range_start = max(start, hw + abstinent_ms - grace_ms)
                if range_start >= end:
                    reason = Reason.EMPTY_RANGE
                else:
                    reason = Reason.WITHIN_GRACE if range_start < hw else Reason.NEW_TIME
            else:
                reason = Reason.UP_TO_DATE
            if reason in EXECUTING_REASONS:
                active.append((start, order, PlannedUnit(start, end, unit, reason, range_start, end, hw)))
            else:
                _skip(skipped, unit, start, end, 1, reason)
            i += 1
    active.sort(key=lambda entry: (entry[0], entry[1]))
    planned = [entry[2] for entry in active]
    if max_work_units is not None:
        kept = set(sorted(range(len(planned)), key=lambda i: (planned[i].reason in REREADS, i))[:max_work_units])
        planned = [
            u if i in kept else u._replace(reason=Reason.CAPPED, range_start=None, range_end=None)
            for i, u in enumerate(planned)
        ]
    return Plan(now_ms, cutoff, unit_keys, tuple(planned), tuple(skipped), tuple(starts), tuple(ends))


def _skip(skipped: list[SkippedRange], unit: str, start: int, end: int, count: int, reason: Reason) -> None:
    last = skipped[-1] if skipped else None
    if last is not None and last.unit == unit and last.reason is reason and last.last_end == start:
        skipped[-1] = last._replace(last_end=end, partitions=last.partitions + count)
    else:
        skipped.append(SkippedRange(unit, start, end, count, reason))


def succeeded(done: Plan) -> list[UnitResult]:
    """Every executing work unit of a plan as succeeded (what a fully successful run reports)."""
    return [UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED) for u in done.executing()]
