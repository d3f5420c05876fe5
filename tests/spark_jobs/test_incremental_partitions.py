"""The incremental-partitions job on real Spark: plans from core, pruning, quarantine (each bad row once),
overwrite, failures, an empty source."""

from __future__ import annotations

import re
import shutil
import sys
import types
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Observation
from pyspark.sql import functions as F

from airflow_provider_wm.contracts import PartitionsRequest, WorkUnitRequest
from airflow_provider_wm.core.partitions import (
    DAY_MS,
    PartitionSpec,
    PartitionState,
    UnitResult,
    UnitStatus,
    iso_ms,
    plan,
    quarantine_reason,
)
from airflow_provider_wm.core.times import MAX_TIME_MS
from spark_jobs.common import physical_plan
from spark_jobs.partitions import Job, partition_key, run
from spark_jobs.partitions.layout import (
    PARTITION_COLUMNS,
    ObservedReads,
    load_transform,
    observed_reads,
    partition_dates,
    prunes_exactly,
)
from tests.spark_jobs.codegen import generated_code

DAILY = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily")
UNITS = ["eu", "us"]


def events(days: int, per_day: int = 6, start: str = "2020-01-01"):
    """(id, region, event_time, event_date, amount) rows spread over ``days`` days."""
    base = datetime.fromisoformat(start).replace(tzinfo=UTC)
    rows = []
    for d in range(days):
        for i in range(per_day):
            moment = base + timedelta(days=d, hours=4 * i, minutes=i)
            rows.append((f"e{d}-{i}", UNITS[i % 2], moment, moment.date(), d * 10 + i))
    return rows


SCHEMA = "id string, region string, event_time timestamp, event_date date, amount int"


def write_source(spark, path: Path, rows, mode="overwrite"):
    spark.createDataFrame(rows, SCHEMA).write.mode(mode).partitionBy("event_date").parquet(str(path))


def execute(spark, tmp_path: Path, the_plan, name: str, **extra) -> dict:
    """Run the job in-process on the shared session for the executing units of ``the_plan``."""
    units = [
        WorkUnitRequest(u.partition_start, u.partition_end, u.unit, u.range_start, u.range_end, u.reason.value)
        for u in the_plan.executing()
    ]
    request = PartitionsRequest(
        pipeline="p",
        run_id=name,
        work_units=units,
        source=str(extra.pop("source", tmp_path / "source")),
        time_column=extra.pop("time_column", "event_time"),
        target=str(tmp_path / "target"),
        round_out=str(tmp_path / "runs" / name),
        **extra,
    )
    return run(spark, request).to_json()


def target_rows(spark, tmp_path: Path) -> Counter:
    df = spark.read.parquet(str(tmp_path / "target"))
    return Counter(
        (r["id"], r["wm_partition"], r["wm_unit"]) for r in df.select("id", "wm_partition", "wm_unit").collect()
    )


def expected_rows(rows, the_plan_units) -> Counter:
    """The reference: each source row belongs to the work unit whose range holds its time (core's plan)."""
    out = Counter()
    for rid, region, moment, _day, _amount in rows:
        ms = int(moment.timestamp() * 1000)
        for u in the_plan_units:
            if u.unit == region and u.partition_start <= ms < u.partition_end:
                out[(rid, partition_key(u.partition_start), region)] += 1
    return out


@pytest.mark.slow
def test_first_and_grace_runs_write_each_unit_exactly_once_and_pick_up_late_rows(spark, tmp_path):
    rows = events(10)
    write_source(spark, tmp_path / "source", rows)
    kwargs = {"unit_column": "region", "source_partition_column": "event_date", "transform_sql": "SELECT * FROM source"}
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-10"), units=UNITS)
    manifest = execute(spark, tmp_path, first, "run1", **kwargs)
    assert manifest["status"] == "succeeded" and manifest["totals"]["work_units"] == 18
    assert target_rows(spark, tmp_path) == expected_rows(rows, first.executing())
    assert all(e["rows_read"] == e["rows_written"] == 3 for e in manifest["work_units"])
    # the source's timestamps stay UTC instants for every reader of the target (not Spark's INT96)
    written = next((tmp_path / "target").rglob("*.parquet"))
    assert pq.read_schema(written).field("event_time").type == pa.timestamp("us", tz="UTC")

    # a late row for 01-08 and a new day arrive; grace 2 days re-executes 01-08 and 01-09 and adds 01-10
    late = [("late-1", "eu", datetime(2020, 1, 8, 23, 0, tzinfo=UTC), datetime(2020, 1, 8).date(), 1)]
    day10 = events(1, start="2020-01-10")
    write_source(spark, tmp_path / "source", late + day10, mode="append")
    state = PartitionState.empty().apply(
        UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED) for u in first.executing()
    )
    second = plan(DAILY, state, iso_ms("2020-01-11"), units=UNITS, grace_ms=2 * DAY_MS)
    assert {u.partition_start for u in second.executing()} == {iso_ms(f"2020-01-{d:02d}") for d in (8, 9, 10)}
    manifest = execute(spark, tmp_path, second, "run2", **kwargs)
    assert manifest["status"] == "succeeded"
    everything = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-11"), units=UNITS).executing()
    assert target_rows(spark, tmp_path) == expected_rows(rows + late + day10, everything)


