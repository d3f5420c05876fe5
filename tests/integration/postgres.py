"""A throw-away PostgreSQL server for integration tests, from the machine's PostgreSQL binaries.

``postgres_server()`` runs ``initdb`` in a fresh temp dir, starts the server with ``pg_ctl`` on a free loopback port
(TCP on 127.0.0.1 only, unix socket inside the temp dir), creates a database and yields a ``PostgresServer`` with a
``postgresql+psycopg2://`` SQLAlchemy URL. Afterwards (also on failure) it stops the server and removes the dir.

PostgreSQL refuses to run as root, so when the tests run as root the server processes run as an unprivileged user
(``postgres`` if it exists, else ``nobody``) that owns the temp dir; the switch is done by ``subprocess``
(``user=``/``group=``), so neither ``su`` nor ``runuser`` is needed. Authentication is ``trust``: the server only
listens on loopback and on a socket in a private dir, and lives only as long as the test.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRED_BINARIES = ("initdb", "pg_ctl", "postgres")
# Users that may own and run the server when the tests run as root, first existing one wins.
UNPRIVILEGED_USERS = ("postgres", "nobody")
# Settings for a disposable server: fast rather than durable.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    database: str
    socket_dir: Path
    data_dir: Path
    log_file: Path

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the database (no password: loopback ``trust`` authentication)."""
        return f"postgresql+psycopg2://{self.user}@{self.host}:{self.port}/{self.database}"

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError as error:
            return f"<no server log: {error}>"


def find_bindir() -> Path | None:
    """The directory with ``initdb``, ``pg_ctl`` and ``postgres``, or None if PostgreSQL is not installed.

    ``pg_ctl`` starts the ``postgres`` next to itself, so the three must come from one directory; symlinks such as
    ``/usr/local/bin/initdb`` are resolved to their real directory.
    """
    candidates: list[Path] = []
    if env_bindir := os.environ.get("PG_BINDIR"):
        candidates.append(Path(env_bindir))
    if initdb := shutil.which("initdb"):
        candidates.append(Path(os.path.realpath(initdb)).parent)

    def major(path: str) -> int:
        version = Path(path).parent.name
        return int(version) if version.isdigit() else -1

    candidates += [Path(d) for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True)]
    candidates += [Path("/usr/local/pgsql/bin")]
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in REQUIRED_BINARIES):
            return bindir
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """The user to run the server as: None for the current user, an unprivileged one when we are root."""
    if os.geteuid() != 0:
        return None
    for name in UNPRIVILEGED_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError(f"running as root and none of the users {UNPRIVILEGED_USERS} exists to run PostgreSQL")


class _Runner:
    """Runs PostgreSQL commands as the server user, in the server's dir, with a predictable environment."""

    def __init__(self, bindir: Path, workdir: Path, user: pwd.struct_passwd | None) -> None:
        self.bindir = bindir
        self.workdir = workdir
        self.user = user
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", TZ="UTC")
        if user is not None:
            env.update(HOME=str(workdir), USER=user.pw_name, LOGNAME=user.pw_name)
        self.env = env

    def run(self, program: str, args: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        extra: dict[str, object] = {}
        if self.user is not None:
            extra = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bindir / program), *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **extra,  # type: ignore[arg-type]
        )

    def check(self, program: str, args: Sequence[str], timeout: float = 120, log: Path | None = None) -> None:
        result = self.run(program, args, timeout)
        if result.returncode != 0:
            server_log = ""
            if log is not None and log.exists():
                server_log = f"\n--- server log {log} ---\n{log.read_text(errors='replace')}"
            raise RuntimeError(
                f"{program} {' '.join(args)} failed with exit code {result.returncode}\n"
                f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}{server_log}"
            )


def _create_database(host: str, port: int, user: str, database: str) -> None:
    import psycopg2

    connection = psycopg2.connect(host=host, port=port, user=user, dbname="postgres", connect_timeout=10)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{database}"')
    finally:
        connection.close()


def _kill_postmaster(data_dir: Path) -> None:
    """Last resort when ``pg_ctl stop`` fails: SIGKILL the postmaster named in its pid file."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@contextmanager
def postgres_server(
    database: str = "airflow", user: str = "airflow", start_attempts: int = 3
) -> Iterator[PostgresServer]:
    """Start a throw-away PostgreSQL server, yield it, then stop it and delete its files (also on failure).

    Fails the test (``pytest.fail``) naming what to install if the PostgreSQL binaries are missing: the machines
    we test on have them, so a missing server must not pass silently as a skip. Any other problem raises with the
    command's output and the server log.
    """
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(
            f"PostgreSQL binaries {REQUIRED_BINARIES} not found (PATH, $PG_BINDIR, /usr/lib/postgresql/*/bin); "
            "install PostgreSQL server packages to run this test"
        )
    os_user = _server_user()
    # Short path (the unix socket path must stay under ~100 bytes) that the server user can reach: /tmp is 1777.
    root = Path(tempfile.mkdtemp(prefix="wm-pg-", dir="/tmp" if os.path.isdir("/tmp") else None))
    data_dir, socket_dir, log_file = root / "data", root / "sock", root / "server.log"
    socket_dir.mkdir()
    if os_user is not None:
        for path in (root, socket_dir):
            os.chown(path, os_user.pw_uid, os_user.pw_gid)
    runner = _Runner(bindir, root, os_user)
    try:
        runner.check(
            "initdb",
            ["-D", str(data_dir), "-U", user, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
        )
        port = 0
        for attempt in range(1, start_attempts + 1):
            port = free_port()
            options = " ".join([f"-p {port}", f"-k {socket_dir}", *(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items())])
            result = runner.run("pg_ctl", ["-D", str(data_dir), "-l", str(log_file), "-o", options, "-w", "-t", "60",
                                           "start"])  # fmt: skip
            if result.returncode == 0:
                break
            # Most likely the port was taken between free_port() and bind(); try another one.
            if attempt == start_attempts:
                log = log_file.read_text(errors="replace") if log_file.exists() else ""
                raise RuntimeError(
                    f"pg_ctl start failed {start_attempts} times; last exit code {result.returncode}\n"
                    f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n--- server log ---\n{log}"
                )
            _kill_postmaster(data_dir)
        _create_database("127.0.0.1", port, user, database)
        yield PostgresServer("127.0.0.1", port, user, database, socket_dir, data_dir, log_file)
    finally:
        if (data_dir / "postmaster.pid").exists():  # a server was started (maybe by a failed attempt)
            stop = runner.run("pg_ctl", ["-D", str(data_dir), "-m", "fast", "-w", "-t", "30", "stop"], timeout=60)
            if stop.returncode != 0:
                _kill_postmaster(data_dir)
        shutil.rmtree(root, ignore_errors=True)
