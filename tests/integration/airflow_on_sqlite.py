"""Airflow on a SQLite metadata DB, its components run as subprocesses: the scaffolding of airflow_on_postgres.py
(``airflow_components``, ``wait_for``, the CLI and SQL helpers of ``AirflowOnPostgres``) with a SQLite file in place
of the PostgreSQL server. ``airflow standalone`` runs the same components on SQLite; running them one by one lets a
test stop and start one of them (the triggerer) while the others stay up."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.integration.airflow_on_postgres import AirflowOnPostgres, airflow_env
from tests.integration.postgres import free_port


@dataclass(frozen=True)
class SqliteDatabase:
    """What the scaffolding reads of a database server: its SQLAlchemy URL and a log (SQLite has none: empty)."""

    url: str
    log_file: Path


@contextmanager
def airflow_on_sqlite() -> Iterator[AirflowOnPostgres]:
    """A fresh AIRFLOW_HOME with a SQLite metadata DB migrated in it; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="wm-sqlite-airflow-") as tmp:
        home = Path(tmp)
        dags_folder, logs = home / "dags", home / "process-logs"
        dags_folder.mkdir()
        logs.mkdir()
        database = SqliteDatabase(f"sqlite:///{home / 'airflow.db'}", logs / "sqlite.log")
        database.log_file.write_text("(SQLite: no server log)\n")
        api_port = free_port()
        env = airflow_env(database, home, dags_folder, api_port)  # type: ignore[arg-type]
        setup = AirflowOnPostgres(database, home, dags_folder, logs, api_port, env)  # type: ignore[arg-type]
        setup.airflow("db", "migrate", timeout=300)
        yield setup
