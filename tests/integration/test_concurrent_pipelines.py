"""Our example pipelines under a real scheduler on PostgreSQL, with runs that overlap, and a task killed mid-commit.

The example DAGs (controller watermark + sensor, windowed aggregate, incremental partitions) are copied into a fresh
dags folder and replayed with ``WM_EXAMPLE_CATCHUP_INTERVALS=5``: the scheduler creates five catch-up runs of each
at once (``max_active_runs=5``, the intervals that end with the demo data's last one), and a manual run of an
interval that is also scheduled is triggered at the same time.
LocalExecutor runs four tasks at a time; the sensors defer to the triggerer. Whatever order the runs happen to take:

- a stateful task never runs twice at once (``max_active_tis_per_dag=1``, enforced by the operators);
- no committed state is lost: the versions the runs committed are exactly 1..n, the last one is in the asset state
  store (the primary copy) and the same document in the Variable (its mirror);
- cut-offs and store watermarks never go back;
- every input is output exactly once: each order event is either aggregated once (the panes of its window sum,
  retractions negated, to its window's events) or quarantined once; each daily partition holds its day's orders
  once.

A second DAG runs each stateful operator twice on the same inputs; one copy's first attempt SIGKILLs its own task
process at the moment it commits its state (after the Spark job succeeded and the mirrors were written, before the
asset state store and the Variable are). Its retry must converge to the state and outputs of the undisturbed copy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_provider_wm.demo import data, order_events, orders_data
from airflow_provider_wm.demo.standalone import DEMO_DAYS, write_example_data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.integration.airflow_on_postgres import AirflowOnPostgres, airflow_components, print_task_logs, wait_for
from tests.integration.test_postgres_scheduler import max_overlap

pytestmark = pytest.mark.slow

REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"
EXAMPLES = {
    "example_stream_watermark": timedelta(hours=1),
    "example_windowed_aggregate": timedelta(hours=1),
    "example_incremental_partitions": timedelta(days=1),
}
STATEFUL_TASKS = {
    "example_stream_watermark": "controller_watermark",
    "example_windowed_aggregate": "orders_15m",
    "example_incremental_partitions": "orders_daily",
}
INTERVALS = 5
DAYS = DEMO_DAYS  # of daily orders; the hourly streams have data.HOURS (4) hours, the first interval replayed has none
SENSOR_TIMEOUT = 900  # every interval's watermark comes eventually; a sensor that gives up would hide a bug
KILL_DAG = "wm_killed_before_commit"
KILL_LOGICAL_DATE = datetime(2026, 1, 6, tzinfo=UTC)
ALL_RUNS_TIMEOUT = 900
MINUTE_MS = 60_000

KILL_DAG_SOURCE = '''
"""Written by tests/integration/test_concurrent_pipelines.py: each stateful operator twice on the same inputs. The
"killed" copies' first attempt SIGKILLs its own process where it commits its state (the Spark job has succeeded, the
mirrors are written); the retry has to converge to what the "undisturbed" copies commit and write."""

import os
import signal
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, Asset

from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling

BASE = {base!r}


def killed_at_commit(operator_class):
    class KilledAtCommit(operator_class):
        def commit(self, context, document, committed):
            if context["ti"].try_number == 1:  # the first attempt dies before writing either copy
                os.kill(os.getpid(), signal.SIGKILL)
            return super().commit(context, document, committed)

    return KilledAtCommit


with DAG(
    dag_id={dag_id!r},
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    default_args={{"retries": 1, "retry_delay": timedelta(seconds=1)}},
) as dag:
    for variant, wrap in (("killed", killed_at_commit), ("undisturbed", lambda operator_class: operator_class)):
        store = f"{{BASE}}/{{variant}}/store"
        wrap(ControllerWatermarkOperator)(
            task_id=f"{{variant}}_controller",
            controller=f"{{variant}}_controller",
            marks_path=f"{{BASE}}/marks",
            segments_path=f"{{BASE}}/segments",
            store_path=store,
            writer_timeout=timedelta(minutes=30),
            asset=Asset(name=f"{{variant}}_streams", uri=f"file://{{store}}/streams"),
        )
        wrap(WindowedAggregateOperator)(
            task_id=f"{{variant}}_windows",
            pipeline=f"{{variant}}_windows",
            events=f"{{BASE}}/order_events",
            event_time="event_time",
            arrival_column="ingested_at",
            keys=["region"],
            window=tumbling("PT15M"),
            aggregates={{"orders": "count(*)", "revenue": "sum(amount)"}},
            watermark={{"max_delay": "PT10M"}},
            allowed_lateness="PT30M",
            accumulation="ACCUMULATING_AND_RETRACTING",
            early_firing=True,
            output=f"{{BASE}}/{{variant}}/orders_15m",
            store_path=store,
            asset=Asset(name=f"{{variant}}_orders_15m", uri=f"file://{{BASE}}/{{variant}}/orders_15m"),
        )
        wrap(IncrementalPartitionsOperator)(
            task_id=f"{{variant}}_partitions",
            pipeline=f"{{variant}}_daily",
            source=f"{{BASE}}/orders",
            source_partition_column="event_date",
            time_column="event_time",
            watermark={{"from": "2026-01-01", "to": "P0D"}},
            partition="daily",
            grace_period=timedelta(days=2),
            units=["eu", "us"],
            unit_column="region",
            transform="airflow_provider_wm.demo.transforms:daily_orders",
            target=f"{{BASE}}/{{variant}}/orders_daily",
            store_path=store,
            asset=Asset(name=f"{{variant}}_orders_daily", uri=f"file://{{BASE}}/{{variant}}/orders_daily"),
        )
'''


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def iso(moment: datetime) -> str:
    return moment.isoformat()


def variable_value(exported: Any) -> Any:
    """A value of ``airflow variables export``: ``{"value": ..., "description": ...}`` for a Variable with a
    description, its JSON text decoded."""
    if isinstance(exported, dict) and "value" in exported:
        exported = exported["value"]
    return json.loads(exported) if isinstance(exported, str) else exported


class Observed:
    """What the metadata DB and the files hold once every run has finished."""

    def __init__(self, setup: AirflowOnPostgres, dag_ids: list[str], base: Path, variables: dict[str, Any]) -> None:
        self.base = base
        self.variables = variables
        self.runs = setup.query(
            "select dag_id, run_id, run_type, state, start_date, end_date from dag_run where dag_id = any(:ids)",
            ids=dag_ids,
        )
        self.tis = setup.query(
            "select dag_id, run_id, task_id, state, try_number, start_date, end_date from task_instance "
            "where dag_id = any(:ids)",
            ids=dag_ids,
        )
        # the asset state store of the active assets, by (asset name, key); the value column is JSON text
        self.asset_states: dict[tuple[str, str], Any] = {
            (name, key): json.loads(value)
            for name, key, value in setup.query(
                "select a.name, s.key, s.value from asset_state_store s join asset a on a.id = s.asset_id "
                "join asset_active active on active.name = a.name and active.uri = a.uri"
            )
        }
        self.xcoms: dict[tuple[str, str, str, str], Any] = {
            (dag_id, run_id, task_id, key): value  # a JSON column: psycopg2 returns it decoded
            for dag_id, run_id, task_id, key, value in setup.query(
                "select dag_id, run_id, task_id, key, value from xcom where dag_id = any(:ids)", ids=dag_ids
            )
        }

    def variable(self, key: str) -> dict[str, Any]:
        return variable_value(self.variables[key])

    def committed(self, asset: str, state_key: str, variable: str) -> dict[str, Any]:
        """The committed state: the asset state store's document (the primary copy, under ``<state_key>/<name>``,
        the name being the Variable's after its prefix), which the Variable mirrors."""
        document = self.asset_states[(asset, f"{state_key}/{variable.split('__', 1)[1]}")]
        assert self.variable(variable) == document, f"the Variable {variable} differs from {asset}'s state store"
        return document

    def committed_versions(self, dag_id: str, task_id: str, key: str) -> list[int]:
        """The state versions the task's runs committed (each pushes its new state to XCom just before)."""
        return sorted(
            int(value["version"])
            for (d, _run, t, k), value in self.xcoms.items()
            if (d, t, k) == (dag_id, task_id, key)
        )

    def most_overlapping(self, dag_id: str, task_id: str | None = None) -> int:
        """The largest number of runs (or of one task's instances) of a DAG that were running at one moment."""
        if task_id is None:
            spans = [(r.start_date, r.end_date) for r in self.runs if r.dag_id == dag_id]
        else:
            spans = [(t.start_date, t.end_date) for t in self.tis if (t.dag_id, t.task_id) == (dag_id, task_id)]
        return max_overlap([(s.timestamp(), e.timestamp()) for s, e in spans if s is not None and e is not None])


