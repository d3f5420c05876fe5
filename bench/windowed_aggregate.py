"""Benchmark: the windowed-aggregate job against a native floor of the same work, in the same Spark session.

Generates N events (default 20 million) for 1,000 keys over one day, arriving in time order with up to one
minute of disorder (``event_time = arrival - U(0, 60 s)``), as Parquet sorted by arrival with INT64
timestamps (what current writers produce; Spark's legacy INT96 has no row-group statistics, so an
incremental run could not skip old row groups by arrival time). Then, in one classic Spark session
(``local[2]`` by default), for each window kind (tumbling 5 min, sliding 10/5 min, session gap 2 min):

- first run: the job (``spark_jobs.windowed.run_request``, in-process) over all events, no state
  (watermark: bounded out-of-orderness of one minute), against its floor, the native
  ``groupBy(window|session_window, key).agg(count, sum)`` over the same Parquet, written as Parquet
  (target: ratio <= 1.25);
- incremental run: 1% new events appended (arriving after the first run's cut-off), the job with the first
  run's state, against its floor, the native read of just the new events (the same arrival filter, on the
  arrival column, which Parquet pushes down), the same group-by and write (target: ratio <= 2.0). Each call has
  new cut-offs, as every scheduled run does: the end of the arrival range one millisecond later (job and floor)
  and, for the job, the previous watermark one millisecond earlier (the new watermark comes from the events: the
  same in every call).

``--connect``: the same in a Spark Connect session instead, on a server of its own started like the embedded one
(the product's default run mode: the operators run the job as a client of it), job and floor both clients;
seconds only there (a Connect client has no status tracker to count Spark jobs), written to
``bench/results/windowed_aggregate_connect.json`` unless ``--output`` says otherwise.

Job and floor run alternately, each the best of ``--repeat`` (first runs) or ``--repeat-short`` (incremental runs,
about half a second each) after ``--warmup`` untimed calls of both (a warm JVM, as a long-lived Spark Connect server
is); the bench prints its seconds, Spark jobs and stages
(job and floor), the job's longest Spark jobs, writes ``bench/results/windowed_aggregate.json`` (or ``--output``)
and ends with ``ratio=<x>``, the ratio of the run worst against its target.

    python bench/windowed_aggregate.py --events 20000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from timing import Measured, compare, write_results

from airflow_provider_wm.contracts.jobs import CLASSIC_CONF
from airflow_provider_wm.core.windowing import Aggregate, AggregationSpec, BoundedOutOfOrderness
from airflow_provider_wm.core.windows import Session, Sliding, Tumbling, WindowFn
from spark_jobs.windowed import run_request as run_windowed

T0_MS = 1_767_225_600_000
DAY_MS = 86_400_000
MINUTE_MS = 60_000
FIRST_TARGET = 1.25
"""A first run's target: at most this many times the native group-by and write of the same events."""
INCREMENTAL_TARGET = 2.0
"""An incremental run's target: at most this many times the native read of just the new events (the same
arrival filter), group-by and write."""

VARIANTS: dict[str, tuple[WindowFn, Callable[[Column], Column]]] = {
    "tumbling 5 min": (Tumbling(5 * MINUTE_MS), lambda ts: F.window(ts, "5 minutes")),
    "sliding 10/5 min": (Sliding(10 * MINUTE_MS, 5 * MINUTE_MS), lambda ts: F.window(ts, "10 minutes", "5 minutes")),
    "session gap 2 min": (Session(2 * MINUTE_MS), lambda ts: F.session_window(ts, "2 minutes")),
}


def generate(spark: SparkSession, path: str, n: int, keys: int, first_id: int, start_ms: int, span_ms: int) -> None:
    """``n`` events with ids from ``first_id``, arriving evenly over ``[start_ms, start_ms + span_ms)``."""
    arrival = F.lit(start_ms) + (F.col("id") - first_id) * F.lit(span_ms) / F.lit(n)
    disorder = F.abs(F.hash(F.col("id"), F.lit(7))) % 60_000
    events = spark.range(first_id, first_id + n).select(
        F.concat(F.lit("k"), (F.abs(F.hash(F.col("id"))) % keys).cast("string")).alias("key"),
        F.timestamp_millis((arrival - disorder).cast("long")).alias("event_time"),
        (F.col("id") % 1000).alias("amount"),
        F.timestamp_millis(arrival.cast("long")).alias("ingested_at"),
    )
    events.write.mode("append").parquet(path)


