"""The windowed-aggregate example DAG: loads cleanly, and runs three hours end to end on real Airflow and Spark
(EARLY, ON_TIME and LATE panes with retractions, too-late and invalid events), the ``orders`` watermark being
published straight into the store (the controller DAG is not run)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.models.variable import Variable

from airflow_provider_wm.core.windowing import Accumulation, StoreWatermark
from airflow_provider_wm.core.windows import Tumbling
from airflow_provider_wm.demo import data, order_events
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.state import windowed_variable_key
from tests.airflow_helpers import run_dag, xcom

DAGS = Path(__file__).resolve().parents[2] / "dags"
PIPELINE = "orders_15m"
MINUTE = 60_000


def at(minutes: int) -> int:
    return data.START_MS + minutes * MINUTE


def load_example_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "example_windowed_aggregate.py"))
    assert bag.import_errors == {}
    return bag.get_dag("example_windowed_aggregate")


def test_the_example_waits_for_the_orders_watermark_then_aggregates(airflow_db):
    dag = load_example_dag()
    assert set(dag.task_ids) == {"wait_for_orders", "orders_15m"}
    assert "example" in dag.tags and dag.catchup is False and dag.max_active_runs == 1
    assert "WM_SPARK_CONN_ID" in dag.doc_md and "WM_EXAMPLE_BASE" in dag.doc_md
    sensor = dag.get_task("wait_for_orders")
    assert sensor.stream == "orders" and sensor.deferrable and sensor.soft_fail and sensor.poke_interval == 2
    op = dag.get_task("orders_15m")
    assert op.upstream_task_ids == {"wait_for_orders"}
    assert op.pipeline == PIPELINE and op.event_time == "event_time" and op.arrival_column == "ingested_at"
    spec = op.spec
    assert spec.window == Tumbling(15 * MINUTE) and spec.keys == ("region",)
    assert [(a.name, a.function, a.column) for a in spec.aggregates] == [
        ("orders", "count", None),
        ("revenue", "sum", "amount"),
        ("avg_amount", "avg", "amount"),
    ]
    assert spec.watermark == StoreWatermark("orders") and spec.allowed_lateness_ms == 30 * MINUTE
    assert spec.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING and spec.early_firing
    assert op.output_path.endswith("/orders_15m") and op.late_output.endswith("/orders_15m_late")
    assert op.store_path.endswith("/store") and op.events.endswith("/order_events")
    assert [a.name for a in op.outlets] == ["orders_15m"]


def publish(store: WatermarkStoreHook, hour: int) -> None:
    """The ``orders`` watermark the controller would publish at the end of ``hour``."""
    store.publish(
        {
            "stream": "orders",
            "wm_key": None,
            "lower_ms": at(60 * hour),
            "upper_ms": at(60 * hour),
            "stream_cut": {"0": 100 * 60 * hour},
            "computed_at_ms": at(60 * hour),
        }
    )


def window_panes(rows: list[dict], region: str, start_minute: int) -> list[tuple]:
    """One window's pane rows as ``(wm_run, pane, pane_index, retraction, orders, revenue)``, in firing order."""
    return sorted(
        (
            (r["wm_run"], r["pane"], r["pane_index"], r["retraction"], r["orders"], r["revenue"])
            for r in rows
            if r["region"] == region and r["window_start"] == at(start_minute)
        ),
        key=lambda row: (row[0], row[2]),  # by run, then pane index: a retraction comes before its successor
    )


def regular_orders(region: str, start_minute: int) -> tuple[int, int]:
    """(count, revenue) of the regular (on-time) orders of a window."""
    start = data.START + timedelta(minutes=start_minute)
    amounts = [
        e["amount"]
        for hour in range(data.HOURS)
        for e in order_events.regular(hour)
        if e["region"] == region and start <= e["event_time"] < start + timedelta(minutes=15)
    ]
    return len(amounts), sum(amounts)