def test_runs_of_different_days_generate_the_same_code_and_read_only_the_plans_partitions(spark, tmp_path):
    """Spark compiles a stage's code again for every new literal number in it, and orders the common
    subexpressions it extracts by a hash that a literal string changes: a run's work units are a column
    (``wm_units``), and daily units over a source partitioned by UTC date need no time bounds in the pushed filter
    (the pruning selects their rows exactly), so the next day's run reuses the code compiled for the last one."""
    write_source(spark, tmp_path / "source", events(10))

    def planned(now: int) -> tuple[list[str], str]:
        first = plan(DAILY, PartitionState.empty(), now - DAY_MS, units=UNITS)
        state = PartitionState.empty().apply(
            UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED) for u in first.executing()
        )
        units = [
            WorkUnitRequest(u.partition_start, u.partition_end, u.unit, u.range_start, u.range_end, u.reason.value)
            for u in plan(DAILY, state, now, units=UNITS, grace_ms=2 * DAY_MS).executing()
        ]
        args = PartitionsRequest(
            pipeline="p", run_id=f"r{now}", work_units=units, source=str(tmp_path / "source"), time_column="event_time",
            source_partition_column="event_date", source_partition_timezone="UTC", unit_column="region",
            units=UNITS, target=str(tmp_path / "t"), round_out=str(tmp_path / "o"),
        )  # fmt: skip
        job = Job(spark, args, [u.to_json() for u in units])
        rows = job.rows(job.units)
        return [generated_code(rows.rows), generated_code(rows.read)], rows.rows._explain_string(extended=False)

    (first, first_plan), (second, _) = planned(iso_ms("2020-01-06")), planned(iso_ms("2020-01-07"))
    assert first == second
    scan = first_plan.split("FileScan parquet")[1].split("\n")[0]
    assert "PartitionFilters: [" in scan and "event_date" in scan.split("PartitionFilters: [")[1].split("]")[0]
    assert "2020-01-0" not in scan.split("PushedFilters: [")[1].split("]")[0]  # no time bounds pushed


@pytest.mark.parametrize(
    ("zone", "interval", "exact"),
    [
        ("UTC", ("2020-01-02", "2020-01-04"), True),  # whole UTC days: the pruning selects exactly their rows
        ("UTC", ("2020-01-02T00:00", "2020-01-02T01:00"), False),  # an hour of a day's partition
        ("Europe/Berlin", ("2020-01-01T23:00", "2020-01-02T23:00"), True),  # Berlin's 2020-01-02
        ("Europe/Berlin", ("2020-01-02", "2020-01-03"), False),  # UTC days are not Berlin's
        (None, ("2020-01-02", "2020-01-03"), False),  # any zone: a day of margin is read
    ],
)
def test_the_read_needs_no_time_bounds_only_where_the_partitions_hold_exactly_the_ranges(zone, interval, exact):
    args = PartitionsRequest(
        pipeline="p", run_id="r", work_units=[], source="s", time_column="event_time",
        source_partition_column="event_date", source_partition_timezone=zone, target="t", round_out="o",
    )  # fmt: skip
    assert prunes_exactly(args, [(iso_ms(interval[0]), iso_ms(interval[1]))]) is exact
    assert not prunes_exactly(replace(args, source_partition_column=None), [(iso_ms(interval[0]), iso_ms(interval[1]))])


@pytest.mark.slow
def test_the_read_prunes_source_partitions_to_the_plans_ranges(spark, tmp_path):
    write_source(spark, tmp_path / "source", events(30))
    args = PartitionsRequest(
        pipeline="p", run_id="r", work_units=[], source=str(tmp_path / "source"), time_column="event_time",
        source_partition_column="event_date", unit_column="region", target=str(tmp_path / "t"),
        round_out=str(tmp_path / "o"),
    )  # fmt: skip
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    unit = {"partition_start": iso_ms("2020-01-20"), "partition_end": iso_ms("2020-01-21"), "unit": "eu",
            "range_start": iso_ms("2020-01-20"), "range_end": iso_ms("2020-01-21")}  # fmt: skip
    job = Job(spark, args, [unit])
    frame = job.rows([unit]).rows
    plan_text = frame._explain_string(extended=False)  # the physical plan, over Spark Connect too
    assert (
        "PartitionFilters: [" in plan_text and "event_date" in plan_text.split("PartitionFilters: [")[1].split("]")[0]
    )
    assert "PushedFilters: [" in plan_text and "event_time" in plan_text.split("PushedFilters: [")[1].split("]")[0]
    assert frame.count() == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("zone", "dates"), [(None, ("2020-01-09", "2020-01-12")), ("UTC", ("2020-01-10", "2020-01-11")),
                        ("America/New_York", ("2020-01-09", "2020-01-11"))],
)  # fmt: skip
def test_a_source_partition_timezone_reads_exactly_the_dates_of_the_ranges_in_that_zone(spark, tmp_path, zone, dates):
    """Two UTC days [01-10, 01-12): without a zone, a day of margin on each side; in UTC exactly 01-10 and 01-11;
    in New York (UTC-5) from the evening of 01-09. A row of 01-10 23:00 UTC filed under 01-12 (its date at UTC+14)
    is read within the margin only."""
    misfiled = ("misfiled", "eu", datetime(2020, 1, 10, 23, 0, tzinfo=UTC), datetime(2020, 1, 12).date(), 1)
    write_source(spark, tmp_path / "source", [*events(14), misfiled])
    kwargs = {"unit_column": "region", "source_partition_column": "event_date", "source_partition_timezone": zone}
    done = succeeded_state(plan(DAILY, PartitionState.empty(), iso_ms("2020-01-10"), units=UNITS))
    the_plan = plan(DAILY, done, iso_ms("2020-01-12"), units=UNITS)
    request = PartitionsRequest(
        pipeline="p", run_id="r", work_units=[], source="s", time_column="t", target="t", round_out="o",
        source_partition_column="event_date", source_partition_timezone=zone,
    )  # fmt: skip
    intervals = [(iso_ms("2020-01-10"), iso_ms("2020-01-12"))]
    assert [(a.isoformat(), b.isoformat()) for a, b in partition_dates(request, intervals)] == [dates]
    manifest = execute(spark, tmp_path, the_plan, "z", **kwargs)
    read = {r["id"] for r in spark.read.parquet(str(tmp_path / "target")).select("id").collect()}
    assert ("misfiled" in read) == (zone is None)
    assert manifest["totals"]["rows_read"] == 2 * 6 + (zone is None)


