"""The chain example: controller -> 5-minute aggregate -> hourly rollup, each stage waiting on the previous
stage's output watermark, over several hours with late data, on real Airflow and Spark. The hourly numbers
equal a one-shot batch over the events the 5-minute stage did not reject."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.models.variable import Variable

from airflow_provider_wm.core.windowing import Accumulation, StoreWatermark, UpstreamPanes
from airflow_provider_wm.core.windows import Tumbling
from airflow_provider_wm.demo import data, order_events
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.state import cutoff_variable_key, windowed_variable_key
from tests.airflow_helpers import run_dag, xcom

DAGS = Path(__file__).resolve().parents[2] / "dags"
MINUTE = 60_000
HOUR = 60 * MINUTE


def load(name: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{name}.py"))
    assert bag.import_errors == {}
    return bag.get_dag(name)


def test_the_chain_waits_on_each_stages_output_watermark(airflow_db):
    dag = load("example_pipeline_chain")
    assert dag.get_task("wait_for_orders").stream == "orders"
    assert dag.get_task("wait_for_orders_5m").stream == "orders_5m"
    five, hourly = dag.get_task("orders_5m"), dag.get_task("orders_1h")
    assert five.output_stream == "orders_5m" and five.spec.window == Tumbling(5 * MINUTE)
    assert hourly.spec.upstream == UpstreamPanes(
        "orders_5m", Tumbling(5 * MINUTE), Accumulation.ACCUMULATING_AND_RETRACTING
    )
    assert hourly.spec.window == Tumbling(HOUR) and hourly.spec.watermark == StoreWatermark("orders_5m")
    assert hourly.events == five.output_path and hourly.upstream_task_ids == {"wait_for_orders_5m"}


def last_panes(rows: list[dict], names: tuple[str, ...]) -> dict[tuple[str, int], tuple]:
    """Per (region, window start): the values of the window's last pane that is not a retraction."""
    last: dict[tuple[str, int], tuple] = {}
    for row in sorted(rows, key=lambda r: (r["wm_run"], r["pane_index"], not r["retraction"])):
        if not row["retraction"]:
            last[(row["region"], row["window_start"])] = tuple(row[n] for n in names)
    return last


@pytest.mark.slow
def test_two_hours_of_the_chain_give_hourly_numbers_equal_to_a_batch_over_accepted_events(
    airflow_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "20")
    Variable.delete(cutoff_variable_key("example_controller"))  # the session's DB is shared
    for pipeline in ("orders_5m", "orders_1h"):
        Variable.delete(windowed_variable_key(pipeline))
    data.write(tmp_path)
    order_events.write(tmp_path)
    controller, chain = load("example_stream_watermark"), load("example_pipeline_chain")
    store = WatermarkStoreHook(str(tmp_path / "store"))

    hours = (1, 2)  # the controller holds orders back at 03:00 (a writer shut down): the demo data's last clean hour
    for hour in hours:
        end = data.START + timedelta(hours=hour)
        _, controller_states = run_dag(controller, end)
        assert controller_states["controller_watermark"] == "success", hour
        run, states = run_dag(chain, end)
        assert set(states.values()) == {"success"}, (hour, states)
        end_ms = int(end.timestamp() * 1000)
        assert xcom(run, "wait_for_orders_5m")["lower_ms"] >= end_ms
        assert store.read_latest("orders_1h")["lower_ms"] == end_ms
    assert store.read_latest("orders_5m")["upstream"] == "orders"
    assert store.read_latest("orders_1h")["upstream"] == "orders_5m"

    five = pq.read_table(tmp_path / "orders_5m").to_pylist()
    rejected = {r["order_id"] for r in pq.read_table(tmp_path / "orders_5m_late").to_pylist()}
    assert rejected  # the demo data has too-late and invalid events
    last_run = data.START + timedelta(hours=hours[-1])
    batch: dict[tuple[str, int], list] = defaultdict(lambda: [0, 0])
    for event in order_events.events():
        if event["ingested_at"] <= last_run and event["order_id"] not in rejected:
            t = int(event["event_time"].timestamp() * 1000)
            slot = batch[(event["region"], t - t % HOUR)]
            slot[0] += 1
            slot[1] += event["amount"]
    complete_until = int(last_run.timestamp() * 1000)
    expected = {slot: (n, revenue) for slot, (n, revenue) in batch.items() if slot[1] + HOUR <= complete_until}
    hourly = pq.read_table(tmp_path / "orders_1h").to_pylist()
    assert last_panes(hourly, ("orders", "revenue")) == expected
    assert any(r["pane"] == "LATE" for r in hourly) and any(r["retraction"] for r in five)
    assert not (tmp_path / "orders_1h_late").exists()
    # the busiest 5-minute window of an hour is the largest of its live 5-minute panes
    five_last = last_panes(five, ("orders",))
    for (region, start), values in last_panes(hourly, ("busiest_5m",)).items():
        inside = [v[0] for (r, s), v in five_last.items() if r == region and start <= s < start + HOUR]
        assert values == (max(inside),)
    committed = Variable.get(windowed_variable_key("orders_1h"), deserialize_json=True)
    assert committed["upstream_version"] == 2 and committed["live_path"].endswith("/pipelines/orders_1h/live/v2")
    assert datetime.fromtimestamp(committed["watermark_ms"] / 1000, UTC) == last_run
