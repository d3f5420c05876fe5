"""The stateful operators' OpenLineage events, captured through the OpenLineage provider's own file transport during
a real ``dag.test()`` run; and no import of the provider until its listener asks."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm import lineage
from airflow_provider_wm.demo.standalone import write_example_data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.airflow_helpers import asset_state, xcom
from tests.lineage_dag import DAG_ID

REPO = Path(__file__).resolve().parents[1]
LOGICAL_DATE = datetime(2026, 1, 6, tzinfo=UTC)
# Run from a scratch folder, with the repository's test helpers loaded by path: no clone on sys.path, so a stale
# airflow_provider_wm.egg-info in it (an in-tree build) cannot make the provider a second distribution (Airflow 3.3.2
# stops loading the plugins that follow a duplicate, the OpenLineage provider's among them).
RUN = """
import importlib.util
import sys
from datetime import datetime, timezone


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


repo, base = sys.argv[1], sys.argv[2]
helpers = load("wm_test_helpers", f"{repo}/tests/airflow_helpers.py")
lineage_dag = load("wm_test_lineage_dag", f"{repo}/tests/lineage_dag.py").lineage_dag

from airflow.sdk.plugins_manager import _get_plugins

print("PLUGINS", sorted(plugin.name for plugin in _get_plugins()[0]))
dag = lineage_dag(base)
helpers.register(dag)
run = dag.test(logical_date=datetime(2026, 1, 6, tzinfo=timezone.utc))
print("STATES", sorted((ti.task_id, str(ti.state)) for ti in run.get_task_instances()))
"""


def test_dataset_names_follow_openlineage_naming():
    assert doctest.testmod(lineage).failed == 0


WITHOUT_OPENLINEAGE = """
import sys
from importlib.abc import MetaPathFinder


class NotInstalled(MetaPathFinder):  # as if neither the provider nor the OpenLineage client were installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "openlineage" or name.startswith("airflow.providers.openlineage"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


import airflow  # its configuration reads every installed provider's metadata (get_provider_info), ours included

sys.meta_path.insert(0, NotInstalled())
from airflow_provider_wm.lineage import RunLineage
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling

operator = WindowedAggregateOperator(
    task_id="w", pipeline="p", events="/e", event_time="t", arrival_column="a", keys=[], window=tumbling("PT1M"),
    aggregates={"n": "count(*)"}, watermark={"max_delay": "PT1M"}, output="/o", store_path="/s",
)
operator.run_lineage = RunLineage("windowed_aggregate", "p", ["/e"], ["/o"], 1, 0)
print("FACETS", operator.get_openlineage_facets_on_complete(None))
"""


def test_without_the_openlineage_provider_the_operators_import_and_report_nothing():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENLINEAGE], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert "FACETS None" in result.stdout, result.stderr[-3000:]


def complete_events(path: Path) -> dict[str, dict[str, Any]]:
    """The COMPLETE event of each task of the lineage DAG, by task id."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        e["job"]["name"].removeprefix(f"{DAG_ID}."): e
        for e in events
        if e.get("eventType") == "COMPLETE" and e["job"]["name"].startswith(f"{DAG_ID}.")
    }


