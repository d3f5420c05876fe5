"""The chain example: controller -> 5-minute aggregate -> hourly rollup, each stage waiting on the previous
stage's output watermark, over several hours with late data, on real Airflow and Spark. The hourly numbers
equal a one-shot batch over the events the 5-minute stage did not reject."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest

from airflow_provider_wm.core.windowing import Accumulation, StoreWatermark, UpstreamPanes
from airflow_provider_wm.core.windows import Tumbling
from airflow_provider_wm.demo import data, order_events
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.state import windowed_variable_key
from tests.airflow_helpers import load_example_dag, xcom
from tests.dags.conftest import HELD_BACK_HOUR

MINUTE = 60_000
HOUR = 60 * MINUTE


def test_the_chain_waits_on_each_stages_output_watermark(airflow_db):
    dag = load_example_dag("example_pipeline_chain")
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
def test_four_hours_of_the_chain_give_hourly_numbers_equal_to_a_batch_over_accepted_events(
    chain_hours,
):
    demo = chain_hours
    base, store = demo.base, WatermarkStoreHook(str(demo.base / "store"))
    for hour, (run, states) in zip(demo.hours, demo.runs["example_pipeline_chain"], strict=True):
        end_ms = int((data.START + timedelta(hours=hour)).timestamp() * 1000)
        if hour == HELD_BACK_HOUR:  # ``orders`` stays behind 03:00: the first stage gives up, nothing runs
            assert set(states.values()) == {"skipped"}, (hour, states)
            continue
        assert set(states.values()) == {"success"}, (hour, states)
        assert xcom(run, "wait_for_orders_5m")["watermark_ms"] >= end_ms
    assert store.read_latest("orders_1h")["lower_ms"] == end_ms
    assert store.read_latest("orders_5m")["upstream"] == "orders"
    assert store.read_latest("orders_1h")["upstream"] == "orders_5m"
    assert store.read_latest("orders_5m")["dag_id"] == "example_pipeline_chain"  # the page reads its sensors

    five = pq.read_table(base / "orders_5m").to_pylist()
    rejected = {r["order_id"] for r in pq.read_table(base / "orders_5m_late").to_pylist()}
    assert rejected == {"o-X1", "o-T1", "o-T2"}  # no event time; too late at 02:00; too late at 04:00
    last_run = data.START + timedelta(hours=demo.hours[-1])
    batch: dict[tuple[str, int], list] = defaultdict(lambda: [0, 0])
    for event in order_events.events():
        if event["ingested_at"] <= last_run and event["order_id"] not in rejected:
            t = int(event["event_time"].timestamp() * 1000)
            slot = batch[(event["region"], t - t % HOUR)]
            slot[0] += 1
            slot[1] += event["amount"]
    expected = {slot: (n, revenue) for slot, (n, revenue) in batch.items() if slot[1] + HOUR <= end_ms}
    hourly = pq.read_table(base / "orders_1h").to_pylist()
    assert last_panes(hourly, ("orders", "revenue")) == expected
    assert any(r["pane"] == "LATE" for r in hourly) and any(r["retraction"] for r in five)
    # o-L4 (event 01:48, arrived 02:10) reached the hour 01:00 through the 04:00 runs: a LATE pane of each stage
    late_at_four = {(r["region"], r["window_start"]) for r in hourly if r["pane"] == "LATE" and r["wm_run"] == 3}
    assert ("eu", int((data.START + timedelta(hours=1)).timestamp() * 1000)) in late_at_four
    assert not (base / "orders_1h_late").exists()
    # the busiest 5-minute window of an hour is the largest of its live 5-minute panes
    five_last = last_panes(five, ("orders",))
    for (region, start), values in last_panes(hourly, ("busiest_5m",)).items():
        inside = [v[0] for (r, s), v in five_last.items() if r == region and start <= s < start + HOUR]
        assert values == (max(inside),)
    committed = demo.variables[windowed_variable_key("orders_1h")]
    # the rollup consumed the three versions its upstream committed (01:00, 02:00, 04:00) in its own three runs
    assert committed["upstream_version"] == 3 and committed["live_path"].endswith("/pipelines/orders_1h/live/v3")
    assert datetime.fromtimestamp(committed["watermark_ms"] / 1000, UTC) == last_run
