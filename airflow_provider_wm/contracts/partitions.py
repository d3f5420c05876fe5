"""The incremental-partitions job's request and manifest (DIL work units executed on Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from airflow_provider_wm.contracts.codec import Contract
from airflow_provider_wm.contracts.jobs import JobManifest, JobRequest

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
    """Read ``source`` for the work units' ranges, quarantine rows without a usable time, apply the
    transformation (``transform_sql`` over the view ``source``, or ``transform_callable`` as
    ``package.module:function``) and write each unit's output under ``target``."""

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
    transform_sql: str | None = None
    transform_callable: str | None = None


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
    work_units: int = 0
    failed: int = 0
    rows_read: int = 0
    rows_written: int = 0
    quarantined: int = 0


@dataclass(frozen=True)
class PartitionsManifest(JobManifest):
    """Per work unit its outcome; ``status`` is ``partial`` when some failed (the job isolates them)."""

    pipeline: str
    run_id: str
    work_units: list[WorkUnitOutcome] = field(default_factory=list)
    quarantine: dict[str, int] = field(default_factory=dict)
    totals: PartitionsTotals = field(default_factory=PartitionsTotals)
    write_id: str | None = None
    status: str = "succeeded"
    job: str = "incremental_partitions"
