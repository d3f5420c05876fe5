"""Spark job: execute a plan of incremental work units (LinkedIn DIL), DataFrame-native.

The plan comes from :func:`airflow_provider_wm.core.partitions.plan` (the operator writes it as JSON): a list
of work units, each a partition ``[partition_start, partition_end)``, a unit, and the range
``[range_start, range_end)`` to extract. The job:

1. reads the source filtered to the plan's ranges: a filter on the source's partition column (partition
   pruning) when one is named, and a filter on the raw time column (Parquet predicate pushdown) when it is
   a timestamp, date or epoch-millisecond number;
2. quarantines rows whose time is null or unparseable (``reason`` column, counted in the manifest);
3. assigns each row to its work unit by an equi-join on ``(UTC day, unit)`` with the plan's ranges
   exploded into the days they touch (broadcast), then a range filter: no Python on rows;
4. exposes the rows as the view ``source`` with ``wm_partition`` (partition key), ``wm_unit``,
   ``wm_partition_start/end``, ``wm_range_start/end`` and ``wm_time``; applies the user's transformation
   (a Spark SQL statement over ``source``, or a ``DataFrame -> DataFrame`` function named by import path);
   its output must keep ``wm_partition`` and ``wm_unit``;
5. writes the target partitioned by ``wm_partition, wm_unit`` with dynamic partition overwrite, so a unit
   re-executed replaces exactly its own output. A unit executed over a partial range (grace/abstinent
   cut inside its partition) keeps its previous rows before ``range_start`` (they need the time column in
   the output). A unit that now produces no rows has its old output removed;
6. isolates failures: if writing a batch of work units fails, the batch is split in halves and retried,
   so only the failing units end up ``failed`` in the manifest (O(failures x log units) extra writes).

The manifest (``manifest.json``, written atomically last) has one entry per work unit: range, rows read,
rows written, status and error; ``status`` is ``succeeded``, ``partial`` (some units failed) or ``failed``.
"""

from __future__ import annotations

import datetime as dt
import importlib
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_provider_wm.contracts import PartitionsManifest, PartitionsRequest
from airflow_provider_wm.core.partitions import DAY_MS
from spark_jobs.common import active_session, delete_path, parse_time, path_exists, submit_main

PARTITION_COLUMNS = ("wm_partition", "wm_unit")
LIST_FOLDERS_UP_TO = 64
"""Up to this many work units, the job reads their output folders directly instead of listing the target."""
WORK_UNITS_SCHEMA = StructType(
    [
        StructField("wm_partition", StringType(), False),
        StructField("wm_unit", StringType(), False),
        StructField("partition_start_ms", LongType(), False),
        StructField("partition_end_ms", LongType(), False),
        StructField("range_start_ms", LongType(), False),
        StructField("range_end_ms", LongType(), False),
    ]
)


def partition_key(start_ms: int) -> str:
    """The target's partition value of a partition start: ``20200101T000000Z`` (UTC, path-safe)."""
    return dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def unit_key(unit: str) -> str:
    """The target's ``wm_unit`` value: the unit, or ``-`` for a pipeline without units (Spark cannot
    partition by an empty string)."""
    return unit or "-"


def work_unit_key(unit: dict[str, Any]) -> tuple[str, str]:
    return partition_key(int(unit["partition_start"])), unit_key(str(unit["unit"]))


