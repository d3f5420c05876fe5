"""``late_data="window_end"`` against Spark Structured Streaming itself.

The same events go through a streaming query (``withWatermark``, a windowed ``groupBy`` (``window`` or
``session_window``), append mode, one Parquet file per micro-batch, ``availableNow``) and through
``core.windowing.run``, one run per micro-batch (the last one has no data), each fed the watermark Spark
reports for that micro-batch. Spark evicts (emits) a window with that watermark and drops late rows by the
previous micro-batch's, which is exactly a run's firing watermark and its previous one. The windows Spark
emits, their counts and sums, and the events it drops are those of the reference. For sessions Spark drops a
row whose own ``[t, t + gap)`` has closed before merging it with the stored sessions, also when it would
merge into one that is still open: so does the reference (``core.windowing.LateData``).
"""

from __future__ import annotations

import datetime as dt
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
from airflow_provider_wm.core.windows import Session, Sliding, Tumbling, Window, WindowFn

EXAMPLES = int(os.environ.get("WM_STREAMING_EXAMPLES", "2"))
WINDOWS: dict[str, WindowFn] = {
    "tumbling": Tumbling(10_000),
    "sliding": Sliding(10_000, 5_000),
    "session": Session(4_000),
}
AGGREGATES = (Aggregate("n", "count"), Aggregate("s", "sum", "v"))
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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
    if isinstance(window, Session):
        grouping = F.session_window("ts", f"{window.gap_ms} milliseconds")
    else:
        size = window.size_ms  # type: ignore[attr-defined]
        slide = window.slide_ms if isinstance(window, Sliding) else size
        grouping = F.window("ts", f"{size} milliseconds", f"{slide} milliseconds")
    events = (
        spark.readStream.schema("k string, ts timestamp, v bigint")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder / "events"))
    )
    aggregated = (
        events.withWatermark("ts", f"{delay_ms} milliseconds")
        .groupBy(grouping.alias("window"), "k")
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
    # a few windows: small; epoch ms computed by Spark, exactly
    rows = spark.sql(
        f"SELECT unix_millis(window.start) AS start, unix_millis(window.end) AS end, k, n, s FROM {name}"
    ).collect()
    return rows, progress


def watermark_of(progress: dict) -> int:
    """The watermark Spark applied in a micro-batch, as epoch ms."""
    return _ms(dt.datetime.fromisoformat(progress["eventTime"]["watermark"]))


def core_runs(window: WindowFn, batches: list[list[tuple[str, int, int]]], progress: list[dict], late_data: LateData):
    """``core.windowing.run`` once per micro-batch (the last one has no data), fed the watermark Spark applied in
    it: (the ON_TIME panes as ``(start, end, key, n, s)``, the events dropped, the state after the last run)."""
    spec = AggregationSpec(window, AGGREGATES, ("k",), StoreWatermark("spark"), late_data=late_data)
    state, fired, dropped, files = AggregationState(), [], [], iter(batches)
    for micro_batch in progress:
        rows = next(files) if micro_batch["rows"] else []
        assert len(rows) == micro_batch["rows"]
        result = run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows], watermark_of(micro_batch))
        state = result.state
        fired += [
            (p.window.start, p.window.end, p.key[0], *p.values) for p in result.panes if p.timing is Timing.ON_TIME
        ]
        dropped += [
            (e.key[0], e.time_ms)
            for e, reason in result.late
            if reason in (LateReason.WINDOW_CLOSED, LateReason.TOO_LATE)
        ]
    assert next(files, None) is None
    return sorted(fired), dropped, state


