"""Example: a DAG that runs when the ``orders`` watermark passes each full hour, with no sensor.

``example_stream_watermark`` waits for the ``orders`` watermark with a sensor: its runs start every hour by
the clock, and each holds a deferred task until the hour's data is complete. Here an ``AssetWatcher`` runs a
:class:`~airflow_provider_wm.triggers.watermark_advance.WatermarkAdvanceTrigger` in the triggerer instead:
every time the ``orders`` watermark (published by the controller of ``example_stream_watermark``) passes a
full hour, the asset ``orders_watermark_hours`` gets an event for that hour and this DAG runs. No run
exists, and no task waits, until the hour is complete; a watermark that jumps several hours gives one event
per hour, and the report handles each event of its run.

The report: per complete hour, the number and amount of orders per region whose event time lies in the hour
(the demo's order events, ``$WM_EXAMPLE_BASE/order_events``, written by ``python -m airflow_provider_wm.demo``).

Data: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``), as in the other examples.
``WM_EXAMPLE_WATCHER_POLL`` sets how often the trigger reads the store (seconds, default 30).
"""

from __future__ import annotations

# --8<-- [start:dag]
import os
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_wm.triggers.watermark_advance import WatermarkAdvanceTrigger

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
STORE = f"{BASE}/store"
START = datetime(2026, 1, 5, tzinfo=UTC)

# --8<-- [start:watcher]
ORDERS_HOURS = Asset(
    name="orders_watermark_hours",
    uri=f"file://{STORE}/streams/orders",
    watchers=[
        AssetWatcher(
            name="orders_watermark_hourly",
            trigger=WatermarkAdvanceTrigger(
                stream="orders",
                store_path=STORE,
                every="PT1H",  # each full hour (UTC)
                start_after=START,  # first event: the hour [00:00, 01:00) of the demo's data
                poll_interval=float(os.environ.get("WM_EXAMPLE_WATCHER_POLL", "30")),
            ),
        )
    ],
)
# --8<-- [end:watcher]

with DAG(
    dag_id="example_watermark_watcher",
    schedule=[ORDERS_HOURS],
    start_date=START,
    catchup=False,
    tags=["example", "watermark", "assets"],
    doc_md=__doc__,
) as dag:
    # --8<-- [start:report]
    @task
    def hourly_orders_report(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """One report per hour whose boundary the watermark passed: the run's events, oldest first."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        payloads = sorted(
            (event.extra["payload"] for events in (triggering_asset_events or {}).values() for event in events),
            key=lambda payload: payload["boundary_ms"],
        )
        source = f"{BASE}/order_events"

        def orders_between(start_ms: int, end_ms: int) -> list[dict[str, Any]]:
            if not os.path.isdir(source):
                return []
            start, end = (pa.scalar(ms, pa.timestamp("ms", tz="UTC")) for ms in (start_ms, end_ms))
            in_interval = (ds.field("event_time") >= start) & (ds.field("event_time") < end)
            table = ds.dataset(source, format="parquet").to_table(columns=["region", "amount"], filter=in_interval)
            return table.to_pylist()

        reports = []
        for payload in payloads:
            rows = orders_between(payload["interval_start_ms"], payload["interval_end_ms"])
            by_region: dict[str, dict[str, int]] = {}
            for row in rows:
                region = by_region.setdefault(row["region"], {"orders": 0, "amount": 0})
                region["orders"] += 1
                region["amount"] += row["amount"]
            report = {"hour_end": payload["boundary"], "watermark_ms": payload["watermark_ms"], "regions": by_region}
            print(f"Orders of the hour ending {payload['boundary']}: {by_region}")
            reports.append(report)
        return reports

    hourly_orders_report()
    # --8<-- [end:report]
# --8<-- [end:dag]
