"""Airflow on a real PostgreSQL metadata DB with a real scheduler running tasks in parallel (LocalExecutor).

A throw-away PostgreSQL server (tests/integration/postgres.py) backs a fresh AIRFLOW_HOME; ``airflow scheduler``,
``airflow dag-processor`` and ``airflow api-server`` run as subprocesses, the way a deployment runs them. In Airflow 3
the LocalExecutor's task runners report to the api-server's execution API, so the executor is pointed at it
(``[core] execution_api_server_url``) and every component shares one ``[api_auth] jwt_secret``. The DAG is pure
Airflow (no Spark): six independent tasks that sleep and record when and in which process they ran, and one
downstream task that collects their XComs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.postgres import PostgresServer, free_port, postgres_server

pytestmark = pytest.mark.slow

DAG_ID = "wm_pg_parallel"
PARALLEL_TASKS = 6
SLEEP_SECONDS = 3
PARALLELISM = 4
RUN_TIMEOUT = 150  # seconds from trigger to a finished run
LOG_TAIL = 200  # lines of each log printed on failure


@dataclass(frozen=True)
class AirflowOnPostgres:
    server: PostgresServer
    home: Path
    dags_folder: Path
    logs: Path
    api_port: int
    env: dict[str, str]

    def airflow(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run an ``airflow`` CLI command in this environment; raise with its output if it fails."""
        result = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"airflow {' '.join(args)} failed with exit code {result.returncode}\n"
                f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
            )
        return result


