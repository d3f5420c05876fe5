"""Example: an incremental, daily-partitioned orders table with a 2-day grace period, per region.

Every day the pipeline plans its work units (day x region) from the committed state: new days run in
full, the last two days run again to pick up late orders (grace), failed units run again, everything
older is skipped. The Spark job (through ``SparkSubmitHook``) reads only those days of the source
(partition pruning), converts amounts, and overwrites exactly the output of the units it ran. A sensor
then waits until every unit of the run's day has succeeded, and a last task reads that day's output.
Each day x region written is an event of the partitioned asset ``orders_daily`` (``emit_partition_keys``):
``example_partition_report`` runs once per such key.

Paths: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``) holds ``orders/`` (the source,
partitioned by ``event_date``), ``orders_daily/`` (the target) and ``store/`` (plans, manifests, state).
``python -m airflow_provider_wm.demo`` generates the data and runs this DAG for several simulated days.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, task

from airflow_provider_wm.demo.schedule import demo_schedule
from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.sensors.partition_watermark import PartitionWatermarkSensor

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
STORE = f"{BASE}/store"
TARGET = f"{BASE}/orders_daily"

START = datetime(2026, 1, 1, tzinfo=UTC)

with DAG(
    dag_id="example_incremental_partitions",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(days=1), last=START + timedelta(days=4), end=START + timedelta(days=8)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "partitions"],
    doc_md=__doc__,
) as dag:
    # --8<-- [start:partitions]
    orders_daily = IncrementalPartitionsOperator(
        task_id="orders_daily",
        pipeline="orders_daily",
        source=f"{BASE}/orders",
        source_partition_column="event_date",
        source_partition_timezone="UTC",  # event_date is the UTC date of event_time: read exactly those dates
        time_column="event_time",
        watermark={"from": "2026-01-01", "to": "P0D"},
        partition="daily",
        grace_period=timedelta(days=2),
        units=["eu", "us"],
        unit_column="region",
        transform="airflow_provider_wm.demo.transforms:daily_orders",
        target=TARGET,
        store_path=STORE,
        asset=Asset(name="orders_daily", uri=f"file://{TARGET}"),
        emit_partition_keys=True,  # an asset event per day x region written: example_partition_report
        spark_conn_id=os.environ.get("WM_SPARK_CONN_ID") or None,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
    # --8<-- [end:partitions]
    # --8<-- [start:sensor]
    day_complete = PartitionWatermarkSensor(
        task_id="day_complete",
        pipeline="orders_daily",
        store_path=STORE,
        deferrable=True,
        poke_interval=2,
        timeout=int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600")),
        soft_fail=True,
    )
    # --8<-- [end:sensor]

    @task
    def daily_revenue(data_interval_start: datetime | None = None) -> dict[str, float]:
        """Revenue per region of the completed day, read from the target's partitions."""
        import pyarrow.dataset as ds

        assert data_interval_start is not None
        key = data_interval_start.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        table = ds.dataset(TARGET, format="parquet", partitioning="hive").to_table(
            filter=ds.field("wm_partition") == key, columns=["wm_unit", "amount_eur"]
        )
        revenue: dict[str, float] = {}
        for unit, amount in zip(
            table.column("wm_unit").to_pylist(), table.column("amount_eur").to_pylist(), strict=True
        ):
            revenue[unit] = round(revenue.get(unit, 0.0) + amount, 2)
        print(f"revenue of {key}: {revenue}")
        return revenue

    orders_daily >> day_complete >> daily_revenue()
