"""Test session set-up: an isolated AIRFLOW_HOME with a migrated SQLite DB, and one Spark Connect server.

AIRFLOW_HOME must be set before anything imports airflow, so it is set at module import time.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

REPO = Path(__file__).resolve().parents[1]


def _scratch_dir() -> None:
    """Temporary files in memory (``/dev/shm``) when the machine has it: the SQLite metadata DB, the
    throw-away PostgreSQL server and every test's files. On disk, their commits' fsyncs kept the CPUs idle
    waiting for I/O for a large part of the suite. Subprocesses (Airflow, ``spark-submit``, pytest-xdist's
    workers) inherit TMPDIR; a TMPDIR set by the caller is kept, and so is /tmp when /dev/shm has less than
    4 GiB free."""
    shm = Path("/dev/shm")
    if os.environ.get("TMPDIR") or not (shm.is_dir() and os.access(shm, os.W_OK)):
        return
    if shutil.disk_usage(shm).free < 4 << 30:  # a container's small default (64 MiB) would fill up
        return
    scratch = shm / "wm-tests"
    scratch.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(scratch)


_scratch_dir()
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="wm-airflow-home-"))
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ.setdefault("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "False")
# One Fernet key for this process and every Airflow subprocess it starts: without it, a process that reads the
# config before airflow.cfg exists makes up a key of its own, and the asset watchers' trigger kwargs that one
# process encrypted cannot be read by another (DAG parsing then fails decoding them).
os.environ.setdefault("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
# Tests re-parse the example DAGs with a new WM_EXAMPLE_BASE (new asset URIs) seconds apart. By default a
# serialized DAG written less than 30 s ago is not rewritten, and the API server serves its cached copy for
# 30 s without checking: a task would then run with the previous test's outlets.
os.environ["AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL"] = "0"
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Spark's shuffle and block files go to the scratch dir too (its default is the JVM's /tmp, not TMPDIR).
os.environ.setdefault("SPARK_LOCAL_DIRS", tempfile.gettempdir())
# spark-submit and the venv's tools must resolve from the interpreter running the tests.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# spark-submit runs of the tests log warnings only and start no UI: a job's INFO lines (thousands) all go through
# the Airflow task logger, which costs more CPU than the job on a 2-core machine.
_SPARK_CONF_DIR = Path(tempfile.mkdtemp(prefix="wm-spark-conf-"))
atexit.register(shutil.rmtree, _SPARK_CONF_DIR, ignore_errors=True)
# -XX:-UsePerfData: no hsperfdata file in /tmp, which every JVM otherwise keeps writing to.
_SHORT_LIVED_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
(_SPARK_CONF_DIR / "log4j2.properties").write_text(
    "rootLogger.level = warn\n"
    "rootLogger.appenderRef.stdout.ref = console\n"
    "appender.console.type = Console\n"
    "appender.console.name = console\n"
    "appender.console.target = SYSTEM_ERR\n"
    "appender.console.layout.type = PatternLayout\n"
    "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
)
# Their driver JVMs live for seconds: the C1 compiler alone and the serial GC cut their CPU time by about 40%.
(_SPARK_CONF_DIR / "spark-defaults.conf").write_text(
    f"spark.ui.enabled false\nspark.driver.extraJavaOptions {_SHORT_LIVED_JVM_OPTIONS}\n"
)
os.environ.setdefault("SPARK_CONF_DIR", str(_SPARK_CONF_DIR))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated Airflow metadata DB (SQLite) in the session's AIRFLOW_HOME."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return _AIRFLOW_HOME


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# One Spark Connect server for the whole run, shared by pytest-xdist's workers: the embedded default of every
# operator without a Spark connection, the in-process DAG runs' and the subprocesses' (airflow standalone, the
# scheduler on PostgreSQL) alike. A second server would only compile the same plans again in a second JVM on the
# same two cores. The controller process picks the port (workers inherit its environment); the first test that
# needs the server starts it (``spark_connect_url``, or the first task; a lock makes it one), and the
# controller stops it when the whole run ends. Spark Connect keeps each client session's conf and views apart.
_SHARED_PORT = "WM_TESTS_SPARK_CONNECT_PORT"
_IS_WORKER = "PYTEST_XDIST_WORKER" in os.environ and _SHARED_PORT in os.environ
_CONNECT_PORT = int(os.environ[_SHARED_PORT]) if _IS_WORKER else _free_port()
os.environ[_SHARED_PORT] = str(_CONNECT_PORT)
os.environ["WM_SPARK_CONNECT_URL"] = f"sc://127.0.0.1:{_CONNECT_PORT}"
os.environ.setdefault("WM_SPARK_CONNECT_DRIVER_MEMORY", "3g")


def _stop_connect_server() -> None:
    from airflow_provider_wm.spark_connect_server import stop_server

    stop_server(_CONNECT_PORT)


if not _IS_WORKER:
    atexit.register(_stop_connect_server)


@pytest.fixture(scope="session")
def spark_connect_url() -> str:
    """The session's Spark Connect server (started here, warm), as ``sc://127.0.0.1:<port>``."""
    from airflow_provider_wm.spark_connect_server import ensure_embedded_server

    return ensure_embedded_server()


@pytest.fixture(scope="session")
def spark(spark_connect_url: str) -> Iterator[object]:
    """A Spark Connect session on the session's server: the jobs run over Spark Connect in the tests, as they
    do in the embedded default (the tests that submit with ``spark-submit`` start JVMs of their own)."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_connect_url).create()
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first, the integration tests (the longest) before the other slow ones, the order otherwise
    kept. ``make test`` runs three pytest-xdist workers that take tests one at a time (``--maxschedchunk 1``):
    the long end-to-end runs then start early on every worker and the quick tests fill in around them, instead
    of one worker ending the suite with a long test alone."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, "integration" not in item.path.parts))
