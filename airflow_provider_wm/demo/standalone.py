"""``python -m airflow_provider_wm.demo.standalone`` (``make airflow``): a real Airflow with our example DAGs and
the Watermarks page, on loopback, and the embedded Spark Connect server its tasks connect to.

Runs ``airflow standalone`` (scheduler, dag-processor, triggerer, api-server; SQLite; LocalExecutor) in
``$WM_AIRFLOW_DIR`` (default ``./.airflow``) on ``127.0.0.1:$WM_AIRFLOW_PORT`` (default 8080), with the example
data in ``$WM_AIRFLOW_DIR/data`` (the store the page shows is its ``store/``). The scheduler replays the demo's
last ``$WM_EXAMPLE_CATCHUP_INTERVALS`` intervals (default 5; 0 replays nothing: trigger runs yourself). Log in as
``admin`` with the password printed at start (kept in ``$WM_AIRFLOW_DIR/passwords.json``). Ctrl-C or SIGTERM
stops Airflow's process group and the Spark Connect server.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

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
        f"Airflow (standalone) in {home}\n"
        f"  log in at   http://127.0.0.1:{port}/  as admin / {password}\n"
        f"  Watermarks  http://127.0.0.1:{port}/plugin/watermarks  (the page alone: /wm/)\n"
        f"  replaying the demo's last {replay} intervals; Ctrl-C stops everything",
        flush=True,
    )
    return run_until_stopped(["airflow", "standalone"], env)


def run_until_stopped(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` in a process group of its own beside the embedded Spark Connect server; Ctrl-C or
    SIGTERM stops the whole group (scheduler, triggerer, api-server...) and then the server."""
    from airflow_provider_wm.spark_connect_server import embedded_server, terminate_group

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    with embedded_server():
        child = subprocess.Popen(command, env=env, start_new_session=True)
        try:
            return child.wait()
        except KeyboardInterrupt:
            terminate_group(child.pid, timeout=30)
            child.wait()
            return 0


if __name__ == "__main__":
    sys.exit(main())