def spark_rows(emitted: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((r["start"], r["end"], r["k"], r["n"], r["s"]) for r in emitted)


def _ms(value: dt.datetime) -> int:
    """Epoch ms, exactly: through a float, 16.281 s would become 16280 ms (a session starts at any ms)."""
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


@pytest.mark.slow
@pytest.mark.parametrize("window_kind", list(WINDOWS))
def test_window_end_lateness_drops_and_fires_exactly_what_spark_structured_streaming_does(spark, tmp_path, window_kind):
    window = WINDOWS[window_kind]
    dropped_in_all = 0
    for example in range(EXAMPLES):
        seed = zlib.crc32(f"streaming-{window_kind}-{example}".encode())
        rnd = random.Random(seed)
        # a session event is late only once t + gap <= W_prev: a shorter delay, so that some are
        delay = rnd.choice([0, 3_000] if window_kind == "session" else [0, 3_000, 7_000])
        batches = random_batches(rnd)
        folder = tmp_path / f"e{example}"
        write_batches(folder / "events", batches)
        emitted, progress = spark_streaming(spark, folder, window, delay, f"wm_streaming_{window_kind}_{example}")
        fired, dropped, state = core_runs(window, batches, progress, LateData.WINDOW_END)
        spark_windows = spark_rows(emitted)
        assert spark_windows == fired, seed
        assert spark_windows, seed  # a scenario that fires nothing would prove nothing
        total = sum(len(rows) for rows in batches)
        emitted_events = sum(n for _, _, _, n, _ in spark_windows)
        if window_kind == "tumbling":
            # every event Spark neither emitted nor still holds in an open window, it dropped
            final = watermark_of(progress[-1])
            still_open = sum(1 for rows in batches for _, t, _ in rows if window.assign(t)[0].end > final)
            assert len(dropped) == total - emitted_events - still_open, seed
        elif window_kind == "session":
            # every event is in a session Spark emitted, in one still open (held by both), or dropped
            still_open = sum(ws.partial[0] for ws in state.windows)
            assert len(dropped) == total - emitted_events - still_open, seed
        dropped_in_all += len(dropped)
    assert dropped_in_all or window_kind != "session"  # scenarios that drop nothing would not test lateness


@pytest.mark.slow
def test_spark_drops_a_session_event_whose_own_window_closed_though_it_would_merge_into_an_open_session(
    spark, tmp_path
):
    """Gap 10 s, delay 5 s. Micro-batch 0 opens ``a``'s session ``[30 s, 48 s)``; micro-batch 1 (``b`` at 40 s)
    makes Spark's watermark 33 s; micro-batch 2 brings ``a`` at 22 s (own window ``[22 s, 32 s)``: closed) and
    25 s (``[25 s, 35 s)``: open) and micro-batch 3 ``b`` at 100 s, which moves the watermark past both keys'
    sessions. Merged, 22 s would join ``[22 s, 48 s)``, which ends after 33 s: Spark still drops it, and
    ``late_data="window_end"`` does the same; ``"event_time"`` drops 25 s too."""
    window = Session(10_000)
    batches = [[("a", 30_000, 1), ("a", 38_000, 2)], [("b", 40_000, 4)], [("a", 22_000, 8), ("a", 25_000, 16)],
               [("b", 100_000, 32)]]  # fmt: skip
    write_batches(tmp_path / "events", batches)
    emitted, progress = spark_streaming(spark, tmp_path, window, 5_000, "wm_streaming_session_bridge")
    assert [watermark_of(p) for p in progress] == [0, 33_000, 35_000, 35_000, 95_000]
    assert spark_rows(emitted) == [(25_000, 48_000, "a", 3, 19), (40_000, 50_000, "b", 1, 4)]

    fired, dropped, _ = core_runs(window, batches, progress, LateData.WINDOW_END)
    assert fired == spark_rows(emitted) and dropped == [("a", 22_000)]
    by_time, dropped_by_time, _ = core_runs(window, batches, progress, LateData.EVENT_TIME)
    assert by_time == [(30_000, 48_000, "a", 2, 3), (40_000, 50_000, "b", 1, 4)]
    assert dropped_by_time == [("a", 22_000), ("a", 25_000)]
    # the reading this rules out: micro-batch 2 drops by micro-batch 1's watermark, 33 s, which has passed the end
    # of 22 s's own window but not that of the session it would merge into
    assert Window(22_000, 32_000).end <= watermark_of(progress[1]) < Window(22_000, 48_000).end
