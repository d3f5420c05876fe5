"""Benchmark: an hourly rollup of 5-minute panes (window propagation) vs the 5-minute aggregate it reads.

Generates N events (default 20 million) for 1,000 keys over one day with ``windowed_aggregate.generate`` (the
windowed benchmark's events: time order with up to one minute of disorder, Parquet, INT64 timestamps). Then, in
one Spark session (``local[2]`` by default):

- the 5-minute aggregate: the job's run (version 1) over all events, tumbling 5 min, ``count`` and
  ``sum(amount)`` per key, accumulating; the store's watermark is the end of the day, so every window is
  complete and fires ON_TIME once (about 289,000 panes: 1,000 keys x the day's 288 windows, and for nearly every
  key the 5 minutes before the day, which the disorder reaches);
- the native baseline, for context: ``groupBy(window(event_time, "5 minutes"), key).agg(count, sum)`` written
  as Parquet;
- the native rollup, the floor of any Spark run over those panes: read them, ``groupBy(hour, key).agg(sum)``,
  write;
- the hourly rollup: the job with ``upstream`` set (tumbling 1 h over those panes, ``sum`` of the upstream's
  columns), reading upstream versions ``(0, 1]`` of the pane folder, the watermark at the end of the day; each
  repeat with a fresh state, live and output folder.

Prints the times (best of ``--repeat``), the rows each run read (the manifests' ``events_read``: events vs
panes), the ratio rollup / 5-minute aggregate (target <= 5%: the rollup reads panes, not events), the same
ratio for the native rollup and the rollup / native rollup ratio, and checks
that the rollup's revenue summed over all hourly panes equals ``sum(amount)`` over all events.

    python bench/rollup.py --events 20000000
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from timing import best_of
from windowed_aggregate import DAY_MS, T0_MS, events_arguments, events_session, generate

from airflow_provider_wm.core.windowing import (
    Accumulation,
    Aggregate,
    AggregationSpec,
    StoreWatermark,
    UpstreamPanes,
)
from airflow_provider_wm.core.windows import Tumbling
from spark_jobs.windowed import run_request as run_windowed

FIVE_MINUTES = Tumbling(300_000)
AGGREGATE = AggregationSpec(
    FIVE_MINUTES,
    (Aggregate("orders", "count"), Aggregate("revenue", "sum", "amount")),
    keys=("key",),
    watermark=StoreWatermark("events"),
    accumulation=Accumulation.ACCUMULATING,
)
ROLLUP = AggregationSpec(
    Tumbling(3_600_000),
    (Aggregate("orders", "sum", "orders"), Aggregate("revenue", "sum", "revenue")),
    keys=("key",),
    watermark=StoreWatermark("events_5m"),
    upstream=UpstreamPanes("agg5m", FIVE_MINUTES, Accumulation.ACCUMULATING),
)


def request(base: Path, name: str, spec: AggregationSpec, events: str, **fields: Any) -> dict[str, Any]:
    """A version-1 run of pipeline ``name`` with its folders under ``base``, the store's watermark at the end of
    the day (the Pipeline and Rollup requests of tests/spark_jobs/test_windowed_aggregate.py)."""
    return {
        "pipeline": name,
        "run_id": f"{name}-1",
        "version": 1,
        "spec": spec.to_json(),
        "events": events,
        "source_watermark_ms": T0_MS + DAY_MS,
        "state_in": None,
        "state_out": str(base / "state"),
        "output": str(base / "panes"),
        "late_output": str(base / "late"),
        "round_out": str(base / "run"),
        **fields,
    }


def main() -> None:
    parser = events_arguments(__doc__)
    parser.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True, help="time the native one")
    args = parser.parse_args()
    spark = events_session(args, "bench-rollup")
    work = Path(tempfile.mkdtemp(prefix="bench-rollup-"))
    try:
        events = str(work / "events")
        started = time.perf_counter()
        generate(spark, events, args.events, args.keys, 0, T0_MS, DAY_MS)
        print(f"generated {args.events:,} events in {time.perf_counter() - started:.1f}s under {work}")

        five = request(
            work / "agg5m", "agg5m", AGGREGATE, events, event_time="event_time", arrival_column="ingested_at",
            arrival_from_ms=None, arrival_until_ms=T0_MS + DAY_MS,
        )  # fmt: skip
        manifests: dict[str, dict[str, Any]] = {}
        rollups = itertools.count()

        def aggregate() -> None:  # overwrites its own wm_run=1 partition and state each time
            manifests["aggregate"] = run_windowed(spark, five)

        def rollup() -> None:  # fresh state, live and output folders each time
            base = work / f"agg1h-{next(rollups)}"
            hourly = request(
                base, "agg1h", ROLLUP, five["output"], event_time="window_start", arrival_column=None,
                arrival_from_ms=0, arrival_until_ms=1, live_in=None, live_out=str(base / "live"),
            )  # fmt: skip
            manifests["rollup"] = run_windowed(spark, hourly)

        def baseline() -> None:
            spark.read.parquet(events).groupBy(F.window("event_time", "5 minutes"), "key").agg(
                F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("revenue")
            ).write.mode("overwrite").parquet(str(work / "baseline"))

        def native_rollup() -> None:  # the floor for any rollup of the panes: read, group by hour, write
            panes = spark.read.parquet(five["output"])
            hour = F.col("window_start") - F.pmod(F.col("window_start"), F.lit(3_600_000))
            panes.groupBy(hour.alias("hour"), "key").agg(F.sum("orders"), F.sum("revenue")).write.mode(
                "overwrite"
            ).parquet(str(work / "native_rollup"))

        baseline()  # warm the file cache (and the JVM) for all
        aggregate_s = best_of(args.repeat, aggregate)
        baseline_s = best_of(args.repeat, baseline) if args.baseline else None
        rollup_s = best_of(args.repeat, rollup)
        native_rollup_s = best_of(args.repeat, native_rollup)

        print(f"\n{'':<22} {'rows read':>12} {'ON_TIME panes':>14} {'best s':>8}")
        for label, key, seconds in (
            ("5-min aggregate", "aggregate", aggregate_s),
            ("hourly rollup", "rollup", rollup_s),
        ):
            totals = manifests[key]["totals"]
            print(f"{label:<22} {totals['events_read']:>12,} {totals['panes']['ON_TIME']:>14,} {seconds:>8.2f}")
        if baseline_s is not None:
            print(f"{'native 5-min baseline':<22} {args.events:>12,} {'':>14} {baseline_s:>8.2f}")
        pane_rows = manifests["rollup"]["totals"]["events_read"]
        print(f"{'native hourly rollup':<22} {pane_rows:>12,} {'':>14} {native_rollup_s:>8.2f}")
        print(f"\nrollup / 5-min aggregate: {rollup_s / aggregate_s:.1%} (target <= 5%)")
        print(
            f"native rollup / 5-min aggregate: {native_rollup_s / aggregate_s:.1%} (the floor of any Spark rollup run)"
        )
        print(f"rollup / native rollup: {rollup_s / native_rollup_s:.2f}x")

        rolled = spark.read.parquet(manifests["rollup"]["output"]).where("NOT retraction")
        hourly = rolled.agg(F.sum("revenue"), F.sum("orders"), F.count(F.lit(1))).collect()[0]  # one row: small
        source = spark.read.parquet(events).agg(F.sum("amount"), F.count(F.lit(1))).collect()[0]  # one row: small
        assert (hourly[0], hourly[1]) == (source[0], source[1]), (hourly, source)
        print(
            f"check: sum(revenue) over {hourly[2]:,} hourly panes = {hourly[0]:,} = sum(amount) over "
            f"{source[1]:,} events (orders: {hourly[1]:,})"
        )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