@pytest.mark.slow
def test_three_hours_fire_early_on_time_and_late_panes_with_retractions_and_drop_too_late_events(
    airflow_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "20")
    Variable.delete(windowed_variable_key(PIPELINE))  # the session's DB is shared: start from no state
    order_events.write(tmp_path)
    dag = load_example_dag()  # parsed now, so it sees WM_EXAMPLE_BASE
    store = WatermarkStoreHook(str(tmp_path / "store"))

    summaries = []
    for hour in (1, 2, 3):
        publish(store, hour)
        run, states = run_dag(dag, data.START + timedelta(hours=hour))
        assert states == {"wait_for_orders": "success", "orders_15m": "success"}, f"hour {hour}"
        assert xcom(run, "wait_for_orders")["watermark_ms"] == at(60 * hour)
        summaries.append(xcom(run, "orders_15m"))

    counts = [
        (s["events_read"], s["events_aggregated"], s["too_late"], s["invalid_event_time"], s["panes"])
        for s in summaries
    ]
    assert [s["invalid_arrival"] for s in summaries] == [0, 0, 0]  # every order has its ingested_at
    assert counts == [
        # 01:00: hour 0's orders and o-E1 (EARLY pane of eu [01:00, 01:15)); o-X1 has no event time
        (31, 30, 0, 1, {"EARLY": 1, "ON_TIME": 8, "LATE": 0, "RETRACTION": 0}),
        # 02:00: o-L1, o-L3 (eu [00:45, 01:00)) and o-L2 (us [00:30, 00:45)) are late; o-T1 too late;
        # the EARLY pane of eu [01:00, 01:15) is retracted by its ON_TIME pane
        (33, 32, 1, 0, {"EARLY": 0, "ON_TIME": 8, "LATE": 2, "RETRACTION": 3}),
        # 03:00: o-L4 (eu [01:45, 02:00)) is late, o-T2 too late
        (31, 30, 1, 0, {"EARLY": 0, "ON_TIME": 8, "LATE": 1, "RETRACTION": 1}),
    ]
    committed = Variable.get(windowed_variable_key(PIPELINE), deserialize_json=True)
    assert committed["version"] == 3
    assert committed["watermark_ms"] == at(180) and committed["arrival_until_ms"] == at(180)
    assert committed["state_path"].endswith("/pipelines/orders_15m/state/v3")

    rows = pq.read_table(tmp_path / "orders_15m").to_pylist()
    n, revenue = regular_orders("eu", 45)
    late = 60 + 15  # o-L1 and o-L3
    assert window_panes(rows, "eu", 45) == [
        (1, "ON_TIME", 0, False, n, revenue),
        (2, "ON_TIME", 0, True, n, revenue),
        (2, "LATE", 1, False, n + 2, revenue + late),
    ]
    late_pane = next(r for r in rows if r["window_start"] == at(45) and r["region"] == "eu" and r["pane"] == "LATE")
    assert late_pane["avg_amount"] == pytest.approx((revenue + late) / (n + 2))
    assert late_pane["watermark_ms"] == at(120) and late_pane["window_end"] == at(60)
    n, revenue = regular_orders("us", 30)
    assert window_panes(rows, "us", 30) == [
        (1, "ON_TIME", 0, False, n, revenue),
        (2, "ON_TIME", 0, True, n, revenue),
        (2, "LATE", 1, False, n + 1, revenue + 35),  # o-L2
    ]
    n, revenue = regular_orders("eu", 60)
    assert window_panes(rows, "eu", 60) == [
        (1, "EARLY", 0, False, 1, 40),  # o-E1 alone, before the watermark passed 01:15
        (2, "EARLY", 0, True, 1, 40),
        (2, "ON_TIME", 1, False, n + 1, revenue + 40),
    ]
    n, revenue = regular_orders("eu", 105)
    assert window_panes(rows, "eu", 105) == [
        (2, "ON_TIME", 0, False, n, revenue),
        (3, "ON_TIME", 0, True, n, revenue),
        (3, "LATE", 1, False, n + 1, revenue + 50),  # o-L4
    ]
    # Summing the panes with retractions negated gives every accepted event exactly once.
    signed = sum(-r["revenue"] if r["retraction"] else r["revenue"] for r in rows)
    dropped = {"o-X1", "o-T1", "o-T2"}
    arrived = [e for e in order_events.events() if e["ingested_at"] <= data.START + timedelta(hours=3)]
    assert signed == sum(e["amount"] for e in arrived if e["order_id"] not in dropped)

    late_rows = pq.read_table(tmp_path / "orders_15m_late").to_pylist()
    assert sorted((r["wm_run"], r["order_id"], r["reason"]) for r in late_rows) == [
        (1, "o-X1", "INVALID_EVENT_TIME"),
        (2, "o-T1", "TOO_LATE"),
        (3, "o-T2", "TOO_LATE"),
    ]
