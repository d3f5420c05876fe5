"""The partition-report example: scheduled by Airflow's PartitionedAssetTimetable on the partitions example's keys.

That it runs exactly once per key emitted, under a real scheduler, is tests/integration/test_partitioned_assets.py.
"""

from __future__ import annotations

from pathlib import Path

from airflow_provider_wm.core.asset_partitions import partition_event_key
from airflow_provider_wm.core.partitions import iso_ms

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load(name: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{name}.py"))
    assert bag.import_errors == {}
    return bag.get_dag(name)


def test_the_report_is_partitioned_on_the_asset_whose_events_the_partitions_example_keys(airflow_db):
    from airflow.sdk import PartitionedAssetTimetable
    from airflow.serialization.decoders import decode_timetable
    from airflow.serialization.encoders import encode_timetable

    report = load("example_partition_report")
    timetable = report.timetable
    assert isinstance(timetable, PartitionedAssetTimetable)
    assert timetable.asset_condition.name == "orders_daily"
    producer = load("example_incremental_partitions").get_task("orders_daily")
    assert producer.emit_partition_keys is True and [a.name for a in producer.outlets] == ["orders_daily"]
    # the key the producer emits for region eu on 2026-01-05 is the report's partition eu|2026-01-05 (mapped by
    # the scheduler's side of the timetable, as the DAG processor serialises it)
    key = partition_event_key(iso_ms("2026-01-05"), "eu", producer.spec.timezone)
    mapper = decode_timetable(encode_timetable(timetable)).get_partition_mapper(name="orders_daily")
    assert mapper.to_downstream(key) == "eu|2026-01-05"