TRIGGER = """
import sys
from datetime import datetime

from airflow.api.common.trigger_dag import trigger_dag
from airflow.utils.types import DagRunTriggeredByType

dag_id, run_id, moment = sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3])
trigger_dag(dag_id, run_id=run_id, logical_date=moment, run_after=moment, triggered_by=DagRunTriggeredByType.CLI)
"""


def trigger(setup: AirflowOnPostgres, dag_id: str, moment: datetime, run_id: str) -> None:
    """A manual run as ``airflow dags trigger`` makes it, but "triggered at" ``moment``: its data interval is the
    last whole one before ``moment`` (the CLI takes the wall clock, which would cover every interval up to now)."""
    subprocess.run(
        [sys.executable, "-c", TRIGGER, dag_id, run_id, iso(moment)], env=setup.env, check=True, capture_output=True
    )


def test_overlapping_runs_of_the_example_pipelines_lose_nothing_and_a_kill_at_commit_converges(
    airflow_on_postgres, tmp_path
):
    setup = airflow_on_postgres
    base, dags_folder = tmp_path / "data", tmp_path / "dags"
    base.mkdir()
    dags_folder.mkdir()
    write_example_data(base)
    for dag_id in EXAMPLES:
        shutil.copy(REPO_DAGS / f"{dag_id}.py", dags_folder)
    (dags_folder / f"{KILL_DAG}.py").write_text(
        textwrap.dedent(KILL_DAG_SOURCE.format(base=str(base), dag_id=KILL_DAG)).lstrip()
    )
    extra_env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "WM_EXAMPLE_BASE": str(base),
        "WM_EXAMPLE_CATCHUP_INTERVALS": str(INTERVALS),
        "WM_EXAMPLE_SENSOR_TIMEOUT": str(SENSOR_TIMEOUT),
    }
    dag_ids = [*EXAMPLES, KILL_DAG]
    started = time.monotonic()
    timings: dict[str, float] = {}
    try:
        with airflow_components(setup, extra_env=extra_env) as processes:
            wait_for(
                lambda: (
                    setup.scalar(
                        "select count(distinct dag_id) from serialized_dag where dag_id = any(:ids)", ids=dag_ids
                    )
                    == len(dag_ids)
                ),
                "the dag-processor to store the DAGs",
                120,
                processes,
            )
            timings["parsed"] = time.monotonic() - started
            for dag_id in dag_ids:
                setup.airflow("dags", "unpause", dag_id)
            trigger(setup, KILL_DAG, KILL_LOGICAL_DATE, "killed_at_commit")
            # A manual run of an interval while its scheduled run is queued or running. A logical date is
            # unique per DAG, so the manual one is mid-interval: its data interval is the last whole one before it.
            for dag_id, interval in EXAMPLES.items():
                start = orders_data.START if interval == timedelta(days=1) else data.START
                trigger(setup, dag_id, start + 1.5 * interval, "manual_overlap")
            timings["triggered"] = time.monotonic() - started
            expected_runs = len(EXAMPLES) * (INTERVALS + 1) + 1

            def all_finished() -> bool:
                rows = setup.query("select state from dag_run where dag_id = any(:ids)", ids=dag_ids)
                return len(rows) == expected_runs and all(state in ("success", "failed") for (state,) in rows)

            wait_for(all_finished, f"{expected_runs} DAG runs to finish", ALL_RUNS_TIMEOUT, processes)
            timings["all runs finished"] = time.monotonic() - started
            export = tmp_path / "variables.json"
            setup.airflow("variables", "export", str(export))
            observed = Observed(setup, dag_ids, base, json.loads(export.read_text()))
    finally:
        timings["stopped"] = time.monotonic() - started
        rounded = {k: round(v) for k, v in timings.items()}
        print(f"\nConcurrent pipelines on PostgreSQL, timings (s): {json.dumps(rounded)}")

    states = Counter((r.dag_id, r.state) for r in observed.runs)
    for run in observed.runs:
        if run.state != "success":
            print_task_logs(setup, run.dag_id, run.run_id)
    assert states == {**{(d, "success"): INTERVALS + 1 for d in EXAMPLES}, (KILL_DAG, "success"): 1}, observed.runs
    report = {}
    for dag_id, task_id in STATEFUL_TASKS.items():
        runs_at_once = observed.most_overlapping(dag_id)
        assert runs_at_once >= 2, f"the runs of {dag_id} never overlapped"
        assert observed.most_overlapping(dag_id, task_id) == 1, f"two {task_id} tasks ran at once"
        report[dag_id] = runs_at_once
    print(f"most runs running at once, per DAG: {report}")

    check_controller(observed)
    check_windows(observed)
    check_partitions(observed)
    check_kill_converged(observed)


