"""The joined-streams example DAG on real Airflow: it waits for a lagging stream, then excludes it as idle."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow_provider_wm.demo import data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.airflow_helpers import run_dag, xcom

DAGS = Path(__file__).resolve().parents[2] / "dags"


def at(minutes: int) -> int:
    return data.START_MS + minutes * 60_000


def publish(store: WatermarkStoreHook, stream: str, lower_min: int, computed_min: int) -> None:
    store.publish(
        {
            "stream": stream,
            "wm_key": None,
            "lower_ms": at(lower_min),
            "upper_ms": at(lower_min),
            "stream_cut": {"0": lower_min},
            "computed_at_ms": at(computed_min),
        }
    )


def load_example_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "example_joined_streams.py"))
    assert bag.import_errors == {}
    return bag.get_dag("example_joined_streams")


def test_the_join_waits_for_a_lagging_stream_and_then_excludes_it_once_idle(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "3")
    store = WatermarkStoreHook(str(tmp_path / "store"))
    publish(store, "orders", 120, 120)
    publish(store, "refunds", 70, 120)  # quiet since 01:10, last advanced by the 02:00 round
    dag = load_example_dag()

    _run, states = run_dag(dag, data.START + timedelta(hours=2))
    assert states == {"orders_and_refunds_complete": "skipped", "join_orders_and_refunds": "skipped"}

    publish(store, "orders", 240, 240)  # two hours later, refunds has not advanced for 2 hours
    run, states = run_dag(dag, data.START + timedelta(hours=4))
    assert states == {"orders_and_refunds_complete": "success", "join_orders_and_refunds": "success"}
    progress = xcom(run, "orders_and_refunds_complete")
    assert progress["idle"] == ["refunds"] and progress["watermark_ms"] == at(240)
    assert progress["streams"]["refunds"]["lower_ms"] == at(70)
    assert "idle streams excluded: refunds" in xcom(run, "join_orders_and_refunds")
