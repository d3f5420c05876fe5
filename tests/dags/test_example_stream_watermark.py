"""The example DAG: loads cleanly, and runs end to end on real Airflow and Spark across two intervals."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from airflow.models.variable import Variable

from airflow_provider_wm.demo import data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.airflow_helpers import asset_event_extras, asset_state, run_dag, xcom

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_every_example_dag_imports_without_errors(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.get_dag("example_stream_watermark")
    assert "example" in dag.tags and dag.catchup is False
    assert "WM_SPARK_CONN_ID" in dag.doc_md and "WM_EXAMPLE_BASE" in dag.doc_md


@pytest.mark.slow
def test_two_consecutive_runs_continue_from_the_first_runs_cutoff(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "20")
    data.write(tmp_path)
    dag = load_example_dag()  # parsed now, so it sees WM_EXAMPLE_BASE
    key = "wm_controller__example_controller"
    Variable.delete(key)  # the session's DB is shared: start from no state
    hour = lambda h: data.START + timedelta(hours=h)  # noqa: E731

    _run1, states1 = run_dag(dag, hour(1))
    assert states1 == {"controller_watermark": "success", "wait_for_orders": "success", "use_watermark": "success"}
    first = Variable.get(key, deserialize_json=True)
    assert first["processed_until_ms"] == int(hour(1).timestamp() * 1000)

    run2, states2 = run_dag(dag, hour(2))
    assert states2["wait_for_orders"] == "success"
    second = Variable.get(key, deserialize_json=True)
    assert second["version"] == first["version"] + 1
    summary = xcom(run2, "controller_watermark")
    assert summary["totals"]["rejected"] == {"INVALID_TIME": 1}  # the planted mark; nothing re-applied
    orders = summary["streams"]["orders"]["watermark"]
    assert orders["lower_ms"] == int(hour(2).timestamp() * 1000)
    assert xcom(run2, "wait_for_orders")["watermark_ms"] == orders["lower_ms"]
    store = WatermarkStoreHook(str(tmp_path / "store"))
    assert [r["lower_ms"] for r in store.read_history("orders")] == [
        int(hour(1).timestamp() * 1000),
        int(hour(2).timestamp() * 1000),
    ]

    _run2_again, states = run_dag(dag, hour(2))  # re-running a committed interval changes nothing
    assert states["controller_watermark"] == "success"
    assert Variable.get(key, deserialize_json=True) == second

    # the controller's asset: an event per successful run (the re-run's says nothing changed), its state mirrored
    extras = asset_event_extras("example_controller_watermarks")
    assert [e["version"] for e in extras] == [1, 2, 2] and extras[2]["covered_by"] == second["run_id"]
    assert extras[1]["lower_ms"]["orders"] == orders["lower_ms"]
    assert asset_state("example_controller_watermarks", "controller_cutoff/example_controller") == second
    # what the Watermarks page shows beside each watermark: the round's verdict on the stream
    status = store.read_stream_status("orders")
    assert status is not None and status["run_id"] == run2.run_id and status["no_active_writers"] is False
    assert status["active_writers"] == summary["streams"]["orders"]["active_writers"] > 0


def load_example_dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS / "example_stream_watermark.py")).get_dag("example_stream_watermark")
