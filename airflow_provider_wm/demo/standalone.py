"""``python -m airflow_provider_wm.demo.standalone`` (``make airflow``): a real Airflow with our example DAGs and
the Watermarks page, on loopback, and the embedded Spark Connect server its tasks connect to.

Runs Airflow's four components (SQLite, LocalExecutor) in ``$WM_AIRFLOW_DIR`` (default ``./.airflow``) on
``127.0.0.1:$WM_AIRFLOW_PORT`` (default 8080), with the example data in ``$WM_AIRFLOW_DIR/data`` (the store the
page shows is its ``store/``). Unlike ``airflow standalone``, which starts them all at once, the api-server starts
first and the scheduler only once it answers: a task started earlier cannot reach the execution API and fails
with an empty log. The scheduler replays the demo's last ``$WM_EXAMPLE_CATCHUP_INTERVALS`` intervals (default 5;
0 replays nothing: trigger runs yourself). Log in as ``admin`` with the password printed at start (kept in
``$WM_AIRFLOW_DIR/passwords.json``). Each component logs to ``$WM_AIRFLOW_DIR/components/<name>.log``. Ctrl-C or
SIGTERM stops every component (and the processes they started) and the Spark Connect server.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil

from airflow_provider_wm.demo import data, order_events, orders_data

REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"
DEMO_DAYS = 5


def write_example_data(base: Path) -> None:
    """The inputs of every example DAG: writer marks and segments, order events, five days of daily orders."""
    data.write(base)
    order_events.write(base)
    orders_data.write_history(base / "orders", orders_data.START + timedelta(days=DEMO_DAYS))


def standalone_environment(home: Path, port: int, replay: int, paused: bool) -> dict[str, str]:
    """The environment of ``airflow standalone`` for ``home``: our DAGs, the store, loopback, one admin user."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__")}
    base = home / "data"
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # LocalExecutor forks one worker per slot at start (32 by default): the examples need a few
            "AIRFLOW__CORE__PARALLELISM": os.environ.get("AIRFLOW__CORE__PARALLELISM", "8"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(paused),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            # the scheduler's and the triggerer's log servers: free ports, so two of these can run at once
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__WM__STORE_PATH": str(base / "store"),
            "WM_EXAMPLE_BASE": str(base),
            "WM_EXAMPLE_CATCHUP_INTERVALS": str(replay),
            "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def admin_password(home: Path) -> str:
    """The admin's password: kept in ``passwords.json`` (written on first start, read by Airflow)."""
    passwords = home / "passwords.json"
    if passwords.exists():
        return str(json.loads(passwords.read_text())["admin"])
    password = secrets.token_urlsafe(12)
    passwords.write_text(json.dumps({"admin": password}))
    passwords.chmod(0o600)
    return password


COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")  # the api-server first: see the docstring
READY_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    home = Path(os.environ.get("WM_AIRFLOW_DIR", ".airflow")).resolve()
    port = int(os.environ.get("WM_AIRFLOW_PORT", "8080"))
    replay = int(os.environ.get("WM_EXAMPLE_CATCHUP_INTERVALS", "5"))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "data").exists():
        write_example_data(home / "data")
    password = admin_password(home)
    env = standalone_environment(home, port, replay, paused=replay == 0)
    print(
        f"Airflow in {home} (component logs in {home / 'components'})\n"
        f"  log in at   http://127.0.0.1:{port}/  as admin / {password}\n"
        f"  Watermarks  http://127.0.0.1:{port}/plugin/watermarks  (the page alone: /wm/)\n"
        f"  replaying the demo's last {replay} intervals; Ctrl-C stops everything",
        flush=True,
    )
    return run_until_stopped(home, port, env)


def run_until_stopped(home: Path, port: int, env: dict[str, str]) -> int:
    """Beside the embedded Spark Connect server: migrate the DB, start the api-server, and the other components
    once it answers, all in one process group of their own; Ctrl-C or SIGTERM stops the whole group (and the
    server, when this process started it). Returns when stopped, or with 1 when a component exits by itself."""
    from airflow_provider_wm.spark_connect_server import embedded_server, terminate_group

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    logs = home / "components"
    logs.mkdir(exist_ok=True)
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
    with embedded_server():
        processes: dict[str, subprocess.Popen[bytes]] = {}
        group: int | None = None
        try:
            for name in COMPONENTS:
                with open(logs / f"{name}.log", "ab") as log:
                    processes[name] = subprocess.Popen(
                        ["airflow", name],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        process_group=group or 0,  # the first one leads a new group; the others join it
                    )
                    group = group or processes[name].pid
                if name == "api-server":
                    wait_until_healthy(port, processes[name], logs / f"{name}.log")
            print("Airflow is up: the scheduler starts the replay now", flush=True)
            while all(process.poll() is None for process in processes.values()):
                time.sleep(1)
            exited = [f"{name} (exit {p.returncode})" for name, p in processes.items() if p.poll() is not None]
            print(f"{', '.join(exited)} stopped by itself; stopping the rest (see {logs})", flush=True)
            return 1
        except KeyboardInterrupt:
            return 0
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C must not cut this short
                signal.signal(signum, signal.SIG_IGN)
            stop_all(group, list(processes.values()), terminate_group)


def stop_all(group: int | None, processes: list[subprocess.Popen[bytes]], terminate_group: Any) -> None:
    """Stop the components' process group, then whatever they started outside it: Airflow runs each task in a
    process group of its own, which a task still running after the group's grace time would outlive."""
    started = [child for p in processes if p.poll() is None for child in _descendants(p.pid)]
    if group is not None:
        terminate_group(group, timeout=30)
    for child in started:
        with contextlib.suppress(psutil.Error):
            child.kill()
    for process in processes:
        process.wait()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def wait_until_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Return once the api-server answers its health check."""
    url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the api-server exited with {process.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the api-server did not answer {url} in {READY_TIMEOUT_S:.0f} s; see {log}")
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
