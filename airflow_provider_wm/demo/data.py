"""Example writer marks and segments for the demo (and the DAG tests), written as Parquet with pyarrow.

Scenario over four hours from ``START`` (one controller round per hour, at each hour's end):

- ``orders``: segments 0 ``[0, .5)`` and 1 ``[.5, 1)``; at 01:30 segment 1 splits into
  ``(1<<32)|2 [.5, .75)`` and ``(1<<32)|3 [.75, 1)`` (a scale event). Writers ``w1 w2 w3`` note their time
  at every minute boundary, ``txn`` commits transactions every 15 minutes. ``w3`` shuts down at 02:30 and
  holds the watermark back for one round. Bad rows: a negative offset, an unknown segment, a mark whose
  time goes back, a stream name that tries to leave the store.
- ``payments``: one segment; ``p2`` stops reporting at 01:20, holds the stream back, and is dropped after
  the 30-minute writer timeout.
- ``deliveries``: one writer ``d1`` noting its time every minute, like ``orders`` (the delivery events of
  :mod:`airflow_provider_wm.demo.order_events`; ``dags/example_orders_deliveries.py`` merges both).
- ``refunds``: one writer whose marks carry sequence numbers (one per minute, origin ``r1-upload``); the
  mark of 00:30 is uploaded late, at 01:05, so the first round can only use sequences up to 00:29 (the
  rest wait behind the gap in the controller state). The writer stops at 01:10: from then on the stream
  is quiet, and ``dags/example_joined_streams.py`` treats it as idle after 45 minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2026, 1, 5, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)
MINUTE = 60_000
HOUR = 60 * MINUTE
HOURS = 4
SPLIT_AT = START_MS + 90 * MINUTE
W3_SHUTDOWN_AT = START_MS + 150 * MINUTE
P2_SILENT_AFTER = START_MS + 80 * MINUTE
REFUNDS_SILENT_AFTER = START_MS + 70 * MINUTE
REFUNDS_LATE_SEQ = 30
REFUNDS_LATE_AT = START_MS + 65 * MINUTE
EPOCH1 = 1 << 32

MARKS_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("writer_id", pa.string()),
        ("time_ms", pa.int64()),
        ("position", pa.map_(pa.int64(), pa.int64())),
        ("kind", pa.string()),
        ("reported_at_ms", pa.int64()),
        ("origin_id", pa.string()),
        ("seq", pa.int64()),
        ("chunk", pa.int64()),
        ("last_chunk", pa.bool_()),
    ]
)
SEGMENTS_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("segment_id", pa.int64()),
        ("key_start", pa.float64()),
        ("key_end", pa.float64()),
    ]
)


def segments() -> list[dict[str, Any]]:
    return [
        {"stream": "orders", "segment_id": 0, "key_start": 0.0, "key_end": 0.5},
        {"stream": "orders", "segment_id": 1, "key_start": 0.5, "key_end": 1.0},
        {"stream": "orders", "segment_id": EPOCH1 | 2, "key_start": 0.5, "key_end": 0.75},
        {"stream": "orders", "segment_id": EPOCH1 | 3, "key_start": 0.75, "key_end": 1.0},
        {"stream": "payments", "segment_id": 0, "key_start": 0.0, "key_end": 1.0},
        {"stream": "deliveries", "segment_id": 0, "key_start": 0.0, "key_end": 1.0},
        {"stream": "refunds", "segment_id": 0, "key_start": 0.0, "key_end": 1.0},
    ]


def _mark(
    stream: str,
    writer: str,
    t: int,
    position: dict[int, int] | None,
    kind: str = "note",
    reported: int | None = None,
) -> dict[str, Any]:
    return {
        "stream": stream,
        "writer_id": writer,
        "time_ms": t,
        "position": None if position is None else list(position.items()),
        "kind": kind,
        "reported_at_ms": t if reported is None else reported,
        "origin_id": None,
        "seq": None,
        "chunk": None,
        "last_chunk": None,
    }


def _refund_mark(n: int, t: int) -> dict[str, Any]:
    """Sequence ``n`` of the refunds uploader, in one chunk; the 30th is uploaded late."""
    reported = REFUNDS_LATE_AT if n == REFUNDS_LATE_SEQ else t
    mark = _mark("refunds", "r1", t, {0: 7 * n}, reported=reported)
    return {**mark, "origin_id": "r1-upload", "seq": n, "chunk": 1, "last_chunk": True}


def marks_for_hour(hour: int) -> Iterator[dict[str, Any]]:
    """Marks reported in ``(START + hour h, START + (hour+1) h]``."""
    first = START_MS + hour * HOUR + MINUTE
    for t in range(first, first + HOUR, MINUTE):
        n = (t - START_MS) // MINUTE
        right = {1: 100 * n} if t < SPLIT_AT else {EPOCH1 | 2: 40 * n, EPOCH1 | 3: 60 * n}
        yield _mark("orders", "w1", t, {0: 100 * n})
        yield _mark("orders", "w2", t, right)
        if t < W3_SHUTDOWN_AT:
            yield _mark("orders", "w3", t, {0: 100 * n - 5, **{k: v - 5 for k, v in right.items()}})
        elif t == W3_SHUTDOWN_AT:
            yield _mark("orders", "w3", t, None, kind="shutdown")
        if n % 15 == 0:
            yield _mark("orders", "txn", t - 2 * MINUTE, {0: 100 * n - 50}, kind="commit", reported=t)
            yield _mark("orders", "txn", t, {0: 100 * n}, kind="commit")
        yield _mark("payments", "p1", t, {0: 10 * n})
        yield _mark("deliveries", "d1", t, {0: 20 * n})
        if t <= P2_SILENT_AFTER:
            yield _mark("payments", "p2", t, {0: 10 * n + 3})
        if t <= REFUNDS_SILENT_AFTER:
            yield _refund_mark(n, t)
    if hour == 0:
        yield _mark("orders", "w1", first + 5 * MINUTE, {0: -1})  # negative offset
        yield _mark("orders", "w2", first + 6 * MINUTE, {99: 10})  # unknown segment
        yield _mark("../outside", "w9", first + 7 * MINUTE, {0: 1})  # path traversal attempt
    if hour == 1:
        yield _mark("orders", "w1", START_MS + 30 * MINUTE, {0: 9_999_999}, reported=first + 10 * MINUTE)


def write(base: Path) -> dict[str, int]:
    """Write ``marks/marks-hour-<h>.parquet`` files and ``segments/segments.parquet`` under ``base``."""
    (base / "marks").mkdir(parents=True, exist_ok=True)
    (base / "segments").mkdir(parents=True, exist_ok=True)
    counts = {}
    for hour in range(HOURS):
        rows = list(marks_for_hour(hour))
        pq.write_table(pa.Table.from_pylist(rows, MARKS_SCHEMA), base / "marks" / f"marks-hour-{hour:02d}.parquet")
        counts[f"hour {hour}"] = len(rows)
    pq.write_table(pa.Table.from_pylist(segments(), SEGMENTS_SCHEMA), base / "segments" / "segments.parquet")
    return counts
