"""Where an incremental-partitions run reads and writes: the hive folders of a work unit, the read filter that
prunes the source to the plan's ranges, the user's transform, and the row ids of the quarantine."""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_provider_wm.contracts import PartitionsRequest
from airflow_provider_wm.core.partitions import local_dates, zone_info
from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS, disjoint_union
from spark_jobs.common import Observed, physical_plan, plan_node

__all__ = [
    "INLINE_UNITS_UP_TO",
    "LIST_FOLDERS_UP_TO",
    "OBSERVE_UNITS_UP_TO",
    "PARTITION_COLUMNS",
    "PLAN_FIELDS",
    "ROW_ID",
    "UNIT_BOUNDS",
    "UNIT_BOUND_FIELDS",
    "UNKNOWN_UNIT_SAMPLES",
    "WORK_UNITS_SCHEMA",
    "ObservedReads",
    "PlannedRows",
    "Quarantined",
    "load_transform",
    "merged_intervals",
    "observed_reads",
    "partition_dates",
    "partition_key",
    "prunes_exactly",
    "read_filter",
    "unit_key",
    "with_row_ids",
    "work_unit_key",
]


PARTITION_COLUMNS = ("wm_partition", "wm_unit")

ROW_ID = "wm_row_id"
"""The quarantine's key of a bad row: SHA-256 of the row's columns as JSON, ``-<n>`` for its n-th identical copy."""

UNKNOWN_UNIT_SAMPLES = 5

LIST_FOLDERS_UP_TO = 64
"""Up to this many work units, the job reads their output folders directly instead of listing the target."""

OBSERVE_UNITS_UP_TO = 64
"""Up to this many work units, the job counts each unit's rows while it writes them (one conditional count per
unit and row, in the write's own scan): the rows read when the transformation reads each row once
(:attr:`ObservedReads.counted_once`), else in a scan of their own that writes nothing, and the rows written,
unless the transformation writes each row read in its unit (:attr:`ObservedReads.written_as_counted`: the counts
of the rows read are those of the rows written); above it, it groups the rows read by unit and reads the written
folders back to count them."""

NARROW_OPERATORS = frozenset({"CollectMetrics", "Expand", "Filter", "Generate", "Project"})
"""Operators of a physical plan that compute each row of their one input once, in the task that reads it. Above an
observation, they leave it counting every row it saw, in the write's own tasks, whose metrics Spark applies once
per partition (a retried task counts once). Not a limit (it may stop early), a join or a union (they may read an
input twice, or skip it), a global sort (it samples its input first, in a Spark job of its own), nor anything that
shuffles (an aggregation, a window, a repartition): the observation would run in a map stage, which Spark runs
again when it loses that stage's output."""

INLINE_UNITS_UP_TO = 64
"""Up to this many work units, a row's unit is found by a ``CASE`` over the units; above it, by a broadcast join."""

UNIT_BOUNDS = ("wm_partition_start", "wm_partition_end", "wm_range_start", "wm_range_end")
"""The work unit's bounds each row of the job's view carries (timestamps)."""
UNIT_BOUND_FIELDS = ("partition_start", "partition_end", "range_start", "range_end")
"""The work unit's fields (epoch milliseconds) of :data:`UNIT_BOUNDS`, in their order."""

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
    return disjoint_union((int(u["range_start"]), int(u["range_end"])) for u in units)


def _local_date(ms: int, zone: dt.tzinfo) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, zone).date()


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def read_filter(raw_type: DataType, args: PartitionsRequest, intervals: list[tuple[int, int]]) -> Column | None:
    """Partition pruning and predicate pushdown for ``intervals`` over a source whose ``time_column`` is of type
    ``raw_type``; rows whose time is null or outside the valid range stay in (quarantine). The time bounds are left
    out when the pruning selects exactly the intervals' rows (:func:`prunes_exactly`): a pushed filter is also
    evaluated in the scan's generated code, and its bounds, which change with every scheduled run, made every run
    compile its scan again."""
    conditions: list[Column] = []
    if args.source_partition_column:
        # partition values are dates, in ``source_partition_timezone`` when the request names it (exactly the dates
        # of the ranges), else in some zone: a day of margin on each side, the exact filter comes later. A null or
        # unparseable value (Hive's default partition, 20200102) prunes nothing: the row's time decides
        pcol = F.try_to_date(F.col(args.source_partition_column))
        windows = [(pcol >= F.lit(first)) & (pcol <= F.lit(last)) for first, last in partition_dates(args, intervals)]
        conditions.append(pcol.isNull() | any_of(windows))
    raw = F.col(args.time_column)
    if isinstance(raw_type, (TimestampType, TimestampNTZType)):
        bounds = [(raw >= F.lit(_utc(a))) & (raw < F.lit(_utc(b))) for a, b in intervals]
        out_of_range = (raw < F.lit(_utc(MIN_TIME_MS))) | (raw > F.lit(_utc(MAX_TIME_MS)))
    elif isinstance(raw_type, DateType):  # a date starts at its midnight in the pipeline's zone (parse_time)
        zone = zone_info(args.timezone, "timezone")
        bounds = [(raw >= F.lit(_local_date(a, zone))) & (raw <= F.lit(_local_date(b, zone))) for a, b in intervals]
        out_of_range = (raw < F.lit(_utc(MIN_TIME_MS).date())) | (raw > F.lit(_utc(MAX_TIME_MS).date()))
    elif isinstance(raw_type, IntegralType):
        bounds = [(raw >= F.lit(a)) & (raw < F.lit(b)) for a, b in intervals]
        out_of_range = (raw < F.lit(MIN_TIME_MS)) | (raw > F.lit(MAX_TIME_MS))
    else:
        bounds = []
    if bounds and not prunes_exactly(args, intervals):
        conditions.append(raw.isNull() | out_of_range | any_of(bounds))
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result


