"""The incremental-partitions job on real Spark: plans from core, pruning, quarantine, overwrite, failures."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_wm.contracts import PartitionsRequest, WorkUnitRequest
from airflow_provider_wm.core.partitions import (
    DAY_MS,
    PartitionSpec,
    PartitionState,
    UnitResult,
    UnitStatus,
    iso_ms,
    plan,
)
from spark_jobs.incremental_partitions import Job, partition_key, run

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
    frame, _ = job.rows([unit])
    plan_text = frame._explain_string(extended=False)  # the physical plan, over Spark Connect too
    assert (
        "PartitionFilters: [" in plan_text and "event_date" in plan_text.split("PartitionFilters: [")[1].split("]")[0]
    )
    assert "PushedFilters: [" in plan_text and "event_time" in plan_text.split("PushedFilters: [")[1].split("]")[0]
    assert frame.count() == 3


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
def test_an_output_without_the_work_unit_columns_fails_the_job_clearly(spark, tmp_path):
    write_source(spark, tmp_path / "source", events(2))
    first = plan(DAILY, PartitionState.empty(), iso_ms("2020-01-02"))
    manifest = execute(spark, tmp_path, first, "bad", transform_sql="SELECT id FROM source")
    assert manifest["status"] == "partial"
    assert "must keep the columns ['wm_partition', 'wm_unit']" in manifest["work_units"][0]["error"]