@pytest.mark.slow
@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo", "UTC"])
def test_a_date_time_column_puts_each_row_in_the_partition_of_its_date_in_the_pipelines_zone(spark, tmp_path, zone):
    """A date is the day that starts at its midnight in the pipeline's zone: read as UTC midnight, the row dated
    01-02 landed in New York's 01-01 (19:00 there), and the one dated 01-01 in no partition at all."""
    days = [datetime(2020, 1, d).date() for d in range(1, 6)]
    spark.createDataFrame([(f"d{d.day}", d) for d in days], "id string, order_date date").write.parquet(
        str(tmp_path / "source")
    )
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily", timezone=zone)
    the_plan = plan(spec, PartitionState.empty(), iso_ms("2020-01-04", zone))  # 01-01 .. 01-03 are over
    manifest = execute(spark, tmp_path, the_plan, "dates", time_column="order_date", timezone=zone)
    written = spark.read.parquet(str(tmp_path / "target")).select("id", "wm_partition").collect()
    assert sorted((r["id"], r["wm_partition"]) for r in written) == [
        (f"d{d}", partition_key(iso_ms(f"2020-01-0{d}", zone))) for d in (1, 2, 3)
    ]
    assert manifest["totals"]["rows_read"] == 3 and manifest["totals"]["quarantined"] == 0


@pytest.mark.slow
def test_rows_with_a_null_or_unparseable_time_are_quarantined_and_counted(spark, tmp_path):
    rows = [
        ("a", "eu", "2020-01-01 10:00:00"),
        ("b", "eu", "2020-01-02T11:00:00Z"),
        ("c", "eu", None),
        ("d", "eu", "last tuesday"),
    ]
    spark.createDataFrame(rows, "id string, region string, ts string").write.parquet(str(tmp_path / "strings"))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=["eu"])
    manifest = execute(spark, tmp_path, first, "q", source=tmp_path / "strings", time_column="ts", unit_column="region")
    assert manifest["quarantine"] == {"null_time": 1, "unparseable_time": 1}
    assert manifest["totals"]["rows_written"] == 2
    bad = spark.read.parquet(str(tmp_path / "runs" / "q" / "quarantine"))
    assert sorted((r["id"], r["reason"]) for r in bad.collect()) == [("c", "null_time"), ("d", "unparseable_time")]


@pytest.mark.slow
def test_a_partial_range_keeps_earlier_rows_and_replaces_only_the_new_range(spark, tmp_path):
    """DIL example (c): no partitioning, abstinent one day."""
    rows = events(16)
    write_source(spark, tmp_path / "source", rows)
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "none")
    kwargs = {"source_partition_column": "event_date"}
    p1 = plan(spec, PartitionState.empty(), iso_ms("2020-01-15"), abstinent_ms=DAY_MS)
    execute(spark, tmp_path, p1, "c1", **kwargs)
    state = PartitionState.empty().apply(
        [UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED) for u in p1.executing()]
    )
    p3 = plan(spec, state, iso_ms("2020-01-17"), abstinent_ms=DAY_MS)
    assert [(u.range_start, u.range_end) for u in p3.executing()] == [(iso_ms("2020-01-16"), iso_ms("2020-01-17"))]
    manifest = execute(spark, tmp_path, p3, "c3", **kwargs)
    assert manifest["work_units"][0]["rows_read"] == 6  # the day 01-16
    ids = Counter(r["id"] for r in spark.read.parquet(str(tmp_path / "target")).select("id").collect())
    # run 1 extracted [01-01, 01-15); the abstinent day 01-15 is never extracted; run 3 adds [01-16, 01-17)
    assert ids == Counter(
        r[0] for r in rows if r[2] < datetime(2020, 1, 15, tzinfo=UTC) or r[2] >= datetime(2020, 1, 16, tzinfo=UTC)
    )


@pytest.mark.slow
def test_a_failing_unit_is_isolated_and_its_retry_leaves_no_duplicate_or_missing_row(spark, tmp_path):
    rows = events(6)
    write_source(spark, tmp_path / "source", rows)
    failing = partition_key(iso_ms("2020-01-04"))
    broken = (
        f"SELECT *, CASE WHEN wm_partition = '{failing}' AND wm_unit = 'us' THEN raise_error('bad day') END AS chk "
        "FROM source"
    )
    kwargs = {"unit_column": "region", "source_partition_column": "event_date"}
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-06"), units=UNITS)
    manifest = execute(spark, tmp_path, first, "f1", transform_sql=broken, **kwargs)
    assert manifest["status"] == "partial"
    failed = [(e["wm_partition"], e["unit"]) for e in manifest["work_units"] if e["status"] == "failed"]
    assert failed == [(failing, "us")]
    assert "bad day" in next(e["error"] for e in manifest["work_units"] if e["status"] == "failed")
    results = [
        UnitResult(e["partition_start"], e["partition_end"], e["unit"], UnitStatus(e["status"][0]))
        for e in manifest["work_units"]
    ]
    retry = plan(DAILY, PartitionState.empty().apply(results), iso_ms("2020-01-06"), units=UNITS)
    assert [(partition_key(u.partition_start), u.unit) for u in retry.executing()] == [(failing, "us")]
    fixed = "SELECT *, CAST(NULL AS STRING) AS chk FROM source"
    assert execute(spark, tmp_path, retry, "f2", transform_sql=fixed, **kwargs)["status"] == "succeeded"
    assert target_rows(spark, tmp_path) == expected_rows(rows, first.executing())


@pytest.mark.slow
@pytest.mark.parametrize("counted", ["while_written", "read_back"])
def test_a_re_execution_counts_each_units_rows_written_and_removes_the_output_of_a_unit_left_without_rows(
    spark, tmp_path, monkeypatch, counted
):
    """A few units count their rows while writing them, many read them back (``OBSERVE_UNITS_UP_TO``); both say
    the same. The source loses day 01-02's ``us`` rows; the grace day re-executes it: 0 rows, old output gone."""
    if counted == "read_back":
        monkeypatch.setattr("spark_jobs.partitions.job.OBSERVE_UNITS_UP_TO", 0)
    rows = events(2)
    write_source(spark, tmp_path / "source", rows)
    kwargs = {"unit_column": "region", "source_partition_column": "event_date"}
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)
    manifest = execute(spark, tmp_path, first, "r1", **kwargs)
    assert [(e["rows_read"], e["rows_written"]) for e in manifest["work_units"]] == [(3, 3)] * 4
    gone = partition_key(iso_ms("2020-01-02")), "us"
    kept = [r for r in rows if (partition_key(iso_ms(r[3].isoformat())), r[1]) != gone]
    write_source(spark, tmp_path / "source", kept)
    second = plan(DAILY, succeeded_state(first), iso_ms("2020-01-03"), units=UNITS, grace_ms=DAY_MS)
    manifest = execute(spark, tmp_path, second, "r2", **kwargs)
    assert {(e["wm_partition"], e["unit"]): (e["rows_read"], e["rows_written"]) for e in manifest["work_units"]} == {
        (gone[0], "eu"): (3, 3),
        gone: (0, 0),
    }
    assert not (tmp_path / "target" / f"wm_partition={gone[0]}" / "wm_unit=us").exists()
    assert target_rows(spark, tmp_path) == expected_rows(kept, first.executing())


