"""Airflow on a real PostgreSQL metadata DB with a real scheduler running tasks in parallel (LocalExecutor).

A throw-away PostgreSQL server backs a fresh AIRFLOW_HOME, and the api-server, dag-processor and scheduler run as
subprocesses (tests/integration/airflow_on_postgres.py). The DAG is pure Airflow (no Spark): six independent tasks
that sleep and record when and in which process they ran, and one downstream task that collects their XComs.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.airflow_on_postgres import PARALLELISM, airflow_components, json_output, wait_for

pytestmark = pytest.mark.slow

DAG_ID = "wm_pg_parallel"
PARALLEL_TASKS = 6
SLEEP_SECONDS = 3
RUN_TIMEOUT = 150  # seconds from trigger to a finished run


DAG_SOURCE = '''
"""Written by tests/integration/test_postgres_scheduler.py: parallel sleepers and a collector."""

import json
import os
import time
from pathlib import Path

import pendulum
from airflow.sdk import dag, task

RECORDS = Path({records!r})


@task
def sleep_and_record(index: int) -> dict:
    start = time.time()
    time.sleep({sleep})
    record = {{"index": index, "pid": os.getpid(), "start": start, "end": time.time()}}
    (RECORDS / f"sleep_{{index}}.json").write_text(json.dumps(record))
    return record


@task
def collect(records: list) -> int:
    (RECORDS / "collect.json").write_text(json.dumps({{"records": records, "pid": os.getpid(), "at": time.time()}}))
    return len(records)


@dag(
    dag_id={dag_id!r},
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks={max_active_tasks},
    tags=["wm-test"],
)
def parallel_sleepers():
    collect([sleep_and_record.override(task_id=f"sleep_{{i}}")(i) for i in range({tasks})])


parallel_sleepers()
'''


def write_dag(dags_folder: Path, records: Path) -> Path:
    source = DAG_SOURCE.format(
        records=str(records),
        sleep=SLEEP_SECONDS,
        dag_id=DAG_ID,
        max_active_tasks=2 * PARALLELISM,
        tasks=PARALLEL_TASKS,
    )
    path = dags_folder / f"{DAG_ID}.py"
    path.write_text(textwrap.dedent(source).lstrip())
    return path


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that contain one point in time."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, delta in events:  # at equal times -1 sorts first: touching intervals do not overlap
        running += delta
        best = max(best, running)
    return best


def test_a_real_scheduler_runs_tasks_in_parallel_on_postgres(airflow_on_postgres, tmp_path):
    setup = airflow_on_postgres
    records, dags_folder = tmp_path / "records", tmp_path / "dags"
    records.mkdir()
    dags_folder.mkdir()
    write_dag(dags_folder, records)
    run_id = f"wm_pg_{int(time.time())}"
    started = time.monotonic()
    timings: dict[str, float] = {}
    try:
        with airflow_components(
            setup,
            "api-server",
            "dag-processor",
            "scheduler",
            extra_env={"AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder)},
        ) as processes:
            timings["api-server up"] = time.monotonic() - started
            wait_for(
                lambda: setup.scalar("select count(*) from serialized_dag where dag_id = :d", d=DAG_ID),
                f"the dag-processor to store {DAG_ID}",
                90,
                processes,
            )
            timings["dag parsed"] = time.monotonic() - started

            setup.airflow("dags", "unpause", DAG_ID)
            assert setup.scalar("select is_paused from dag where dag_id = :d", d=DAG_ID) is False
            setup.airflow("dags", "trigger", DAG_ID, "--run-id", run_id)
            timings["triggered"] = time.monotonic() - started

            def finished_state() -> object:
                state = setup.scalar("select state from dag_run where run_id = :r", r=run_id)
                return state if state in ("success", "failed") else None

            state = wait_for(finished_state, f"dag run {run_id} to finish", RUN_TIMEOUT, processes)
            timings["run finished"] = time.monotonic() - started

            listed = json_output(setup.airflow("dags", "list-runs", DAG_ID, "-o", "json").stdout)
            task_states = dict(
                setup.query(
                    "select task_id, state from task_instance where dag_id = :d and run_id = :r", d=DAG_ID, r=run_id
                )
            )
            version = setup.scalar("select version()")

            assert state == "success", f"dag run ended {state}: {task_states}"
            assert [(run["run_id"], run["state"]) for run in listed] == [(run_id, "success")]
            expected_tasks = {f"sleep_{i}" for i in range(PARALLEL_TASKS)} | {"collect"}
            assert task_states == dict.fromkeys(expected_tasks, "success")
            assert str(version).startswith("PostgreSQL ")

            sleepers = [json.loads((records / f"sleep_{i}.json").read_text()) for i in range(PARALLEL_TASKS)]
            collected = json.loads((records / "collect.json").read_text())
            assert sorted(r["index"] for r in collected["records"]) == list(range(PARALLEL_TASKS))
            assert {r["pid"] for r in collected["records"]} == {r["pid"] for r in sleepers}
            overlap = max_overlap([(r["start"], r["end"]) for r in sleepers])
            pids = {r["pid"] for r in sleepers}
            assert overlap >= 3, f"at most {overlap} sleepers ran at once: {sleepers}"
            assert overlap <= PARALLELISM, f"{overlap} sleepers ran at once with parallelism {PARALLELISM}"
            assert len(pids) >= 3, f"sleepers ran in processes {pids}"
            assert collected["at"] >= max(r["end"] for r in sleepers), "collect ran before its upstream tasks"
            print(f"\nmax parallel sleepers: {overlap}, task processes: {len(pids)}, metadata DB: {version}")
    finally:
        timings["stopped"] = time.monotonic() - started
        print(f"\nAirflow on PostgreSQL timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