def check_controller(observed: Observed) -> None:
    controller = "wm_controller__example_controller"
    cutoff = observed.committed("example_controller_watermarks", "controller_cutoff", controller)
    assert cutoff["processed_until_ms"] == ms(data.START + data.HOURS * timedelta(hours=1))
    versions = observed.committed_versions("example_stream_watermark", "controller_watermark", "cutoff")
    assert versions == list(range(1, cutoff["version"] + 1)), "a committed cut-off was lost"
    store = WatermarkStoreHook(str(observed.base / "store"))
    for stream in cutoff["watermarks"]:
        history = store.read_history(stream)
        lowers = [record["lower_ms"] for record in history]
        assert lowers == sorted(set(lowers)), f"the watermark of {stream} went back or repeated: {lowers}"
        assert store.read_latest(stream)["lower_ms"] == lowers[-1]


def check_windows(observed: Observed) -> None:
    state = observed.committed("orders_15m", "windowed_state", "wm_windows__orders_15m")
    versions = observed.committed_versions("example_windowed_aggregate", "orders_15m", "state")
    assert versions == list(range(1, state["version"] + 1)), "a committed window state was lost"
    arrived = [e for e in order_events.events() if ms(e["ingested_at"]) <= state["arrival_until_ms"]]
    late = pq.read_table(observed.base / "orders_15m_late").to_pylist()
    quarantined = Counter(r["order_id"] for r in late)
    assert all(n == 1 for n in quarantined.values()), f"events quarantined twice: {quarantined}"
    assert set(quarantined) <= {e["order_id"] for e in arrived}
    expected: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0])
    for event in arrived:
        if event["order_id"] not in quarantined:
            window = ms(event["event_time"]) // (15 * MINUTE_MS) * (15 * MINUTE_MS)
            expected[(event["region"], window)][0] += 1
            expected[(event["region"], window)][1] += event["amount"]
    panes = pq.read_table(observed.base / "orders_15m").to_pylist()
    signed: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0])
    on_time: Counter[tuple[str, int]] = Counter()
    for pane in panes:
        sign = -1 if pane["retraction"] else 1
        key = (pane["region"], pane["window_start"])
        signed[key][0] += sign * pane["orders"]
        signed[key][1] += sign * pane["revenue"]
        on_time[key] += pane["pane"] == "ON_TIME" and not pane["retraction"]
    assert {k: v for k, v in signed.items() if v != [0, 0]} == dict(expected), "an event was aggregated twice or lost"
    complete = {k for k in expected if k[1] + 15 * MINUTE_MS <= state["watermark_ms"]}
    assert complete and all(on_time[k] == 1 for k in complete), "a complete window fired ON_TIME more than once"


