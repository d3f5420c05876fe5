"""``make airflow`` out of the box: the scheduler replays the demo's last intervals of every example DAG (and the
DAGs their assets schedule) with no failed run, and SIGTERM stops every process it started, the Spark Connect
server it started included.

The replay here is two intervals (``make airflow`` replays five): enough for runs to overlap and for the
asset-scheduled DAGs to follow; the server is its own, on a free port, so the test can see it stopped.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import psutil
import pytest

from airflow_provider_wm.spark_connect_server import is_listening
from tests.integration.postgres import free_port
from tests.integration.standalone import Api, running_standalone, wait_until

pytestmark = pytest.mark.slow

REPLAY = 2
REPLAY_TIMEOUT = 900
TERMINAL = ("success", "failed")


def example_dags(api: Api) -> list[dict[str, Any]]:
    return list(api.request("GET", "/api/v2/dags?dag_id_pattern=example&limit=100")["dags"])


def all_runs(api: Api) -> list[dict[str, Any]]:
    return list(api.request("GET", "/api/v2/dags/~/dagRuns?limit=1000")["dag_runs"])


def replay_finished(api: Api, periodic: set[str], settled: list[int]) -> bool:
    """Every periodic example DAG has its ``REPLAY`` runs and no run of any DAG is queued or running, on two
    checks in a row with the same number of runs (an asset event creates its run on the scheduler's next loop)."""
    runs = all_runs(api)
    per_dag = Counter(run["dag_id"] for run in runs)
    done = all(per_dag[dag_id] == REPLAY for dag_id in periodic) and all(run["state"] in TERMINAL for run in runs)
    settled.append(len(runs) if done else -1)
    return done and settled[-2:] == [len(runs), len(runs)]


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_make_airflow_replays_every_example_without_a_failed_run_and_sigterm_stops_every_process(tmp_path):
    connect_port = free_port()
    env = {
        "WM_EXAMPLE_CATCHUP_INTERVALS": str(REPLAY),
        "WM_SPARK_CONNECT_URL": f"sc://127.0.0.1:{connect_port}",
        # the demo's last hour is held back (its watermark never passes the hour's end): its sensors give up
        # (soft_fail, the run succeeds) after this instead of the examples' ten minutes
        "WM_EXAMPLE_SENSOR_TIMEOUT": "45",
    }
    with running_standalone(tmp_path, env) as airflow:
        periodic = {dag["dag_id"] for dag in example_dags(airflow.api) if dag["timetable_periodic"]}
        assert {"example_stream_watermark", "example_incremental_partitions"} <= periodic, periodic
        settled: list[int] = []
        wait_until(
            lambda: replay_finished(airflow.api, periodic, settled),
            f"the replay of {sorted(periodic)} to finish",
            REPLAY_TIMEOUT,
            airflow.process,
        )
        runs = all_runs(airflow.api)
        started = psutil.Process(airflow.process.pid).children(recursive=True)
        assert is_listening("127.0.0.1", connect_port), "the replay ran without its own Spark Connect server"
        os.killpg(airflow.process.pid, signal.SIGTERM)
        assert airflow.process.wait(timeout=90) == 0

    failed = [(run["dag_id"], run["dag_run_id"]) for run in runs if run["state"] != "success"]
    assert not failed, f"runs that did not succeed: {failed}"
    assert {run["dag_id"] for run in runs} > periodic, "no asset-scheduled DAG ran after the replay"
    left = [f"{p.pid} {p.name()}" for p in started if alive(p)]
    assert not left, f"processes still running after SIGTERM: {left}"
    assert not is_listening("127.0.0.1", connect_port), "the Spark Connect server still listens after SIGTERM"
