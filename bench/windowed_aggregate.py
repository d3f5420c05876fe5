"""Benchmark: the windowed-aggregate job vs a bare ``groupBy(window(...), key).agg(...)`` plus write.

Generates N events (default 20 million) for 1,000 keys over one day, arriving in time order with up to one
minute of disorder (``event_time = arrival - U(0, 60 s)``), as Parquet sorted by arrival with INT64
timestamps (what current writers produce; Spark's legacy INT96 has no row-group statistics, so an
incremental run could not skip old row groups by arrival time). Then, in one Spark
session (``local[2]`` by default), for each window kind (tumbling 5 min, sliding 10/5 min, session gap
2 min):

- the job's first run over all events (no state; watermark: bounded out-of-orderness of one minute);
- the native baseline over the same Parquet: ``groupBy(window|session_window, key).agg(count, sum)``
  written as Parquet;
- an incremental run over 1% new events (appended, arriving after the first run's cut-off) with the
  first run's state, and its time as a fraction of the first run's.

Prints the times, the ratio job/baseline (target <= 1.25) and the incremental fraction (target <= 10%),
best of ``--repeat`` runs each.

    python bench/windowed_aggregate.py --events 20000000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from timing import best_of

from airflow_provider_wm.core.windowing import Aggregate, AggregationSpec, BoundedOutOfOrderness
from airflow_provider_wm.core.windows import Session, Sliding, Tumbling, WindowFn
from spark_jobs.windowed import run_request as run_windowed

T0_MS = 1_767_225_600_000
DAY_MS = 86_400_000
MINUTE_MS = 60_000

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
    parser.add_argument("--repeat", type=int, default=2)
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
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = events_arguments(__doc__)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of the variants")
    args = parser.parse_args()
    spark = events_session(args, "bench-windowed-aggregate")
    work = Path(tempfile.mkdtemp(prefix="bench-windows-"))
    try:
        events = str(work / "events")
        started = time.perf_counter()
        generate(spark, events, args.events, args.keys, 0, T0_MS, DAY_MS)
        print(f"generated {args.events:,} events in {time.perf_counter() - started:.1f}s under {work}")
        incremental = max(1, args.events // 100)
        first_until = T0_MS + DAY_MS
        generate(spark, str(work / "new"), incremental, args.keys, args.events, first_until, DAY_MS // 100)

        print(f"\n{'':<20} {'events':>12} {'job s':>8} {'baseline s':>11} {'ratio':>7} {'incr. s':>8} {'incr/1st':>9}")
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

            def baseline() -> None:
                frame = spark.read.parquet(variant_events)  # noqa: B023
                frame.groupBy(native(F.col("event_time")), "key").agg(  # noqa: B023
                    F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")
                ).write.mode("overwrite").parquet(str(work / tag / "baseline"))  # noqa: B023

            baseline()  # warm the file cache for both
            job_s = best_of(args.repeat, first_run)
            base_s = best_of(args.repeat, baseline)
            first = manifests[-1]
            spark.read.parquet(str(work / "new")).write.mode("append").parquet(variant_events)
            previous = {"watermark_ms": first["watermark_ms"], "max_event_time_ms": first["max_event_time_ms"]}

            def incremental_run() -> None:
                run_windowed(
                    spark,
                    request(2, first_until + DAY_MS, first_until, previous, first["state_path"]),  # noqa: B023
                )

            incr_s = best_of(args.repeat, incremental_run)
            print(
                f"{name:<20} {args.events:>12,} {job_s:>8.2f} {base_s:>11.2f} {job_s / base_s:>7.2f} "
                f"{incr_s:>8.2f} {incr_s / job_s:>8.1%}"
            )
            shutil.rmtree(variant_events, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
