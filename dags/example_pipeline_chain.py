"""Example: a chain of watermark-driven jobs, each stage waiting on the previous stage's output watermark.

1. ``example_stream_watermark``'s controller publishes the ``orders`` stream watermark.
2. Here, every hour, ``wait_for_orders`` waits until ``orders`` passes ``data_interval_end``, then
   ``orders_5m`` aggregates the order events into 5-minute windows per region (early panes, 30 minutes of
   lateness, retractions) and publishes what it emitted as the derived stream ``orders_5m``: the end of the
   last 5-minute window that fired ON_TIME.
3. ``wait_for_orders_5m`` waits until ``orders_5m`` passes ``data_interval_end``, then ``orders_1h`` rolls
   the 5-minute panes up into hourly windows (window propagation): it reads panes, not events; a retraction
   undoes the pane it repeats and a late pane replaces the one before it, so the hourly numbers stay exact.
   It publishes the derived stream ``orders_1h`` in turn, for whatever waits on it.

The Watermarks page shows ``orders_5m`` and ``orders_1h`` beside ``orders``, each with its upstream.

Connections and paths: as ``example_windowed_aggregate`` (``$WM_EXAMPLE_BASE``, ``WM_SPARK_CONN_ID``); the
outputs are ``orders_5m/`` and ``orders_1h/`` (panes by ``wm_run``) with their ``_late`` folders.
``python -m airflow_provider_wm.demo`` runs this DAG after the controller every hour.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable

from airflow_provider_wm.demo.schedule import demo_schedule
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
STORE = f"{BASE}/store"
SPARK_CONN_ID = os.environ.get("WM_SPARK_CONN_ID") or None
SENSOR_TIMEOUT = int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600"))

START = datetime(2026, 1, 5, tzinfo=UTC)


# --8<-- [start:wait]
def wait_for(stream: str) -> StreamWatermarkSensor:
    """Every stage waits the same way: in the triggerer until ``stream`` passes the interval end; a
    stream that stays behind skips the rest of the run (the next run covers its data)."""
    return StreamWatermarkSensor(
        task_id=f"wait_for_{stream}",
        stream=stream,
        # the streams come from another DAG's controller, which may not have run yet on a new deployment
        fail_on_unknown_stream=False,
        store_path=STORE,
        deferrable=True,
        poke_interval=2,
        timeout=SENSOR_TIMEOUT,
        soft_fail=True,
    )
    # --8<-- [end:wait]


with DAG(
    dag_id="example_pipeline_chain",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(hours=1), last=START + timedelta(hours=3), end=START + timedelta(hours=4)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "watermark", "windows"],
    doc_md=__doc__,
) as dag:
    wait_for_orders = wait_for("orders")
    # --8<-- [start:stage]
    orders_5m = WindowedAggregateOperator(
        task_id="orders_5m",
        pipeline="orders_5m",
        events=f"{BASE}/order_events",
        event_time="event_time",
        arrival_column="ingested_at",
        keys=["region"],
        window=tumbling("PT5M"),
        aggregates={"orders": "count(*)", "revenue": "sum(amount)"},
        watermark={"stream": "orders"},
        allowed_lateness="PT30M",
        accumulation="ACCUMULATING_AND_RETRACTING",
        early_firing=True,
        output=f"{BASE}/orders_5m",
        store_path=STORE,
        spark_conn_id=SPARK_CONN_ID,
    )
    # --8<-- [end:stage]
    wait_for_orders_5m = wait_for("orders_5m")
    # --8<-- [start:rollup]
    orders_1h = WindowedAggregateOperator(
        task_id="orders_1h",
        pipeline="orders_1h",
        upstream=orders_5m,
        window=tumbling("PT1H"),
        keys=["region"],
        aggregates={"orders": "sum(orders)", "revenue": "sum(revenue)", "busiest_5m": "max(orders)"},
        allowed_lateness="PT30M",
        output=f"{BASE}/orders_1h",
        store_path=STORE,
        spark_conn_id=SPARK_CONN_ID,
        asset=Asset(name="orders_1h", uri=f"file://{BASE}/orders_1h"),
    )
    # --8<-- [end:rollup]

    wait_for_orders >> orders_5m >> wait_for_orders_5m >> orders_1h