def check_partitions(observed: Observed) -> None:
    state = observed.committed("orders_daily", "partition_state", "wm_partitions__orders_daily")
    assert state["processed_until_ms"] == ms(orders_data.START + DAYS * timedelta(days=1))
    versions = observed.committed_versions("example_incremental_partitions", "orders_daily", "state")
    assert versions == list(range(1, state["version"] + 1)), "a committed partition state was lost"
    source = ds.dataset(observed.base / "orders", format="parquet", partitioning="hive").to_table().to_pylist()
    target = ds.dataset(observed.base / "orders_daily", format="parquet", partitioning="hive").to_table()
    order_ids = target.column("order_id").to_pylist()
    assert len(order_ids) == len(set(order_ids)), "an order was written twice"
    assert sorted(order_ids) == sorted(r["order_id"] for r in source if r["event_time"] is not None)


def comparable_outputs(observed: Observed, variant: str) -> dict[str, Any]:
    """A variant's committed state (both copies) and outputs, without what names the run or the variant."""
    base = observed.base

    def state(asset: str, state_key: str, key: str, *dropped: str) -> dict[str, Any]:
        document = observed.committed(asset, state_key, key)
        return {k: v for k, v in document.items() if k not in {"run_id", "committed_at", "state_path", *dropped}}

    def rows(path: Path, *dropped: str) -> list[tuple]:
        table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
        kept = [c for c in table.column_names if c not in {"run_id", "wm_write_id", *dropped}]  # ids of the write
        return sorted(tuple(str(v) for v in row.values()) for row in table.select(kept).to_pylist())

    store = WatermarkStoreHook(str(base / variant / "store"))
    controller = state(f"{variant}_streams", "controller_cutoff", f"wm_controller__{variant}_controller", "controller")
    return {
        "controller": controller,
        "watermarks": {
            stream: [(r["lower_ms"], r["upper_ms"], json.dumps(r["stream_cut"])) for r in store.read_history(stream)]
            for stream in controller["watermarks"]
        },
        "windows": state(f"{variant}_orders_15m", "windowed_state", f"wm_windows__{variant}_windows", "pipeline"),
        "panes": rows(base / variant / "orders_15m"),
        "late_events": rows(base / variant / "orders_15m_late"),
        "partitions": state(
            f"{variant}_orders_daily", "partition_state", f"wm_partitions__{variant}_daily", "pipeline"
        ),
        "partition_rows": rows(base / variant / "orders_daily"),
    }


def check_kill_converged(observed: Observed) -> None:
    tries = {t.task_id: (t.state, t.try_number) for t in observed.tis if t.dag_id == KILL_DAG}
    for operator in ("controller", "windows", "partitions"):
        assert tries[f"killed_{operator}"] == ("success", 2), tries
        assert tries[f"undisturbed_{operator}"] == ("success", 1), tries
    killed = comparable_outputs(observed, "killed")
    undisturbed = comparable_outputs(observed, "undisturbed")
    assert killed["controller"]["version"] == killed["windows"]["version"] == killed["partitions"]["version"] == 1
    for name in undisturbed:
        assert killed[name] == undisturbed[name], f"after the kill and retry, {name} differs from an undisturbed run"