def names(datasets: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


@pytest.mark.slow
def test_each_stateful_operator_reports_its_datasets_and_watermark_facet_to_openlineage(airflow_db, tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    write_example_data(base)
    events_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "wm_tests",
    }
    result = subprocess.run(
        [sys.executable, "-c", RUN, str(REPO), str(base)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            k: v for k, v in env.items() if k != "PYTHONPATH" or not (Path(v) / "airflow_provider_wm.egg-info").exists()
        },
        timeout=600,
    )
    assert "OpenLineageProviderPlugin" in result.stdout.split("PLUGINS", 1)[-1].split("\n", 1)[0], (
        "Airflow did not load the OpenLineage provider's plugin: " + result.stdout[-2000:] + result.stderr[-2000:]
    )
    states = "STATES [('controller', 'success'), ('partitions', 'success'), ('windows', 'success')]"
    assert states in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]

    events = complete_events(events_file)
    emitted = [line for line in result.stdout.splitlines() if "OpenLineage" in line]
    assert sorted(events) == ["controller", "partitions", "windows"], "\n".join(emitted)
    at = int(LOGICAL_DATE.timestamp() * 1000)

    controller, cutoff, summary = (
        events["controller"],
        asset_state("lineage_streams", "controller_cutoff/lineage_controller"),
        xcom_of("controller"),
    )
    assert names(controller["inputs"]) == [("file", f"{base}/marks"), ("file", f"{base}/segments")]
    assert names(controller["outputs"]) == [("file", f"{base}/store/streams")]
    facet = controller["run"]["facets"]["watermark"]
    assert facet["_schemaURL"] == lineage.FACET_SCHEMA_URL
    assert (facet["kind"], facet["name"], facet["version"]) == ("controller_watermark", "lineage_controller", 1)
    assert facet["cutoff_ms"] == cutoff["processed_until_ms"] == at and facet["cutoff"].startswith("2026-01-06T00:00")
    assert facet["stream_watermarks_ms"] == {s: w["lower_ms"] for s, w in cutoff["watermarks"].items()}
    assert len(facet["stream_watermarks_ms"]) == 4
    totals = summary["totals"]
    assert facet["late"] == totals["late_marks"]
    assert facet["quarantined"] == sum(totals["rejected"].values()) + sum(totals["quarantined"].values()) > 0
    assert "covered_by" not in facet  # None: the client leaves it out

    state = asset_state("lineage_orders_15m", "windowed_state/lineage_windows")
    windows, summary = events["windows"], xcom_of("windows")
    assert names(windows["inputs"]) == [("file", f"{base}/order_events")]
    assert names(windows["outputs"]) == [("file", f"{base}/orders_15m"), ("file", f"{base}/orders_15m_late")]
    facet = windows["run"]["facets"]["watermark"]
    assert (facet["kind"], facet["name"], facet["version"]) == ("windowed_aggregate", "lineage_windows", 1)
    assert (facet["watermark_ms"], facet["cutoff_ms"]) == (state["watermark_ms"], state["arrival_until_ms"])
    assert facet["late"] == summary["too_late"]
    invalid = sum(summary[n] for n in ("invalid_event_time", "invalid_value", "invalid_window", "invalid_arrival"))
    assert facet["quarantined"] == invalid > 0
    published = WatermarkStoreHook(f"{base}/store").read_latest("lineage_windows")["lower_ms"]
    assert facet["stream_watermarks_ms"] == {"lineage_windows": published}

    partitions, summary = events["partitions"], xcom_of("partitions")
    assert names(partitions["inputs"]) == [("file", f"{base}/orders")]
    assert names(partitions["outputs"]) == [
        ("file", f"{base}/orders_daily"),
        ("file", f"{base}/store/pipelines/lineage_daily/quarantine"),
    ]
    facet = partitions["run"]["facets"]["watermark"]
    committed = asset_state("lineage_orders_daily", "partition_state/lineage_daily")
    assert (facet["kind"], facet["version"], facet["cutoff_ms"]) == ("incremental_partitions", 1, at)
    assert facet["cutoff_ms"] == committed["processed_until_ms"]
    published = WatermarkStoreHook(f"{base}/store").read_latest("lineage_daily")["lower_ms"]
    assert facet["watermark_ms"] == published and facet["stream_watermarks_ms"] == {"lineage_daily": published}
    assert facet["quarantined"] == summary["quarantined"] and "late" not in facet


def xcom_of(task_id: str) -> Any:
    """The return value of ``task_id`` in the lineage DAG's one run."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        [run] = session.query(DagRun).filter(DagRun.dag_id == DAG_ID).all()
        session.expunge(run)
    return xcom(run, task_id)
