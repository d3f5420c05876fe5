"""One incremental-partitions run: extract the plan's work units, quarantine bad rows, write each partition
once, and return the manifest (``run``); ``main`` is the spark-submit entry point."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_wm.contracts import PartitionsManifest, PartitionsRequest
from airflow_provider_wm.core.partitions import DAY_MS, QuarantineReason
from spark_jobs.common import (
    PARTITION_TYPES,
    Observed,
    delete_path,
    job_session,
    local_frame,
    observe,
    observed_below,
    path_exists,
    read_dataset,
    read_dataset_and_schema,
    submit_main,
    with_constants,
)
from spark_jobs.partitions.layout import (
    INLINE_UNITS_UP_TO,
    LIST_FOLDERS_UP_TO,
    OBSERVE_UNITS_UP_TO,
    PARTITION_COLUMNS,
    PLAN_FIELDS,
    ROW_ID,
    ROWS_READ,
    UNIT_BOUND_FIELDS,
    UNIT_BOUNDS,
    UNKNOWN_UNIT_SAMPLES,
    WORK_UNITS_SCHEMA,
    PlannedRows,
    Quarantined,
    any_of,
    load_transform,
    merged_intervals,
    observed_reads,
    read_filter,
    with_row_ids,
    work_unit_key,
)
from spark_jobs.sql_text import case, ident, invalid_time, number, parse_time, string, time_ms

__all__ = ["Job", "main", "run"]

UNITS_COLUMN = "wm_units"
"""The work units of a run whose rows are assigned by a ``CASE`` (:meth:`Job._assign_units`), one struct each, as a
column (:func:`~spark_jobs.common.with_constants`): a run's units change from one scheduled run to the next, and as
literals they made every run compile its scan again."""
INTERVALS_COLUMN = "wm_intervals"
"""The run's read intervals (:func:`~spark_jobs.partitions.layout.merged_intervals`) as a column, for the unit
reasons of the quarantine (:meth:`Job.quarantine_reason`), as :data:`UNITS_COLUMN` is."""


class Job:
    """One execution of a plan: the read, the quarantine, the transformation and the writes, per batch of work
    units. ``source`` is None for an existing source folder with no data file (a source without rows)."""

    def __init__(self, spark: SparkSession, args: PartitionsRequest, units: list[dict[str, Any]]) -> None:
        self.spark = spark
        self.args = args
        self.units = units
        self.write_id = uuid.uuid4().hex
        self.transform = load_transform(args)
        self.quarantine_path = args.quarantine_path or f"{args.round_out}/quarantine"
        self._planned_rows: dict[tuple[tuple[Any, ...], ...], PlannedRows] = {}
        self._counted_reads: tuple[dict[tuple[str, str], int], int] | None = None
        if not path_exists(spark, args.source):
            raise ValueError(f"source {args.source} does not exist (an empty folder is a source without rows)")
        # the schema read once (over Spark Connect each schema of a new frame is a round trip, with a listing)
        read = read_dataset_and_schema(spark, args.source, args.source_format)
        self.source: DataFrame | None = None if read is None else read[0]
        self.source_columns: list[str] = [] if read is None else read[1].names
        self.time_type: Any = None
        if read is None:
            return
        missing = [
            f"{argument}={name!r}"
            for argument, name in (
                ("time_column", args.time_column),
                ("unit_column", args.unit_column),
                ("source_partition_column", args.source_partition_column),
            )
            if name and name not in self.source_columns
        ]
        if missing:
            raise ValueError(f"source {args.source} has no column {', '.join(missing)}; it has {self.source_columns}")
        self.time_type = read[1][args.time_column].dataType
        parse_time(ident(args.time_column), self.time_type, f"time_column={args.time_column!r}")  # fails early

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
        return local_frame(self.spark, rows, WORK_UNITS_SCHEMA)

    def checks_units(self) -> bool:
        """Whether the quarantine has unit reasons: the request lists the pipeline's units."""
        return bool(self.args.unit_column) and self.args.units is not None

    def quarantine_reason(self, intervals: list[tuple[int, int]]) -> Column:
        """:func:`core.partitions.quarantine_reason` on the source's columns (null: a good row). Unit reasons
        only when the request lists the pipeline's units (:meth:`checks_units`), and only for times inside
        ``intervals``, read from the column :data:`INTERVALS_COLUMN` the rows then carry."""
        args = self.args
        raw = F.col(args.time_column)
        millis_sql = time_ms(
            ident(args.time_column), self.time_type, f"time_column={args.time_column!r}", args.timezone
        )
        millis = F.expr(millis_sql)
        reason = (
            F.when(raw.isNull(), QuarantineReason.NULL_TIME.value)
            .when(millis.isNull(), QuarantineReason.UNPARSEABLE_TIME.value)
            .when(F.expr(invalid_time(millis_sql)), QuarantineReason.TIME_OUT_OF_RANGE.value)
        )
        if args.unit_column and self.checks_units():
            unit = F.col(args.unit_column).cast("string")
            interval = [f"{INTERVALS_COLUMN}[{i}]" for i in range(len(intervals))]
            in_plan = any_of([F.expr(f"{millis_sql} >= {i}.wm_from AND {millis_sql} < {i}.wm_until") for i in interval])
            known = unit.isin(list(args.units)) if args.units else F.lit(False)
            reason = reason.when(in_plan & unit.isNull(), QuarantineReason.NULL_UNIT.value).when(
                in_plan & ~known, QuarantineReason.UNKNOWN_UNIT.value
            )
        return reason

    def rows(self, units: list[dict[str, Any]]) -> PlannedRows:
        """The frames of one filtered read of ``units`` (:class:`PlannedRows`). Needs a source with rows
        (``self.source`` is not None). Planned once per set of units: the counts, the quarantine and the write of
        a run read the same frames (each plan costs the driver a few dozen DataFrame operations)."""
        key = tuple(
            sorted(
                (
                    *work_unit_key(u),
                    *(int(u[f]) for f in ("partition_start", "partition_end", "range_start", "range_end")),
                )
                for u in units
            )
        )
        if key not in self._planned_rows:
            self._planned_rows[key] = self._plan_rows(units)
        return self._planned_rows[key]

    def _plan_rows(self, units: list[dict[str, Any]]) -> PlannedRows:
        assert self.source is not None, "a source without rows has no rows to read"
        intervals = merged_intervals(units)
        condition = read_filter(self.time_type, self.args, intervals)
        frame = self.source if condition is None else self.source.where(condition)
        constants = {}
        if self.checks_units():
            constants[INTERVALS_COLUMN] = _ranges_array(intervals)
        if len(units) <= max(INLINE_UNITS_UP_TO, OBSERVE_UNITS_UP_TO):  # for the CASE and the counts
            constants[UNITS_COLUMN] = _units_array(units)
        if constants:
            frame = with_constants(frame, constants)
        frame = frame.withColumn("wm_reason", self.quarantine_reason(intervals))
        # a bad row has no time here, so it lands in no work unit
        timed = frame.withColumn(
            "wm_time",
            # guarded: a number far out of range would overflow the conversion
            F.when(
                F.col("wm_reason").isNull(),
                F.expr(
                    parse_time(
                        ident(self.args.time_column),
                        self.time_type,
                        f"time_column={self.args.time_column!r}",
                        self.args.timezone,
                    )
                ),
            ),
        )
        assigned = self._assign_units(timed, units)
        columns = [c for c in self.source_columns if c not in PARTITION_COLUMNS]
        observed, to_write = None, assigned
        # a Python transformation may run Spark actions on its input before it returns: the first one would fill
        # the observation
        if len(units) <= OBSERVE_UNITS_UP_TO and not self.args.transform_callable:
            to_write, observed = observe(assigned, ROWS_READ, *self._read_counters(units))
        shaped = to_write.where("wm_partition IS NOT NULL").selectExpr(
            *[ident(c) for c in (*columns, "wm_time", "wm_partition", "wm_unit", *UNIT_BOUNDS)]
        )
        return PlannedRows(shaped, assigned, tuple(work_unit_key(u) for u in units), observed)

    def _assign_units(self, timed: DataFrame, units: list[dict[str, Any]]) -> DataFrame:
        """``timed`` with the columns of the work unit each row lands in (``wm_partition``, ``wm_unit`` and
        :data:`UNIT_BOUNDS`; null for a row in none): the unit whose range holds ``wm_time`` and, with a unit
        column, whose unit is the row's. A unit's ranges never overlap, so a row lands in one unit at most.

        Up to :data:`INLINE_UNITS_UP_TO` units the unit is a ``CASE`` over them (no join, no broadcast to
        build: a small run's plan is a scan and a projection, like a plain filtered read); above it, a broadcast
        equi-join on the row's UTC day (and unit) against the units' days. Example: units ``[d1, eu]`` and
        ``[d1, us]``: a row of ``us`` on d1 gets ``CASE WHEN <in d1's range> AND unit = 'eu' THEN <eu's columns>
        WHEN <in d1's range> AND unit = 'us' THEN <us's columns> END``, the second unit's columns (a struct). The
        units are the column :data:`UNITS_COLUMN` (``wm_units[1]``: the second unit), not literals."""
        if len(units) <= INLINE_UNITS_UP_TO and self._lands_in_one_unit(units):
            row_millis = "unix_millis(wm_time)"
            branches = []
            for i in range(len(units)):
                this = f"{UNITS_COLUMN}[{i}]"
                inside = f"{row_millis} >= {this}.wm_from AND {row_millis} < {this}.wm_until"
                if self.args.unit_column:
                    inside += f" AND CAST({ident(self.args.unit_column)} AS STRING) = {this}.wm_unit"
                branches.append((inside, this))
            # computed once per row: behind a nondeterministic condition, the filter on the unit (rows that land in
            # none) is not pushed below it with the CASE inlined, which would evaluate it again, twice per unit
            assigned = f"CASE WHEN spark_partition_id() >= 0 THEN {case(*branches)} END AS wm_assigned"
            return timed.selectExpr("*", assigned).selectExpr(
                "*", *[f"wm_assigned.{c} AS {c}" for c in ("wm_partition", "wm_unit", *UNIT_BOUNDS)]
            )
        with_day = timed.withColumn("wm_day", F.floor(F.unix_millis(F.col("wm_time")) / DAY_MS))
        days = self._work_units_frame(units).withColumn(
            "wm_day",
            F.explode(
                F.sequence(F.floor(F.col("range_start_ms") / DAY_MS), F.floor((F.col("range_end_ms") - 1) / DAY_MS))
            ),
        )
        millis = F.unix_millis(with_day["wm_time"])
        in_unit = (
            (with_day["wm_day"] == days["wm_day"])
            & (millis >= days["range_start_ms"])
            & (millis < days["range_end_ms"])
        )
        if self.args.unit_column:
            in_unit = in_unit & (with_day[self.args.unit_column].cast("string") == days["wm_unit"])
        return with_day.join(F.broadcast(days), on=in_unit, how="left").select(
            *[with_day[c] for c in timed.columns],
            days["wm_partition"],
            days["wm_unit"],
            *[
                F.timestamp_millis(days[f"{field}_ms"]).alias(name)
                for name, field in zip(UNIT_BOUNDS, UNIT_BOUND_FIELDS, strict=True)
            ],
        )

    def _lands_in_one_unit(self, units: list[dict[str, Any]]) -> bool:
        """Whether a row can land in one of ``units`` at most: the ranges of units a row may match (those of one
        unit, or all of them without a unit column) do not overlap. A plan's do not: its units are partitions of
        one spec, per unit."""
        spans: dict[str, list[tuple[int, int]]] = {}
        for unit in units:
            matched_by = work_unit_key(unit)[1] if self.args.unit_column else ""
            spans.setdefault(matched_by, []).append((int(unit["range_start"]), int(unit["range_end"])))
        return all(
            end <= next_start
            for ranges in spans.values()
            for (_, end), (next_start, _) in itertools.pairwise(sorted(ranges))
        )

    def read_counts(self) -> tuple[dict[tuple[str, str], int], int]:
        """Rows read per work unit of the plan, and the bad rows among the rows read (a run whose read has no bad
        row skips the quarantine's own scan). Up to :data:`OBSERVE_UNITS_UP_TO` units they are observed: as the
        rows were written, when the write counted each row read once (:meth:`write`), else while the rows are read
        for nothing (one Spark job, no shuffle); for more, grouped and fetched."""
        if self.source is None:
            return {}, 0
        if self._counted_reads is not None:
            return self._counted_reads
        return self._scan_read_counts()

    def _scan_read_counts(self) -> tuple[dict[tuple[str, str], int], int]:
        """:meth:`read_counts` from a scan of their own."""
        planned = self.rows(self.units)
        read_rows = planned.read
        if len(self.units) <= OBSERVE_UNITS_UP_TO:
            judged = read_rows.select("wm_partition", "wm_unit", "wm_reason", UNITS_COLUMN)  # only what it counts
            scan, observed = observe(judged, ROWS_READ, *self._read_counters(self.units))
            scan.write.format("noop").mode("overwrite").save()
            counts = observed_below(scan, observed)
            if counts is not None:  # else not reported with the scan: grouped and fetched below
                return self._reads_observed(counts, planned.keys)
        grouped = read_rows.groupBy("wm_partition", "wm_unit", "wm_reason").count()
        counted = grouped.collect()  # small: one row per unit and bad reason, and the margin's
        read = {(r["wm_partition"], r["wm_unit"]): int(r["count"]) for r in counted if r["wm_partition"] is not None}
        return read, sum(int(r["count"]) for r in counted if r["wm_reason"] is not None)

    def quarantine(self, bad_rows: int) -> Quarantined:
        """Quarantine the bad rows no committed version holds yet, into this run's version (see the module's
        docstring): each bad row is counted once, however many runs read it. ``bad_rows``: how many the read has
        (:meth:`read_counts`); with none, and no earlier attempt's version to keep or replace, nothing is read."""
        version = self.args.version
        if bad_rows == 0 and not path_exists(self.spark, f"{self.quarantine_path}/wm_version={version}"):
            return Quarantined({}, {}, [])
        existing = read_dataset(self.spark, self.quarantine_path, job_output=True)
        stored_version = F.col("wm_version").cast("long")
        seen_before: dict[str, int] = {}
        samples: list[str] = []
        parts: list[DataFrame] = []
        if self.source is not None:
            read = self.rows(self.units).read
            bad = read.where("wm_reason IS NOT NULL").selectExpr(
                *[ident(c) for c in self.source_columns], "wm_reason AS reason"
            )
            bad = with_row_ids(bad, self.source_columns)
            if existing is not None:
                known = existing.where(stored_version < version).select(ROW_ID).distinct()
                bad = bad.join(known.withColumn("wm_seen_before", F.lit(True)), on=ROW_ID, how="left").withColumn(
                    "wm_seen_before", F.coalesce("wm_seen_before", F.lit(False))
                )
            else:
                bad = bad.withColumn("wm_seen_before", F.lit(False))
            bad = bad.localCheckpoint(eager=True)  # the one scan of this run's bad rows (few): read three times below
            counts = bad.groupBy("reason", "wm_seen_before").count().collect()  # <= 2 rows per reason: small
            seen_before = {r["reason"]: int(r["count"]) for r in counts if r["wm_seen_before"]}
            if self.args.unit_column:
                unknown = bad.where(F.col("reason") == QuarantineReason.UNKNOWN_UNIT.value)
                values = unknown.select(F.col(self.args.unit_column).cast("string").alias("unit")).distinct()
                samples = sorted(r["unit"] for r in values.limit(UNKNOWN_UNIT_SAMPLES).collect())  # small: 5 values
            parts.append(
                bad.where(~F.col("wm_seen_before"))
                .drop("wm_seen_before")
                .withColumn("wm_run_id", F.lit(self.args.run_id))
            )
        if existing is not None:  # what earlier attempts of this run found (another run's are a failed run's)
            parts.append(
                existing.where((stored_version == version) & (F.col("wm_run_id") == self.args.run_id)).drop(
                    "wm_version"
                )
            )
        new_counts = self._replace_version(parts, version) if parts else {}
        if not new_counts:
            delete_path(self.spark, f"{self.quarantine_path}/wm_version={version}")
        return Quarantined(new_counts, seen_before, samples)

    def _replace_version(self, parts: list[DataFrame], version: int) -> dict[str, int]:
        """Write the union of ``parts`` (one row per ``wm_row_id``) as the quarantine's ``wm_version=<version>``;
        returns its rows by reason (nothing is written when there are none)."""
        this_run = parts[0]
        for part in parts[1:]:
            this_run = this_run.unionByName(part, allowMissingColumns=True)
        # materialised before the write replaces the very folder part of it comes from
        this_run = this_run.dropDuplicates([ROW_ID]).localCheckpoint(eager=True)
        counted = this_run.groupBy("reason").count().collect()  # one row per reason: small
        if counted:
            this_run.withColumn("wm_version", F.lit(version)).write.mode("overwrite").partitionBy("wm_version").parquet(
                self.quarantine_path
            )
        return {r["reason"]: int(r["count"]) for r in counted}

    def _output(self, units: list[dict[str, Any]]) -> tuple[DataFrame | None, DataFrame | None, set[tuple[str, str]]]:
        """This run's rows to write for ``units`` (None: no source), the earlier rows of partially re-executed
        units to write with them (None: none), and the units that keep earlier rows."""
        out: DataFrame | None = None
        if self.source is not None:
            out = self.transform(self.spark, self.rows(units).rows)
            lacking = [c for c in PARTITION_COLUMNS if c not in out.columns]
            if lacking:
                raise ValueError(f"the transformation's output must keep the columns {lacking}; it has {out.columns}")
            out = out.withColumn("wm_run_id", F.lit(self.args.run_id)).withColumn("wm_write_id", F.lit(self.write_id))
        partial = [u for u in units if int(u["range_start"]) > int(u["partition_start"])]
        previous = self._unit_outputs({work_unit_key(u) for u in partial}) if partial else None
        if previous is None:
            return out, None, set()
        kept = self._kept_rows(previous, partial, previous.columns if out is None else out.columns)
        keeping_units = kept.select(*PARTITION_COLUMNS).distinct()
        keeping = {
            (r["wm_partition"], r["wm_unit"])
            for r in keeping_units.collect()  # one row per partial unit: small
        }
        return out, kept, keeping

    def _observe_written(self, out: DataFrame, units: list[dict[str, Any]]) -> tuple[DataFrame, Observed]:
        """``out`` counting its rows per unit of ``units`` as they are written."""
        with_units = with_constants(out, {UNITS_COLUMN: _units_array(units)})
        counted, observation = observe(with_units, "rows_written", *self._rows_per_unit(units))
        return counted.drop(UNITS_COLUMN), observation

    def _read_counters(self, units: list[dict[str, Any]]) -> list[Column]:
        """The counts of the rows read (:data:`ROWS_READ`): one per unit, then ``bad``."""
        return [*self._rows_per_unit(units), F.expr("count_if(wm_reason IS NOT NULL) AS bad")]

    @staticmethod
    def _reads_observed(
        observed: dict[str, Any], keys: Sequence[tuple[str, str]]
    ) -> tuple[dict[tuple[str, str], int], int]:
        """The rows read per work unit and the bad rows, from the metrics of :meth:`_read_counters` over the
        units whose keys are ``keys``, in the order of the units column the rows carry (:attr:`PlannedRows.keys`,
        not the request's: a DAG lists its units in its own order, and a run writes them sorted)."""
        return {key: int(observed[str(i)]) for i, key in enumerate(keys)}, int(observed["bad"])

    @staticmethod
    def _rows_per_unit(units: list[dict[str, Any]]) -> list[Column]:
        """One count per work unit, named by its position in ``units`` (SQL text: one call to the JVM each), over
        rows that carry the units as :data:`UNITS_COLUMN`: as literals, their keys changed the generated code of
        each run (Spark orders the common subexpressions it extracts by their hash, which the literals change)."""
        return [
            F.expr(f"count_if(wm_partition = {u}.wm_partition AND wm_unit = {u}.wm_unit) AS `{i}`")
            for i, u in enumerate(f"{UNITS_COLUMN}[{i}]" for i in range(len(units)))
        ]

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
        kept_time = F.expr(
            parse_time(
                ident(self.args.time_column),
                previous.schema[self.args.time_column].dataType,
                f"time_column={self.args.time_column!r} of the target {self.args.target}",
                self.args.timezone,
            )
        )
        kept = (
            previous.join(F.broadcast(ranges), on=list(PARTITION_COLUMNS))
            .where(F.unix_millis(kept_time) < F.col("range_start_ms"))
            .select(*columns)
        )
        # materialised before the write replaces the very files it comes from
        return kept.localCheckpoint(eager=True)

    def write(self, units: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
        """Write ``units`` (dynamic overwrite); returns this run's rows written per unit, removing stale outputs.
        The rows are counted while they are written (observed), or for many units read back after the write. A
        write of all the plan's units whose transformation reads each row once also counts the rows read
        (:meth:`read_counts`), so no scan of the source counts them; when it also writes each row it reads in
        that row's unit (:func:`~spark_jobs.partitions.layout.observed_reads`), those counts are the rows
        written too, and the write counts nothing more."""
        out, kept, keeping = self._output(units)
        reads = observation = None
        written_as_counted = False
        if out is not None:
            if self.source is not None and len(units) == len(self.units) and kept is None:
                reads = self.rows(units).observed
            if reads is not None:
                verdict = observed_reads(out, ROWS_READ)
                if not verdict.counted_once:
                    reads = None  # the transformation may read a row twice or not at all: a scan counts them
                written_as_counted = verdict.written_as_counted
            if not written_as_counted and len(units) <= OBSERVE_UNITS_UP_TO:
                out, observation = self._observe_written(out, units)
        to_write = out if kept is None else kept if out is None else out.unionByName(kept)
        if to_write is not None:
            to_write.write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(self.args.target)
        if to_write is not None and reads is not None:
            observed = observed_below(to_write, reads)
            if observed is not None:
                self._counted_reads = self._reads_observed(observed, self.rows(units).keys)
        keys = [work_unit_key(u) for u in units]
        written = None if to_write is None or observation is None else observed_below(to_write, observation)
        if written_as_counted and self._counted_reads is not None:
            counts = dict(self._counted_reads[0])
            # a folder is deleted below only on what it holds of this write, not on what a reading of the plan says
            emptied = {key for key in keys if not counts.get(key)} - keeping
            if emptied:
                counts.update(self._written_rows(emptied))
        elif written is not None:
            counts = {key: int(written[str(i)]) for i, key in enumerate(keys)}
        else:
            counts = self._written_rows(set(keys))
        for key in set(keys) - keeping:
            if not counts.get(key):  # executed, no rows now nor kept: its previous output is stale
                delete_path(self.spark, f"{self.args.target}/wm_partition={key[0]}/wm_unit={key[1]}")
        return {key: counts.get(key, 0) for key in keys}

    def _written_rows(self, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """This run's rows in the target's folders of ``keys``, read back."""
        outputs = self._unit_outputs(keys)
        if outputs is None:
            return {}
        written = (
            outputs.where(F.col("wm_write_id") == self.write_id)
            .groupBy(*PARTITION_COLUMNS)
            .count()
            .collect()  # one row per work unit of the batch: small
        )
        return {(r["wm_partition"], r["wm_unit"]): int(r["count"]) for r in written}

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
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    spark.conf.set(PARTITION_TYPES, "false")
    spark.conf.set("spark.sql.debug.maxToStringFields", str(PLAN_FIELDS))  # the plan observed_reads reads
    units: list[dict[str, Any]] = [u.to_json() for u in args.work_units]
    if not units:
        return PartitionsManifest(pipeline=args.pipeline, run_id=args.run_id)
    job = Job(spark, args, units)
    outcomes: dict[tuple[str, str], dict[str, Any]] = {}
    job.execute(sorted(units, key=lambda u: (int(u["partition_start"]), str(u["unit"]))), outcomes)
    read_counts, bad_rows = job.read_counts()  # counted by the write when it can
    quarantined = job.quarantine(bad_rows)
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
        "quarantine": quarantined.new,
        "quarantine_seen_before": quarantined.seen_before,
        "unknown_unit_samples": quarantined.unknown_unit_samples,
        "quarantine_path": job.quarantine_path,
        "totals": {
            "work_units": len(entries),
            "failed": failed,
            "rows_read": sum(e["rows_read"] for e in entries),
            "rows_written": sum(e["rows_written"] for e in entries),
            "quarantined": sum(quarantined.new.values()),
            "quarantined_seen_before": sum(quarantined.seen_before.values()),
        },
        "write_id": job.write_id,
    }
    return PartitionsManifest.from_json(manifest)


def run(spark: SparkSession, args: PartitionsRequest) -> PartitionsManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with job_session(spark):
        return _run(spark, args)


def _units_array(units: list[dict[str, Any]]) -> str:
    """The work units as an array of structs (SQL text): each its ``wm_partition`` and ``wm_unit`` (the target's
    keys, :func:`~spark_jobs.partitions.layout.work_unit_key`), its :data:`UNIT_BOUNDS` (timestamps) and its range
    (:func:`_range_fields`)."""
    structs = []
    for unit in units:
        partition, unit_name = work_unit_key(unit)
        bounds = [
            f"{string(name)}, timestamp_millis({number(int(unit[field]))})"
            for name, field in zip(UNIT_BOUNDS, UNIT_BOUND_FIELDS, strict=True)
        ]
        keys = f"'wm_partition', {string(partition)}, 'wm_unit', {string(unit_name)}"
        ranges = _range_fields(int(unit["range_start"]), int(unit["range_end"]))
        structs.append(f"named_struct({keys}, {', '.join(bounds)}, {ranges})")
    return f"array({', '.join(structs)})"


def _range_fields(start: int, end: int) -> str:
    """A range ``[start, end)`` as the fields ``wm_from`` and ``wm_until`` of a struct (SQL text)."""
    return f"'wm_from', CAST({number(start)} AS BIGINT), 'wm_until', CAST({number(end)} AS BIGINT)"


def _ranges_array(intervals: list[tuple[int, int]]) -> str:
    """``intervals`` as an array of structs of :func:`_range_fields` (SQL text)."""
    return f"array({', '.join(f'named_struct({_range_fields(start, end)})' for start, end in intervals)})"


def main(argv: Sequence[str] | None = None) -> int:
    """``incremental_partitions.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(PartitionsRequest, run, argv)
