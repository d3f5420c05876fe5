"""Airflow on a throw-away PostgreSQL server, its components run as subprocesses the way a deployment runs them.

``airflow_home(server)`` makes a fresh AIRFLOW_HOME migrated on the server; ``airflow_components(...)`` starts
``airflow api-server``, ``dag-processor``, ``scheduler``, ``triggerer`` (each in its own process group) and always
stops them, printing their logs and the task logs when the block failed. In Airflow 3 the LocalExecutor's task
runners report to the api-server's execution API, so the executor is pointed at it (``[core]
execution_api_server_url``) and every component shares one ``[api_auth] jwt_secret``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from tests.integration.postgres import PostgresServer, free_port, postgres_server

PARALLELISM = 4
LOG_TAIL = 200  # lines of each log printed on failure


@dataclass(frozen=True)
class AirflowOnPostgres:
    server: PostgresServer
    home: Path
    dags_folder: Path
    logs: Path
    api_port: int
    env: dict[str, str]

    def query(self, sql: str, **params: object) -> list[sa.Row]:
        """Rows of a query on the metadata DB (a fresh connection each time)."""
        engine = sa.create_engine(self.server.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                return list(connection.execute(sa.text(sql), params).all())
        finally:
            engine.dispose()

    def scalar(self, sql: str, **params: object) -> object:
        rows = self.query(sql, **params)
        return rows[0][0] if rows else None

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
            # New files are parsed when found; re-parsing unchanged ones every 30 s (the default) takes CPU the
            # tasks need on a 2-core machine.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        }
    )
    return env


@contextmanager
def airflow_home() -> Iterator[AirflowOnPostgres]:
    """A PostgreSQL server and a fresh AIRFLOW_HOME migrated on it; both removed afterwards."""
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


COMPONENTS = ("api-server", "dag-processor", "scheduler", "triggerer")


@contextmanager
def airflow_components(
    setup: AirflowOnPostgres, *names: str, extra_env: Mapping[str, str] | None = None
) -> Iterator[dict[str, subprocess.Popen]]:
    """Start long-running ``airflow`` components (default: all of ``COMPONENTS``) and wait for the api-server;
    always stop them, and print their logs and the task logs if the block failed."""
    env = {**setup.env, **(extra_env or {})}
    processes: dict[str, subprocess.Popen] = {}
    succeeded = False
    try:
        for name in names or COMPONENTS:
            command = [name]
            if name == "api-server":
                command += ["--host", "127.0.0.1", "--port", str(setup.api_port), "--workers", "1"]
            with open(setup.logs / f"{name}.log", "wb") as log:
                processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *command],
                    env=env,
                    cwd=setup.home,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # own process group, so stopping it also stops its children
                )
        if "api-server" in processes:
            wait_for(
                lambda: http_ok(f"http://127.0.0.1:{setup.api_port}/execution/health"),
                "the api-server's execution API",
                90,
                processes,
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
    print_task_logs(setup)
    print(f"\n----- PostgreSQL server log -----\n{tail(setup.server.log_file, 80)}")


def print_task_logs(setup: AirflowOnPostgres, dag_id: str = "*", run_id: str = "*") -> None:
    """Print the end of each task log (every attempt) of the given DAG and run; all of them by default. For one
    run, also the components' log lines that name it (a task that failed before it could log shows only there)."""
    for task_log in sorted((setup.home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/**/*.log")):
        print(f"\n----- task log {task_log.relative_to(setup.home)} -----\n{tail(task_log, 80)}")
    if run_id == "*":
        return
    for component_log in sorted(setup.logs.glob("*.log")):
        lines = [line for line in component_log.read_text(errors="replace").splitlines() if run_id in line]
        print(f"\n----- {component_log.name}: lines naming {run_id} -----\n" + "\n".join(lines[-40:]))


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