def test_an_observation_counts_each_row_once_under_projections_filters_and_generators_only(spark):
    observed = spark.range(10).observe(Observation("seen"), F.count(F.lit(1)).alias("n"))
    observed.createOrReplaceTempView("observed_ids")

    once = [
        observed.selectExpr("id * 2 AS twice"),
        observed.where("id > 3").selectExpr("explode(array(id, -id)) AS signed"),
        spark.sql("SELECT id, id % 2 AS odd FROM observed_ids WHERE id > 1"),
    ]
    not_once = [
        observed.limit(3),  # may stop early
        observed.orderBy("id"),  # sampled for its ranges first
        observed.groupBy((F.col("id") % 2).alias("odd")).count(),  # in a map stage, which may run again
        observed.repartition(2),  # the same
        observed.union(observed),  # twice
        observed.join(observed.withColumnRenamed("id", "other"), F.col("id") == F.col("other")),  # twice
        observed.where("false"),  # the optimizer drops the observation: never
        spark.range(3).join(observed, "id"),  # a join: may skip rows
        spark.sql("SELECT id FROM observed_ids WHERE id > (SELECT avg(id) FROM observed_ids)"),  # twice: a subquery
    ]

    assert [observed_reads(frame, "seen").counted_once for frame in once] == [True] * len(once)
    assert [observed_reads(frame, "seen").counted_once for frame in not_once] == [False] * len(not_once)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transform_sql", "counted_by_the_write"),
    [
        ("SELECT id, region, event_time, wm_partition, wm_unit FROM source WHERE amount % 2 = 0", True),
        ("SELECT wm_partition, wm_unit, count(*) AS n FROM source GROUP BY wm_partition, wm_unit", False),
        ("SELECT * FROM source ORDER BY id", False),
        ("SELECT * FROM source LIMIT 5", False),
        ("SELECT * FROM source UNION ALL SELECT * FROM source", False),
    ],
    ids=["filtered", "aggregated", "sorted", "limited", "read_twice"],
)
def test_each_row_read_is_counted_once_by_the_write_or_by_a_scan_of_its_own(
    spark, tmp_path, monkeypatch, transform_sql, counted_by_the_write
):
    """A transformation that reads each row once lets the write count the rows read (no scan of their own); one
    that may stop early or read a row twice needs the scan. Either way each unit read its 3 rows."""
    if counted_by_the_write:
        monkeypatch.setattr(Job, "_scan_read_counts", lambda _: pytest.fail("the write should have counted them"))
    write_source(spark, tmp_path / "source", events(2))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    manifest = execute(spark, tmp_path, first, "r1", transform_sql=transform_sql, **partitioned)

    assert manifest["status"] == "succeeded"
    assert [e["rows_read"] for e in manifest["work_units"]] == [3] * 4


@pytest.mark.slow
def test_a_wide_source_passed_through_is_counted_by_the_read_alone(spark, tmp_path, monkeypatch):
    """A source of more columns than Spark lists of a projection by default (25) still reads back from the plan."""
    monkeypatch.setattr(Job, "_observe_written", lambda *_: pytest.fail("the rows read should have counted them"))
    wide = spark.createDataFrame(events(2), SCHEMA).selectExpr("*", *[f"id AS copy_{i}" for i in range(30)])
    wide.write.partitionBy("event_date").parquet(str(tmp_path / "source"))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    manifest = execute(spark, tmp_path, first, "r1", transform_sql="SELECT * FROM source", **partitioned)

    assert [(e["rows_read"], e["rows_written"]) for e in manifest["work_units"]] == [(3, 3)] * 4


def test_a_projection_writes_each_row_counted_in_its_unit_only_when_it_passes_the_unit_columns_through(spark):
    observed = (
        spark.range(3)
        .selectExpr("id", "'p' AS wm_partition", "'u' AS wm_unit")
        .observe(Observation("seen"), F.count(F.lit(1)).alias("n"))
    )
    partition = re.search(r"wm_partition#\d+", physical_plan(observed)).group()

    as_counted = [
        observed.selectExpr("id * 2 AS twice", "wm_partition", "wm_unit"),
        observed.where("wm_partition IS NOT NULL").selectExpr("wm_unit", "wm_partition"),  # the job's own filter
    ]
    not_as_counted = [
        observed.where("id > 0").selectExpr("wm_partition", "wm_unit"),  # rows dropped
        observed.selectExpr("wm_partition", "upper(wm_unit) AS wm_unit"),  # another unit
        observed.selectExpr("explode(array(1, 2)) AS copy", "wm_partition", "wm_unit"),  # rows repeated
        # a literal that prints as the observed attribute, and a bracket that hides the computed one
        observed.selectExpr(
            "wm_unit", f"'{partition}, y' AS s", "'(' AS z", "concat(wm_partition, 'X') AS wm_partition", "id"
        ),
    ]

    assert [tuple(observed_reads(frame, "seen")) for frame in as_counted] == [(True, True)] * len(as_counted)
    assert [tuple(observed_reads(frame, "seen")) for frame in not_as_counted] == [(True, False)] * len(not_as_counted)


