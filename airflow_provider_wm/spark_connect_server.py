"""The embedded Spark Connect server: a ``SparkConnectServer`` started from the pip ``pyspark`` package.

The pip package ships the server's jar but no start script; this module starts one with the package's own
``spark-submit`` on loopback, waits until its gRPC port answers, and stops it. Tasks that run with no Spark
connection are Spark Connect clients of it (:func:`embedded_url`): the JVM starts once, not once per task.

- ``python -m airflow_provider_wm.spark_connect_server start`` starts it in the background (and returns once
  it answers), ``stop`` stops it, ``status`` says whether it answers, ``serve`` runs it in the foreground
  (for a container). ``--master`` defaults to ``local[*]``; ``--port`` to the port of :func:`embedded_url`.
- ``WM_SPARK_CONNECT_URL`` (default ``sc://127.0.0.1:15002``) is where the embedded default connects. When
  nothing answers there and the host is loopback, the first task starts the server itself and leaves it
  running for the next ones (``stop`` ends it); ``make demo`` and ``make airflow`` start it first and stop it
  when they end.

Pure Python: no airflow and no pyspark imports at module level.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

__all__ = [
    "DEFAULT_URL",
    "ConnectServer",
    "embedded_server",
    "embedded_url",
    "ensure_embedded_server",
    "is_listening",
    "quiet_java_options",
    "spark_home",
    "start_server",
    "stop_server",
    "terminate_group",
]

DEFAULT_URL = "sc://127.0.0.1:15002"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def embedded_url() -> str:
    """Where tasks without a Spark connection connect: ``$WM_SPARK_CONNECT_URL`` or :data:`DEFAULT_URL`."""
    return os.environ.get("WM_SPARK_CONNECT_URL") or DEFAULT_URL


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ValueError(f"WM_SPARK_CONNECT_URL={url!r} must look like sc://127.0.0.1:15002")
    return parsed.hostname, parsed.port or 15002


def spark_home() -> Path:
    """The pip ``pyspark`` package folder: it has ``bin/spark-submit`` and ``jars/``."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed")
    return Path(spec.origin).parent


def quiet_java_options() -> str:
    """JVM options that give Spark's own logging warnings only (our ``spark_conf/log4j2.properties``)."""
    config = resources.files("airflow_provider_wm").joinpath("spark_conf/log4j2.properties")
    return f"-Dlog4j2.configurationFile=file:{config} -XX:-UsePerfData"