def prunes_exactly(args: PartitionsRequest, intervals: list[tuple[int, int]]) -> bool:
    """Whether the partitions :func:`read_filter` selects hold the rows of ``intervals`` and no others: the source
    is partitioned by the date of its rows' time in a zone the request names (``source_partition_timezone``), and
    every interval starts and ends at a midnight of that zone. A row filed under another date than its time's lands
    in no work unit either way. Example: daily units over a source partitioned by UTC date, ``True``; hourly
    units, or a source whose partition zone is not given, ``False``."""
    if not args.source_partition_column or args.source_partition_timezone is None:
        return False
    zone = zone_info(args.source_partition_timezone, "source_partition_timezone")
    midnight = dt.time()
    return all(
        dt.datetime.fromtimestamp(ms / 1000, zone).time() == midnight for interval in intervals for ms in interval
    )


def partition_dates(args: PartitionsRequest, intervals: list[tuple[int, int]]) -> list[tuple[dt.date, dt.date]]:
    """The source partitions' dates to read for each interval: its dates in ``source_partition_timezone``
    (:func:`~airflow_provider_wm.core.partitions.local_dates`), or without a zone its UTC dates and a day on
    each side (any zone's date of an instant is within a day of its UTC date)."""
    if args.source_partition_timezone is not None:
        zone = zone_info(args.source_partition_timezone, "source_partition_timezone")
        return [local_dates(a, b, zone) for a, b in intervals]
    day = dt.timedelta(days=1)
    return [(first - day, last + day) for first, last in (local_dates(a, b, dt.UTC) for a, b in intervals)]


