"""Benchmark: the controller-watermark job against a native floor of the same work, in the same Spark session.

Generates N writer marks (10,000 writers over 4 streams, 64 segments per stream: 32 of epoch 0, 16 of
which split into 32 of epoch 1 halfway through), then in one classic Spark session (``local[2]`` by default):

- round 1: the job over all N marks (no prior state);
- round 2: a steady-state round over N/10 newer marks, with round 1's state.

The floor of each round is what any implementation must compute, written natively: the round's marks (by
``reported_at_ms``) and the previous writers' state; per (stream, writer) the latest mark by reported time
(``max_by``), written as the new writers' state; per stream the min of the writers' times; per (stream,
segment) the max offset over the writers' exploded positions. It does not validate, quarantine, time writers
out or order sequences: the job's extra work over it is what the ratio shows. Job and floor run alternately
(``timing.compare``), each call with the round's ``now`` (and the previous round's) a millisecond later than the
call before, as every scheduled round has new bounds (the same marks: they are reported 50 ms into a step), so
both pay what a new bound costs (Spark compiles the code it generates for it). Each run prints its seconds
(best of ``--repeat``), Spark jobs and stages, and the job's longest Spark jobs, writes
``bench/results/controller_watermark.json`` (or ``--output``, with every Spark job of the job's fastest call: its
call site and seconds) and ends with ``ratio=<the worst job/floor ratio of the two rounds>``. Optionally a fraction
of bad rows (negative times) exercises the quarantine path.

With DuckDB installed (the ``bench`` extra), each round also runs the floor's work in DuckDB over the same Parquet
(:func:`duckdb_round`, as many threads as the master has cores) after the Spark calls: the single-node limit of
that work, reported beside the floor (no target); its watermarks and cuts must equal the Spark floor's.

With ``--sequenced`` every mark carries a sequence number (origin = writer, one chunk per sequence), and
10% of round 1's marks (every other mark of its last fifth) are uploaded late, in round 2's window: round
1 applies each writer's gap-free prefix and keeps the rest waiting in its state; round 2 fills the gaps.

    python bench/controller_watermark.py --marks 10000000 --bad-fraction 0.001
    python bench/controller_watermark.py --marks 10000000 --sequenced
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from timing import best_of, compare, write_results

from airflow_provider_wm.contracts import ControllerRequest
from airflow_provider_wm.contracts.jobs import CLASSIC_CONF
from spark_jobs.controller import run as run_round

T0 = 1_767_225_600_000
STEP_MS = 1_000
STREAMS = 4
SEGMENTS_PER_EPOCH = 32
SPLIT = 16
EPOCH1 = 1 << 32


def segments(spark: SparkSession) -> DataFrame:
    rows = []
    for s in range(STREAMS):
        for i in range(SEGMENTS_PER_EPOCH):
            rows.append((f"s{s}", i, i / SEGMENTS_PER_EPOCH, (i + 1) / SEGMENTS_PER_EPOCH))
        for i in range(SPLIT):
            mid = (i + 0.5) / SEGMENTS_PER_EPOCH
            rows.append((f"s{s}", EPOCH1 | (32 + 2 * i), i / SEGMENTS_PER_EPOCH, mid))
            rows.append((f"s{s}", EPOCH1 | (32 + 2 * i + 1), mid, (i + 1) / SEGMENTS_PER_EPOCH))
    return spark.createDataFrame(rows, "stream string, segment_id long, key_start double, key_end double")


def marks(
    spark: SparkSession,
    n: int,
    writers: int,
    first_step: int,
    split_step: int,
    bad_fraction: float,
    sequenced: bool = False,
    late_to_step: int | None = None,
) -> DataFrame:
    """``n`` marks: writer ``id % writers`` reports step ``first_step + id // writers``.

    ``sequenced``: sequence number ``step + 1`` per writer; every other mark of the last fifth of the steps
    is reported at ``late_to_step`` (late, in the next round) when given."""
    w = F.col("id") % writers
    step = F.lit(first_step) + (F.col("id") / writers).cast("long")
    base = w % SEGMENTS_PER_EPOCH
    split = (base < SPLIT) & (step >= split_step)
    seg_a = F.when(split, F.lit(EPOCH1) + 32 + 2 * base).otherwise(base)
    seg_b = F.when(split, F.lit(EPOCH1) + 33 + 2 * base).otherwise((base + 1) % SEGMENTS_PER_EPOCH)
    bad_every = int(1 / bad_fraction) if bad_fraction else 0
    time_ms = F.lit(T0) + step * STEP_MS + (w % 7)
    if bad_every:
        time_ms = F.when(F.col("id") % bad_every == bad_every - 1, F.lit(-1)).otherwise(time_ms)
    reported = F.lit(T0) + step * STEP_MS + 50
    if sequenced and late_to_step is not None:
        last_fifth = step >= F.lit(first_step + (n // writers) * 4 // 5)
        late = last_fifth & (step % 2 == 0)
        reported = F.when(late, F.lit(T0 + late_to_step * STEP_MS + 50)).otherwise(reported)
    columns = [
        F.concat(F.lit("s"), (w % STREAMS).cast("string")).alias("stream"),
        F.concat(F.lit("writer-"), w.cast("string")).alias("writer_id"),
        time_ms.alias("time_ms"),
        F.create_map(
            seg_a.cast("long"), (step * 10).cast("long"), seg_b.cast("long"), (step * 10 + 5).cast("long")
        ).alias("position"),
        F.when(F.col("id") % 97 == 0, F.lit("commit")).otherwise(F.lit("note")).alias("kind"),
        reported.alias("reported_at_ms"),
    ]
    if sequenced:
        columns += [
            F.concat(F.lit("writer-"), w.cast("string")).alias("origin_id"),
            (step + 1).alias("seq"),
            F.lit(1).cast("long").alias("chunk"),
            F.lit(True).alias("last_chunk"),
        ]
    return spark.range(n).select(*columns)


FLOOR_COLUMNS = ("stream", "writer_id", "time_ms", "position", "reported_at_ms")
"""What the floor reads of a mark (and of the writers' state)."""


def floor_round(
    spark: SparkSession, marks_path: str, lo: int | None, hi: int, state_in: str | None, out: str
) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """The native floor of one round (see the module docstring): the watermark per stream and the stream cut per
    (stream, segment) that the driver reads."""
    reported = F.col("reported_at_ms")
    in_round = spark.read.parquet(marks_path).where(
        (reported <= hi) & (reported > lo) if lo is not None else reported <= hi
    )
    candidates = in_round.select(*FLOOR_COLUMNS)
    if state_in is not None:
        candidates = candidates.unionByName(spark.read.parquet(state_in).select(*FLOOR_COLUMNS))
    latest = candidates.groupBy("stream", "writer_id").agg(
        F.max_by(F.struct("time_ms", "position", "reported_at_ms"), "reported_at_ms").alias("m")
    )
    latest.select("stream", "writer_id", "m.*").write.mode("overwrite").parquet(out)
    writers = spark.read.parquet(out)
    watermarks = writers.groupBy("stream").agg(F.min("time_ms")).collect()  # small: one row per stream
    offsets = writers.select("stream", F.explode("position").alias("segment_id", "offset"))
    cuts = offsets.groupBy("stream", "segment_id").agg(F.max("offset")).collect()  # small: a row per segment
    return {r[0]: r[1] for r in watermarks}, {(r[0], r[1]): r[2] for r in cuts}


def duckdb_round(
    connection: Any, marks_path: str, lo: int | None, hi: int, state_in: str | None, out: str
) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """:func:`floor_round` in DuckDB over the same Parquet (the single-node limit of the same work, for reference):
    the latest mark per writer (``max_by``) written as Parquet, then read back for the watermarks and the cuts."""
    columns = ", ".join(FLOOR_COLUMNS)
    bound = f"reported_at_ms <= {hi}" + ("" if lo is None else f" AND reported_at_ms > {lo}")
    candidates = f"SELECT {columns} FROM read_parquet('{marks_path}/*.parquet') WHERE {bound}"
    if state_in is not None:
        candidates += f" UNION ALL SELECT {columns} FROM read_parquet('{state_in}/*.parquet')"
    shutil.rmtree(out, ignore_errors=True)
    Path(out).mkdir(parents=True)
    connection.execute(
        f"COPY (SELECT stream, writer_id, m.time_ms, m.position, m.reported_at_ms FROM (SELECT stream, writer_id, "
        f"max_by({{'time_ms': time_ms, 'position': position, 'reported_at_ms': reported_at_ms}}, reported_at_ms) "
        f"AS m FROM ({candidates}) GROUP BY stream, writer_id)) TO '{out}/part-0.parquet' (FORMAT parquet)"
    )
    written = f"read_parquet('{out}/*.parquet')"
    watermarks = connection.execute(f"SELECT stream, min(time_ms) FROM {written} GROUP BY stream").fetchall()
    cuts = connection.execute(
        f"SELECT stream, segment_id, max(offset_) FROM (SELECT stream, unnest(map_keys(position)) AS segment_id, "
        f"unnest(map_values(position)) AS offset_ FROM {written}) GROUP BY stream, segment_id"
    ).fetchall()
    return {r[0]: r[1] for r in watermarks}, {(r[0], r[1]): r[2] for r in cuts}


def duckdb_connection(master: str) -> Any:
    """A DuckDB connection with as many threads as ``master`` has cores (``local[2]``: 2), or ``None`` when DuckDB
    is not installed (``pip install -e '.[bench]'``)."""
    try:
        import duckdb
    except ImportError:
        return None
    cores = re.fullmatch(r"local\[(\d+)\]", master)
    threads = int(cores.group(1)) if cores else 1 if master == "local" else os.cpu_count() or 1
    return duckdb.connect(config={"threads": threads})


def duckdb_reference(
    connection: Any,
    repeat: int,
    expected: tuple[dict[str, int], dict[tuple[str, int], int]],
    marks_path: str,
    lo: int | None,
    hi: int,
    work: Path,
    key: str,
    previous: str | None,
) -> dict[str, Any]:
    """The best of ``repeat`` calls of :func:`duckdb_round` after an untimed one whose watermarks and cuts must equal
    the Spark floor's (``expected``)."""
    state_in = None if previous is None else str(work / "duckdb" / previous)
    out = str(work / "duckdb" / key)
    outputs = duckdb_round(connection, marks_path, lo, hi, state_in, out)
    if outputs != expected:
        raise SystemExit(f"the DuckDB floor of {key} differs from the Spark floor: {outputs} != {expected}")
    seconds = best_of(repeat, lambda: duckdb_round(connection, marks_path, lo, hi, state_in, out))
    threads = connection.execute("SELECT current_setting('threads')").fetchone()[0]
    return {"seconds": seconds, "threads": int(threads), "version": connection.execute("PRAGMA version").fetchone()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--marks", type=int, default=10_000_000)
    parser.add_argument("--writers", type=int, default=10_000)
    parser.add_argument("--bad-fraction", type=float, default=0.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--sequenced", action="store_true", help="sequence numbers, 10%% of marks late by a round")
    parser.add_argument("--output", type=Path, default=None, help="the JSON results (default bench/results/)")
    args = parser.parse_args()

    spark = (
        SparkSession.builder.master(args.master)
        .appName("bench-controller-watermark")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=CLASSIC_CONF)  # as the operators submit the jobs
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    try:
        steps = args.marks // args.writers
        marks_path, segments_path = str(work / "marks"), str(work / "segments")
        segments(spark).write.parquet(segments_path)
        started = time.perf_counter()
        second = args.marks // 10
        late_to = steps + 1 if args.sequenced else None
        marks(spark, args.marks, args.writers, 0, steps // 2, args.bad_fraction, args.sequenced, late_to).write.parquet(
            marks_path
        )
        marks(spark, second, args.writers, steps, steps // 2, args.bad_fraction, args.sequenced).write.mode(
            "append"
        ).parquet(marks_path)
        print(f"generated {args.marks + second:,} marks in {time.perf_counter() - started:.1f}s under {work}")

        now1 = T0 + steps * STEP_MS
        now2 = T0 + (steps + second // args.writers) * STEP_MS
        label = " sequenced" if args.sequenced else ""
        rounds = [
            ("round_1", f"round 1 (no state){label}", None, now1, args.marks),
            ("round_2", f"round 2 (steady state){label}", now1, now2, second),
        ]
        results: dict[str, dict[str, Any]] = {}
        floor_outputs: dict[str, tuple[dict[str, int], dict[tuple[str, int], int]]] = {}
        duckdb = duckdb_connection(args.master)
        if duckdb is None:
            print("DuckDB is not installed (pip install -e '.[bench]'): no DuckDB floor")
        print(
            f"\n{'':<34} {'marks':>12} {'job s':>7} {'jobs':>5} {'stages':>6}"
            f" {'floor s':>8} {'jobs':>5} {'stages':>6} {'ratio':>6}"
        )
        for key, name, processed_until, now, n in rounds:
            previous = None if processed_until is None else "round_1"
            calls = itertools.count()  # each call a millisecond later: the same marks (reported 50 ms into a step)

            def floor(lo=processed_until, hi=now, key=key, previous=previous, calls=calls) -> None:
                state_in = None if previous is None else str(work / "floor" / previous)
                shift = next(calls)
                lo = None if lo is None else lo + shift
                floor_outputs[key] = floor_round(spark, marks_path, lo, hi + shift, state_in, str(work / "floor" / key))

            def job(key=key, pu=processed_until, previous=previous, now=now, calls=calls) -> None:
                shift = next(calls)
                run_round(
                    spark,
                    ControllerRequest(
                        controller="bench",
                        run_id="bench",
                        marks_path=marks_path,
                        segments_path=segments_path,
                        state_in=None if previous is None else str(work / "job" / previous / "state"),
                        state_out=str(work / "job" / key / "state"),
                        round_out=str(work / "job" / key / "out"),
                        now_ms=now + shift,
                        processed_until_ms=None if pu is None else pu + shift,
                        writer_timeout_ms=600_000,
                        initial_delay_ms=0,
                    ),
                )

            floor()  # warm the file cache for both
            job_m, floor_m = compare(spark, args.repeat, job, floor)
            ratio = job_m.seconds / floor_m.seconds
            results[key] = {"marks": n, "job": job_m.as_dict(), "floor": floor_m.as_dict(), "ratio": ratio}
            print(
                f"{name:<34} {n:>12,} {job_m.seconds:>7.2f} {job_m.jobs:>5} {job_m.stages:>6}"
                f" {floor_m.seconds:>8.2f} {floor_m.jobs:>5} {floor_m.stages:>6} {ratio:>6.2f}"
            )
            print(job_m.summary())
            if duckdb is not None:  # for reference, after the Spark calls: none of them shares the cores with it
                reference = duckdb_reference(
                    duckdb, args.repeat, floor_outputs[key], marks_path, processed_until, now, work, key, previous
                )
                results[key]["duckdb"] = reference
                print(
                    f"    DuckDB floor {reference['seconds']:.2f}s ({reference['threads']} threads): job / DuckDB "
                    f"{job_m.seconds / reference['seconds']:.2f}, floor / DuckDB "
                    f"{floor_m.seconds / reference['seconds']:.2f}"
                )
        worst = max(r["ratio"] for r in results.values())
        document = {
            "mode": f"classic session, {args.master}",
            "marks": args.marks,
            "writers": args.writers,
            "sequenced": args.sequenced,
            "bad_fraction": args.bad_fraction,
            "repeat": args.repeat,
            "rounds": results,
            "worst_ratio": worst,
        }
        name = "controller_watermark_sequenced" if args.sequenced else "controller_watermark"
        print(f"wrote {write_results(name, document, args.output)}")
        print(f"ratio={worst:.2f}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
