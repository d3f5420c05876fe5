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

from airflow_provider_wm.core.partitions.completeness import (
    FIRST_PENDING,
    Completeness,
    check_completeness,
    complete_until,
    work_units_not_done,
)
from airflow_provider_wm.core.partitions.planning import (
    EXECUTING_REASONS,
    REASON_TEXT,
    Plan,
    PlannedUnit,
    Reason,
    SkippedRange,
    plan,
    succeeded,
)
from airflow_provider_wm.core.partitions.quarantine import QuarantineReason, quarantine_reason
from airflow_provider_wm.core.partitions.spec import DEFAULT_UNIT, PartitionSpec, Piece
from airflow_provider_wm.core.partitions.state import History, PartitionState, Run, UnitResult, UnitStatus
from airflow_provider_wm.core.partitions.timebounds import (
    ACCEPTED_BOUNDS,
    DAY_MS,
    HOUR_MS,
    Granularity,
    Partition,
    TimeBound,
    format_day,
    iso_ms,
    local_dates,
    never_before,
    zone_info,
)

__all__ = [
    "ACCEPTED_BOUNDS",
    "DAY_MS",
    "DEFAULT_UNIT",
    "EXECUTING_REASONS",
    "FIRST_PENDING",
    "HOUR_MS",
    "REASON_TEXT",
    "Completeness",
    "Granularity",
    "History",
    "Partition",
    "PartitionSpec",
    "PartitionState",
    "Piece",
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
    "complete_until",
    "format_day",
    "iso_ms",
    "local_dates",
    "never_before",
    "plan",
    "quarantine_reason",
    "succeeded",
    "work_units_not_done",
    "zone_info",
]