def events_arguments(description: str | None) -> argparse.ArgumentParser:
    """The options of the benchmarks over :func:`generate`'s events (this one and ``rollup.py``)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--repeat-short",
        type=int,
        default=10,
        help="best of this many for the runs of about a second or less (incremental runs, the rollup): at that "
        "length the machine's noise outweighs what best-of-3 can smooth",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls of job and floor before timing")
    parser.add_argument("--driver-memory", default="6g")
    return parser


def events_session(args: argparse.Namespace, app_name: str) -> SparkSession:
    """The session both event benchmarks measure in: the given master and memory, 8 shuffle partitions,
    microsecond Parquet timestamps (INT64, as the events are written)."""
    spark = (
        SparkSession.builder.master(args.master)
        .appName(app_name)
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config(map=CLASSIC_CONF)  # as the operators submit the jobs
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(args: argparse.Namespace) -> tuple[SparkSession, Any]:
    """A Spark Connect session on a server of its own (``args.master``, the memory and settings of
    :func:`events_session`), and the server (``.stop()`` it)."""
    import socket

    from airflow_provider_wm.spark_connect_server import start_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = {
        "spark.driver.memory": args.driver_memory,
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    server = start_server(port, master=args.master, conf=conf)
    return SparkSession.builder.remote(server.url).create(), server


def compare_seconds(
    repeat: int, job: Callable[[], Any], floor: Callable[[], Any], warmup: int = 0
) -> tuple[Measured, Measured]:
    """:func:`timing.compare` for a Spark Connect session: job and floor alternately, each one's fastest call,
    seconds only (jobs and stages: ``-1``, not counted), after ``warmup`` untimed calls of both."""
    for _ in range(warmup):
        job()
        floor()
    best = {"job": float("inf"), "floor": float("inf")}
    for _ in range(repeat):
        for name, fn in (("job", job), ("floor", floor)):
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return Measured(best["job"], -1, -1), Measured(best["floor"], -1, -1)


def native_aggregate(
    spark: SparkSession,
    events: str,
    native: Callable[[Column], Column],
    out: str,
    arrival: tuple[int | None, int],
) -> None:
    """The native floor: ``groupBy(window|session_window, key).agg(count, sum)`` over the events whose arrival is
    in ``arrival = (after, until]`` (``after`` ``None``: no lower bound), the job's arrival filter, written as
    Parquet."""
    after, until = (None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC) for ms in arrival)
    arrived = F.col("ingested_at") <= F.lit(until)
    if after is not None:
        arrived = (F.col("ingested_at") > F.lit(after)) & arrived
    frame = spark.read.parquet(events).where(arrived)
    frame.groupBy(native(F.col("event_time")), "key").agg(
        F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")
    ).write.mode("overwrite").parquet(out)


def main() -> None:
    parser = events_arguments(__doc__)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    parser.add_argument("--output", type=Path, default=None, help="the JSON results (default bench/results/)")
    parser.add_argument("--connect", action="store_true", help="in a Spark Connect session (seconds only)")
    args = parser.parse_args()
    server = None
    if args.connect:
        spark, server = connect_session(args)
    else:
        spark = events_session(args, "bench-windowed-aggregate")

    def timed(job: Callable[[], Any], floor: Callable[[], Any], repeat: int) -> tuple[Measured, Measured]:
        if args.connect:
            return compare_seconds(repeat, job, floor, args.warmup)
        return compare(spark, repeat, job, floor, warmup=args.warmup)

    work = Path(tempfile.mkdtemp(prefix="bench-windows-"))
    try:
        events = str(work / "events")
        started = time.perf_counter()
        generate(spark, events, args.events, args.keys, 0, T0_MS, DAY_MS)
        print(f"generated {args.events:,} events in {time.perf_counter() - started:.1f}s under {work}")
        incremental = max(1, args.events // 100)
        first_until = T0_MS + DAY_MS
        generate(spark, str(work / "new"), incremental, args.keys, args.events, first_until, DAY_MS // 100)

        print(
            f"\n{'':<34} {'events':>11} {'job s':>7} {'jobs':>5} {'stages':>6}"
            f" {'floor s':>8} {'jobs':>5} {'stages':>6} {'ratio':>6} {'target':>7}"
        )
        runs: dict[str, dict[str, Any]] = {}
        jobs: dict[str, Measured] = {}
        for name in args.variants.split(","):
            window, native = VARIANTS[name]
            spec = AggregationSpec(
                window,
                (Aggregate("n", "count"), Aggregate("total", "sum", "amount")),
                keys=("key",),
                watermark=BoundedOutOfOrderness(MINUTE_MS),
            )
            tag = name.split()[0]
            variant_events = str(work / f"events-{tag}")
            shutil.copytree(events, variant_events)

            def request(version: int, until: int, arrival_from: int | None, previous: dict[str, Any], state_in: Any):
                return {
                    "pipeline": "bench",
                    "run_id": f"bench-{version}",
                    "version": version,
                    "spec": spec.to_json(),  # noqa: B023
                    "events": variant_events,  # noqa: B023
                    "event_time": "event_time",
                    "arrival_column": "ingested_at",
                    "arrival_from_ms": arrival_from,
                    "arrival_until_ms": until,
                    "previous_watermark_ms": previous.get("watermark_ms"),
                    "previous_max_event_time_ms": previous.get("max_event_time_ms"),
                    "source_watermark_ms": None,
                    "state_in": state_in,
                    "state_out": str(work / tag / f"state-{version}"),  # noqa: B023
                    "output": str(work / tag / "panes"),  # noqa: B023
                    "late_output": str(work / tag / "late"),  # noqa: B023
                    "round_out": str(work / tag / f"run-{version}"),  # noqa: B023
                }

            manifests: list[dict[str, Any]] = []

            def first_run() -> None:
                manifests.append(run_windowed(spark, request(1, first_until, None, {}, None)))  # noqa: B023

            def floor() -> None:
                native_aggregate(spark, variant_events, native, str(work / tag / "floor"), (None, first_until))  # noqa: B023

            floor()  # warm the file cache for both
            first_m, floor_m = timed(first_run, floor, args.repeat)
            first = manifests[-1]
            report(runs, f"{tag}_first", f"{name}, first run", args.events, first_m, floor_m, FIRST_TARGET)
            jobs[f"{tag}_first"] = first_m

            spark.read.parquet(str(work / "new")).write.mode("append").parquet(variant_events)
            previous = {"watermark_ms": first["watermark_ms"], "max_event_time_ms": first["max_event_time_ms"]}
            until = first_until + DAY_MS
            calls = {"job": 0, "floor": 0}  # each call's cut-offs move by a millisecond, as a scheduled run's do

            def incremental_run() -> None:
                calls["job"] += 1  # noqa: B023
                moved = {**previous, "watermark_ms": previous["watermark_ms"] - calls["job"]}  # noqa: B023
                run_windowed(
                    spark,
                    request(2, until + calls["job"], first_until, moved, first["state_path"]),  # noqa: B023
                )

            def incremental_floor() -> None:  # the same arrival filter: only the new 1%
                calls["floor"] += 1  # noqa: B023
                arrival = (first_until, until + calls["floor"])  # noqa: B023
                native_aggregate(spark, variant_events, native, str(work / tag / "floor-2"), arrival)  # noqa: B023

            incremental_floor()
            incr_m, incr_floor_m = timed(incremental_run, incremental_floor, args.repeat_short)
            key = f"{tag}_incremental"
            report(runs, key, f"{name}, incremental (1% new)", incremental, incr_m, incr_floor_m, INCREMENTAL_TARGET)
            runs[key]["of_first_run"] = incr_m.seconds / first_m.seconds
            jobs[key] = incr_m
            shutil.rmtree(variant_events, ignore_errors=True)
        for key, measured in jobs.items() if not args.connect else ():
            print(f"\n{runs[key]['label']}: the job's longest Spark jobs (last call)\n{measured.summary()}")
        headline = max(runs, key=lambda k: runs[k]["ratio"] / runs[k]["target"])
        document = {
            "mode": (
                f"job and floor as clients of a Spark Connect server, {args.master}; seconds only"
                if args.connect
                else f"job in-process (spark_jobs.windowed.run_request) on a classic session, {args.master}"
            ),
            "events": args.events,
            "keys": args.keys,
            "repeat": args.repeat,
            "repeat_short": args.repeat_short,
            "warmup": args.warmup,
            "runs": runs,
            "headline": headline,
            "worst_ratio": runs[headline]["ratio"],
        }
        name = "windowed_aggregate_connect" if args.connect else "windowed_aggregate"
        print(f"\nwrote {write_results(name, document, args.output)}")
        print(f"headline: {headline} (the worst ratio against its target)")
        print(f"ratio={runs[headline]['ratio']:.2f}")
    finally:
        spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(
    runs: dict[str, dict[str, Any]],
    key: str,
    label: str,
    events: int,
    job: Measured,
    floor: Measured,
    target: float,
) -> None:
    """Print one row of the table and add it to ``runs``."""
    ratio = job.seconds / floor.seconds
    runs[key] = {
        "label": label,
        "events": events,
        "job": job.as_dict(),
        "floor": floor.as_dict(),
        "ratio": ratio,
        "target": target,
        "met": ratio <= target,
    }

    def counted(n: int) -> str:  # -1: not counted (Spark Connect)
        return str(n) if n >= 0 else "-"

    print(
        f"{label:<34} {events:>11,} {job.seconds:>7.2f} {counted(job.jobs):>5} {counted(job.stages):>6}"
        f" {floor.seconds:>8.2f} {counted(floor.jobs):>5} {counted(floor.stages):>6} {ratio:>6.2f}"
        f" {'<= ' + format(target, 'g'):>7}"
    )


if __name__ == "__main__":
    main()