def airflow_env(server: PostgresServer, home: Path, dags_folder: Path, api_port: int) -> dict[str, str]:
    """Environment for Airflow subprocesses: only this test's settings, nothing from the pytest session's Airflow."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    api_url = f"http://127.0.0.1:{api_port}"
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": server.url,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(2 * PARALLELISM),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # the test unpauses through the CLI
            # Task runners started by the LocalExecutor call the execution API of the api-server started below.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
            "AIRFLOW__API__BASE_URL": api_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            # One signing secret for the scheduler (which issues task tokens) and the api-server (which checks them).
            # (64+ bytes: HS512 warns about shorter keys.)
            "AIRFLOW__API_AUTH__JWT_SECRET": "wm-postgres-scheduler-test-jwt-secret-" + "0123456789abcdef" * 4,
            "AIRFLOW__API__SECRET_KEY": "wm-postgres-scheduler-test-secret-key",
            # The scheduler serves task logs on this port on all interfaces; the default 8793 may be taken.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        }
    )
    return env


@pytest.fixture(scope="module")
def airflow_on_postgres() -> Iterator[AirflowOnPostgres]:
    with postgres_server(database="airflow") as server, tempfile.TemporaryDirectory(prefix="wm-pg-airflow-") as tmp:
        home = Path(tmp)
        dags_folder, logs = home / "dags", home / "process-logs"
        dags_folder.mkdir()
        logs.mkdir()
        api_port = free_port()
        env = airflow_env(server, home, dags_folder, api_port)
        setup = AirflowOnPostgres(server, home, dags_folder, logs, api_port, env)
        setup.airflow("db", "migrate", timeout=300)
        yield setup


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


def tail(path: Path, lines: int = LOG_TAIL) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as error:
        return f"<cannot read {path}: {error}>"
    return "\n".join(text[-lines:])


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 20) -> None:
    """SIGTERM the process group this test started (executor workers and task runners included), then SIGKILL."""
    if process.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with suppress(ProcessLookupError, PermissionError):  # also children left behind by a leader that has exited
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


@contextmanager
def airflow_components(setup: AirflowOnPostgres, *components: list[str]) -> Iterator[dict[str, subprocess.Popen]]:
    """Start long-running ``airflow`` components; always stop them, and print their logs if the block failed."""
    processes: dict[str, subprocess.Popen] = {}
    succeeded = False
    try:
        for command in components:
            name = command[0]
            with open(setup.logs / f"{name}.log", "wb") as log:
                processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *command],
                    env=setup.env,
                    cwd=setup.home,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # own process group, so stopping it also stops its children
                )
        yield processes
        succeeded = True
    finally:
        for process in processes.values():
            stop_process_group(process)
        if not succeeded:
            print_logs(setup, list(processes))


def print_logs(setup: AirflowOnPostgres, names: list[str]) -> None:
    print(f"\n===== Airflow on PostgreSQL failed; AIRFLOW_HOME={setup.home} =====")
    for name in names:
        print(f"\n----- airflow {name} (last {LOG_TAIL} lines) -----\n{tail(setup.logs / f'{name}.log')}")
    for task_log in sorted((setup.home / "logs").glob(f"dag_id={DAG_ID}/**/*.log")):
        print(f"\n----- task log {task_log.relative_to(setup.home)} -----\n{tail(task_log, 80)}")
    print(f"\n----- PostgreSQL server log -----\n{tail(setup.server.log_file, 80)}")


def wait_for(
    predicate: Callable[[], object], what: str, seconds: float, processes: dict[str, subprocess.Popen]
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail early if a component died."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        dead = {name: p.returncode for name, p in processes.items() if p.poll() is not None}
        if dead:
            raise AssertionError(f"airflow components exited while waiting for {what}: {dead}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(1)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 200 <= response.status < 300
    except (OSError, urllib.error.URLError):
        return False


def json_output(stdout: str) -> object:
    """The JSON document in a CLI's stdout, which can also hold log lines (e.g. "Could not import graphviz")."""
    documents = [line for line in stdout.splitlines() if line.startswith(("[", "{"))]
    if not documents:
        raise AssertionError(f"no JSON in the command's output:\n{stdout}")
    return json.loads(documents[-1])


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
    engine = sa.create_engine(setup.server.url, poolclass=sa.pool.NullPool)
    records = tmp_path / "records"
    records.mkdir()
    write_dag(setup.dags_folder, records)
    run_id = f"wm_pg_{int(time.time())}"
    started = time.monotonic()
    timings: dict[str, float] = {}

    def scalar(query: str, **params: object) -> object:
        with engine.connect() as connection:
            return connection.execute(sa.text(query), params).scalar()

    try:
        with airflow_components(
            setup,
            ["api-server", "--host", "127.0.0.1", "--port", str(setup.api_port), "--workers", "1"],
            ["dag-processor"],
            ["scheduler"],
        ) as processes:
            wait_for(
                lambda: http_ok(f"http://127.0.0.1:{setup.api_port}/execution/health"),
                "the api-server's execution API",
                90,
                processes,
            )
            timings["api-server up"] = time.monotonic() - started
            wait_for(
                lambda: scalar("select count(*) from serialized_dag where dag_id = :d", d=DAG_ID),
                f"the dag-processor to store {DAG_ID}",
                90,
                processes,
            )
            timings["dag parsed"] = time.monotonic() - started

            setup.airflow("dags", "unpause", DAG_ID)
            assert scalar("select is_paused from dag where dag_id = :d", d=DAG_ID) is False
            setup.airflow("dags", "trigger", DAG_ID, "--run-id", run_id)
            timings["triggered"] = time.monotonic() - started

            def finished_state() -> object:
                state = scalar("select state from dag_run where run_id = :r", r=run_id)
                return state if state in ("success", "failed") else None

            state = wait_for(
                finished_state,
                f"dag run {run_id} to finish",
                RUN_TIMEOUT,
                processes,
            )
            timings["run finished"] = time.monotonic() - started

            listed = json_output(setup.airflow("dags", "list-runs", DAG_ID, "-o", "json").stdout)
            with engine.connect() as connection:
                task_states = dict(
                    connection.execute(
                        sa.text("select task_id, state from task_instance where dag_id = :d and run_id = :r"),
                        {"d": DAG_ID, "r": run_id},
                    ).all()
                )
                version = connection.execute(sa.text("select version()")).scalar()
                dialect = connection.dialect.name

            assert state == "success", f"dag run ended {state}: {task_states}"
            assert [(run["run_id"], run["state"]) for run in listed] == [(run_id, "success")]
            expected_tasks = {f"sleep_{i}" for i in range(PARALLEL_TASKS)} | {"collect"}
            assert task_states == dict.fromkeys(expected_tasks, "success")
            assert dialect == "postgresql"
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
        engine.dispose()
        timings["stopped"] = time.monotonic() - started
        print(f"\nAirflow on PostgreSQL timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
