"""Benchmark: an hourly rollup of 5-minute panes (window propagation) against the native rollup of those panes.

Generates N events (default 20 million) for 1,000 keys over one day with ``windowed_aggregate.generate`` (the
windowed benchmark's events: time order with up to one minute of disorder, Parquet, INT64 timestamps). Then, in
one classic Spark session (``local[2]`` by default), the jobs in-process (``spark_jobs.windowed.run_request``):

- the 5-minute aggregate: the job's run (version 1) over all events, tumbling 5 min, ``count`` and
  ``sum(amount)`` per key, accumulating; the store's watermark is the end of the day, so every window is
  complete and fires ON_TIME once (about 289,000 panes: 1,000 keys x the day's 288 windows, and for nearly every
  key the 5 minutes before the day, which the disorder reaches); for reference, against the native
  ``groupBy(window(event_time, "5 minutes"), key).agg(count, sum)`` written as Parquet;
- the hourly rollup: the job with ``upstream`` set (tumbling 1 h over those panes, ``sum`` of the upstream's
  columns), reading upstream versions ``(0, 1]`` of the pane folder, the watermark at the end of the day; each
  call with a fresh state, live and output folder and a watermark one millisecond later than the call before (as
  every scheduled run has new cut-offs: the job's stages must not compile again for them; the outputs stay the
  same); against its floor, the native rollup: read the panes,
  ``groupBy(hour, key).agg(sum)``, write (target: ratio <= 2.0); and, for reference, against the pick written
  natively: each upstream window's live pane picked first (``max_by`` over the rank the job uses: upstream run,
  pane index, a retraction before the pane that replaces it), as a rollup run with live panes stored must (this
  first run has none: it needs no pick unless a pane row repeats an upstream window), then the sum per hour and
  the write.

``--connect``: the same in a Spark Connect session instead, on a server of its own started like the embedded one
(the product's default run mode: the operators run the job as a client of it), job and floor both clients;
seconds only there (a Connect client has no status tracker to count Spark jobs), written to
``bench/results/rollup_connect.json`` unless ``--output`` says otherwise.

Job and floor run alternately, each the best of ``--repeat`` (the 5-minute aggregate) or ``--repeat-short`` (the
rollups, under a second each) after ``--warmup`` untimed calls of both (a warm JVM, as a long-lived Spark Connect
server is; here 50 by default: in a new JVM both keep getting faster for about fifty calls, the rollup's best of
ten calls from 0.71 s (its first ten) to 0.36 s (calls 51-60), the native rollup's from 0.31 s to 0.19 s, and their
ratio of the ten calls after ten untimed ones, 2.07, was 1.84-1.98 from the fiftieth call on); the bench prints
its seconds, Spark jobs and stages (job and floor), the rows each run read (the manifests' ``events_read``: events
vs panes), the job's longest Spark jobs, checks that the rollup's revenue summed over all hourly panes equals
``sum(amount)`` over all events, writes ``bench/results/rollup.json`` (or ``--output``) and ends with
``ratio=<rollup / native rollup>``.

    python bench/rollup.py --events 20000000
    python bench/rollup.py --connect
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from timing import Measured, compare, write_results
from windowed_aggregate import (
    DAY_MS,
    T0_MS,
    compare_seconds,
    connect_session,
    events_arguments,
    events_session,
    generate,
)

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
ROLLUP_TARGET = 2.0
"""The rollup's target: at most this many times the native rollup (read the panes, group by hour, write)."""
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


def row(label: str, rows_read: int, job: Measured, floor: Measured, target: float | None) -> dict[str, Any]:
    """One run of the results: the job and its floor, their ratio, and the target (None: for reference)."""
    ratio = job.seconds / floor.seconds
    return {
        "label": label,
        "rows_read": rows_read,
        "job": job.as_dict(),
        "floor": floor.as_dict(),
        "ratio": ratio,
        "target": target,
        "met": None if target is None else ratio <= target,
    }


