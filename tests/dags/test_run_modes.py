"""Connect mode and submit mode give the same manifests and outputs: the example DAGs run over the same demo
data once with no Spark connection (the embedded Spark Connect server) and once with a ``spark`` connection
whose master is ``local[*]`` (``spark-submit``), and everything they wrote is compared. A stray file in the marks
folder is set aside alike in both."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from airflow.models.variable import Variable

from airflow_provider_wm.demo import data, order_events, orders_data
from airflow_provider_wm.state import cutoff_variable_key, pipeline_variable_key, windowed_variable_key
from tests.airflow_helpers import load_example_dag, run_dag

HOURLY_DAGS = (
    "example_stream_watermark",
    "example_windowed_aggregate",
    "example_pipeline_chain",
    "example_orders_deliveries",
)
VARIABLES = [
    cutoff_variable_key("example_controller"),
    *(windowed_variable_key(p) for p in ("orders_15m", "orders_5m", "orders_1h", "orders_deliveries_10m")),
    pipeline_variable_key("orders_daily"),
]
OUTPUTS = ("orders_15m", "orders_15m_late", "orders_5m", "orders_1h", "orders_deliveries_10m", "orders_daily")
RUN_SPECIFIC = {"run_id", "wm_run_id", "wm_write_id", "write_id", "duration_s", "committed_at", "published_at_ms"}


def normalised(value: Any, base: Path) -> Any:
    """``value`` without what differs between two runs of the same work: run ids, times of day, the base path
    and the run folders named after run ids."""
    if isinstance(value, dict):
        return {k: normalised(v, base) for k, v in sorted(value.items()) if k not in RUN_SPECIFIC}
    if isinstance(value, list):
        return [normalised(v, base) for v in value]
    if isinstance(value, str):
        text = value.replace(str(base), "<base>")
        return re.sub(r"-manual__[^/]*", "", text)
    return value


def snapshot(base: Path) -> dict[str, Any]:
    """Every manifest and watermark record in the store, every output dataset's rows, every Variable."""
    store = base / "store"
    documents = {
        normalised(str(path.relative_to(store)), base): normalised(json.loads(path.read_text()), base)
        for path in sorted(store.rglob("*.json"))
        if path.name in ("manifest.json", "request.json", "latest.json") or path.parent.name == "log"
    }
    outputs = {}
    for name in OUTPUTS:
        if (base / name).exists():
            table = ds.dataset(base / name, format="parquet", partitioning="hive").to_table()
            rows = [normalised(row, base) for row in table.to_pylist()]
            outputs[name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    variables = {key: normalised(Variable.get(key, default_var=None, deserialize_json=True), base) for key in VARIABLES}
    return {"documents": documents, "outputs": outputs, "variables": variables}


def run_examples(base: Path) -> dict[str, Any]:
    for key in VARIABLES:  # the session's DB is shared: start from no state
        Variable.delete(key)
    data.write(base)
    (base / "marks" / "stray.parquet").write_bytes(b"not Parquet: every controller round sets it aside")
    order_events.write(base)
    orders_data.write_history(base / "orders", orders_data.FIRST_RUN)
    dags = {dag_id: load_example_dag(dag_id) for dag_id in HOURLY_DAGS}
    for hour in (1, 2):  # the second hour starts from the first one's state; the chain and merge run once
        for dag_id, dag in dags.items():
            if hour == 1 and dag_id in ("example_pipeline_chain", "example_orders_deliveries"):
                continue
            _run, states = run_dag(dag, data.START + timedelta(hours=hour))
            assert set(states.values()) == {"success"}, (dag_id, hour, states)
    _run, states = run_dag(load_example_dag("example_incremental_partitions"), orders_data.FIRST_RUN)
    assert set(states.values()) == {"success"}, states
    result = snapshot(base)
    for key in VARIABLES:
        Variable.delete(key)
    return result


@pytest.mark.slow
def test_the_example_dags_write_the_same_manifests_and_outputs_in_connect_and_submit_mode(
    airflow_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "10")
    monkeypatch.setenv("AIRFLOW_CONN_WM_LOCAL_SUBMIT", '{"conn_type": "spark", "host": "local[*]"}')
    results, seconds = {}, {}
    for mode, conn_id in (("connect", None), ("submit", "wm_local_submit")):
        base = tmp_path / mode
        monkeypatch.setenv("WM_EXAMPLE_BASE", str(base))
        if conn_id is None:
            monkeypatch.delenv("WM_SPARK_CONN_ID", raising=False)
        else:
            monkeypatch.setenv("WM_SPARK_CONN_ID", conn_id)
        started = time.monotonic()
        results[mode] = run_examples(base)
        seconds[mode] = round(time.monotonic() - started)
    print(f"\nthe example DAGs ran in (s): {seconds}")
    connect, submit = results["connect"], results["submit"]
    assert set(connect["outputs"]) == set(OUTPUTS)
    assert all(connect["outputs"].values()) and connect["variables"][VARIABLES[0]]["version"] == 2
    assert connect["documents"].keys() == submit["documents"].keys()
    for name, document in connect["documents"].items():
        assert document == submit["documents"][name], name
    set_aside = [
        file["path"]
        for document in connect["documents"].values()
        if isinstance(document, dict)
        for file in document.get("unreadable_files", [])
    ]
    assert set_aside and set(set_aside) == {"<base>/marks/stray.parquet"}
    assert connect["outputs"] == submit["outputs"]
    assert connect["variables"] == submit["variables"]
