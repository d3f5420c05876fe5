"""``late_data="window_end"`` against Spark Structured Streaming itself.

The same events go through a streaming query (``withWatermark``, a windowed ``groupBy``, append mode, one
Parquet file per micro-batch, ``availableNow``) and through ``core.windowing.run``, one run per micro-batch
(the last one has no data), each fed the watermark Spark reports for that micro-batch. Spark evicts (emits)
a window with that watermark and drops late rows by the previous micro-batch's, which is exactly a run's
firing watermark and its previous one. The windows Spark emits, their counts and sums, and the events it
drops are those of the reference.
"""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from airflow_provider_wm.core.windowing import (
    Aggregate,
    AggregationSpec,
    AggregationState,
    Event,
    LateData,
    LateReason,
    StoreWatermark,
    Timing,
    run,
)
from airflow_provider_wm.core.windows import Sliding, Tumbling, WindowFn

EXAMPLES = int(os.environ.get("WM_STREAMING_EXAMPLES", "2"))
WINDOWS: dict[str, WindowFn] = {"tumbling": Tumbling(10_000), "sliding": Sliding(10_000, 5_000)}
AGGREGATES = (Aggregate("n", "count"), Aggregate("s", "sum", "v"))


def random_batches(rnd: random.Random) -> list[list[tuple[str, int, int]]]:
    """Micro-batches of ``(key, time_ms, value)``: time moves on, and events lag it by up to 25 s, so some
    fall into windows that have already closed and some just below the horizon into windows still open."""
    batches, clock = [], 0
    for _ in range(rnd.randint(4, 7)):
        clock += rnd.randint(2_000, 15_000)
        batches.append(
            [
                (rnd.choice("ab"), max(0, clock - rnd.randint(0, 25_000)), rnd.randint(0, 9))
                for _ in range(rnd.randint(1, 8))
            ]
        )
    return batches


def write_batches(folder: Path, batches: list[list[tuple[str, int, int]]]) -> None:
    """One Parquet file per micro-batch, with increasing modification times (the file source's order)."""
    folder.mkdir(parents=True)
    for i, rows in enumerate(batches):
        path = folder / f"batch-{i:03d}.parquet"
        table = pa.table(
            {
                "k": [k for k, _, _ in rows],
                "ts": pa.array([t for _, t, _ in rows], pa.timestamp("ms", tz="UTC")),
                "v": pa.array([v for _, _, v in rows], pa.int64()),
            }
        )
        pq.write_table(table, path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))


def spark_streaming(spark, folder: Path, window: WindowFn, delay_ms: int, name: str) -> tuple[list[Any], list[dict]]:
    """(the rows Spark emitted, each micro-batch's progress) of one ``availableNow`` query over ``folder``."""
    size = window.size_ms  # type: ignore[attr-defined]
    slide = window.slide_ms if isinstance(window, Sliding) else size
    events = (
        spark.readStream.schema("k string, ts timestamp, v bigint")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder / "events"))
    )
    aggregated = (
        events.withWatermark("ts", f"{delay_ms} milliseconds")
        .groupBy(F.window("ts", f"{size} milliseconds", f"{slide} milliseconds"), "k")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))
    )
    query = (
        aggregated.writeStream.outputMode("append")
        .format("memory")
        .queryName(name)
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = [{"rows": p.numInputRows, "eventTime": dict(p.eventTime)} for p in query.recentProgress]
    rows = spark.sql(f"SELECT window.start AS start, k, n, s FROM {name}").collect()  # a few windows: small
    return rows, progress


def watermark_of(progress: dict) -> int:
    """The watermark Spark applied in a micro-batch, as epoch ms."""
    from airflow_provider_wm.timeutil import to_epoch_ms

    return to_epoch_ms(progress["eventTime"]["watermark"], "watermark")


@pytest.mark.slow
@pytest.mark.parametrize("window_kind", list(WINDOWS))
def test_window_end_lateness_drops_and_fires_exactly_what_spark_structured_streaming_does(spark, tmp_path, window_kind):
    window = WINDOWS[window_kind]
    for example in range(EXAMPLES):
        seed = zlib.crc32(f"streaming-{window_kind}-{example}".encode())
        rnd = random.Random(seed)
        delay = rnd.choice([0, 3_000, 7_000])
        batches = random_batches(rnd)
        folder = tmp_path / f"e{example}"
        write_batches(folder / "events", batches)
        emitted, progress = spark_streaming(spark, folder, window, delay, f"wm_streaming_{window_kind}_{example}")

        # one run per micro-batch (the last one has no data), fed the watermark Spark applied in it
        spec = AggregationSpec(window, AGGREGATES, ("k",), StoreWatermark("spark"), late_data=LateData.WINDOW_END)
        state, fired, dropped, files = AggregationState(), [], 0, iter(batches)
        for micro_batch in progress:
            rows = next(files) if micro_batch["rows"] else []
            assert len(rows) == micro_batch["rows"], seed
            result = run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows], watermark_of(micro_batch))
            state = result.state
            fired += [(p.window.start, p.key[0], *p.values) for p in result.panes if p.timing is Timing.ON_TIME]
            dropped += sum(1 for _, reason in result.late if reason == LateReason.WINDOW_CLOSED)
        assert next(files, None) is None, seed
        final = watermark_of(progress[-1])
        spark_windows = sorted((int(r["start"].timestamp() * 1000), r["k"], r["n"], r["s"]) for r in emitted)
        assert spark_windows == sorted(fired), seed
        assert spark_windows, seed  # a scenario that fires nothing would prove nothing
        if window_kind == "tumbling":
            # every event Spark neither emitted nor still holds in an open window, it dropped
            still_open = sum(1 for rows in batches for _, t, _ in rows if window.assign(t)[0].end > final)
            total = sum(len(rows) for rows in batches)
            assert dropped == total - sum(n for _, _, n, _ in spark_windows) - still_open, seed