def main() -> None:
    parser = events_arguments(__doc__)
    parser.add_argument("--output", type=Path, default=None, help="the JSON results (default bench/results/)")
    parser.add_argument("--connect", action="store_true", help="in a Spark Connect session (seconds only)")
    parser.set_defaults(warmup=50)  # the rollups' code paths warm for about fifty calls (module docstring)
    args = parser.parse_args()
    server = None
    if args.connect:
        spark, server = connect_session(args)
    else:
        spark = events_session(args, "bench-rollup")

    def timed(
        job: Callable[[], Any], floor: Callable[[], Any], repeat: int, warmup: int = 0
    ) -> tuple[Measured, Measured]:
        if args.connect:
            return compare_seconds(repeat, job, floor, warmup)
        return compare(spark, repeat, job, floor, warmup=warmup)

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

        def rollup() -> None:  # fresh state, live and output folders each time, and a new watermark
            call = next(rollups)
            base = work / f"agg1h-{call}"
            hourly = request(
                base, "agg1h", ROLLUP, five["output"], event_time="window_start", arrival_column=None,
                arrival_from_ms=0, arrival_until_ms=1, live_in=None, live_out=str(base / "live"),
                source_watermark_ms=T0_MS + DAY_MS + call,
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

        def native_pick() -> None:  # each upstream window's live pane first, as a run with live panes stored does
            panes = spark.read.parquet(five["output"]).where("CAST(wm_run AS INT) <= 1")
            retraction = F.col("retraction")
            rank = (
                F.col("wm_run").cast("long") * F.lit(2**32)
                + F.col("pane_index") * 4
                + F.when(retraction, 0).otherwise(2)
            )
            live = panes.groupBy("key", "window_start", "window_end").agg(
                *[F.max_by(c, rank).alias(c) for c in ("orders", "revenue", "retraction")]
            )
            hour = F.col("window_start") - F.pmod(F.col("window_start"), F.lit(3_600_000))
            live.where(~retraction).groupBy(hour.alias("hour"), "key").agg(
                F.sum("orders"), F.sum("revenue")
            ).write.mode("overwrite").parquet(str(work / "native_pick"))

        baseline()  # warm the file cache (and the JVM) for all
        aggregate_m, baseline_m = timed(aggregate, baseline, args.repeat)
        rollup_m, native_m = timed(rollup, native_rollup, args.repeat_short, args.warmup)
        pick_job_m, pick_m = timed(rollup, native_pick, args.repeat_short, args.warmup)

        pane_rows = manifests["rollup"]["totals"]["events_read"]
        runs = {
            "rollup": row("hourly rollup of the 5-min panes", pane_rows, rollup_m, native_m, ROLLUP_TARGET),
            "aggregate": row("5-min aggregate (reference)", args.events, aggregate_m, baseline_m, None),
            "rollup_vs_native_pick": row("rollup vs a native pick (reference)", pane_rows, pick_job_m, pick_m, None),
        }
        print(
            f"\n{'':<34} {'rows read':>11} {'job s':>7} {'jobs':>5} {'stages':>6}"
            f" {'floor s':>8} {'jobs':>5} {'stages':>6} {'ratio':>6} {'target':>7}"
        )
        for r in runs.values():
            job, floor, target = r["job"], r["floor"], r["target"]
            print(
                f"{r['label']:<34} {r['rows_read']:>11,} {job['seconds']:>7.2f} {job['jobs']:>5} {job['stages']:>6}"
                f" {floor['seconds']:>8.2f} {floor['jobs']:>5} {floor['stages']:>6} {r['ratio']:>6.2f}"
                f" {'<= ' + format(target, 'g') if target else '':>7}"
            )
        of_aggregate = rollup_m.seconds / aggregate_m.seconds
        print(f"rollup / 5-min aggregate: {of_aggregate:.1%}; native rollup / native 5-min aggregate: "
              f"{native_m.seconds / baseline_m.seconds:.1%}")  # fmt: skip
        for label, measured in (
            (("hourly rollup", rollup_m), ("5-min aggregate", aggregate_m)) if not args.connect else ()
        ):
            print(f"\n{label}: the job's longest Spark jobs (last call)\n{measured.summary()}")

        rolled = spark.read.parquet(manifests["rollup"]["output"]).where("NOT retraction")
        hourly = rolled.agg(F.sum("revenue"), F.sum("orders"), F.count(F.lit(1))).collect()[0]  # one row: small
        source = spark.read.parquet(events).agg(F.sum("amount"), F.count(F.lit(1))).collect()[0]  # one row: small
        assert (hourly[0], hourly[1]) == (source[0], source[1]), (hourly, source)
        print(
            f"check: sum(revenue) over {hourly[2]:,} hourly panes = {hourly[0]:,} = sum(amount) over "
            f"{source[1]:,} events (orders: {hourly[1]:,})"
        )
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
            "rollup_of_aggregate": of_aggregate,
            "headline": "rollup",
            "worst_ratio": runs["rollup"]["ratio"],
        }
        name = "rollup_connect" if args.connect else "rollup"
        print(f"\nwrote {write_results(name, document, args.output)}")
        print(f"ratio={runs['rollup']['ratio']:.2f}")
    finally:
        spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
