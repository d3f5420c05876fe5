"""``make airflow`` (``python -m airflow_provider_wm.demo.standalone``) started by a test: in a temporary home on a
free loopback port, with its REST API as the admin user. Shared by the UI test and the replay test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_provider_wm.demo.standalone import admin_password
from tests.integration.postgres import free_port

EXAMPLE_DAGS = len(list((Path(__file__).resolve().parents[2] / "dags").glob("example_*.py")))  # one DAG each

RUN_TIMEOUT = 600


class Api:
    """The REST API of the running Airflow, as the admin user."""

    def __init__(self, url: str, password: str) -> None:
        self.url, self.password = url, password
        login = {"username": "admin", "password": password}
        self.token = str(self.request("POST", "/auth/token", login, token=None)["access_token"])

    def request(self, method: str, path: str, body: Any = None, token: str | None = "own") -> Any:
        content = self._send(method, path, body, self.token if token == "own" else token)
        return json.loads(content) if content else None

    def status(self, path: str, token: str | None = None) -> int:
        try:
            self._send("GET", path, None, token)
            return 200
        except urllib.error.HTTPError as error:
            return error.code

    def _send(self, method: str, path: str, body: Any, bearer: str | None) -> bytes:
        headers = {"Content-Type": "application/json"}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        payload = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=payload, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=30) as response:
            return bytes(response.read())

    def trigger(self, dag_id: str, run_id: str, start: datetime, end: datetime) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        body = {
            "dag_run_id": run_id,
            "logical_date": end.isoformat(),
            "data_interval_start": start.isoformat(),
            "data_interval_end": end.isoformat(),
        }
        self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_for_success(self, dag_id: str, run_id: str, process: subprocess.Popen) -> None:
        def finished() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in ("success", "failed") else None

        state = wait_until(finished, f"{dag_id} {run_id} to finish", RUN_TIMEOUT, process)
        assert state == "success", f"{dag_id} {run_id} ended {state}"


def wait_until(predicate: Any, what: str, seconds: float, process: subprocess.Popen) -> Any:
    """``predicate()``'s first true value within ``seconds``. A call that times out, cannot connect or gets a
    server error is retried (a busy machine's api-server can take longer than a request's timeout while Airflow
    starts); a client error (4xx) fails at once."""
    deadline = time.monotonic() + seconds
    last_error: OSError | None = None
    while True:
        try:
            if value := predicate():
                return value
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise
            last_error = error
        except OSError as error:  # a timeout, a refused or reset connection
            last_error = error
        assert process.poll() is None, f"airflow standalone exited while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last error: {last_error})"
        time.sleep(1)


@dataclass
class Standalone:
    api: Api
    home: Path
    process: subprocess.Popen


@contextmanager
def running_standalone(home: Path, env: Mapping[str, str]) -> Iterator[Standalone]:
    """``make airflow`` in ``home`` with ``env`` on top of ours (Airflow's own settings removed), once its
    api-server answers and the example DAGs are parsed; stopped with SIGTERM (SIGKILL after 60 s) at the end."""
    port = free_port()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    environment.update({"WM_AIRFLOW_DIR": str(home), "WM_AIRFLOW_PORT": str(port), **env})
    log = (home / "standalone.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_wm.demo.standalone"],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    succeeded = False
    try:
        wait_until(healthy, "the api-server", 180, process)
        api = wait_until(lambda: Api(url, admin_password(home)), "a token from the api-server", 180, process)
        wait_until(
            lambda: api.request("GET", "/api/v2/dags?dag_id_pattern=example")["total_entries"] >= EXAMPLE_DAGS,
            f"the {EXAMPLE_DAGS} example DAGs to be parsed",
            180,
            process,
        )
        yield Standalone(api, home, process)
        succeeded = True
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
        log.close()
        if not succeeded:
            print((home / "standalone.log").read_text()[-20000:])
