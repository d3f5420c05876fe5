"""Example writer marks and segments for the demo (and the DAG tests), written with
:class:`airflow_provider_wm.marks.MarksWriter`.

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

from datetime import UTC, datetime
from pathlib import Path

from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.marks import MarksWriter

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
STREAMS = ("orders", "payments", "deliveries", "refunds")
OUTSIDE = "../outside"
"""A stream name that tries to leave the store: its mark is quarantined ``INVALID_STREAM``."""


def segments() -> dict[str, list[Segment]]:
    """Each stream's segments; every stream but ``orders`` has one."""
    whole = [Segment(0, 0.0, 1.0)]
    orders = [
        Segment(0, 0.0, 0.5),
        Segment(1, 0.5, 1.0),
        Segment(EPOCH1 | 2, 0.5, 0.75),
        Segment(EPOCH1 | 3, 0.75, 1.0),
    ]
    return {"orders": orders, "payments": whole, "deliveries": whole, "refunds": whole}


def report_hour(marks: dict[str, MarksWriter], planted: dict[str, MarksWriter], hour: int) -> None:
    """The marks reported in ``(START + hour h, START + (hour+1) h]``, each at its own time. ``planted``
    writers do not validate: they take the bad rows (``orders`` and :data:`OUTSIDE`)."""
    orders, payments, deliveries, refunds = (marks[s] for s in STREAMS)
    first = START_MS + hour * HOUR + MINUTE
    for t in range(first, first + HOUR, MINUTE):
        n = (t - START_MS) // MINUTE
        right = {1: 100 * n} if t < SPLIT_AT else {EPOCH1 | 2: 40 * n, EPOCH1 | 3: 60 * n}
        orders.note("w1", t, {0: 100 * n}, reported_at=t)
        orders.note("w2", t, right, reported_at=t)
        if t < W3_SHUTDOWN_AT:
            orders.note("w3", t, {0: 100 * n - 5, **{k: v - 5 for k, v in right.items()}}, reported_at=t)
        elif t == W3_SHUTDOWN_AT:
            orders.shutdown("w3", time=t, reported_at=t)
        if n % 15 == 0:
            orders.commit("txn", t - 2 * MINUTE, {0: 100 * n - 50}, reported_at=t)
            orders.commit("txn", t, {0: 100 * n}, reported_at=t)
        payments.note("p1", t, {0: 10 * n}, reported_at=t)
        deliveries.note("d1", t, {0: 20 * n}, reported_at=t)
        if t <= P2_SILENT_AFTER:
            payments.note("p2", t, {0: 10 * n + 3}, reported_at=t)
        if t <= REFUNDS_SILENT_AFTER:  # sequence n of the refunds uploader, one chunk; the 30th uploaded late
            reported = REFUNDS_LATE_AT if n == REFUNDS_LATE_SEQ else t
            refunds.note("r1", t, {0: 7 * n}, reported_at=reported, seq=n, origin_id="r1-upload")
    if hour == 0:
        planted["orders"].note("w1", first + 5 * MINUTE, {0: -1}, reported_at=first + 5 * MINUTE)  # negative offset
        planted["orders"].note("w2", first + 6 * MINUTE, {99: 10}, reported_at=first + 6 * MINUTE)  # unknown segment
        planted[OUTSIDE].note("w9", first + 7 * MINUTE, {0: 1}, reported_at=first + 7 * MINUTE)  # path traversal
    if hour == 1:  # a time that goes back, reported at 01:11
        orders.note("w1", START_MS + 30 * MINUTE, {0: 9_999_999}, reported_at=first + 10 * MINUTE)


def write(base: Path) -> dict[str, int]:
    """Write ``segments/segments-<stream>.parquet`` and, per hour, ``marks/marks-hour-<h>-<stream>.parquet``
    (``-planted`` for the bad rows) under ``base``; fixed names, so writing again replaces the files."""
    marks = {stream: MarksWriter(base, stream) for stream in STREAMS}
    planted = {stream: MarksWriter(base, stream, validate=False) for stream in ("orders", OUTSIDE)}
    for stream, stream_segments in segments().items():
        marks[stream].write_segments(stream_segments, name=f"segments-{stream}")
    counts = {}
    for hour in range(HOURS):
        report_hour(marks, planted, hour)
        counts[f"hour {hour}"] = sum(w.pending for w in [*marks.values(), *planted.values()])
        for stream, writer in marks.items():
            writer.flush(name=f"marks-hour-{hour:02d}-{stream}")
        planted["orders"].flush(name=f"marks-hour-{hour:02d}-orders-planted")
        planted[OUTSIDE].flush(name=f"marks-hour-{hour:02d}-outside-planted")
    return counts
