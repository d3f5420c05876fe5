"""The demo's four hours for the chain and merge example tests: per hour the controller DAG, then the DAG under
test, which waits on the controller's streams, on real Airflow and Spark (one run of each per hour, so the tests
only read results). Each example gets its own hours, so that two pytest-xdist workers can run them at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.demo import data, order_events
from tests.airflow_helpers import load_example_dag, run_dag

DEMO_HOURS = (1, 2, 3, 4)
"""The controller holds ``orders`` back at 03:00 (a writer shut down): the 03:00 runs' sensors give up and
skip the rest of their runs, and the 04:00 runs catch up on both hours."""
HELD_BACK_HOUR = 3
CONTROLLER_DAG = "example_stream_watermark"


@dataclass
class DemoHours:
    base: Path
    hours: tuple[int, ...]
    runs: dict[str, list[tuple[Any, dict[str, str]]]] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    """The Variables the runs committed (deleted afterwards, so that later tests start from no state)."""


def run_demo_hours(base: Path, dag_id: str, pipelines: tuple[str, ...]) -> DemoHours:
    """Every hour of :data:`DEMO_HOURS`: the controller DAG, then ``dag_id``; ``pipelines`` are its windowed
    pipelines, whose Variables (with the controller's) start empty and are collected at the end."""
    from airflow.models.variable import Variable

    from airflow_provider_wm.state import cutoff_variable_key, windowed_variable_key

    saved = {name: os.environ.get(name) for name in ("WM_EXAMPLE_BASE", "WM_EXAMPLE_SENSOR_TIMEOUT")}
    # a sensor gives up after 3 s: the watermarks it waits on were published by the runs before it, or never (its
    # first poll always happens, so a published watermark is always seen)
    os.environ.update(WM_EXAMPLE_BASE=str(base), WM_EXAMPLE_SENSOR_TIMEOUT="3")
    try:
        keys = [cutoff_variable_key("example_controller")] + [windowed_variable_key(p) for p in pipelines]
        for key in keys:  # the session's DB is shared: start from no state
            Variable.delete(key)
        data.write(base)
        order_events.write(base)
        dags = {name: load_example_dag(name) for name in (CONTROLLER_DAG, dag_id)}
        result = DemoHours(base, DEMO_HOURS, {name: [] for name in dags})
        for hour in DEMO_HOURS:
            for name, dag in dags.items():
                result.runs[name].append(run_dag(dag, data.START + timedelta(hours=hour)))
        for key in keys:
            result.variables[key] = Variable.get(key, default_var=None, deserialize_json=True)
            Variable.delete(key)
        return result
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def chain_hours(airflow_db, tmp_path_factory) -> Iterator[DemoHours]:
    yield run_demo_hours(tmp_path_factory.mktemp("chain-hours"), "example_pipeline_chain", ("orders_5m", "orders_1h"))


@pytest.fixture(scope="module")
def merge_hours(airflow_db, tmp_path_factory) -> Iterator[DemoHours]:
    yield run_demo_hours(
        tmp_path_factory.mktemp("merge-hours"), "example_orders_deliveries", ("orders_deliveries_10m",)
    )
