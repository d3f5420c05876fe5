"""The watcher example DAG: scheduled on an asset watched by a WatermarkAdvanceTrigger, and its report per hour
over the demo's order events. Its runs under a real triggerer and scheduler are in
tests/integration/test_watermark_watcher.py."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from airflow_provider_wm.core.boundaries import BoundaryEvent
from airflow_provider_wm.demo import order_events
from airflow_provider_wm.triggers.watermark_advance import WatermarkAdvanceTrigger
from tests.airflow_helpers import load_example_dag

HOUR = 3_600_000
START_MS = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)


def expected_orders(hour: int) -> dict[str, dict[str, int]]:
    """The demo's orders whose event time lies in hour ``hour`` of its data, per region."""
    start = order_events.START + timedelta(hours=hour)
    regions: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "amount": 0})
    for row in order_events.events():
        if row["event_time"] is not None and start <= row["event_time"] < start + timedelta(hours=1):
            regions[row["region"]]["orders"] += 1
            regions[row["region"]]["amount"] += row["amount"]
    return dict(regions)


def test_the_dag_is_scheduled_on_the_orders_watermark_passing_each_hour(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    dag = load_example_dag("example_watermark_watcher")
    [asset] = dag.timetable.asset_condition.objects  # schedule=[asset]: all of one asset
    [watcher] = asset.watchers
    assert isinstance(watcher.trigger, WatermarkAdvanceTrigger)
    kwargs = watcher.trigger.serialize()[1]
    assert (kwargs["stream"], kwargs["store_path"], kwargs["every"]) == ("orders", f"{tmp_path}/store", "PT3600S")
    assert kwargs["start_after"] == START_MS
    assert dag.catchup is False and "example" in dag.tags


def test_the_report_covers_each_hour_of_the_runs_events_once_oldest_first(airflow_db, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    order_events.write(tmp_path)
    dag = load_example_dag("example_watermark_watcher")
    trigger = WatermarkAdvanceTrigger(store_path=str(tmp_path), stream="orders", start_after=START_MS)

    def asset_event(boundary_ms: int) -> Any:
        return SimpleNamespace(
            extra={
                "from_trigger": True,
                "payload": trigger.event(BoundaryEvent(boundary_ms - HOUR, boundary_ms, boundary_ms, 1)).payload,
            }
        )

    events: dict[str, list[Any]] = {
        "orders_watermark_hours": [asset_event(START_MS + 2 * HOUR), asset_event(START_MS + HOUR)]
    }
    reports = dag.get_task("hourly_orders_report").python_callable(triggering_asset_events=events)

    assert [report["hour_end"] for report in reports] == ["2026-01-05T01:00:00.000Z", "2026-01-05T02:00:00.000Z"]
    assert [report["regions"] for report in reports] == [expected_orders(0), expected_orders(1)]
    assert reports[0]["regions"]["eu"]["orders"] > 0 and reports[0]["regions"]["us"]["orders"] > 0
