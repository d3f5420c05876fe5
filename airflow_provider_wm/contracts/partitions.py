"""The incremental-partitions job's request and manifest (DIL work units executed on Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from airflow_provider_wm.contracts.codec import Contract
from airflow_provider_wm.contracts.jobs import JobManifest, JobRequest, UnreadableFile

__all__ = ["PartitionsManifest", "PartitionsRequest", "PartitionsTotals", "WorkUnitOutcome", "WorkUnitRequest"]


@dataclass(frozen=True)
class WorkUnitRequest(Contract):
    """Execute ``unit`` of the partition ``[partition_start, partition_end)`` over ``[range_start, range_end)``
    (epoch ms); ``reason`` is the plan's (new, grace, failed before, backfill...)."""

    partition_start: int
    partition_end: int
    unit: str
    range_start: int
    range_end: int
    reason: str


@dataclass(frozen=True)
class PartitionsRequest(JobRequest):
    """Read ``source`` for the work units' ranges, quarantine bad rows (no usable time; with ``units``, a
    null or unknown unit), apply the transformation (``transform_sql`` over the view ``source``, or
    ``transform_callable`` as ``package.module:function``) and write each unit's output under ``target``.

    ``quarantine_path`` is the pipeline's quarantine (default: ``<round_out>/quarantine``): the bad rows no
    earlier version quarantined go to its partition ``wm_version=<version>``, so each is counted once.
    ``units`` lists every configured unit (``None``: units are not checked). ``source_partition_timezone``: the
    zone in which ``source_partition_column``'s dates are the rows' dates (the read selects exactly the dates of
    the ranges); ``None``: not known (a day of margin on each side). ``timezone``: the pipeline's; a ``time_column``
    of dates gives each row the midnight that starts its date there (other times are instants already)."""

    job: ClassVar[str] = "incremental_partitions"
    pipeline: str
    run_id: str
    work_units: list[WorkUnitRequest]
    source: str
    time_column: str
    target: str
    round_out: str
    source_format: str = "parquet"
    unit_column: str | None = None
    source_partition_column: str | None = None
    source_partition_timezone: str | None = None
    transform_sql: str | None = None
    transform_callable: str | None = None
    units: list[str] | None = None
    quarantine_path: str | None = None
    version: int = 1
    timezone: str = "UTC"


@dataclass(frozen=True)
class WorkUnitOutcome(WorkUnitRequest):
    """A requested work unit with its partition key and what the job did with it."""

    wm_partition: str
    status: str
    rows_read: int = 0
    rows_written: int = 0
    error: str | None = None


@dataclass(frozen=True)
class PartitionsTotals(Contract):
    """``quarantined``: bad rows this run quarantined first; ``quarantined_seen_before``: bad rows it read
    again that an earlier version already holds (not counted again)."""

    work_units: int = 0
    failed: int = 0
    rows_read: int = 0
    rows_written: int = 0
    quarantined: int = 0
    quarantined_seen_before: int = 0


@dataclass(frozen=True)
class PartitionsManifest(JobManifest):
    """Per work unit its outcome; ``status`` is ``partial`` when some failed (the job isolates them).

    ``quarantine`` counts by reason the bad rows this run quarantined first (its ``wm_version`` partition of
    ``quarantine_path``, over all its attempts), ``quarantine_seen_before`` the bad rows it read again that
    an earlier version holds; ``unknown_unit_samples`` shows a few of the unknown unit values it read."""

    pipeline: str
    run_id: str
    work_units: list[WorkUnitOutcome] = field(default_factory=list)
    quarantine: dict[str, int] = field(default_factory=dict)
    quarantine_seen_before: dict[str, int] = field(default_factory=dict)
    unknown_unit_samples: list[str] = field(default_factory=list)
    quarantine_path: str | None = None
    totals: PartitionsTotals = field(default_factory=PartitionsTotals)
    write_id: str | None = None
    unreadable_files: list[UnreadableFile] = field(default_factory=list)
    status: str = "succeeded"
    job: str = "incremental_partitions"
