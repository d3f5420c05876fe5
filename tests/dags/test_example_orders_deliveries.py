"""The merge example: orders and deliveries in the same 10-minute windows per region, on real Airflow and Spark
after the controller; each pane holds both inputs' aggregates, and the windows fire on the two streams'
coalesced watermark."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from airflow_provider_wm.core.windowing import MergedWatermark, StoreWatermark
from airflow_provider_wm.core.windows import Tumbling
from airflow_provider_wm.demo import data, order_events
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.airflow_helpers import load_example_dag, xcom
from tests.dags.conftest import HELD_BACK_HOUR

TEN_MINUTES = 600_000


def test_the_merge_reads_both_inputs_into_the_same_windows(airflow_db):
    dag = load_example_dag("example_orders_deliveries")
    op = dag.get_task("orders_deliveries_10m")
    assert [i["name"] for i in op.inputs] == ["orders", "deliveries"] and op.spec.window == Tumbling(TEN_MINUTES)
    assert op.spec.watermark == MergedWatermark(
        (("orders", StoreWatermark("orders")), ("deliveries", StoreWatermark("deliveries"))), 45 * 60_000
    )
    assert [(a.name, a.function, a.column) for a in op.spec.aggregates] == [
        ("orders", "count", "orders__wm_row"),
        ("revenue", "sum", "orders__amount"),
        ("deliveries", "count", "deliveries__wm_row"),
    ]
    assert dag.get_task("wait_for_both").upstream_task_ids == set() and op.upstream_task_ids == {"wait_for_both"}


def last_panes(rows: list[dict]) -> dict[tuple[str, int], tuple]:
    last: dict[tuple[str, int], tuple] = {}
    for row in sorted(rows, key=lambda r: (r["wm_run"], r["pane_index"])):
        last[(row["region"], row["window_start"])] = (row["orders"], row["revenue"], row["deliveries"])
    return last


def ten_minute_window(moment) -> int:
    t = int(moment.timestamp() * 1000)
    return t - t % TEN_MINUTES


@pytest.mark.slow
def test_four_hours_merge_orders_and_deliveries_per_window_like_a_batch(merge_hours):
    demo = merge_hours
    for hour, (run, states) in zip(demo.hours, demo.runs["example_orders_deliveries"], strict=True):
        if hour == HELD_BACK_HOUR:  # ``orders`` stays behind 03:00 and is not idle: the merge waits for it
            assert states == {"wait_for_both": "skipped", "orders_deliveries_10m": "skipped"}, (hour, states)
            continue
        assert states == {"wait_for_both": "success", "orders_deliveries_10m": "success"}, (hour, states)
        assert xcom(run, "wait_for_both")["idle"] == []
    last_run = data.START + timedelta(hours=demo.hours[-1])
    watermark_ms = int(last_run.timestamp() * 1000)
    rows = pq.read_table(demo.base / "orders_deliveries_10m").to_pylist()
    rejected = {r["orders__order_id"] for r in pq.read_table(demo.base / "orders_deliveries_10m_late").to_pylist()}
    assert rejected == {"o-X1", "o-T1", "o-T2"}  # no event time; too late at 02:00; too late at 04:00
    orders: Counter = Counter()
    revenue: Counter = Counter()
    for e in order_events.events():
        if e["ingested_at"] <= last_run and e["order_id"] not in rejected:
            orders[(e["region"], ten_minute_window(e["event_time"]))] += 1
            revenue[(e["region"], ten_minute_window(e["event_time"]))] += e["amount"]
    delivered = Counter(
        (d["region"], ten_minute_window(d["delivered_at"]))
        for d in order_events.deliveries()
        if d["ingested_at"] <= last_run
    )
    windows = {w for w in [*orders, *delivered] if w[1] + TEN_MINUTES <= watermark_ms}
    expected = {w: (orders[w], revenue[w] if orders[w] else None, delivered[w]) for w in windows}
    assert {w: v for w, v in last_panes(rows).items() if w[1] + TEN_MINUTES <= watermark_ms} == expected
    assert {r["pane"] for r in rows} >= {"ON_TIME", "LATE"}
    derived = WatermarkStoreHook(str(demo.base / "store")).read_latest("orders_deliveries_10m")
    assert derived["lower_ms"] == watermark_ms and derived["upstream"] == "orders, deliveries"