@pytest.mark.slow
def test_the_counts_per_unit_follow_the_units_not_the_order_the_dag_lists_them_in(spark, tmp_path):
    """A DAG may list its units in any order (``us`` before ``eu``); a run writes them sorted. Each unit's counts
    are its own, with unequal counts per unit, whether the write, the read or a scan of their own counts them."""
    day1, day2 = datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC)
    rows = [(f"a{i}", "eu", day1 + timedelta(hours=i), day1.date(), i) for i in range(4)]
    rows += [("b0", "eu", day2, day2.date(), 5)]
    rows += [(f"c{i}", "us", day2 + timedelta(hours=i + 1), day2.date(), 6 + i) for i in range(2)]
    write_source(spark, tmp_path / "source", rows)
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=["us", "eu"])
    day1_key, day2_key = partition_key(iso_ms("2020-01-01")), partition_key(iso_ms("2020-01-02"))
    expected = {(day1_key, "eu"): 4, (day1_key, "us"): 0, (day2_key, "eu"): 1, (day2_key, "us"): 2}

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    for name, transform_sql in (
        ("passed", "SELECT * FROM source"),
        ("filtered", "SELECT * FROM source WHERE amount >= 0"),
        ("sorted", "SELECT * FROM source ORDER BY id"),
    ):
        manifest = execute(spark, tmp_path, first, name, transform_sql=transform_sql, **partitioned)

        counts = {(e["wm_partition"], e["unit"]): (e["rows_read"], e["rows_written"]) for e in manifest["work_units"]}
        assert counts == {key: (n, n) for key, n in expected.items()}, name
        on_disk = Counter((r["wm_partition"], r["wm_unit"]) for r in target_frame(spark, tmp_path).collect())
        assert on_disk == {key: n for key, n in expected.items() if n}, name


@pytest.mark.slow
def test_a_folder_the_write_filled_is_never_deleted_as_stale_even_on_a_wrong_reading_of_the_plan(
    spark, tmp_path, monkeypatch
):
    """Should the plan be read wrongly as writing each row in the unit it was read in, a unit that read no rows
    but got some is not deleted as stale: a folder is deleted only on what it holds of this write."""
    monkeypatch.setattr("spark_jobs.partitions.job.observed_reads", lambda *_: ObservedReads(True, True))
    day1 = datetime(2020, 1, 1, tzinfo=UTC)
    rows = [(f"a{i}", "eu", day1 + timedelta(hours=i), day1.date(), i) for i in range(4)]
    write_source(spark, tmp_path / "source", rows)
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"), units=UNITS)
    moved = "SELECT id, event_time, wm_partition, 'us' AS wm_unit FROM source"  # every row into unit us

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    manifest = execute(spark, tmp_path, first, "r1", transform_sql=moved, **partitioned)

    day1_key = partition_key(iso_ms("2020-01-01"))
    assert Counter((r["wm_partition"], r["wm_unit"]) for r in target_frame(spark, tmp_path).collect()) == {
        (day1_key, "us"): 4
    }
    assert {e["unit"]: e["rows_written"] for e in manifest["work_units"]}["us"] == 4


def target_frame(spark, tmp_path: Path):
    return spark.read.parquet(str(tmp_path / "target")).select(*PARTITION_COLUMNS)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transform_sql", "written", "counted_by_the_read"),
    [
        ("SELECT id, region, event_time, wm_partition, wm_unit FROM source", {"eu": 3, "us": 3}, True),
        ("SELECT *, amount * 2 AS doubled FROM source", {"eu": 3, "us": 3}, True),
        ("SELECT id, wm_partition, wm_unit, event_time FROM source WHERE amount % 2 = 0", {"eu": 3, "us": 0}, False),
        ("SELECT id, event_time, wm_partition, upper(wm_unit) AS wm_unit FROM source", {"eu": 0, "us": 0}, False),
        (
            "SELECT id, event_time, wm_unit AS wm_partition, wm_partition AS wm_unit FROM source",
            {"eu": 0, "us": 0},
            False,
        ),
        ("SELECT explode(array(1, 2)) AS copy, * FROM source", {"eu": 6, "us": 6}, False),
    ],
    ids=["projected", "computed_column", "filtered", "unit_changed", "columns_swapped", "rows_repeated"],
)
def test_the_rows_read_per_unit_are_the_rows_written_only_when_the_transformation_passes_each_row_and_its_unit(
    spark, tmp_path, monkeypatch, transform_sql, written, counted_by_the_read
):
    """A transformation that only projects, keeping ``wm_partition`` and ``wm_unit`` as they are, writes each row
    read in its unit: the write counts nothing more. One that filters, repeats or changes a row's unit has the
    write count its rows per unit; either way the manifest says what each unit's folder got."""
    if counted_by_the_read:
        monkeypatch.setattr(Job, "_observe_written", lambda *_: pytest.fail("the rows read should have counted them"))
    write_source(spark, tmp_path / "source", events(2))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    manifest = execute(spark, tmp_path, first, "r1", transform_sql=transform_sql, **partitioned)

    assert manifest["status"] == "succeeded"
    assert [(e["unit"], e["rows_read"], e["rows_written"]) for e in manifest["work_units"]] == [
        (unit, 3, written[unit]) for unit in UNITS * 2
    ]
    folders = spark.read.parquet(str(tmp_path / "target")).where(F.col("wm_run_id") == "r1")
    on_disk = Counter((r["wm_partition"], r["wm_unit"]) for r in folders.select(*PARTITION_COLUMNS).collect())
    assert {(e["wm_partition"], e["unit"]): e["rows_written"] for e in manifest["work_units"]} == {
        key: on_disk.get(key, 0) for key in ((e["wm_partition"], e["unit"]) for e in manifest["work_units"])
    }


@pytest.mark.slow
def test_counts_a_scan_does_not_report_are_grouped_and_fetched_instead(spark, tmp_path, monkeypatch):
    """Should Spark report no observed metrics with the counting scan or the write, the rows read are grouped and
    fetched, and the rows written read back: the counts stay exact."""
    monkeypatch.setattr("spark_jobs.partitions.job.observed_below", lambda *_: None)
    write_source(spark, tmp_path / "source", events(2))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)

    partitioned = {"unit_column": "region", "source_partition_column": "event_date"}
    manifest = execute(spark, tmp_path, first, "r1", transform_sql="SELECT * FROM source ORDER BY id", **partitioned)

    assert manifest["status"] == "succeeded"
    assert [(e["rows_read"], e["rows_written"]) for e in manifest["work_units"]] == [(3, 3)] * 4


