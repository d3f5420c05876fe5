"""Example order events for the windowed-aggregate demo (and its DAG test), written as Parquet with pyarrow.

Columns: ``order_id string, region string (eu|us), event_time timestamp(ms, UTC), amount long,
ingested_at timestamp(ms, UTC)``, one file per arrival hour under ``<base>/order_events/``
(``order-events-hour-<h>.parquet``: the events whose ``ingested_at`` falls in hour ``h``). The reader
(``dags/example_windowed_aggregate.py``) takes the events with ``ingested_at`` between its committed
cut-off and the run's ``data_interval_end``; windows of 15 minutes per region, 30 minutes of allowed
lateness, watermark: the ``orders`` stream's, which moves to each hour's end (``HH:00``).

Scenario over the same four hours as :mod:`airflow_provider_wm.demo.data` (from ``START``, 2026-01-05 00:00 UTC):

- Regular orders: 29 per hour, one every two minutes (minutes ``00, 02, ..., 56`` of each hour, plus a few
  seconds), arriving 0-2 minutes after their event time, always within the same hour: they are aggregated
  by the run at that hour's end and fire ON_TIME panes.
- ``o-E1`` (eu, event 01:01:00, ingested 00:59:30): its writer's clock is 90 seconds ahead. The 01:00 run
  sees it in the incomplete window eu ``[01:00, 01:15)`` and fires an EARLY pane; the 02:00 run fires the
  window's ON_TIME pane and retracts the EARLY one.
- ``o-X1`` (us, no event time, ingested 00:30:10): quarantined as ``INVALID_EVENT_TIME`` by the 01:00 run.
- Late, but within the lateness (``t >= previous watermark - 30 min``): they update windows that already
  fired ON_TIME, so the run fires a retraction of the ON_TIME pane and a LATE pane:

  - ``o-L1`` (eu, event 00:50:00, ingested 01:15:00, 25 min late) and ``o-L3`` (eu, event 00:52:00,
    ingested 01:22:00, 30 min late): window eu ``[00:45, 01:00)``, in the 02:00 run;
  - ``o-L2`` (us, event 00:41:30, ingested 01:20:00, 38.5 min late): window us ``[00:30, 00:45)``, in the
    02:00 run;
  - ``o-L4`` (eu, event 01:48:00, ingested 02:10:00, 22 min late): window eu ``[01:45, 02:00)``, in the
    first run after 02:00 that gets past its sensor (03:00 in the DAG test; 04:00 in the demo, where the
    ``orders`` watermark is held back at 02:29 by the 03:00 round, so the 03:00 run's sensor soft-fails).

- Too late (``t < previous watermark - 30 min``): not aggregated, written to the late output and counted:

  - ``o-T1`` (us, event 00:12:00, ingested 01:25:00, 73 min late): 00:12 < 01:00 - 30 min, in the 02:00 run;
  - ``o-T2`` (eu, event 01:05:00, ingested 02:20:00, 75 min late): 01:05 < 02:00 - 30 min, in the next run.

Delivery events (``delivery_events/``, ``order_id string, region string, delivered_at timestamp(ms, UTC),
ingested_at timestamp(ms, UTC)``, by arrival hour): every regular order is delivered 8 to 37 minutes after
it was placed and the delivery is ingested 15 seconds later; one delivered in the last minutes of an hour
arrives in the next, late for its window (the ``deliveries`` watermark is at the hour's end).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_wm.demo.data import HOURS, START

SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("region", pa.string()),
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("amount", pa.int64()),
        ("ingested_at", pa.timestamp("ms", tz="UTC")),
    ]
)
PER_HOUR = 29


def at(hours: int = 0, minutes: int = 0, seconds: float = 0) -> datetime:
    """``START`` plus an offset."""
    return START + timedelta(hours=hours, minutes=minutes, seconds=seconds)


def _event(order_id: str, region: str, event_time: datetime | None, amount: int, ingested_at: datetime) -> dict:
    return {
        "order_id": order_id,
        "region": region,
        "event_time": event_time,
        "amount": amount,
        "ingested_at": ingested_at,
    }


def regular(hour: int) -> list[dict[str, Any]]:
    """The hour's on-time orders: every two minutes, 0-2 minutes of delay, all arriving within the hour."""
    rows = []
    for i in range(PER_HOUR):
        event_time = at(hour, 2 * i, (i * 17 + hour * 11) % 60)
        delay = timedelta(seconds=(i * 37 + hour * 13) % 121)
        region = "us" if (i + hour) % 3 == 2 else "eu"
        amount = 5 + (i * 29 + hour * 17) % 96
        rows.append(_event(f"o-{hour}{i:02d}", region, event_time, amount, event_time + delay))
    return rows


