"""Example order events for the incremental-partitions demo: a daily Parquet source partitioned by day.

Each simulated day ``write_day`` appends the orders of the day that just ended, plus a few late orders
for the day before (inside the pipeline's 2-day grace period), and a row whose time is missing (it is
quarantined, not dropped).
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2026, 1, 1, tzinfo=UTC)
FIRST_RUN = START + timedelta(days=5)
DAYS = 4
REGIONS = ("eu", "us")
ORDERS_PER_DAY = 240
SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("region", pa.string()),
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("amount", pa.float64()),
        ("event_date", pa.date32()),
    ]
)


def _orders(day: date, count: int, prefix: str, rng: random.Random) -> list[dict[str, object]]:
    base = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return [
        {
            "order_id": f"{prefix}-{day:%Y%m%d}-{i}",
            "region": REGIONS[i % len(REGIONS)],
            "event_time": base + timedelta(seconds=rng.randrange(86_400)),
            "amount": round(rng.uniform(5, 500), 2),
            "event_date": day,
        }
        for i in range(count)
    ]


def _write(source: Path, rows: list[dict[str, object]], name: str) -> None:
    by_day: dict[date, list[dict[str, object]]] = {}
    for row in rows:
        by_day.setdefault(row["event_date"], []).append(row)  # type: ignore[arg-type]
    for day, day_rows in by_day.items():
        folder = source / f"event_date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(day_rows, schema=SCHEMA).drop_columns(["event_date"])
        pq.write_table(table, folder / f"{name}.parquet")


def write_history(source: Path, until: datetime) -> int:
    """The orders of every day from ``START`` up to ``until`` (what exists before the first run)."""
    rng = random.Random(7)
    rows: list[dict[str, object]] = []
    day = START.date()
    while day < until.date():
        rows += _orders(day, ORDERS_PER_DAY, "o", rng)
        day += timedelta(days=1)
    _write(source, rows, "initial")
    return len(rows)


def write_day(source: Path, now: datetime) -> dict[str, int]:
    """Before the run at ``now``: the day that just ended, late orders for the day before, one bad row."""
    rng = random.Random(int(now.timestamp()))
    yesterday = (now - timedelta(days=1)).date()
    fresh = _orders(yesterday, ORDERS_PER_DAY, "o", rng)
    late = _orders(yesterday - timedelta(days=1), 12, "late", rng)
    bad = [{**fresh[0], "order_id": f"bad-{yesterday:%Y%m%d}", "event_time": None}]
    _write(source, fresh + bad, "arrived")
    _write(source, late, f"late-{now:%Y%m%d}")
    return {"orders": len(fresh), "late": len(late), "bad": len(bad)}
