"""Example: a downstream DAG scheduled on an asset our operator produces, not on a clock.

``example_windowed_aggregate`` declares the asset ``orders_15m`` (the 15-minute panes it writes). Each of its
successful runs emits an asset event whose ``extra`` carries the aggregate's new state version, watermark,
panes fired by timing and too-late events; Airflow then starts this DAG. Its task reads the triggering events
and the panes of the windows complete at that watermark (each retraction cancels the pane it repeats, so the
signed sum of a window's panes is its latest value), and reports the revenue per region of those windows.

Data: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``), as in the windowed example.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

# --8<-- [start:report]
from airflow.sdk import DAG, Asset, task

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
ORDERS_15M = Asset.ref(name="orders_15m")

with DAG(
    dag_id="example_revenue_report",
    schedule=ORDERS_15M,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["example", "watermark", "assets"],
    doc_md=__doc__,
) as dag:

    @task(inlets=[ORDERS_15M])
    def revenue_of_complete_windows(triggering_asset_events: Any = None) -> dict[str, Any]:
        import pyarrow.dataset as ds

        events = [event for events in (triggering_asset_events or {}).values() for event in events]
        extras = [dict(event.extra or {}) for event in events]
        print(f"Triggered by {len(events)} asset event(s) of orders_15m: {extras}")
        watermark_ms = max((int(e["watermark_ms"]) for e in extras if e.get("watermark_ms") is not None), default=None)
        revenue: dict[str, float] = defaultdict(float)
        if watermark_ms is not None and os.path.exists(f"{BASE}/orders_15m"):
            panes = ds.dataset(f"{BASE}/orders_15m", format="parquet", partitioning="hive").to_table().to_pylist()
            for pane in panes:
                if pane["window_end"] <= watermark_ms:
                    revenue[pane["region"]] += (-1 if pane["retraction"] else 1) * pane["revenue"]
        report = {"watermark_ms": watermark_ms, "versions": [e.get("version") for e in extras], **revenue}
        print(f"Revenue of the complete 15-minute windows, per region: {report}")
        return report

    revenue_of_complete_windows()
# --8<-- [end:report]
