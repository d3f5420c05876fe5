"""The operator against a real Spark standalone cluster (master + worker from the pip package, loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.models.variable import Variable

from airflow_provider_wm.demo import data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
from tests.airflow_helpers import fresh_dag, run_dag, xcom

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for(predicate, what: str, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory) -> Iterator[tuple[str, int]]:
    logs = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(logs / "work")}
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master_cmd = [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                  "--port", str(port), "--webui-port", str(ui)]  # fmt: skip
    worker_cmd = [spark_class(), "org.apache.spark.deploy.worker.Worker", master_url, "--cores", "2",
                  "--memory", "2g", "--webui-port", str(worker_ui), "--host", "127.0.0.1"]  # fmt: skip
    with open(logs / "master.log", "w") as master_log, open(logs / "worker.log", "w") as worker_log:
        master = subprocess.Popen(master_cmd, env=env, stdout=master_log, stderr=subprocess.STDOUT)
        worker = subprocess.Popen(worker_cmd, env=env, stdout=worker_log, stderr=subprocess.STDOUT)

    def worker_registered() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as response:
                return int(json.loads(response.read()).get("aliveworkers", 0)) >= 1
        except (OSError, ValueError):
            return False

    try:
        wait_for(worker_registered, f"a worker registered with {master_url} (logs in {logs})")
        yield master_url, ui
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            process.wait(timeout=30)


def test_the_controller_round_runs_on_a_standalone_cluster_through_the_operator(
    airflow_db, tmp_path, standalone_master, monkeypatch
):
    master_url, ui_port = standalone_master
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", master_url)
    data.write(tmp_path)
    dag = fresh_dag("standalone")
    with dag:
        ControllerWatermarkOperator(
            task_id="controller",
            controller="standalone_controller",
            marks_path=str(tmp_path / "marks"),
            segments_path=str(tmp_path / "segments"),
            store_path=str(tmp_path / "store"),
            writer_timeout=timedelta(minutes=30),
            spark_conn_id="spark_standalone",
            spark_conf={"spark.executor.memory": "1g", "spark.cores.max": "2"},
        )
    end = data.START + timedelta(hours=1)
    run, states = run_dag(dag, end)
    assert states == {"controller": "success"}
    summary = xcom(run, "controller")
    assert summary["streams"]["orders"]["watermark"]["lower_ms"] == int(end.timestamp() * 1000)
    assert WatermarkStoreHook(str(tmp_path / "store")).read_latest("payments")["lower_ms"] == int(
        end.timestamp() * 1000
    )
    assert Variable.get("wm_controller__standalone_controller", deserialize_json=True)["version"] == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        master_state = json.loads(response.read())
    finished = [app["name"] for app in master_state["completedapps"]]
    assert "wm-controller-standalone_controller" in finished  # it really ran on the cluster