@pytest.mark.slow
def test_an_output_without_the_work_unit_columns_fails_the_job_clearly(spark, tmp_path):
    write_source(spark, tmp_path / "source", events(2))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"))
    manifest = execute(spark, tmp_path, first, "bad", transform_sql="SELECT id FROM source")
    assert manifest["status"] == "partial"
    assert "must keep the columns ['wm_partition', 'wm_unit']" in manifest["work_units"][0]["error"]


# ------------------------------------------------------------------------------------------- bad data


def quarantined(spark, path: Path) -> list[tuple[str, str, str]]:
    """The quarantine's rows as (id, reason, wm_version), sorted."""
    rows = spark.read.parquet(str(path)).select("id", "reason", "wm_version").collect()
    return sorted((r["id"], r["reason"], str(r["wm_version"])) for r in rows)


@pytest.mark.slow
def test_epoch_ms_times_before_1970_or_after_9999_are_quarantined_as_time_out_of_range_without_crashing(
    spark, tmp_path
):
    good = iso_ms("2020-01-01T10:00")
    rows = [
        ("ok", "eu", good),
        ("before-epoch", "eu", -1),
        ("year-33658", "eu", 10**15),
        ("long-max", "eu", 2**63 - 1),  # would overflow any conversion to a timestamp
        ("last-ms", "eu", MAX_TIME_MS + 1),
        ("no-time", "eu", None),
    ]
    spark.createDataFrame(rows, "id string, region string, t long").write.parquet(str(tmp_path / "millis"))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"), units=["eu"])
    manifest = execute(spark, tmp_path, first, "ms", source=tmp_path / "millis", time_column="t", unit_column="region")
    assert manifest["status"] == "succeeded"
    assert manifest["quarantine"] == {"time_out_of_range": 4, "null_time": 1}
    assert manifest["totals"]["quarantined"] == 5 and manifest["totals"]["rows_written"] == 1
    assert [(i, r) for i, r, _ in quarantined(spark, tmp_path / "runs" / "ms" / "quarantine")] == [
        ("before-epoch", "time_out_of_range"),
        ("last-ms", "time_out_of_range"),
        ("long-max", "time_out_of_range"),
        ("no-time", "null_time"),
        ("year-33658", "time_out_of_range"),
    ]


@pytest.mark.slow
def test_timestamps_and_iso_strings_before_1970_are_quarantined_even_when_the_read_is_pruned(spark, tmp_path):
    rows = [*events(2), ("1960", "eu", datetime(1960, 1, 2, tzinfo=UTC), datetime(2020, 1, 2).date(), 0)]
    write_source(spark, tmp_path / "source", rows)  # the 1960 row sits in the source partition 2020-01-02
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)
    manifest = execute(
        spark, tmp_path, first, "ts", unit_column="region", source_partition_column="event_date", units=UNITS
    )
    assert manifest["quarantine"] == {"time_out_of_range": 1}
    assert manifest["totals"]["rows_written"] == 12

    strings = [("a", "eu", "2020-01-01T10:00:00Z"), ("b", "eu", "1969-12-31T23:59:59Z")]
    spark.createDataFrame(strings, "id string, region string, ts string").write.parquet(str(tmp_path / "strings"))
    manifest = execute(spark, tmp_path, first, "s", source=tmp_path / "strings", time_column="ts", unit_column="region")
    assert manifest["quarantine"] == {"time_out_of_range": 1} and manifest["totals"]["rows_written"] == 1


@pytest.mark.slow
def test_rows_in_a_null_or_unparseable_source_partition_are_read_and_judged_by_their_time(spark, tmp_path):
    """Pruning reads the source partitions near the plan's ranges; a folder whose value is no date (Hive's
    default partition for a null, a compact 20200102) cannot be placed, so it is read and its rows' times
    decide: written, or quarantined (``null_time``), never pruned away unseen."""
    good = datetime(2020, 1, 1, 10, tzinfo=UTC)
    folders = {"__HIVE_DEFAULT_PARTITION__": [("in-null", good), ("null-time", None)], "20200101": [("compact", good)]}
    for value, rows in folders.items():
        frame = spark.createDataFrame([(i, "eu", t) for i, t in rows], "id string, region string, event_time timestamp")
        frame.write.parquet(str(tmp_path / "source" / f"event_date={value}"))
    spark.createDataFrame([("dated", "eu", good)], "id string, region string, event_time timestamp").write.parquet(
        str(tmp_path / "source" / "event_date=2020-01-01")
    )
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"), units=["eu"])
    manifest = execute(spark, tmp_path, first, "p", unit_column="region", source_partition_column="event_date")
    assert manifest["status"] == "succeeded" and manifest["quarantine"] == {"null_time": 1}
    assert sorted(i for i, _p, _u in target_rows(spark, tmp_path)) == ["compact", "dated", "in-null"]


def succeeded_state(*plans) -> PartitionState:
    state = PartitionState.empty()
    for done in plans:
        state = state.apply(
            UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED) for u in done.executing()
        )
    return state