def any_of(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


DAG_FILE_MODULES = ("unusual_prefix_", "__main__")
"""Module names of code only its own process can import: Airflow's name for a DAG file it parsed
(``unusual_prefix_<hash>_<file>``) and a script's."""


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
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            if not module_name.startswith(DAG_FILE_MODULES):
                raise
            raise ValueError(
                f"transform {args.transform_callable!r} is defined in a DAG file (Airflow's module name for it), which "
                "this Spark driver cannot import (spark-submit: the job runs in its own process); move the function "
                "into an importable module (a package installed where the job runs), or run in connect mode"
            ) from None
        function = getattr(module, function_name)
        return lambda _spark, frame: function(frame)
    return lambda _spark, frame: frame


class PlannedRows(NamedTuple):
    """One filtered read of a set of work units: ``rows``, the good rows with their work unit's columns (the view
    ``source``); ``read``, every row read with its ``wm_reason`` (not null: a row to quarantine) and its unit's
    columns (a bad row has no unit; a good row outside every unit's range, read for the margin of the source's
    partition filter, has neither)."""

    rows: DataFrame
    read: DataFrame
    keys: tuple[tuple[str, str], ...]
    """The work units' keys (:func:`work_unit_key`) in the order of their structs in ``rows`` and ``read`` (the
    order the units were planned in), which is the order of the counts per unit."""
    observed: Observed | None = None
    """The counts of ``read`` (:data:`ROWS_READ`: one per unit, in the order of ``keys``, then ``bad``), observed
    below ``rows`` (that is, as the rows are written); ``None``: not observed there."""


ROWS_READ = "rows_read"
"""The name of the observation of the rows read per work unit and the bad rows (:class:`PlannedRows`)."""


PLAN_FIELDS = 1000
"""How many columns of a projection a plan the job reads lists (``spark.sql.debug.maxToStringFields``, 25 by
default, beyond which Spark prints ``... n more fields``): :func:`observed_reads` reads a projection's columns
back one by one."""


class ObservedReads(NamedTuple):
    """What the observation of the rows read (:data:`ROWS_READ`) below a frame to write says, from the frame's
    physical plan (:func:`observed_reads`)."""

    counted_once: bool
    """It counts every row below it once: the plan computes the observation once, with only operators of
    :data:`NARROW_OPERATORS` above it."""
    written_as_counted: bool
    """And each row it counts in a work unit is written once, in that unit: its counts per unit are the rows
    written per unit."""


def observed_reads(frame: DataFrame, observation: str) -> ObservedReads:
    """:class:`ObservedReads` of ``frame`` over the observation named ``observation``, from one physical plan
    (:func:`~spark_jobs.common.physical_plan`).

    Counted once, over ``source`` observed: ``SELECT id, amount FROM source WHERE amount > 0``, yes (the filter
    stays above the observation); ``SELECT * FROM source LIMIT 10`` (it may stop early), ``... ORDER BY id``
    (sampled, then sorted), a ``GROUP BY`` (a shuffle), ``source`` joined or unioned with itself, or read again in a
    subquery, no.

    Written as counted: above the observation only projections and the job's own filter of the rows in no unit
    (``Filter isnotnull(wm_partition#10)``), and ``frame`` passes the observed ``wm_partition`` and ``wm_unit``
    through unchanged: its root projects, among exactly ``frame``'s columns, the very attributes the observation's
    child outputs (the same ids, ``wm_partition#10``). Example: ``SELECT id, amount, wm_partition, wm_unit FROM
    source``, yes; with ``WHERE amount > 0`` (rows dropped), ``upper(wm_unit) AS wm_unit`` (another unit) or
    ``explode`` (rows repeated), no. A plan prints string literals unquoted and lists at most
    ``spark.sql.debug.maxToStringFields`` columns of a projection (the job sets :data:`PLAN_FIELDS`): a projection
    it cannot read back item by item as ``frame``'s columns (a literal with a comma or a bracket, more columns than
    that) is not written as counted, and the write counts its rows itself."""
    plan = physical_plan(frame).splitlines()
    operators = [plan_node(line)[0] for line in plan]
    observed = [
        i
        for i, (operator, line) in enumerate(zip(operators, plan, strict=True))
        if operator == "CollectMetrics" and f" CollectMetrics {observation}, " in f" {line}"
    ]
    if len(observed) != 1 or not all(operator in NARROW_OPERATORS for operator in operators[: observed[0]]):
        return ObservedReads(counted_once=False, written_as_counted=False)
    at = observed[0]
    not_as_counted = ObservedReads(counted_once=True, written_as_counted=False)
    if at + 1 >= len(plan) or operators[0] != "Project" or operators[at + 1] != "Project":
        return not_as_counted
    written, counted = _projected(plan[0]), _projected(plan[at + 1])
    if [_output_name(item)[0] for item in written] != frame.columns:  # the root's list read back item by item
        return not_as_counted
    attributes = {}
    for name in PARTITION_COLUMNS:
        passed = [item for item in written if _output_name(item)[0] == name]
        # a bare attribute the observation's child outputs: the same values, by the same id
        if (
            len(passed) != 1
            or " " in passed[0]
            or [_output_name(item) for item in counted].count(_output_name(passed[0])) != 1
        ):
            return not_as_counted
        attributes[name] = passed[0]
    own_filter = f"isnotnull({attributes['wm_partition']})"
    above = zip(operators[1:at], plan[1:at], strict=True)
    passes = all(operator == "Project" or plan_node(line)[1] == own_filter for operator, line in above)
    return ObservedReads(counted_once=True, written_as_counted=passes)


def _projected(line: str) -> list[str]:
    """The items of a ``Project [...]`` line at the top level: ``["a#1", "(b#2 + 1) AS c#3"]`` for
    ``Project [a#1, (b#2 + 1) AS c#3]``."""
    listed = plan_node(line)[1]
    if not (listed.startswith("[") and listed.endswith("]")):
        return []
    items, depth, start = [], 0, 1
    for i, char in enumerate(listed[1:-1], start=1):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(listed[start:i].strip())
            start = i + 1
    items.append(listed[start:-1].strip())
    return items


def _output_name(item: str) -> tuple[str, str]:
    """The name and id of a projected item's output: ``("c", "3")`` for ``(b#2 + 1) AS c#3`` and for ``c#3``."""
    attribute = item.rsplit(" AS ", 1)[-1]
    name, _, expr_id = attribute.rpartition("#")
    return name, expr_id


class Quarantined(NamedTuple):
    """A run's quarantine by reason: ``new`` (quarantined first by this run, over all its attempts),
    ``seen_before`` (read again, held by an earlier version), and a few unknown unit values."""

    new: dict[str, int]
    seen_before: dict[str, int]
    unknown_unit_samples: list[str]


def with_row_ids(rows: DataFrame, columns: list[str]) -> DataFrame:
    """``rows`` with ``wm_row_id``: the SHA-256 of the row's ``columns`` as JSON, ``-<n>`` for the n-th of
    identical rows (so two identical bad rows are two rows). Example: the row ``id="c", region="eu",
    ts=null`` gets ``sha2('{"id":"c","region":"eu"}', 256) || "-1"`` (JSON leaves nulls out)."""
    digest = F.sha2(F.to_json(F.struct(*[F.col(c) for c in columns])), 256)
    hashed = rows.withColumn(ROW_ID, digest)
    copy = F.row_number().over(Window.partitionBy(ROW_ID).orderBy(ROW_ID))
    return hashed.withColumn(ROW_ID, F.concat_ws("-", F.col(ROW_ID), copy.cast("string")))