def merged_intervals(units: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """The union of the units' ranges as few disjoint intervals (the read filter stays short)."""
    spans = sorted((int(u["range_start"]), int(u["range_end"])) for u in units)
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def read_filter(source: DataFrame, args: PartitionsRequest, intervals: list[tuple[int, int]]) -> Column | None:
    """Partition pruning and predicate pushdown for ``intervals``; rows with a null time stay in (quarantine)."""
    conditions: list[Column] = []
    if args.source_partition_column:
        # partition values are dates in some zone: a day of margin on each side, the exact filter comes later
        day = dt.timedelta(days=1)
        pcol = F.col(args.source_partition_column).cast("date")
        windows = [
            (pcol >= F.lit((_utc(a) - day).date())) & (pcol <= F.lit((_utc(b) + day).date())) for a, b in intervals
        ]
        conditions.append(_any(windows))
    raw_type = source.schema[args.time_column].dataType
    raw = F.col(args.time_column)
    if isinstance(raw_type, (TimestampType, TimestampNTZType)):
        bounds = [(raw >= F.lit(_utc(a))) & (raw < F.lit(_utc(b))) for a, b in intervals]
    elif isinstance(raw_type, DateType):
        bounds = [(raw >= F.lit(_utc(a).date())) & (raw <= F.lit(_utc(b).date())) for a, b in intervals]
    elif isinstance(raw_type, IntegralType):
        bounds = [(raw >= F.lit(a)) & (raw < F.lit(b)) for a, b in intervals]
    else:
        bounds = []
    if bounds:
        conditions.append(raw.isNull() | _any(bounds))
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result


def _any(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


def load_transform(args: PartitionsRequest) -> Callable[[SparkSession, DataFrame], DataFrame]:
    """The user's transformation: SQL over the view ``source``, or ``package.module:function``."""
    if args.transform_sql:
        statement = args.transform_sql

        def run_sql(spark: SparkSession, frame: DataFrame) -> DataFrame:
            frame.createOrReplaceTempView("source")
            return spark.sql(statement)

        return run_sql
    if args.transform_callable:
        module_name, _, function_name = args.transform_callable.replace(":", ".").rpartition(".")
        function = getattr(importlib.import_module(module_name), function_name)
        return lambda _spark, frame: function(frame)
    return lambda _spark, frame: frame


class Job:
    """One execution of a plan: the read, the transformation and the writes, per batch of work units."""

    def __init__(self, spark: SparkSession, args: PartitionsRequest, units: list[dict[str, Any]]) -> None:
        self.spark = spark
        self.args = args
        self.units = units
        self.write_id = uuid.uuid4().hex
        self.transform = load_transform(args)
        self.source = spark.read.format(args.source_format).load(args.source)
        missing = [
            f"{argument}={name!r}"
            for argument, name in (
                ("time_column", args.time_column),
                ("unit_column", args.unit_column),
                ("source_partition_column", args.source_partition_column),
            )
            if name and name not in self.source.columns
        ]
        if missing:
            raise ValueError(f"source {args.source} has no column {', '.join(missing)}; it has {self.source.columns}")
        self.time_type = self.source.schema[args.time_column].dataType
        parse_time(F.col(args.time_column), self.time_type, args.time_column)  # fails early on a bad type

    def _work_units_frame(self, units: list[dict[str, Any]]) -> DataFrame:
        rows = [
            (
                *work_unit_key(u),
                int(u["partition_start"]),
                int(u["partition_end"]),
                int(u["range_start"]),
                int(u["range_end"]),
            )
            for u in units
        ]
        return self.spark.createDataFrame(rows, WORK_UNITS_SCHEMA)

    def rows(self, units: list[dict[str, Any]]) -> tuple[DataFrame, DataFrame]:
        """(rows of ``units`` with their work-unit columns, rows with a bad time) from one filtered read."""
        condition = read_filter(self.source, self.args, merged_intervals(units))
        frame = self.source if condition is None else self.source.where(condition)
        frame = frame.withColumn(
            "wm_time", parse_time(F.col(self.args.time_column), self.time_type, self.args.time_column)
        )
        bad = frame.where(F.col("wm_time").isNull()).withColumn(
            "reason", F.when(F.col(self.args.time_column).isNull(), "null_time").otherwise("unparseable_time")
        )
        days = self._work_units_frame(units).withColumn(
            "wm_day",
            F.explode(
                F.sequence(F.floor(F.col("range_start_ms") / DAY_MS), F.floor((F.col("range_end_ms") - 1) / DAY_MS))
            ),
        )
        good = frame.where(F.col("wm_time").isNotNull()).withColumn(
            "wm_day", F.floor(F.unix_millis(F.col("wm_time")) / DAY_MS)
        )
        keys = [good["wm_day"] == days["wm_day"]]
        if self.args.unit_column:
            keys.append(good[self.args.unit_column].cast("string") == days["wm_unit"])
        millis = F.unix_millis(good["wm_time"])
        joined = (
            good.join(F.broadcast(days), on=keys)
            .where((millis >= days["range_start_ms"]) & (millis < days["range_end_ms"]))
            .drop(good["wm_day"])
            .drop(days["wm_day"])
        )
        columns = [c for c in self.source.columns if c not in PARTITION_COLUMNS]
        shaped = joined.select(
            *[good[c] for c in columns],
            good["wm_time"],
            days["wm_partition"],
            days["wm_unit"],
            F.timestamp_millis(days["partition_start_ms"]).alias("wm_partition_start"),
            F.timestamp_millis(days["partition_end_ms"]).alias("wm_partition_end"),
            F.timestamp_millis(days["range_start_ms"]).alias("wm_range_start"),
            F.timestamp_millis(days["range_end_ms"]).alias("wm_range_end"),
        )
        return shaped, bad

    def rows_read(self) -> dict[tuple[str, str], int]:
        rows, _ = self.rows(self.units)
        counts = rows.groupBy(*PARTITION_COLUMNS).count().collect()  # one row per work unit of the plan: small
        return {(r["wm_partition"], r["wm_unit"]): int(r["count"]) for r in counts}

    def quarantine(self) -> dict[str, int]:
        _, bad = self.rows(self.units)
        target = f"{self.args.round_out}/quarantine"
        bad.write.mode("overwrite").parquet(target)
        counts = self.spark.read.parquet(target).groupBy("reason").count().collect()  # one row per reason: small
        return {r["reason"]: int(r["count"]) for r in counts}

    def _output(self, units: list[dict[str, Any]]) -> DataFrame:
        rows, _ = self.rows(units)
        out = self.transform(self.spark, rows)
        lacking = [c for c in PARTITION_COLUMNS if c not in out.columns]
        if lacking:
            raise ValueError(f"the transformation's output must keep the columns {lacking}; it has {out.columns}")
        out = out.withColumn("wm_run_id", F.lit(self.args.run_id)).withColumn("wm_write_id", F.lit(self.write_id))
        partial = [u for u in units if int(u["range_start"]) > int(u["partition_start"])]
        previous = self._unit_outputs({work_unit_key(u) for u in partial}) if partial else None
        if previous is not None:
            out = out.unionByName(self._kept_rows(previous, partial, out.columns))
        return out

    def _unit_outputs(self, keys: set[tuple[str, str]]) -> DataFrame | None:
        """The target's current output of these work units (None when there is none). For a few units only
        their folders are listed: the target grows by a folder per work unit, and listing all of it would
        cost more than a small run's work."""
        if not path_exists(self.spark, self.args.target):
            return None
        if len(keys) > LIST_FOLDERS_UP_TO:
            partitions = sorted({partition for partition, _ in keys})
            return self.spark.read.parquet(self.args.target).where(F.col("wm_partition").isin(partitions))
        folders = [f"{self.args.target}/wm_partition={p}/wm_unit={u}" for p, u in sorted(keys)]
        existing = [folder for folder in folders if path_exists(self.spark, folder)]
        if not existing:
            return None
        return self.spark.read.option("basePath", self.args.target).parquet(*existing)

    def _kept_rows(self, previous: DataFrame, partial: list[dict[str, Any]], columns: list[str]) -> DataFrame:
        """Earlier output of partially re-executed units, before their range start (kept, not re-read)."""
        if self.args.time_column not in columns:
            raise ValueError(
                f"work units re-execute over a partial range (grace/abstinent inside a partition), so the "
                f"transformation's output must keep time_column={self.args.time_column!r} to keep their "
                f"earlier rows; it has {columns}"
            )
        ranges = self._work_units_frame(partial).select(*PARTITION_COLUMNS, "range_start_ms")
        kept_time = parse_time(
            previous[self.args.time_column], previous.schema[self.args.time_column].dataType, self.args.time_column
        )
        kept = (
            previous.join(F.broadcast(ranges), on=list(PARTITION_COLUMNS))
            .where(F.unix_millis(kept_time) < F.col("range_start_ms"))
            .select(*columns)
        )
        # materialised before the write replaces the very files it comes from
        return kept.localCheckpoint(eager=True)

    def write(self, units: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
        """Write ``units`` (dynamic overwrite); returns rows written per unit, removing stale outputs."""
        self._output(units).write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(self.args.target)
        keys = {work_unit_key(u) for u in units}
        outputs = self._unit_outputs(keys)
        written = (
            []
            if outputs is None
            else outputs.where(F.col("wm_write_id") == self.write_id)
            .groupBy(*PARTITION_COLUMNS)
            .count()
            .collect()  # one row per work unit of the batch: small
        )
        counts = {(r["wm_partition"], r["wm_unit"]): int(r["count"]) for r in written}
        for key in keys - set(counts):  # executed, no rows now: its previous output is stale
            delete_path(self.spark, f"{self.args.target}/wm_partition={key[0]}/wm_unit={key[1]}")
        return {key: counts.get(key, 0) for key in keys}

    def execute(self, units: list[dict[str, Any]], outcomes: dict[tuple[str, str], dict[str, Any]]) -> None:
        """Write ``units``; on failure split the batch in halves until the failing units are isolated."""
        try:
            counts = self.write(units)
        except Exception as exc:
            if len(units) == 1:
                outcomes[work_unit_key(units[0])] = {
                    "status": "failed",
                    "rows_written": 0,
                    "error": f"{type(exc).__name__}: {exc}"[:2000],
                }
                return
            middle = len(units) // 2
            self.execute(units[:middle], outcomes)
            self.execute(units[middle:], outcomes)
            return
        for key, count in counts.items():
            outcomes[key] = {"status": "succeeded", "rows_written": count, "error": None}


def _run(spark: SparkSession, args: PartitionsRequest) -> PartitionsManifest:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    units: list[dict[str, Any]] = [u.to_json() for u in args.work_units]
    if not units:
        return PartitionsManifest(pipeline=args.pipeline, run_id=args.run_id)
    job = Job(spark, args, units)
    read_counts = job.rows_read()
    quarantined = job.quarantine()
    outcomes: dict[tuple[str, str], dict[str, Any]] = {}
    job.execute(sorted(units, key=lambda u: (int(u["partition_start"]), str(u["unit"]))), outcomes)
    entries = []
    for u in units:
        key = work_unit_key(u)
        entries.append({**u, "wm_partition": key[0], "rows_read": read_counts.get(key, 0), **outcomes[key]})
    failed = sum(e["status"] == "failed" for e in entries)
    manifest = {
        "job": "incremental_partitions",
        "pipeline": args.pipeline,
        "run_id": args.run_id,
        "status": "partial" if failed else "succeeded",
        "work_units": entries,
        "quarantine": quarantined,
        "totals": {
            "work_units": len(entries),
            "failed": failed,
            "rows_read": sum(e["rows_read"] for e in entries),
            "rows_written": sum(e["rows_written"] for e in entries),
            "quarantined": sum(quarantined.values()),
        },
        "write_id": job.write_id,
    }
    return PartitionsManifest.from_json(manifest)


def run(spark: SparkSession, args: PartitionsRequest) -> PartitionsManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with active_session(spark):
        return _run(spark, args)


def main(argv: Sequence[str] | None = None) -> int:
    """``incremental_partitions.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(PartitionsRequest, run, argv)


if __name__ == "__main__":
    sys.exit(main())