@pytest.mark.slow
def test_a_bad_row_read_again_by_a_later_run_is_quarantined_and_counted_once(spark, tmp_path):
    """A row without a time in the source partition 2020-01-02 is read by the first run and again by the
    second (its grace period re-executes 01-02): quarantined by version 1 only; the second run counts it as
    seen before, and a new bad row that arrived late in that partition as new."""
    no_time = ("no-time", "eu", None, datetime(2020, 1, 2).date(), 0)
    write_source(spark, tmp_path / "source", [*events(2), no_time])
    pipeline = {
        "unit_column": "region", "source_partition_column": "event_date", "units": UNITS,
        "quarantine_path": str(tmp_path / "quarantine"),
    }  # fmt: skip
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)
    manifest = execute(spark, tmp_path, first, "run1", version=1, **pipeline)
    assert manifest["quarantine"] == {"null_time": 1} and manifest["quarantine_seen_before"] == {}

    late_no_time = ("late-no-time", "us", None, datetime(2020, 1, 2).date(), 1)
    write_source(spark, tmp_path / "source", [late_no_time], mode="append")
    second = plan(DAILY, succeeded_state(first), iso_ms("2020-01-03"), units=UNITS, grace_ms=DAY_MS)
    assert {partition_key(u.partition_start) for u in second.executing()} == {partition_key(iso_ms("2020-01-02"))}
    manifest = execute(spark, tmp_path, second, "run2", version=2, **pipeline)
    assert manifest["quarantine"] == {"null_time": 1} and manifest["quarantine_seen_before"] == {"null_time": 1}
    assert manifest["totals"]["quarantined"] == 1 and manifest["totals"]["quarantined_seen_before"] == 1

    third = plan(DAILY, succeeded_state(first, second), iso_ms("2020-01-03"), units=UNITS, grace_ms=DAY_MS)
    manifest = execute(spark, tmp_path, third, "run3", version=3, **pipeline)
    assert manifest["quarantine"] == {} and manifest["quarantine_seen_before"] == {"null_time": 2}
    assert quarantined(spark, tmp_path / "quarantine") == [
        ("late-no-time", "null_time", "2"),
        ("no-time", "null_time", "1"),
    ]


@pytest.mark.slow
def test_a_retry_keeps_what_its_earlier_attempt_quarantined_and_the_next_run_replaces_a_failed_runs(spark, tmp_path):
    rows = events(5) + [(f"no-time-{d}", "eu", None, datetime(2020, 1, d).date(), 0) for d in range(1, 6)]
    write_source(spark, tmp_path / "source", rows)
    pipeline = {
        "unit_column": "region", "source_partition_column": "event_date", "units": UNITS,
        "quarantine_path": str(tmp_path / "quarantine"), "version": 1,
    }  # fmt: skip
    everything = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-06"), units=UNITS)
    assert execute(spark, tmp_path, everything, "attempt-1", **pipeline)["quarantine"] == {"null_time": 5}
    # the retry of the same run (same run id) re-executes only 01-01 (say it failed): it reads the source
    # partitions 12-31..01-02 (a day of margin on each side of 01-01), so two of the five bad rows
    only_first_day = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"), units=UNITS)
    retry = execute(spark, tmp_path, only_first_day, "attempt-1", **pipeline)
    assert retry["quarantine"] == {"null_time": 5}  # the run's first-time bad rows, over both attempts
    assert len(quarantined(spark, tmp_path / "quarantine")) == 5
    # that run never committed: the next run gets the same version and replaces its leftovers
    other = execute(spark, tmp_path, only_first_day, "next-run", **pipeline)
    assert other["quarantine"] == {"null_time": 2}
    assert [i for i, _, _ in quarantined(spark, tmp_path / "quarantine")] == ["no-time-1", "no-time-2"]


@pytest.mark.slow
def test_rows_of_a_null_or_unknown_unit_are_quarantined_once_but_an_up_to_date_units_rows_are_not(spark, tmp_path):
    day = datetime(2020, 1, 1, 10, tzinfo=UTC)
    bad_units = [
        ("no-unit", None, day, day.date(), 0),
        ("asia-1", "asia", day, day.date(), 0),
        ("asia-2", "asia", day, day.date(), 0),
        ("EU", "EU", day, day.date(), 0),
    ]
    write_source(spark, tmp_path / "source", events(2) + bad_units)
    pipeline = {
        "unit_column": "region", "source_partition_column": "event_date", "units": UNITS,
        "quarantine_path": str(tmp_path / "quarantine"),
    }  # fmt: skip
    us_done = PartitionState.empty().apply(
        [UnitResult(iso_ms(f"2020-01-0{d}"), iso_ms(f"2020-01-0{d + 1}"), "us", UnitStatus.SUCCEEDED) for d in (1, 2)]
    )
    only_eu = plan(DAILY, us_done, iso_ms("2020-01-03"), units=UNITS)
    assert {u.unit for u in only_eu.executing()} == {"eu"}  # us is up to date: its rows are not bad data
    manifest = execute(spark, tmp_path, only_eu, "eu", version=1, **pipeline)
    assert manifest["quarantine"] == {"null_unit": 1, "unknown_unit": 3}
    assert manifest["unknown_unit_samples"] == ["EU", "asia"]
    assert manifest["totals"]["rows_written"] == 6

    both = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)
    manifest = execute(spark, tmp_path, both, "both", version=2, **pipeline)
    assert manifest["quarantine"] == {} and manifest["quarantine_seen_before"] == {"null_unit": 1, "unknown_unit": 3}
    assert len(quarantined(spark, tmp_path / "quarantine")) == 4


