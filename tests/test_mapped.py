"""Mapped tasks check their arguments when the DAG is parsed, as unmapped ones do."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from airflow.sdk import DAG, task

from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
from tests.airflow_helpers import fresh_dag

PARTITIONS = {
    "task_id": "orders", "source": "/src", "time_column": "t", "target": "/t", "store_path": "/wm",
    "watermark": {"from": "2026-01-01", "to": "P0D"},
}  # fmt: skip


def test_a_bad_argument_given_to_partial_fails_the_parse_naming_it_and_the_mapped_values():
    with fresh_dag("mapped_bad_partial"), pytest.raises(ValueError, match=r"grace_period=-5") as raised:
        IncrementalPartitionsOperator.partial(**PARTITIONS, grace_period=-5).expand(pipeline=["eu", "us"])
    assert raised.value.__notes__ == ["in the mapped task 'orders' with pipeline='eu'"]


def test_a_bad_mapped_value_fails_the_parse_naming_it():
    with fresh_dag("mapped_bad_value"), pytest.raises(ValueError, match=r"pipeline='u s'") as raised:
        IncrementalPartitionsOperator.partial(**PARTITIONS).expand(pipeline=["eu", "u s"])
    assert raised.value.__notes__ == ["in the mapped task 'orders' with pipeline='u s'"]


def test_bad_windowed_and_sensor_arguments_fail_the_parse_when_mapped():
    with fresh_dag("mapped_windowed"), pytest.raises(ValueError, match=r"window='5 minutes'"):
        WindowedAggregateOperator.partial(
            task_id="w", events="/e", event_time="t", arrival_column="a", window="5 minutes",
            aggregates={"n": "count(*)"}, output="/o", store_path="/s", watermark={"stream": "x"},
        ).expand(pipeline=["a", "b"])  # fmt: skip
    with fresh_dag("mapped_sensor"), pytest.raises(ValueError, match=r"timeout=-1"):
        StreamWatermarkSensor.partial(task_id="s", store_path="/s", timeout=-1).expand(stream=["a"])


def test_a_good_mapped_task_parses_with_the_dags_default_args_and_adds_only_itself():
    dag = DAG(
        dag_id="mapped_default_args", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC),
        default_args={"store_path": "/wm"},
    )  # fmt: skip
    with dag:
        arguments = {name: value for name, value in PARTITIONS.items() if name != "store_path"}
        IncrementalPartitionsOperator.partial(**arguments).expand(pipeline=["eu", "us"])
    assert list(dag.task_dict) == ["orders"]


def test_values_from_an_upstream_task_are_checked_when_the_instances_run_not_at_parse_time():
    with fresh_dag("mapped_xcom"):

        @task
        def pipelines() -> list[str]:
            return ["u s"]  # a bad name, known only at run time

        IncrementalPartitionsOperator.partial(**PARTITIONS).expand(pipeline=pipelines())
