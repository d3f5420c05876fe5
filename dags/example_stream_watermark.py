"""Example: controller watermark -> wait for the stream watermark -> use it.

Every hour, a Pravega-style controller round consolidates the writers' marks of the ``orders`` and
``payments`` streams into stream watermarks (Spark job through ``SparkSubmitHook``), a sensor waits in the
triggerer until the ``orders`` watermark passes the run's ``data_interval_end`` (all of the interval's
events have arrived), and a downstream task reads the watermark the sensor saw.

Connections and paths:
- Spark: ``spark_conn_id=None`` runs the job as a client of the embedded Spark Connect server (started on
  first use). Set the environment variable ``WM_SPARK_CONN_ID`` to the id of a ``spark_connect`` connection
  (``spark-connect://host:15002``) or of a ``spark`` connection (``spark://127.0.0.1:7077``, spark-submit).
- Data and store: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``), holding
  ``marks/`` and ``segments/`` (Parquet, see docs/contracts.md) and ``store/``, the watermark
  store. ``python -m airflow_provider_wm.demo`` generates the data and runs this DAG.
"""

from __future__ import annotations

# --8<-- [start:dag]
import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, task

from airflow_provider_wm.demo.schedule import demo_schedule
from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
START = datetime(2026, 1, 5, tzinfo=UTC)

with DAG(
    dag_id="example_stream_watermark",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(hours=1), last=START + timedelta(hours=3), end=START + timedelta(hours=4)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "watermark"],
    doc_md=__doc__,
) as dag:
    # --8<-- [start:controller]
    controller = ControllerWatermarkOperator(
        task_id="controller_watermark",
        controller="example_controller",
        marks_path=f"{BASE}/marks",
        segments_path=f"{BASE}/segments",
        store_path=f"{BASE}/store",
        writer_timeout=timedelta(minutes=30),
        initial_delay=timedelta(minutes=2),
        spark_conn_id=os.environ.get("WM_SPARK_CONN_ID") or None,  # None: the embedded Spark Connect server
        asset=Asset(name="example_controller_watermarks", uri=f"file://{BASE}/store/streams"),
    )
    # --8<-- [end:controller]
    # --8<-- [start:sensor]
    wait_for_orders = StreamWatermarkSensor(
        task_id="wait_for_orders", stream="orders", store_path=f"{BASE}/store", deferrable=True, poke_interval=2,
        timeout=int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600")), soft_fail=True,
    )  # fmt: skip
    # --8<-- [end:sensor]

    # --8<-- [start:downstream]
    @task
    def use_watermark(watermark: dict) -> str:
        """Work that needs the whole interval: here it reports the watermark the sensor saw."""
        return f"orders complete up to {datetime.fromtimestamp(watermark['watermark_ms'] / 1000, tz=UTC)}"

    controller >> wait_for_orders >> use_watermark(wait_for_orders.output)
    # --8<-- [end:downstream]
# --8<-- [end:dag]
