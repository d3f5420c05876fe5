"""Example: merge two streams, orders and deliveries, per 10-minute window and region (Apex's MergeWindowedOperator).

Every hour, ``wait_for_both`` waits until the coalesced watermark of ``orders`` and ``deliveries`` passes the
run's ``data_interval_end``, then ``orders_deliveries_10m`` reads the order and delivery events that arrived
since its previous run into the same 10-minute windows per region. Each pane holds both inputs' aggregates
side by side: orders placed and their revenue, deliveries made. The aggregate's watermark is the minimum of
the two streams' watermarks (a stream whose watermark has not moved for 45 minutes is idle and left out), so
a window fires ON_TIME only once both inputs have passed it; a delivery ingested after its window fired
updates it with a LATE pane (30 minutes of lateness).

The watermarks come from ``dags/example_stream_watermark.py``'s controller (same ``$WM_EXAMPLE_BASE``); the
events are ``order_events/`` and ``delivery_events/``; the panes go to ``orders_deliveries_10m/``.
``python -m airflow_provider_wm.demo`` runs this DAG after the controller every hour.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable

from airflow_provider_wm.demo.schedule import demo_schedule
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
STORE = f"{BASE}/store"

START = datetime(2026, 1, 5, tzinfo=UTC)

with DAG(
    dag_id="example_orders_deliveries",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(hours=1), last=START + timedelta(hours=3), end=START + timedelta(hours=4)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "watermark", "windows"],
    doc_md=__doc__,
) as dag:
    wait_for_both = StreamWatermarkSensor(
        task_id="wait_for_both",
        streams=["orders", "deliveries"],
        # the streams come from another DAG's controller, which may not have run yet on a new deployment
        fail_on_unknown_stream=False,
        idle_timeout=timedelta(minutes=45),
        store_path=STORE,
        deferrable=True,
        poke_interval=2,
        timeout=int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600")),
        soft_fail=True,
    )
    # --8<-- [start:merge]
    orders_deliveries_10m = WindowedAggregateOperator(
        task_id="orders_deliveries_10m",
        pipeline="orders_deliveries_10m",
        inputs={
            "orders": {
                "events": f"{BASE}/order_events",
                "event_time": "event_time",
                "arrival_column": "ingested_at",
                "watermark": {"stream": "orders"},
            },
            "deliveries": {
                "events": f"{BASE}/delivery_events",
                "event_time": "delivered_at",
                "arrival_column": "ingested_at",
                "watermark": {"stream": "deliveries"},
            },
        },
        idle_timeout=timedelta(minutes=45),
        keys=["region"],
        window=tumbling("PT10M"),
        aggregates={"orders": "count(orders.*)", "revenue": "sum(orders.amount)", "deliveries": "count(deliveries.*)"},
        allowed_lateness="PT30M",
        output=f"{BASE}/orders_deliveries_10m",
        store_path=STORE,
        spark_conn_id=os.environ.get("WM_SPARK_CONN_ID") or None,
    )
    # --8<-- [end:merge]

    wait_for_both >> orders_deliveries_10m
