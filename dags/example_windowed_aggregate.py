"""Example: orders and revenue per region in 15-minute event-time windows, with late data and retractions.

Every hour, a sensor waits in the triggerer until the ``orders`` stream's watermark passes the run's
``data_interval_end``; then ``WindowedAggregateOperator`` reads the order events that arrived since its
previous successful run (``ingested_at`` after the committed cut-off, up to ``data_interval_end``) and a
Spark job (on the embedded Spark Connect server here; through ``SparkSubmitHook`` with a ``spark`` connection)
updates the open windows and fires their panes:

- ON_TIME once the watermark passes a window's end; EARLY for incomplete windows that got data
  (``early_firing=True``);
- LATE when data arrives for a complete window within the 30 minutes of allowed lateness; with
  ``ACCUMULATING_AND_RETRACTING`` each new pane is preceded by a retraction row repeating the pane it
  replaces, so a consumer summing panes stays correct;
- events older than the previous watermark minus the lateness are too late: not aggregated, written to
  ``orders_15m_late/`` with reason ``TOO_LATE`` (events without a time: ``INVALID_EVENT_TIME``).

The run commits (the Variable ``wm_windows__orders_15m``, XCom, the ``orders_15m`` asset) only after the
job succeeded; a failed or retried run starts again from the last committed state. If the watermark does
not pass the interval end within the sensor's timeout, the sensor soft-fails and the run skips the
aggregate: the next run picks up every event that arrived since.

Connections and paths:
- Spark: ``spark_conn_id=None`` runs the job as a client of the embedded Spark Connect server (started on
  first use). Set the environment variable ``WM_SPARK_CONN_ID`` to the id of a ``spark_connect`` connection
  (``spark-connect://host:15002``) or of a ``spark`` connection (``spark://127.0.0.1:7077``, spark-submit).
- Data and store: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``), holding
  ``order_events/`` (Parquet: ``order_id, region, event_time, amount, ingested_at``), the outputs
  ``orders_15m/`` (panes, by ``wm_run``) and ``orders_15m_late/``, and ``store/``, the watermark store.
  The ``orders`` watermark comes from ``dags/example_stream_watermark.py``'s controller (same store).
  ``python -m airflow_provider_wm.demo`` generates the data and runs both DAGs every hour.
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
OUTPUT = f"{BASE}/orders_15m"

START = datetime(2026, 1, 5, tzinfo=UTC)

with DAG(
    dag_id="example_windowed_aggregate",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(hours=1), last=START + timedelta(hours=3), end=START + timedelta(hours=4)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "watermark", "windows"],
    doc_md=__doc__,
) as dag:
    wait_for_orders = StreamWatermarkSensor(
        task_id="wait_for_orders",
        stream="orders",
        store_path=STORE,
        # the streams come from another DAG's controller, which may not have run yet on a new deployment
        fail_on_unknown_stream=False,
        deferrable=True,
        poke_interval=2,
        timeout=int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600")),
        soft_fail=True,
    )
    # --8<-- [start:aggregate]
    orders_15m = WindowedAggregateOperator(
        task_id="orders_15m",
        pipeline="orders_15m",
        events=f"{BASE}/order_events",
        event_time="event_time",
        arrival_column="ingested_at",
        keys=["region"],
        window=tumbling("PT15M"),
        aggregates={"orders": "count(*)", "revenue": "sum(amount)", "avg_amount": "avg(amount)"},
        watermark={"stream": "orders"},
        allowed_lateness="PT30M",
        accumulation="ACCUMULATING_AND_RETRACTING",
        early_firing=True,
        output=OUTPUT,
        store_path=STORE,
        spark_conn_id=os.environ.get("WM_SPARK_CONN_ID") or None,
        asset=Asset(name="orders_15m", uri=f"file://{OUTPUT}"),
    )
    # --8<-- [end:aggregate]

    wait_for_orders >> orders_15m
