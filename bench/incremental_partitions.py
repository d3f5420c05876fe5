"""Benchmark: incremental partitions (DIL) planning at scale, and the Spark job's first run vs a day-2 run.

1. Planning (pure Python, no Spark): ten years of hourly partitions (2016-01-01..2026-01-01, no units,
   87,672 work units). The full state is every work unit succeeded, then 1 in ``--fail-every`` failed.
   Times ``plan(...)`` with a 3-day grace period over that state (median of ``--repeat``; target < 200 ms)
   and, for reference, over the empty state (a first run: every work unit executes) and the
   ``PartitionState.apply`` that builds the full state. Prints the state's size as compact JSON
   (target < 64 KB) and as the Airflow Variable ``wm_partitions__<pipeline>`` would hold it
   (``PipelineState`` dumped the way ``commit_pipeline_state`` does).

2. The Spark job (``spark_jobs/partitions``, in-process, one local session): a daily source
   of ``--rows`` rows over ``--days`` days from 2025-01-01, generated with ``spark.range`` as Parquet
   partitioned by ``event_date`` (one file per day, the UTC date of ``event_time``, which the job is told with
   ``source_partition_timezone="UTC"``) with ``event_time``, ``region`` (eu/us) and ``amount``.
   It is generated once under ``--work-dir`` and reused by later runs with the same parameters.

   - first run: the core plan at the end of the ``--days`` days, units ``eu`` and ``us`` (every work unit
     new), into a fresh target;
   - day-2 run: the state after the first run, one more day of data appended to the source, the plan one
     day later with a 2-day grace period (2 days re-execute + 1 new day, x 2 units). Each call after the first
     runs the day-2 run of a first run one day earlier than the call before (the same work on other days), as a
     scheduled run's days move: the job must not compile its stages again for them.

   The job's transformation writes the source's columns (:data:`SOURCE_COLUMNS`, the shape of the operator's
   example), as the floor does; for reference, the day-2 run also runs with ``SELECT * FROM source``
   (:data:`VIEW_COLUMNS`), which writes the columns of the view the job adds too (``wm_time``, the partition and
   range bounds), into a target of its own.

   Each run's floor is the native read of the source partitions its plan names (``event_date`` values), written
   partitioned by day and unit (the day-2 floor replaces those partitions in the first floor's output, as the
   job's dynamic overwrite does). Job and floor run alternately, each the best of ``--spark-repeat`` for the first
   run (into a fresh target each time) and of ``--day2-repeat`` after three untimed calls of each for the day-2 run,
   which takes seconds (into the first run's last target), with their Spark jobs and stages; before
   them an untimed warm-up runs both for the first day into scratch targets, so all find a warm JVM. Prints rows
   read from the manifests, the source partitions/files the job's scan selects, the job's longest Spark jobs,
   writes ``bench/results/incremental_partitions.json`` (or ``--output``) and ends with ``ratio=<day-2 run / its
   floor>`` (target <= 2.0).

    .venv/bin/python bench/incremental_partitions.py                      # default: 20M rows, a few minutes
    .venv/bin/python bench/incremental_partitions.py --rows 2000000       # quick check
    .venv/bin/python bench/incremental_partitions.py --work-dir /tmp/bench-partitions   # keep and reuse the source
    .venv/bin/python bench/incremental_partitions.py --connect    # job and floor as clients of a Spark Connect server

``--connect``: the Spark part in a Spark Connect session instead, on a server of its own started like the embedded
one (the product's default run mode: the operators run the job as a client of it), job and floor both clients;
seconds only there (a Connect client has no status tracker to count Spark jobs, nor the physical scan the source
read line reports), written to ``bench/results/incremental_partitions_connect.json`` unless ``--output`` says
otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from timing import Measured, compare, write_results
from windowed_aggregate import compare_seconds, connect_session

from airflow_provider_wm.contracts import PartitionsRequest, WorkUnitRequest
from airflow_provider_wm.contracts.jobs import CLASSIC_CONF
from airflow_provider_wm.core.partitions import (
    DAY_MS,
    PartitionSpec,
    PartitionState,
    Plan,
    UnitResult,
    UnitStatus,
    iso_ms,
    plan,
    succeeded,
)
from spark_jobs.partitions import Job, merged_intervals, run

HOURLY_FROM, HOURLY_TO = "2016-01-01", "2026-01-01"
SOURCE_START = "2025-01-01"
UNITS = ["eu", "us"]
DAY_US = DAY_MS * 1000
GENERATOR_VERSION = 1
PLAN_TARGET_MS = 200
STATE_TARGET_BYTES = 64 * 1024
DAY2_TARGET = 2.0
"""The day-2 run's target: at most this many times its native floor (read the plan's source partitions, write
them)."""
SOURCE_COLUMNS = "SELECT id, region, event_time, amount, wm_partition, wm_unit FROM source"
"""The benched transformation: the source's columns and the work unit's (as the floor writes the source's rows)."""
VIEW_COLUMNS = "SELECT * FROM source"
"""The reference transformation: every column of the job's view."""
DAY2_WARMUP = 3
"""Untimed calls of the day-2 job and floor before the timed ones: the new day's files in the cache for both, and
the JVM's compilation of the code paths each takes (the job's calls, which take many more paths than the floor's,
still got faster over their first three calls after one warm-up call)."""


# --- 1. planning ---------------------------------------------------------------------------------


def median_ms(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def variable_value(spec: PartitionSpec, units: list[str], state: PartitionState) -> str:
    """The Variable's value, as ``commit_pipeline_state`` writes it (airflow is imported only here)."""
    from airflow_provider_wm.state import PipelineState

    document = PipelineState(
        pipeline="bench_hourly",
        version=1234,
        run_id="scheduled__2026-01-01T00:00:00+00:00",
        committed_at="2026-01-01T00:05:00+00:00",
        spec=spec.to_json(),
        units=units,
        state=state.to_json(),
    )
    return json.dumps(document.to_json(), separators=(",", ":"), sort_keys=True)


def bench_planning(repeat: int, fail_every: int) -> dict[str, Any]:
    spec = PartitionSpec.build({"from": HOURLY_FROM, "to": HOURLY_TO}, "hourly")
    now = iso_ms(HOURLY_TO)
    first = plan(spec, PartitionState.empty(), now)
    executed = first.executing()
    count = len(executed)

    start = time.perf_counter()
    full = PartitionState.empty().apply(succeeded(first))
    apply_ms = (time.perf_counter() - start) * 1000
    failures = [
        UnitResult(u.partition_start, u.partition_end, u.unit, UnitStatus.FAILED)
        for u in executed[fail_every - 1 :: fail_every]
    ]
    state = full.apply(failures)

    def grace_plan() -> Plan:
        return plan(spec, state, now, grace_ms=3 * DAY_MS)

    def first_plan() -> Plan:
        return plan(spec, PartitionState.empty(), now)

    full_ms = median_ms(repeat, grace_plan)
    empty_ms = median_ms(repeat, first_plan)
    with_state = grace_plan()
    reasons: dict[str, int] = {}
    for u in with_state.executing():
        reasons[u.reason.value] = reasons.get(u.reason.value, 0) + 1
    compact = len(json.dumps(state.to_json(), separators=(",", ":")).encode())
    variable = len(variable_value(spec, [], state).encode())

    print(f"1. planning: {count:,} hourly work units ({HOURLY_FROM}..{HOURLY_TO}, no units), median of {repeat}")
    print(f"   {'':<46} {'ms':>9}  {'executes':>9}  target")
    detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
    print(
        f"   {'plan, full state, grace 3 days':<46} {full_ms:>9.1f}  {len(with_state.executing()):>9,}  < 200 ms"
        f"  ({detail})"
    )
    print(f"   {'plan, empty state (first run)':<46} {empty_ms:>9.1f}  {count:>9,}  reference")
    print(f"   {'apply: state from the first run':<46} {apply_ms:>9.1f}  {'':>9}  reference")
    print(f"   full state vs empty state: {full_ms / empty_ms:.2f}x the time")
    print(
        f"   state: {state.size():,} runs ({len(failures):,} failed units, 1 in {fail_every}); compact JSON "
        f"{compact:,} bytes = {compact / 1024:.1f} KB (target < 64 KB); Variable value {variable:,} bytes "
        f"= {variable / 1024:.1f} KB"
    )
    return {
        "work_units": count,
        "plan_full_state_ms": full_ms,
        "plan_empty_state_ms": empty_ms,
        "apply_ms": apply_ms,
        "executes": len(with_state.executing()),
        "state_runs": state.size(),
        "failed_units": len(failures),
        "state_compact_bytes": compact,
        "variable_bytes": variable,
        "targets": {"plan_ms": PLAN_TARGET_MS, "state_bytes": STATE_TARGET_BYTES},
        "met": full_ms < PLAN_TARGET_MS and compact < STATE_TARGET_BYTES,
    }


# --- 2. the Spark job ----------------------------------------------------------------------------


def session(master: str, driver_memory: str) -> SparkSession:
    spark = (
        SparkSession.builder.master(master)
        .appName("bench-incremental-partitions")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(map=CLASSIC_CONF)  # as the operators submit the jobs
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
    return spark


def events(spark: SparkSession, first_day: int, days: int, per_day: int) -> DataFrame:
    """``per_day`` rows on each of ``days`` days from ``SOURCE_START + first_day``, evenly spaced in the day;
    one range partition (so one Parquet file) per day."""
    base_us = iso_ms(SOURCE_START) * 1000
    step_us = DAY_US // per_day
    ids = spark.range(first_day * per_day, (first_day + days) * per_day, numPartitions=days)
    day = (F.col("id") / per_day).cast("long")
    event_time = F.timestamp_micros(F.lit(base_us) + day * DAY_US + (F.col("id") % per_day) * step_us)
    return ids.select(
        F.col("id"),
        F.when(F.col("id") % 2 == 0, F.lit("eu")).otherwise(F.lit("us")).alias("region"),
        event_time.alias("event_time"),
        F.to_date(event_time).alias("event_date"),  # the session time zone is UTC
        ((F.col("id") * 7919) % 100_000 / 100).cast("decimal(10,2)").alias("amount"),
    )


def day_label(day: int) -> str:
    return (dt.date.fromisoformat(SOURCE_START) + dt.timedelta(days=day)).isoformat()


def prepare_source(spark: SparkSession, work: Path, days: int, per_day: int) -> None:
    """Generate the source once; a reused one only loses the extra day a previous day-2 run appended."""
    source, marker = work / "source", work / "source.json"
    params = {"version": GENERATOR_VERSION, "start": SOURCE_START, "days": days, "per_day": per_day}
    if marker.exists() and source.exists() and json.loads(marker.read_text()) == params:
        shutil.rmtree(source / f"event_date={day_label(days)}", ignore_errors=True)
        print(f"   source: reusing {days * per_day:,} rows over {days} days under {source}")
        return
    marker.unlink(missing_ok=True)
    start = time.perf_counter()
    events(spark, 0, days, per_day).write.mode("overwrite").partitionBy("event_date").parquet(str(source))
    marker.write_text(json.dumps(params))
    print(f"   source: generated {days * per_day:,} rows over {days} days in {time.perf_counter() - start:.1f}s")


def execute(
    spark: SparkSession, work: Path, the_plan: Plan, name: str, target: Path, transform_sql: str = SOURCE_COLUMNS
) -> tuple[dict[str, Any], float]:
    """Write the plan file, run the job in-process; (manifest, seconds around ``run``)."""
    plan_file = work / "runs" / f"{name}-plan.json"
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    units = [
        {
            "partition_start": u.partition_start,
            "partition_end": u.partition_end,
            "unit": u.unit,
            "range_start": u.range_start,
            "range_end": u.range_end,
        }
        for u in the_plan.executing()
    ]
    plan_file.write_text(json.dumps({"work_units": units}))
    request = job_request(work, name, units, target, transform_sql)
    start = time.perf_counter()
    manifest = run(spark, request).to_json()
    return manifest, time.perf_counter() - start


def job_request(
    work: Path, name: str, units: list[dict[str, Any]], target: Path, transform_sql: str = SOURCE_COLUMNS
) -> PartitionsRequest:
    return PartitionsRequest(
        pipeline="bench",
        run_id=name,
        work_units=[WorkUnitRequest.from_json({"reason": "new", **u}) for u in units],
        source=str(work / "source"),
        time_column="event_time",
        unit_column="region",
        source_partition_column="event_date",
        source_partition_timezone="UTC",  # event_date is the UTC date of event_time
        transform_sql=transform_sql,
        target=str(target),
        round_out=str(work / "runs" / name),
    )


def scan_selection(spark: SparkSession, work: Path, name: str, target: Path) -> str:
    """Source partitions and files the job's read selects (partition pruning), from the planned scan."""
    try:
        units = json.loads((work / "runs" / f"{name}-plan.json").read_text())["work_units"]
        frame = Job(spark, job_request(work, name, units, target), units).rows(units).rows
        leaves = frame._jdf.queryExecution().sparkPlan().collectLeaves()  # the physical plan before AQE
        for i in range(leaves.size()):
            node = leaves.apply(i)
            if node.getClass().getName().endswith(".FileSourceScanExec"):
                node.inputRDD()  # selects the partitions (no data read) and sets the driver-side metrics
                metrics = node.metrics()
                partitions = metrics.apply("numPartitions").value()
                files = metrics.apply("numFiles").value()
                return f"{partitions} partitions, {files} files ({len(merged_intervals(units))} read interval(s))"
    except Exception as exc:  # a reporting nicety: never fail the benchmark over it
        return f"n/a ({type(exc).__name__})"
    return "n/a"


def source_days(the_plan: Plan) -> list[str]:
    """The source partitions (``event_date`` values, UTC days) the plan's ranges cover."""
    days: set[str] = set()
    for start, end in merged_intervals(
        [{"range_start": u.range_start, "range_end": u.range_end} for u in the_plan.executing()]
    ):
        for day in range(start // DAY_MS, (end - 1) // DAY_MS + 1):
            days.add((dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat())
    return sorted(days)


def native_floor(spark: SparkSession, work: Path, days: list[str], target: Path) -> None:
    """The floor of a run: read the source partitions of its plan, write them partitioned by day and unit,
    replacing those partitions only (the job's dynamic overwrite)."""
    source = spark.read.parquet(str(work / "source"))
    source.where(F.col("event_date").cast("string").isin(days)).write.mode("overwrite").option(
        "partitionOverwriteMode", "dynamic"
    ).partitionBy("event_date", "region").parquet(str(target))


def row(
    label: str, manifest: dict[str, Any], job: Measured, floor: Measured, target: float | None, **extra: Any
) -> dict[str, Any]:
    """One run of the results: the job and its floor, their ratio, and the target (None: for reference)."""
    ratio = job.seconds / floor.seconds
    totals = manifest["totals"]
    return {
        "label": label,
        "work_units": totals["work_units"],
        "rows_read": totals["rows_read"],
        "rows_written": totals["rows_written"],
        "status": manifest["status"],
        "job": job.as_dict(),
        "floor": floor.as_dict(),
        "ratio": ratio,
        "target": target,
        "met": None if target is None else ratio <= target,
        **extra,
    }


def bench_job(args: argparse.Namespace) -> dict[str, Any]:
    per_day = -(-args.rows // args.days)  # at least --rows
    server = None
    if args.connect:
        spark, server = connect_session(args)
        spark.conf.set("spark.sql.session.timeZone", "UTC")  # the generator's dates are UTC dates
    else:
        spark = session(args.master, args.driver_memory)

    def timed(
        repeat: int, job: Callable[[], Any], floor: Callable[[], Any], warmup: int = 0
    ) -> tuple[Measured, Measured]:
        if args.connect:
            return compare_seconds(repeat, job, floor, warmup)
        return compare(spark, repeat, job, floor, warmup=warmup)

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench-partitions-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(
            f"\n2. Spark job: {per_day * args.days:,} rows over {args.days} days, units {UNITS}, "
            f"master {args.master}{' (Spark Connect)' if args.connect else ''}, best of {args.spark_repeat} "
            f"(day-2 run: best of {args.day2_repeat} after {DAY2_WARMUP} untimed call(s))"
        )
        prepare_source(spark, work, args.days, per_day)
        for stale in ("target", "warm-up-target", "runs", "floor"):
            shutil.rmtree(work / stale, ignore_errors=True)

        spec = PartitionSpec.build({"from": SOURCE_START, "to": "P0D"}, "daily")
        now1 = iso_ms(SOURCE_START) + args.days * DAY_MS
        start = time.perf_counter()
        warm = plan(spec, PartitionState.empty(), iso_ms(SOURCE_START) + DAY_MS, units=UNITS)
        execute(spark, work, warm, "warm-up", work / "warm-up-target")
        native_floor(spark, work, source_days(warm), work / "floor" / "warm-up")
        print(f"   warm-up (day 1 into scratch targets, untimed): {time.perf_counter() - start:.1f}s")

        manifests: dict[str, dict[str, Any]] = {}
        first_plan = plan(spec, PartitionState.empty(), now1, units=UNITS)
        first_days = source_days(first_plan)
        targets: list[Path] = []
        floor_targets: list[Path] = []

        def first_job() -> None:  # a fresh target each time; the last one is the day-2 run's
            targets.append(work / "target" / f"first-{len(targets)}")
            manifests["first"] = execute(spark, work, first_plan, "first", targets[-1])[0]

        def first_floor() -> None:  # a fresh target each time; the last one is the day-2 floor's
            floor_targets.append(work / "floor" / f"first-{len(floor_targets)}")
            native_floor(spark, work, first_days, floor_targets[-1])

        first_m, first_floor_m = timed(args.spark_repeat, first_job, first_floor)
        target, floor_target = targets[-1], floor_targets[-1]
        first_scan = "n/a (Spark Connect)" if args.connect else scan_selection(spark, work, "first", target)

        state = PartitionState.empty().apply(succeeded(first_plan))
        events(spark, args.days, 1, per_day).write.mode("append").partitionBy("event_date").parquet(
            str(work / "source")
        )
        day2_plan = plan(spec, state, now1 + DAY_MS, units=UNITS, grace_ms=2 * DAY_MS)
        day2_days = source_days(day2_plan)
        # each call a day earlier than the one before, as a scheduled run's day moves: the day-2 run of a first run
        # planned that many days before the end (the same work: 2 days of grace and 1 new day, x 2 units)
        calls = DAY2_WARMUP + args.day2_repeat
        day2_plans = [day2_plan] + [
            plan(spec, PartitionState.empty().apply(succeeded(plan(spec, PartitionState.empty(), now, units=UNITS))),
                 now + DAY_MS, units=UNITS, grace_ms=2 * DAY_MS)
            for now in (now1 - k * DAY_MS for k in range(1, calls))
        ]  # fmt: skip
        made = {"job": 0, "floor": 0, "view": 0}

        def next_plan(caller: str) -> Plan:
            made[caller] += 1
            return day2_plans[(made[caller] - 1) % calls]

        def day2_job() -> None:  # the units of the call's day into the same target (dynamic overwrite)
            manifests["day2"] = execute(spark, work, next_plan("job"), "day2", target)[0]

        def day2_floor() -> None:  # the source partitions of the call's plan, into the first floor's target
            native_floor(spark, work, source_days(next_plan("floor")), floor_target)

        day2_m, day2_floor_m = timed(args.day2_repeat, day2_job, day2_floor, warmup=DAY2_WARMUP)
        day2_scan = "n/a (Spark Connect)" if args.connect else scan_selection(spark, work, "day2", target)

        def day2_view_job() -> None:  # SELECT *: wider rows than the other targets', so a target of its own
            manifests["day2_view"] = execute(
                spark, work, next_plan("view"), "day2-view", work / "target" / "view", VIEW_COLUMNS
            )[0]

        view_m, view_floor_m = timed(args.day2_repeat, day2_view_job, day2_floor, warmup=DAY2_WARMUP)

        runs = {
            "day2": row(
                "day-2 run (+1 day, grace 2 days)", manifests["day2"], day2_m, day2_floor_m, DAY2_TARGET,
                source_partitions=len(day2_days), scan=day2_scan,
            ),
            "day2_view": row(
                "day-2 run, SELECT * (reference)", manifests["day2_view"], view_m, view_floor_m, None,
                source_partitions=len(day2_days), scan=day2_scan,
            ),
            "first": row(
                f"first run (plan at {day_label(args.days)})", manifests["first"], first_m, first_floor_m, None,
                source_partitions=len(first_days), scan=first_scan,
            ),
        }  # fmt: skip
        print(
            f"   {'':<34} {'units':>6} {'rows read':>11} {'job s':>7} {'jobs':>5} {'stages':>6}"
            f" {'floor s':>8} {'jobs':>5} {'stages':>6} {'ratio':>6} {'target':>7}  source read"
        )
        for r in (runs["first"], runs["day2"], runs["day2_view"]):
            job, floor, target = r["job"], r["floor"], r["target"]
            print(
                f"   {r['label']:<34} {r['work_units']:>6} {r['rows_read']:>11,} {job['seconds']:>7.2f}"
                f" {job['jobs']:>5} {job['stages']:>6} {floor['seconds']:>8.2f} {floor['jobs']:>5} {floor['stages']:>6}"
                f" {r['ratio']:>6.2f} {'<= ' + format(target, 'g') if target else '':>7}  {r['scan']}"
            )
        print(f"   day-2 / first: {day2_m.seconds / first_m.seconds:.3f}")
        for label, measured in (("day-2 run", day2_m), ("first run", first_m)) if not args.connect else ():
            print(f"\n   {label}: the job's longest Spark jobs (last call)\n{measured.summary()}")
        return {
            "rows_option": args.rows,
            "rows": per_day * args.days,
            "days": args.days,
            "units": UNITS,
            "runs": runs,
            "day2_of_first": day2_m.seconds / first_m.seconds,
        }
    finally:
        spark.stop()
        if server is not None:
            server.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000_000, help="source rows over --days days")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--work-dir", help="keeps the generated source for reuse (default: a temp dir, removed)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--repeat", type=int, default=7, help="planning repeats (median)")
    parser.add_argument("--spark-repeat", type=int, default=2, help="first runs, job and floor (best of)")
    parser.add_argument("--day2-repeat", type=int, default=7, help="day-2 runs, job and floor (best of)")
    parser.add_argument("--output", type=Path, default=None, help="the JSON results (default bench/results/)")
    parser.add_argument("--fail-every", type=int, default=500, help="1 in N hourly work units failed in the state")
    parser.add_argument("--skip-spark", action="store_true", help="only the planning part")
    parser.add_argument("--connect", action="store_true", help="in a Spark Connect session (seconds only)")
    args = parser.parse_args()
    if args.rows < args.days:
        parser.error(f"--rows={args.rows} must be at least --days={args.days}")
    planning = bench_planning(args.repeat, args.fail_every)
    if args.skip_spark:
        return
    job = bench_job(args)
    document = {
        "mode": (
            f"job and floor as clients of a Spark Connect server, {args.master}; seconds only"
            if args.connect
            else f"job in-process (spark_jobs.partitions.run) on a classic session, {args.master}"
        ),
        "repeat": args.spark_repeat,
        "day2_repeat": args.day2_repeat,
        "day2_warmup": DAY2_WARMUP,
        "planning_repeat": args.repeat,
        "planning": planning,
        **job,
        "headline": "day2",
        "worst_ratio": job["runs"]["day2"]["ratio"],
    }
    name = "incremental_partitions_connect" if args.connect else "incremental_partitions"
    print(f"\nwrote {write_results(name, document, args.output)}")
    print(f"ratio={job['runs']['day2']['ratio']:.2f}")


if __name__ == "__main__":
    main()
