"""Spark job: execute a plan of incremental work units (LinkedIn DIL), DataFrame-native.

The plan comes from :func:`airflow_provider_wm.core.partitions.plan` (the operator writes it as JSON): a list
of work units, each a partition ``[partition_start, partition_end)``, a unit, and the range
``[range_start, range_end)`` to extract. The job:

1. reads the source filtered to the plan's ranges: a filter on the source's partition column (partition
   pruning) when one is named (the ranges' dates in ``source_partition_timezone``, or without it a day of
   margin on each side), and a filter on the raw time column (Parquet predicate pushdown) when it is
   a timestamp, date or epoch-millisecond number (rows whose time is null or out of range stay in), unless the
   pruning selects exactly the ranges' rows (whole days of ``source_partition_timezone``: a pushed filter is
   also evaluated in the scan's generated code, and its bounds change with every run). An existing source folder
   with no data file is a source without rows: every unit succeeds with 0 rows;
2. quarantines bad rows (:func:`airflow_provider_wm.core.partitions.quarantine_reason`, the same rule in
   Column operations): ``null_time``, ``unparseable_time``, ``time_out_of_range`` (outside
   ``core.times``' 1970..9999), and, when the request lists the pipeline's ``units``, ``null_unit`` and
   ``unknown_unit`` for rows in the plan's ranges (a row of a known unit whose work unit is up to date is
   not bad);
3. assigns each row to its work unit: up to ``INLINE_UNITS_UP_TO`` units by a ``CASE`` over their ranges
   and units (read from the column ``wm_units``, :func:`~spark_jobs.common.with_constants`, not literals: a
   run's units change every run, and Spark compiles its generated code again for every new literal), for more
   by an equi-join on ``(UTC day, unit)`` with the plan's ranges exploded into the days they touch
   (broadcast), then a range filter: no Python on rows;
4. exposes the rows as the view ``source`` with ``wm_partition`` (partition key), ``wm_unit``,
   ``wm_partition_start/end``, ``wm_range_start/end`` and ``wm_time``; applies the user's transformation
   (a Spark SQL statement over ``source``, or a ``DataFrame -> DataFrame`` function named by import path);
   its output must keep ``wm_partition`` and ``wm_unit``;
5. writes the target partitioned by ``wm_partition, wm_unit`` with dynamic partition overwrite, so a unit
   re-executed replaces exactly its own output. A unit executed over a partial range (grace/abstinent
   cut inside its partition) keeps its previous rows before ``range_start`` (they need the time column in
   the output). A unit that now produces no rows, and keeps none, has its old output removed. The write
   counts each unit's rows written and, when the transformation only projects and filters ``source`` (no
   limit, join, union, sort or shuffle), the rows read per unit and the bad rows, observed below the
   transformation; otherwise a scan that writes nothing counts those;
6. isolates failures: if writing a batch of work units fails, the batch is split in halves and retried,
   so only the failing units end up ``failed`` in the manifest (O(failures x log units) extra writes).

**Each bad row is quarantined and counted once.** A bad row cannot be placed in a work unit (its time or
unit is the damage), and a run re-reads bad rows whenever it reads their source partition again (a grace
re-execution, a neighbour's day of margin, a source without a partition column: every run), nor is the
first reading run known from the plan (a bad row can arrive late in a partition done long ago). So the
quarantine is keyed by the row: the pipeline's quarantine (``quarantine_path``, written by version,
``wm_version=<version>``) holds each bad row once with ``wm_row_id`` (a SHA-256 of the row's columns as
JSON, plus its occurrence number among identical rows). A run quarantines only the bad rows no committed
version (``wm_version < version``) holds, and replaces its own version's partition: a retry of the run
keeps what its earlier attempts found (rows of the same ``wm_run_id``) and adds its own, a failed run's
leftovers under the same version are replaced by the next run. Readers of committed rows read
``wm_version <=`` the committed version. Example: a row without a time in the source partition 2026-01-06
is quarantined by version 2 (``quarantine == {"null_time": 1}``); version 3 re-reads that partition within
its grace period and reports it as ``quarantine_seen_before == {"null_time": 1}``, counted once. A row whose
columns change (a fix, or a new source column) is a new row.

The manifest (``manifest.json``, written atomically last) has one entry per work unit: range, rows read,
rows written, status and error; ``status`` is ``succeeded``, ``partial`` (some units failed) or ``failed``;
``quarantine`` counts the run's first-time bad rows by reason, ``quarantine_seen_before`` those read again,
``unknown_unit_samples`` a few unknown unit values.
"""

from __future__ import annotations

from spark_jobs.partitions.job import Job, main, run
from spark_jobs.partitions.layout import merged_intervals, partition_key, unit_key, work_unit_key

__all__ = [
    "Job",
    "main",
    "merged_intervals",
    "partition_key",
    "run",
    "unit_key",
    "work_unit_key",
]
