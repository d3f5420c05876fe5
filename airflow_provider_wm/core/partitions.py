"""Incremental partitions (LinkedIn DIL): time and unit watermarks, grace and abstinent periods.

A pipeline extracts a time range ``[from, to)`` split into partitions (hourly, daily, weekly, monthly,
yearly, or one partition), times a list of units (ids); each (partition, unit) is a *work unit* with its
own high watermark: the end of the range it last extracted successfully. Every run plans which work units
execute, and over which range:

- effective cut-off ``C = max high watermark over all work units + abstinent - grace`` (no history: none);
- a work unit with no successful history (new, or failed before) executes over its whole partition;
- otherwise it executes when its partition end > C, over ``[max(start, hw + abstinent - grace), end)``;
  an empty range does not execute;
- a backfill ``[start, end)`` re-executes every overlapping work unit in full; ``max_work_units`` caps a
  run, oldest first.

Worked example (DIL): daily from 2020-01-01, first run on 2020-02-21 -> 51 new partitions. After they
succeed, a run on 2020-02-22 with a 3-day grace period has C = 02-21 - 3 days = 02-18: the partitions
ending after 02-18 re-execute and 02-21 is new.

>>> spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily")
>>> first = plan(spec, PartitionState.empty(), iso_ms("2020-02-21"))
>>> len(first.executing()), first.executing()[-1].reason.value
(51, 'new')
>>> state = PartitionState.empty().apply(succeeded(first))
>>> second = plan(spec, state, iso_ms("2020-02-22"), grace_ms=3 * DAY_MS)
>>> [(format_day(u.range_start), u.reason.value) for u in second.executing()]
[('2020-02-18', 'within grace'), ('2020-02-19', 'within grace'), ('2020-02-20', 'within grace'), ('2020-02-21', 'new')]

Times are UTC epoch milliseconds; partitions are stepped in the configured time zone (a daily partition
across a DST change is 23 or 25 hours long).
"""

from __future__ import annotations

import bisect
import calendar
import datetime as dt
import itertools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_wm.core.times import is_valid_time_ms

__all__ = [
    "DAY_MS",
    "DEFAULT_UNIT",
    "HOUR_MS",
    "Completeness",
    "Granularity",
    "Partition",
    "PartitionSpec",
    "PartitionState",
    "Plan",
    "PlannedUnit",
    "QuarantineReason",
    "Reason",
    "Run",
    "SkippedRange",
    "TimeBound",
    "UnitResult",
    "UnitStatus",
    "check_completeness",
    "format_day",
    "iso_ms",
    "never_before",
    "plan",
    "quarantine_reason",
    "succeeded",
    "work_units_not_done",
]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
DEFAULT_UNIT = ""
"""The unit key of a pipeline without unit watermarks (one unit)."""

ACCEPTED_BOUNDS = (
    "an ISO date or date-time (2020-01-01, 2020-01-01T10:00:00; zone-less values are in the configured "
    "timezone), PnD (n days before now, floored to the day), PnDTmH (m in 0..23, floored to the hour) "
    "or '-' (now, floored to the minute)"
)
_DURATION = re.compile(r"^P(\d+)D(?:T(\d+)H)?$")


def iso_ms(text: str, timezone: str = "UTC") -> int:
    """An ISO date or date-time (zone-less: in ``timezone``) as epoch ms.

    >>> iso_ms("2020-01-01")
    1577836800000
    """
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_zone(timezone, "timezone"))
    return int(parsed.timestamp() * 1000)


def format_day(ms: int | None) -> str:
    """Epoch ms as a UTC date-time, shortened to the date at midnight (``-`` for none)."""
    if ms is None:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.strftime("%Y-%m-%d") if moment.time() == dt.time() else moment.strftime("%Y-%m-%dT%H:%M")