@pytest.mark.slow
@pytest.mark.parametrize("run_of", ["few_units", "many_units"])
@settings(
    max_examples=int(__import__("os").environ.get("WM_DIFFERENTIAL_EXAMPLES", "8")) // 4 or 1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.randoms(use_true_random=False), st.integers(1, 3))
def test_random_rows_are_quarantined_or_extracted_as_core_quarantine_reason_says(
    spark, tmp_path_factory, run_of, rng, executing_days
):
    """Either way the job finds a row's work unit and counts the rows: for a few units a CASE over them and counts
    observed, for many (the thresholds set to 0 here) a join, and counts grouped and read back."""
    workdir = tmp_path_factory.mktemp("reasons")
    now = iso_ms("2020-01-05")
    times = [None, -1, 0, 10**15, 2**63 - 1, MAX_TIME_MS, MAX_TIME_MS + 1]
    rows = []
    for i in range(60):
        t = rng.choice(times) if rng.random() < 0.3 else iso_ms("2020-01-01") + rng.randrange(5 * DAY_MS)
        rows.append((f"r{i}", rng.choice([None, "eu", "us", "asia"]), t))
    spark.createDataFrame(rows, "id string, region string, t long").write.parquet(str(workdir / "source"))
    done = PartitionState.empty().apply(
        [UnitResult(iso_ms("2020-01-01"), iso_ms(f"2020-01-0{5 - executing_days}"), "us", UnitStatus.SUCCEEDED)]
    )
    the_plan = plan(DAILY, done, now, units=UNITS)
    ranges = [(u.range_start, u.range_end) for u in the_plan.executing()]
    few = run_of == "few_units"
    with (
        mock.patch("spark_jobs.partitions.job.INLINE_UNITS_UP_TO", 64 if few else 0),
        mock.patch("spark_jobs.partitions.job.OBSERVE_UNITS_UP_TO", 64 if few else 0),
    ):
        manifest = execute(
            spark, workdir, the_plan, "r", source=workdir / "source", time_column="t", unit_column="region", units=UNITS
        )
    expected_bad = {}
    expected_out = Counter()
    for rid, region, t in rows:
        reason = quarantine_reason(t, t, ranges=ranges, unit=region, units=UNITS)
        if reason is not None:
            expected_bad[rid] = reason.value
        else:
            for u in the_plan.executing():
                if u.unit == region and u.range_start <= t < u.range_end:
                    expected_out[(rid, partition_key(u.partition_start), region)] += 1
    bad = spark.read.parquet(str(workdir / "runs" / "r" / "quarantine")) if expected_bad else None
    assert ({r["id"]: r["reason"] for r in bad.collect()} if bad else {}) == expected_bad
    assert manifest["quarantine"] == dict(Counter(expected_bad.values()))
    written = target_rows(spark, workdir) if any((workdir / "target").rglob("*.parquet")) else Counter()
    assert written == expected_out
    read = Counter()
    for (_, partition, unit), copies in expected_out.items():
        read[(partition, unit)] += copies
    assert {(e["wm_partition"], e["unit"]): e["rows_read"] for e in manifest["work_units"] if e["rows_read"]} == read


@pytest.mark.slow
def test_an_empty_source_folder_is_a_source_without_rows_and_every_unit_succeeds_with_none(spark, tmp_path):
    (tmp_path / "empty").mkdir()
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"), units=UNITS)
    manifest = execute(spark, tmp_path, first, "e1", source=tmp_path / "empty", unit_column="region", units=UNITS)
    assert manifest["status"] == "succeeded" and manifest["quarantine"] == {}
    assert [(e["status"], e["rows_read"], e["rows_written"]) for e in manifest["work_units"]] == [
        ("succeeded", 0, 0)
    ] * 4
    with pytest.raises(ValueError, match=r"source .*/missing does not exist"):
        execute(spark, tmp_path, first, "e2", source=tmp_path / "missing", unit_column="region")


@pytest.mark.slow
def test_a_partial_re_execution_that_finds_no_rows_keeps_the_units_earlier_rows(spark, tmp_path):
    """No partitioning, abstinent one day: run 1 extracts [01-01, 01-15); run 3 re-executes [01-16, 01-17),
    which has no rows (here: the source folder is emptied). The rows before 01-16 stay."""
    write_source(spark, tmp_path / "source", events(14))
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "none")
    p1 = plan(spec, PartitionState.empty(), iso_ms("2020-01-15"), abstinent_ms=DAY_MS)
    execute(spark, tmp_path, p1, "c1", source_partition_column="event_date")
    before = target_rows(spark, tmp_path)
    assert sum(before.values()) == 14 * 6
    p3 = plan(spec, succeeded_state(p1), iso_ms("2020-01-17"), abstinent_ms=DAY_MS)
    assert [u.range_start for u in p3.executing()] == [iso_ms("2020-01-16")]
    manifest = execute(spark, tmp_path, p3, "c3", source_partition_column="event_date")  # the days it reads: none
    assert manifest["work_units"][0]["status"] == "succeeded" and manifest["work_units"][0]["rows_read"] == 0
    assert target_rows(spark, tmp_path) == before
    for folder in (tmp_path / "source").iterdir():  # the source emptied: its folder stays
        shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
    manifest = execute(spark, tmp_path, p3, "c4", source_partition_column="event_date")
    assert manifest["status"] == "succeeded" and target_rows(spark, tmp_path) == before


@pytest.mark.parametrize("merge_schema", [False, True])
def test_a_column_only_later_files_have_reaches_the_target_when_parquet_schemas_are_merged(
    spark, tmp_path, merge_schema
):
    """Spark takes a Parquet source's schema from one file: a column added later is read only with
    ``spark.sql.parquet.mergeSchema`` (the operator's ``spark_conf``), as the docs say."""
    write_source(spark, tmp_path / "source", events(1))
    later = spark.createDataFrame(events(1, start="2020-01-02"), SCHEMA).withColumn("note", F.lit("new"))
    later.write.mode("append").partitionBy("event_date").parquet(str(tmp_path / "source"))
    spark.conf.set("spark.sql.parquet.mergeSchema", str(merge_schema).lower())
    try:
        first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-03"))
        assert execute(spark, tmp_path, first, "m1", source_partition_column="event_date")["status"] == "succeeded"
        target = spark.read.parquet(str(tmp_path / "target"))
        notes = Counter(r["note"] for r in target.collect()) if "note" in target.columns else None  # small: 12 rows
    finally:
        spark.conf.unset("spark.sql.parquet.mergeSchema")
    assert notes == ({None: 6, "new": 6} if merge_schema else None)


def test_a_transform_of_a_dag_file_is_found_in_the_process_that_parsed_it_and_refused_clearly_elsewhere(monkeypatch):
    """Connect mode runs the job in the task's process, which imported the DAG file under Airflow's module name;
    a ``spark-submit`` driver has no such module and says what to do."""
    dag_file = types.ModuleType("unusual_prefix_0123_orders_dag")
    dag_file.double = lambda frame: ("doubled", frame)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, dag_file.__name__, dag_file)
    request = PartitionsRequest(
        pipeline="p", run_id="r", work_units=[], source="/s", time_column="t", target="/t", round_out="/o",
        transform_callable="unusual_prefix_0123_orders_dag:double",
    )  # fmt: skip
    assert load_transform(request)(None, "frame") == ("doubled", "frame")  # type: ignore[arg-type]
    elsewhere = replace(request, transform_callable="unusual_prefix_9999_other_dag:double")
    with pytest.raises(ValueError, match=r"^transform 'unusual_prefix_9999_other_dag:double' is defined in a DAG file"):
        load_transform(elsewhere)
