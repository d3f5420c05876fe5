"""The DAG tests/test_lineage.py runs in a subprocess: the three stateful operators on the demo data
(``write_example_data``), each with an asset. Loaded by path, so it imports nothing of tests/."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, Asset

from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling

DAG_ID = "wm_lineage"


def lineage_dag(base: str) -> DAG:
    """The three stateful operators on the demo data (``write_example_data``), each with an asset."""
    with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        ControllerWatermarkOperator(
            task_id="controller",
            controller="lineage_controller",
            marks_path=f"{base}/marks",
            segments_path=f"{base}/segments",
            store_path=f"{base}/store",
            writer_timeout=timedelta(minutes=30),
            asset=Asset(name="lineage_streams", uri=f"file://{base}/store/streams"),
        )
        WindowedAggregateOperator(
            task_id="windows",
            pipeline="lineage_windows",
            events=f"{base}/order_events",
            event_time="event_time",
            arrival_column="ingested_at",
            keys=["region"],
            window=tumbling("PT15M"),
            aggregates={"orders": "count(*)"},
            watermark={"max_delay": "PT10M"},
            output=f"{base}/orders_15m",
            store_path=f"{base}/store",
            asset=Asset(name="lineage_orders_15m", uri=f"file://{base}/orders_15m"),
        )
        IncrementalPartitionsOperator(
            task_id="partitions",
            pipeline="lineage_daily",
            source=f"{base}/orders",
            source_partition_column="event_date",
            time_column="event_time",
            watermark={"from": "2026-01-01", "to": "P0D"},
            partition="daily",
            units=["eu", "us"],
            unit_column="region",
            transform="airflow_provider_wm.demo.transforms:daily_orders",
            target=f"{base}/orders_daily",
            store_path=f"{base}/store",
            asset=Asset(name="lineage_orders_daily", uri=f"file://{base}/orders_daily"),
        )
    return dag