def special() -> list[dict[str, Any]]:
    """The early (clock-skewed), invalid, late and too-late events of the module docstring."""
    return [
        _event("o-E1", "eu", at(1, 1), 40, at(0, 59, 30)),
        _event("o-X1", "us", None, 25, at(0, 30, 10)),
        _event("o-L1", "eu", at(0, 50), 60, at(1, 15)),
        _event("o-L2", "us", at(0, 41, 30), 35, at(1, 20)),
        _event("o-L3", "eu", at(0, 52), 15, at(1, 22)),
        _event("o-T1", "us", at(0, 12), 80, at(1, 25)),
        _event("o-L4", "eu", at(1, 48), 50, at(2, 10)),
        _event("o-T2", "eu", at(1, 5), 90, at(2, 20)),
    ]


def events() -> list[dict[str, Any]]:
    """Every event of the scenario, ordered by arrival."""
    rows = [row for hour in range(HOURS) for row in regular(hour)] + special()
    return sorted(rows, key=lambda r: (r["ingested_at"], r["order_id"]))


DELIVERY_SCHEMA = pa.schema(
    [
        ("order_id", pa.string()),
        ("region", pa.string()),
        ("delivered_at", pa.timestamp("ms", tz="UTC")),
        ("ingested_at", pa.timestamp("ms", tz="UTC")),
    ]
)


def deliveries() -> list[dict[str, Any]]:
    """The delivery of every regular order that arrives within the scenario's hours, ordered by arrival."""
    rows = []
    for hour in range(HOURS):
        for i, order in enumerate(regular(hour)):
            delivered_at = order["event_time"] + timedelta(minutes=8 + (i * 7 + hour * 5) % 30)
            ingested_at = delivered_at + timedelta(seconds=15)
            if ingested_at < at(HOURS):
                rows.append({"order_id": order["order_id"], "region": order["region"],
                             "delivered_at": delivered_at, "ingested_at": ingested_at})  # fmt: skip
    return sorted(rows, key=lambda r: (r["ingested_at"], r["order_id"]))


def _write_by_arrival_hour(folder: Path, rows: list[dict[str, Any]], schema: pa.Schema, prefix: str) -> dict[str, int]:
    folder.mkdir(parents=True, exist_ok=True)
    by_hour: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        hour = int((row["ingested_at"] - START) // timedelta(hours=1))
        by_hour.setdefault(hour, []).append(row)
    counts = {}
    for hour, hour_rows in sorted(by_hour.items()):
        pq.write_table(pa.Table.from_pylist(hour_rows, schema), folder / f"{prefix}-hour-{hour:02d}.parquet")
        counts[f"hour {hour}"] = len(hour_rows)
    return counts


def write(base: Path) -> dict[str, int]:
    """Write ``order_events/order-events-hour-<h>.parquet`` and ``delivery_events/delivery-events-hour-<h>.parquet``
    (events by arrival hour) under ``base``; returns the order events per hour."""
    _write_by_arrival_hour(base / "delivery_events", deliveries(), DELIVERY_SCHEMA, "delivery-events")
    return _write_by_arrival_hour(base / "order_events", events(), SCHEMA, "order-events")
