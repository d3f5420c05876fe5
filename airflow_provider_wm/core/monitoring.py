"""What the Watermarks page shows, computed from the store's small documents: pure functions, no I/O.

- :func:`downsample_lag` turns a stream's watermark log (one entry per published watermark, possibly
  hundreds of thousands) into at most a few hundred chart points: the page draws a picture, it does not
  ship every point.
- :func:`partition_strip` turns an incremental pipeline's compact state into a status strip per work unit:
  runs of consecutive partitions with the same status (done, failed, pending, within grace, never run).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import NamedTuple

from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState, Reason, UnitStatus

__all__ = [
    "LagPoint",
    "PartitionStatus",
    "StripRun",
    "downsample_lag",
    "format_duration",
    "partition_strip",
]


class LagPoint(NamedTuple):
    """One chart point: at ``computed_at_ms`` the watermark was ``lower_ms``, ``lag_ms`` behind its clock."""

    computed_at_ms: int
    lower_ms: int
    lag_ms: int


def downsample_lag(entries: Sequence[tuple[int, int]], max_points: int) -> list[LagPoint]:
    """At most ``max_points`` points of a watermark log given as ``(computed_at_ms, lower_ms)``, oldest first.

    The time span of the log is cut into ``max_points`` equal buckets; each non-empty bucket gives one point:
    the time and lower bound of its last entry (watermarks only go up, so that is the bucket's highest) and
    the largest lag (``computed_at_ms - lower_ms``) of any entry in it, so that no spike of lag disappears.
    A log with at most ``max_points`` entries is returned whole.

    >>> downsample_lag([(10, 5), (20, 8), (30, 29), (40, 30)], 2)
    [LagPoint(computed_at_ms=20, lower_ms=8, lag_ms=12), LagPoint(computed_at_ms=40, lower_ms=30, lag_ms=10)]
    """
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points!r}")
    if len(entries) <= max_points:
        return [LagPoint(t, lower, t - lower) for t, lower in entries]
    first, last = entries[0][0], entries[-1][0]
    width = max(1, -(-(last - first + 1) // max_points))  # ceiling: max_points buckets cover [first, last]
    points: list[LagPoint] = []
    bucket, worst = -1, 0
    for t, lower in entries:
        index = (t - first) // width
        if index != bucket:
            bucket, worst = index, t - lower
        else:
            worst = max(worst, t - lower)
            points.pop()
        points.append(LagPoint(t, lower, worst))
    return points


def format_duration(ms: int) -> str:
    """A lag for people: the two largest units, e.g. ``3h 12m``; negative means ahead of the clock.

    >>> format_duration(11_520_000), format_duration(45_000), format_duration(-90_000), format_duration(0)
    ('3h 12m', '45s', '-1m 30s', '0s')
    """
    sign, rest = ("-" if ms < 0 else ""), abs(ms) // 1000
    parts: list[str] = []
    for unit, seconds in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if rest >= seconds or (unit == "s" and not parts):
            parts.append(f"{rest // seconds}{unit}")
            rest %= seconds
        if len(parts) == 2:
            break
    return sign + " ".join(parts)


class PartitionStatus(StrEnum):
    DONE = "done"
    FAILED = "failed"
    PENDING = "pending"
    WITHIN_GRACE = "within grace"
    NEVER_RUN = "never run"


class StripRun(NamedTuple):
    """``partitions`` consecutive partitions ``[start_ms, end_ms)`` of one work unit with the same status."""

    start_ms: int
    end_ms: int
    status: PartitionStatus
    partitions: int


def partition_strip(
    spec: PartitionSpec,
    state: PartitionState,
    units: Sequence[str],
    now_ms: int,
    last_plan: Iterable[tuple[int, str, str]] = (),
) -> dict[str, list[StripRun]]:
    """Per work unit, the status of every partition up to ``now_ms``, as runs of equal status.

    A partition is *never run* without history, *failed* when its last execution failed, *done* when it
    succeeded; *within grace* when it succeeded and the last plan re-read it for late updates (``last_plan``
    holds ``(partition_start_ms, unit, reason)`` of the plan's executing and capped units), *pending* when
    the last plan left it for a later run (capped).

    >>> from airflow_provider_wm.core.partitions import UnitResult, iso_ms
    >>> spec = PartitionSpec.build({"from": "2026-01-01", "to": "2026-01-04"}, "daily")
    >>> first_day = UnitResult(iso_ms("2026-01-01"), iso_ms("2026-01-02"), "", UnitStatus.SUCCEEDED)
    >>> strip = partition_strip(spec, PartitionState.empty().apply([first_day]), [""], iso_ms("2026-01-04"))
    >>> [(run.status.value, run.partitions) for run in strip[""]]
    [('done', 1), ('never run', 2)]
    """
    planned = {(start, unit): Reason(reason) for start, unit, reason in last_plan}
    strips: dict[str, list[StripRun]] = {}
    partitions = spec.partitions(now_ms)
    for unit in units:
        runs: list[StripRun] = []
        for partition in partitions:
            history = state.history(unit, partition.start, partition.end)
            reason = planned.get((partition.start, unit))
            if reason is Reason.CAPPED:
                status = PartitionStatus.PENDING
            elif history is None:
                status = PartitionStatus.NEVER_RUN
            elif history.status is UnitStatus.FAILED:
                status = PartitionStatus.FAILED
            elif reason is Reason.WITHIN_GRACE:
                status = PartitionStatus.WITHIN_GRACE
            else:
                status = PartitionStatus.DONE
            if runs and runs[-1].status is status and runs[-1].end_ms == partition.start:
                previous = runs.pop()
                runs.append(StripRun(previous.start_ms, partition.end, status, previous.partitions + 1))
            else:
                runs.append(StripRun(partition.start, partition.end, status, 1))
        strips[unit] = runs
    return strips