def _zone(name: str, argument: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(f"{argument}={name!r} is not an IANA time zone such as 'UTC' or 'Europe/Berlin'") from exc


def _local(ms: int, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, zone)


def _epoch_ms(wall: dt.datetime, zone: ZoneInfo) -> int:
    """A wall-clock time in ``zone`` as epoch ms (the earlier instant when a DST change repeats it)."""
    return int(wall.replace(tzinfo=zone, fold=0).timestamp() * 1000)


@dataclass(frozen=True)
class TimeBound:
    """One end of a time watermark, as written by the DAG author; resolved against the run's "now".

    >>> TimeBound.parse("P1DT2H", "to").resolve(iso_ms("2020-01-10T05:30:00"), "UTC") == iso_ms("2020-01-09T03:00")
    True
    >>> TimeBound.parse("yesterday", "from")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: from='yesterday' is not a time watermark bound; accepted forms: an ISO date ...
    """

    text: str
    days: int | None = None
    hours: int | None = None

    @classmethod
    def parse(cls, value: Any, argument: str) -> TimeBound:
        error = f"{argument}={value!r} is not a time watermark bound; accepted forms: {ACCEPTED_BOUNDS}"
        if isinstance(value, (dt.datetime, dt.date)):
            value = value.isoformat()
        if not isinstance(value, str) or not value.strip():
            raise ValueError(error)
        text = value.strip()
        if text == "-":
            return cls(text)
        match = _DURATION.match(text)
        if match:
            days, hours = int(match.group(1)), match.group(2)
            if hours is not None and int(hours) > 23:
                raise ValueError(error)
            return cls(text, days=days, hours=None if hours is None else int(hours))
        try:
            dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(error) from None
        return cls(text)

    @property
    def is_static(self) -> bool:
        return self.text != "-" and self.days is None

    def resolve(self, now_ms: int, timezone: str) -> int:
        zone = _zone(timezone, "timezone")
        if self.is_static:
            return iso_ms(self.text, timezone)
        now = _local(now_ms, zone).replace(tzinfo=None)
        if self.text == "-":
            return _epoch_ms(now.replace(second=0, microsecond=0), zone)
        assert self.days is not None
        back = now - dt.timedelta(days=self.days, hours=self.hours or 0)
        if self.hours is None:
            return _epoch_ms(back.replace(hour=0, minute=0, second=0, microsecond=0), zone)
        return _epoch_ms(back.replace(minute=0, second=0, microsecond=0), zone)


def never_before(from_: TimeBound, to: TimeBound) -> bool:
    """Whether a range of two relative bounds (``PnD``, ``PnDTmH``, ``-``) is empty at every run: ``from``
    resolves at or after ``to`` whatever the run's "now". (Static bounds are compared directly; a static and a
    relative bound are ordered at some runs and not at others, so they are never refused.)

    Rule: each relative bound is ``floor(now - offset)`` to the minute (``-``), hour (``PnDTmH``) or day
    (``PnD``), with an offset of whole hours. So ``to - from`` repeats every day, and within one hour only the
    minute floor moves, one way: the first and the last minute of every hour of one day are every case.

    >>> never_before(TimeBound.parse("P1D", "from"), TimeBound.parse("P5D", "to"))  # 1 day ago, 5 days ago
    True
    >>> never_before(TimeBound.parse("P5D", "from"), TimeBound.parse("P1D", "to"))
    False
    >>> never_before(TimeBound.parse("P0D", "from"), TimeBound.parse("P0DT1H", "to"))  # empty 00:00-01:59 only
    False
    """
    if from_.is_static or to.is_static:
        return False
    day = iso_ms("2001-01-02")  # the time zone only shifts the wall clock: UTC stands for every zone
    samples = (day + hour * HOUR_MS + minute * 60_000 for hour in range(24) for minute in (0, 59))
    return all(from_.resolve(now, "UTC") >= to.resolve(now, "UTC") for now in samples)


class Granularity(StrEnum):
    NONE = "none"
    HOURLY = "hourly"
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"
    YEARLY = "yearly"

    @classmethod
    def parse(cls, value: Any, argument: str) -> Granularity:
        try:
            return cls(str(value).lower()) if isinstance(value, str) else cls(value)
        except ValueError:
            names = ", ".join(g.value for g in cls)
            raise ValueError(f"{argument}={value!r} is not a partitioning; use one of {names}") from None


class Partition(NamedTuple):
    start: int
    end: int


def _add_months(wall: dt.datetime, months: int) -> dt.datetime:
    total = wall.month - 1 + months
    year, month = wall.year + total // 12, total % 12 + 1
    day = min(wall.day, calendar.monthrange(year, month)[1])
    return wall.replace(year=year, month=month, day=day)


def _boundaries(granularity: Granularity, start_ms: int, until_ms: int, zone: ZoneInfo) -> list[int]:
    """Partition starts from ``start_ms`` plus the first boundary at or after ``until_ms``."""
    if granularity is Granularity.NONE:
        return [start_ms, max(until_ms, start_ms)]
    if granularity is Granularity.HOURLY:  # hours are absolute: a DST day has 23 or 25 of them
        count = max(0, -(-(until_ms - start_ms) // HOUR_MS))
        return list(range(start_ms, start_ms + (count + 1) * HOUR_MS, HOUR_MS))
    wall = _local(start_ms, zone).replace(tzinfo=None)
    result = [start_ms]
    k = 0
    while result[-1] < until_ms:
        k += 1
        if granularity is Granularity.DAILY:
            nxt = wall + dt.timedelta(days=k)
        elif granularity is Granularity.WEEKLY:
            nxt = wall + dt.timedelta(days=7 * k)
        elif granularity is Granularity.MONTHLY:
            nxt = _add_months(wall, k)
        else:
            nxt = _add_months(wall, 12 * k)
        result.append(_epoch_ms(nxt, zone))
    return result


@dataclass(frozen=True)
class Piece:
    granularity: Granularity
    from_: TimeBound
    to: TimeBound


@dataclass(frozen=True)
class PartitionSpec:
    """How a pipeline's time range is cut into partitions. Built and validated by :meth:`build`.

    >>> spec = PartitionSpec.build({"from": "2019-01-01", "to": "-"}, "monthly")
    >>> parts = spec.partitions(iso_ms("2020-02-21"))
    >>> len(parts), format_day(parts[-1].start), format_day(parts[-1].end)
    (14, '2020-02-01', '2020-02-21')
    """

    pieces: tuple[Piece, ...]
    timezone: str = "UTC"
    partial_partition: bool = True

    @classmethod
    def build(
        cls,
        watermark: Mapping[str, Any] | Sequence[Any] | None,
        partition: str | Mapping[str, Sequence[Any]] = "none",
        timezone: str = "UTC",
        partial_partition: bool = True,
    ) -> PartitionSpec:
        """``watermark={"from": ..., "to": ...}`` (or a pair) with ``partition`` a granularity name, or
        ``watermark=None`` with a composite ``partition={"monthly": [from, to], "daily": [from, to]}``."""
        _zone(timezone, "timezone")
        if not isinstance(partial_partition, bool):
            raise ValueError(f"partial_partition={partial_partition!r} must be True or False")
        if isinstance(partition, Mapping):
            if watermark is not None:
                raise ValueError(
                    f"watermark={watermark!r}: a composite partition={dict(partition)!r} carries its own "
                    "[from, to] per piece; pass watermark=None"
                )
            if not partition:
                raise ValueError("partition={} names no piece")
            pieces = [
                cls._piece(Granularity.parse(name, "partition"), bounds, f"partition[{name!r}]")
                for name, bounds in partition.items()
            ]
        else:
            if watermark is None:
                raise ValueError(f"watermark=None: partition={partition!r} needs a watermark with 'from' and 'to'")
            pieces = [cls._piece(Granularity.parse(partition, "partition"), watermark, "watermark")]
        spec = cls(tuple(pieces), timezone, partial_partition)
        static = [(p.from_, p.to) for p in pieces if p.from_.is_static and p.to.is_static]
        ranges = sorted((a.resolve(0, timezone), b.resolve(0, timezone), a.text, b.text) for a, b in static)
        for start, end, from_text, to_text in ranges:
            if start >= end:
                raise ValueError(f"watermark from={from_text!r} is not before to={to_text!r}")
        for (_, end, _, to_text), (start, _, from_text, _) in itertools.pairwise(ranges):
            if start < end:
                raise ValueError(f"partition pieces overlap: one ends at {to_text!r}, the next starts at {from_text!r}")
        return spec

    @staticmethod
    def _piece(granularity: Granularity, bounds: Mapping[str, Any] | Sequence[Any], argument: str) -> Piece:
        if isinstance(bounds, Mapping):
            unknown = set(bounds) - {"from", "to"}
            if unknown or "from" not in bounds:
                raise ValueError(f"{argument}={dict(bounds)!r} must have 'from' and optionally 'to' (default '-')")
            piece = Piece(
                granularity,
                TimeBound.parse(bounds["from"], f"{argument}['from']"),
                TimeBound.parse(bounds.get("to", "-"), f"{argument}['to']"),
            )
            shown: Any = dict(bounds)
        elif isinstance(bounds, (list, tuple)) and len(bounds) == 2:
            piece = Piece(
                granularity, TimeBound.parse(bounds[0], f"{argument}[0]"), TimeBound.parse(bounds[1], f"{argument}[1]")
            )
            shown = bounds
        else:
            raise ValueError(f"{argument}={bounds!r} must be {{'from': ..., 'to': ...}} or a [from, to] pair")
        if never_before(piece.from_, piece.to):
            raise ValueError(
                f"{argument}={shown!r}: from={piece.from_.text!r} is at or after to={piece.to.text!r} at every time "
                "of day, so no partition would ever be planned; 'from' must lie further back than 'to' (for "
                "example from='P5D', to='P1D')"
            )
        return piece

    def partitions(self, now_ms: int, open_end_ms: int | None = None) -> list[Partition]:
        """The partitions at ``now_ms``, sorted by start, tiling each piece's ``[from, to)`` exactly.

        With ``open_end_ms`` the last piece ignores its ``to`` and continues with whole partitions until one
        ends at or after ``open_end_ms`` (what a sensor waiting for a future range needs).
        """
        starts, ends = self.bounds(now_ms, open_end_ms)
        return list(map(Partition._make, zip(starts, ends, strict=True)))

    def bounds(self, now_ms: int, open_end_ms: int | None = None) -> tuple[list[int], list[int]]:
        """:meth:`partitions` as two sorted lists, starts and ends (cheap for 100,000 partitions)."""
        zone = _zone(self.timezone, "timezone")
        pieces: list[list[int]] = []
        for index, piece in enumerate(self.pieces):
            start = piece.from_.resolve(now_ms, self.timezone)
            if open_end_ms is not None and index == len(self.pieces) - 1:
                pieces.append(_boundaries(piece.granularity, start, max(open_end_ms, start + 1), zone))
                continue
            end = piece.to.resolve(now_ms, self.timezone)
            if start >= end:
                continue
            bounds = _boundaries(piece.granularity, start, end, zone)
            if bounds[-1] > end:  # the last partition is partial: cut at `to`, or drop it
                if self.partial_partition:
                    bounds[-1] = end
                else:
                    bounds.pop()
            pieces.append(bounds)
        pieces.sort()
        starts: list[int] = []
        ends: list[int] = []
        for bounds in pieces:
            if starts and bounds[0] < ends[-1]:
                raise ValueError(
                    f"partition pieces overlap at {format_day(bounds[0])}: check the [from, to] of each piece"
                )
            starts.extend(bounds[:-1])
            ends.extend(bounds[1:])
        return starts, ends

    def to_json(self) -> dict[str, Any]:
        return {
            "pieces": [[p.granularity.value, p.from_.text, p.to.text] for p in self.pieces],
            "timezone": self.timezone,
            "partial_partition": self.partial_partition,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionSpec:
        pieces = tuple(
            Piece(Granularity(g), TimeBound.parse(f, "from"), TimeBound.parse(t, "to")) for g, f, t in data["pieces"]
        )
        return cls(pieces, str(data["timezone"]), bool(data["partial_partition"]))


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
    [01-16, 01-17).
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
        planned[max_work_units:] = [
            u._replace(reason=Reason.CAPPED, range_start=None, range_end=None) for u in planned[max_work_units:]
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


def work_units_not_done(
    spec: PartitionSpec,
    state: PartitionState,
    units: Sequence[str],
    start_ms: int,
    end_ms: int,
) -> list[tuple[int, int, str]]:
    """Work units overlapping ``[start_ms, end_ms)`` that have not succeeded with a high watermark at or past
    their partition's end: what a completeness sensor waits for (empty = complete).

    Partitions are the spec's whole partitions up to ``end_ms`` (a month is complete only when all of it is).
    """
    if start_ms >= end_ms:
        raise ValueError(f"start={format_day(start_ms)} must be before end={format_day(end_ms)}")
    pending: list[tuple[int, int, str]] = []
    for part in spec.partitions(end_ms, open_end_ms=end_ms):
        if part.end <= start_ms or part.start >= end_ms:
            continue
        for unit in list(units) or [DEFAULT_UNIT]:
            if not _done(state, unit, part):
                pending.append((part.start, part.end, unit))
    return pending


class Completeness(NamedTuple):
    """What one read of a pipeline's state document says about ``[start_ms, end_ms)``.

    ``work_units`` is how many work units (partition x unit) overlap the range and were checked; ``pending``
    lists those not done as ``(partition_start, partition_end, unit)``. Without a state document nothing is
    known: ``work_units`` is None and ``pending`` is empty, and the range is not complete.
    """

    work_units: int | None
    pending: list[tuple[int, int, str]]

    @property
    def complete(self) -> bool:
        return self.work_units is not None and not self.pending


def check_completeness(document: Mapping[str, Any] | None, start_ms: int, end_ms: int) -> Completeness:
    """What a completeness sensor decides from a pipeline's committed state document (``spec``, ``state``,
    ``units``): :func:`work_units_not_done` over ``[start_ms, end_ms)`` and how many work units it checked.

    >>> spec = PartitionSpec.build({"from": "1970-01-01", "to": "-"}, "daily")
    >>> document = {"spec": spec.to_json(), "state": None, "units": ["eu", "us"]}
    >>> result = check_completeness(document, 0, 2 * DAY_MS)
    >>> result.work_units, len(result.pending), result.complete
    (4, 4, False)
    """
    if document is None:
        return Completeness(None, [])
    spec = PartitionSpec.from_json(document["spec"])
    state = PartitionState.from_json(document.get("state"))
    units = [str(u) for u in document.get("units") or []]
    pending = work_units_not_done(spec, state, units, start_ms, end_ms)
    starts, ends = spec.bounds(end_ms, open_end_ms=end_ms)  # the partitions work_units_not_done checked
    partitions = bisect.bisect_left(starts, end_ms) - bisect.bisect_right(ends, start_ms)
    return Completeness(max(partitions, 0) * max(len(units), 1), pending)


def _done(state: PartitionState, unit: str, part: Partition) -> bool:
    """The work unit succeeded, with a high watermark at or past its partition's end."""
    history = state.history(unit, part.start, part.end)
    return (
        history is not None
        and history.status is UnitStatus.SUCCEEDED
        and history.high_watermark_ms is not None
        and history.high_watermark_ms >= part.end
    )


def complete_until(spec: PartitionSpec, state: PartitionState, units: Sequence[str], now_ms: int) -> int | None:
    """The output watermark of a pipeline: the end of the last partition (up to ``now_ms``) such that it and
    every earlier partition are done for every work unit; ``None`` while the first one is not.

    >>> spec = PartitionSpec.build({"from": "2026-01-01", "to": "-"}, "daily")
    >>> done = [UnitResult(iso_ms(f"2026-01-0{d}"), iso_ms(f"2026-01-0{d + 1}"), "", UnitStatus.SUCCEEDED)
    ...         for d in (1, 2, 4)]
    >>> format_day(complete_until(spec, PartitionState.empty().apply(done), [], iso_ms("2026-01-05")))
    '2026-01-03'
    """
    until = None
    for part in spec.partitions(now_ms):
        if not all(_done(state, unit, part) for unit in list(units) or [DEFAULT_UNIT]):
            break
        until = part.end
    return until


class QuarantineReason(StrEnum):
    """Why a source row is bad data: quarantined (kept with this reason, counted), never extracted."""

    NULL_TIME = "null_time"
    UNPARSEABLE_TIME = "unparseable_time"
    TIME_OUT_OF_RANGE = "time_out_of_range"
    NULL_UNIT = "null_unit"
    UNKNOWN_UNIT = "unknown_unit"


def quarantine_reason(
    raw_time: object,
    time_ms: int | None,
    *,
    ranges: Sequence[tuple[int, int]] = (),
    unit: str | None = None,
    units: Collection[str] | None = None,
) -> QuarantineReason | None:
    """Why a source row read by a run is quarantined; ``None``: it is good data.

    Rule, first match wins: ``null_time`` (no time), ``unparseable_time`` (a time that does not parse:
    ``time_ms`` is None), ``time_out_of_range`` (parses, but not ``core.times.is_valid_time_ms``: before
    1970 or after 9999). Then, when the pipeline has units (``units`` is every configured unit) and the time
    lies in one of the run's ``ranges`` (half-open), ``null_unit`` or ``unknown_unit``. A row of a known unit
    whose work unit is not in the plan (up to date) is not bad, nor is a row outside the run's ranges.

    >>> day = (iso_ms("2026-01-05"), iso_ms("2026-01-06"))
    >>> [str(quarantine_reason(raw, ms)) for raw, ms in [(None, None), ("last tuesday", None), (10**15, 10**15)]]
    ['null_time', 'unparseable_time', 'time_out_of_range']
    >>> noon = iso_ms("2026-01-05T12:00")
    >>> [str(quarantine_reason(noon, noon, ranges=[day], unit=u, units=["eu", "us"])) for u in (None, "asia", "us")]
    ['null_unit', 'unknown_unit', 'None']
    >>> quarantine_reason(noon, noon, ranges=[], unit="asia", units=["eu"]) is None  # not this run's range
    True
    """
    if raw_time is None:
        return QuarantineReason.NULL_TIME
    if time_ms is None:
        return QuarantineReason.UNPARSEABLE_TIME
    if not is_valid_time_ms(time_ms):
        return QuarantineReason.TIME_OUT_OF_RANGE
    if units is None or not any(start <= time_ms < end for start, end in ranges):
        return None
    if unit is None:
        return QuarantineReason.NULL_UNIT
    if unit not in units:
        return QuarantineReason.UNKNOWN_UNIT
    return None