def is_listening(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


@dataclass
class ConnectServer:
    """A server this process started: its URL, process and log file."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self, timeout: float = 30.0) -> None:
        terminate_group(self.process.pid, timeout)
        self.process.wait(timeout=timeout)


def _state_dir() -> Path:
    directory = Path(tempfile.gettempdir()) / "wm-spark-connect"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def server_command(port: int, master: str, host: str, conf: dict[str, str] | None = None) -> list[str]:
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", SERVER_CLASS,
        "--name", f"wm-spark-connect-{port}",
        "--master", master,
        "--driver-memory", os.environ.get("WM_SPARK_CONNECT_DRIVER_MEMORY", "2g"),
        "--conf", f"spark.connect.grpc.binding.address={host}",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip
    for key, value in (conf or {}).items():
        command += ["--conf", f"{key}={value}"]
    return command


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_HOME", str(spark_home()))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # a server compiles every query's generated code for hours: with C1 alone (-XX:TieredStopAtLevel=1, a
    # short-lived JVM's option in a shared spark-defaults.conf) the code cache defaults to 48 MB, and a full one
    # kills the JVM ("Out of space in CodeCache")
    options = f"{quiet_java_options()} -XX:ReservedCodeCacheSize=256m"
    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {options}".strip()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def start_server(
    port: int,
    *,
    master: str = "local[*]",
    host: str = "127.0.0.1",
    conf: dict[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> ConnectServer:
    """Start a server and return once its port answers and a first query ran (the JVM's warm-up). It runs in
    a process group of its own: it outlives this process until :func:`stop_server` or ``ConnectServer.stop``."""
    if is_listening(host, port):
        raise RuntimeError(f"port {port} on {host} is already in use: is a Spark Connect server running there?")
    log_path = _state_dir() / f"server-{port}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            server_command(port, master, host, conf),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_environment(),
            start_new_session=True,
        )
    (_state_dir() / f"server-{port}.pid").write_text(str(process.pid))
    url = f"sc://{host}:{port}"
    deadline = time.monotonic() + timeout
    while not is_listening(host, port):
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with {process.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            terminate_group(process.pid, 10)
            raise TimeoutError(f"the Spark Connect server did not listen on {host}:{port} in {timeout:.0f} s")
        time.sleep(0.2)
    _warm_up(url)
    return ConnectServer(url, process, log_path)


def _warm_up(url: str) -> None:
    """One small query: the first after a start pays for the JVM's class loading and JIT."""
    code = (
        "from pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.remote({url!r}).create()\n"
        "s.range(1000).selectExpr('id % 7 AS k').groupBy('k').count().collect()\n"
        "s.stop()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)


def stop_server(port: int, timeout: float = 30.0) -> bool:
    """Stop the server started on ``port`` by :func:`start_server` (its pid file); False when none ran."""
    pid_file = _state_dir() / f"server-{port}.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())
    outcome = terminate_group(pid, timeout)
    pid_file.unlink(missing_ok=True)
    return outcome != "absent"


def _group_alive(pid: int) -> bool:
    """Whether a process of the group led by ``pid`` still runs. A leader that is our child and has exited
    stays in the group as a zombie until reaped, so it is reaped here first (its exit status is not needed)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def terminate_group(pid: int, timeout: float = 30.0) -> Literal["absent", "terminated", "killed"]:
    """SIGTERM to the process group led by ``pid`` (spark-submit and its JVM, or ``airflow standalone`` and its
    components); SIGKILL when some of it still runs after ``timeout``. Returns what happened: ``absent`` (no
    such group), ``terminated`` (it ended on SIGTERM) or ``killed``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "absent"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_alive(pid):
            return "terminated"
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return "killed"


@contextlib.contextmanager
def _start_lock(port: int) -> Iterator[None]:
    with open(_state_dir() / f"server-{port}.lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def embedded_server() -> Iterator[str]:
    """The embedded server for the length of a ``with`` block: started when none answers at
    :func:`embedded_url` (and then stopped at the end, Ctrl-C included), reused as it is otherwise."""
    url = embedded_url()
    host, port = _host_port(url)
    if is_listening(host, port):
        yield url
        return
    server = start_server(port, host="127.0.0.1" if host == "localhost" else host)
    try:
        yield server.url
    finally:
        server.stop()
        (_state_dir() / f"server-{port}.pid").unlink(missing_ok=True)


def ensure_embedded_server() -> str:
    """The embedded default's URL, with a server answering there: started (detached, ``local[*]``) when none
    answers and the URL is on loopback; several tasks starting at once start one server."""
    url = embedded_url()
    host, port = _host_port(url)
    if is_listening(host, port):
        return url
    if host not in LOOPBACK:
        raise ConnectionError(f"no Spark Connect server answers at {url} (WM_SPARK_CONNECT_URL)")
    with _start_lock(port):
        if not is_listening(host, port):
            start_server(port, host="127.0.0.1" if host == "localhost" else host)
    return url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The embedded Spark Connect server (see the module docstring)")
    parser.add_argument("action", choices=["start", "stop", "status", "serve"])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--host", default=None, help="binding address (default: the embedded URL's host)")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)
    default_host, default_port = _host_port(embedded_url())
    port, host = args.port or default_port, args.host or default_host
    if args.action == "status":
        listening = is_listening("127.0.0.1" if host == "0.0.0.0" else host, port)
        print(f"sc://{host}:{port} {'answers' if listening else 'does not answer'}")
        return 0 if listening else 1
    if args.action == "stop":
        print("stopped" if stop_server(port) else f"no server started on port {port}")
        return 0
    if args.action == "serve":
        os.execvpe(server_command(port, args.master, host)[0], server_command(port, args.master, host), _environment())
    server = start_server(port, master=args.master, host=host)
    print(f"Spark Connect server ({args.master}) at {server.url}; log {server.log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
