"""Hours of the demo shared by the chain and merge example tests: per hour the controller DAG, then the DAGs
that wait on its streams, on real Airflow and Spark (one run of each, so the tests only read results)."""

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

CHAINED_HOURS = (1, 2, 3, 4)
"""The demo's four hours. The controller holds ``orders`` back at 03:00 (a writer shut down): the 03:00 runs'
sensors give up and skip the rest of their runs, and the 04:00 runs catch up on both hours."""
HELD_BACK_HOUR = 3
DEMO_HOURS_GROUP = "demo_hours"
"""The xdist group of the tests that read these hours: one worker runs the hours once for all of them."""


@dataclass
class DemoHours:
    base: Path
    hours: tuple[int, ...]
    runs: dict[str, list[tuple[Any, dict[str, str]]]] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    """The Variables the runs committed (deleted afterwards, so that later tests start from no state)."""


@pytest.fixture(scope="session")
def downstream_of_the_controller(airflow_db, tmp_path_factory) -> Iterator[DemoHours]:
    from airflow.models.variable import Variable

    from airflow_provider_wm.state import cutoff_variable_key, windowed_variable_key

    base = tmp_path_factory.mktemp("demo-hours")
    saved = {name: os.environ.get(name) for name in ("WM_EXAMPLE_BASE", "WM_EXAMPLE_SENSOR_TIMEOUT")}
    os.environ.update(WM_EXAMPLE_BASE=str(base), WM_EXAMPLE_SENSOR_TIMEOUT="10")
    try:
        keys = [cutoff_variable_key("example_controller")] + [
            windowed_variable_key(p) for p in ("orders_5m", "orders_1h", "orders_deliveries_10m")
        ]
        for key in keys:  # the session's DB is shared: start from no state
            Variable.delete(key)
        data.write(base)
        order_events.write(base)
        dag_ids = ("example_stream_watermark", "example_pipeline_chain", "example_orders_deliveries")
        dags = {dag_id: load_example_dag(dag_id) for dag_id in dag_ids}
        result = DemoHours(base, CHAINED_HOURS, {dag_id: [] for dag_id in dag_ids})
        for hour in CHAINED_HOURS:
            for dag_id, dag in dags.items():
                result.runs[dag_id].append(run_dag(dag, data.START + timedelta(hours=hour)))
        for key in keys:
            result.variables[key] = Variable.get(key, default_var=None, deserialize_json=True)
            Variable.delete(key)
        yield result
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
