"""One throw-away PostgreSQL server and Airflow home for the integration tests that need them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.airflow_on_postgres import AirflowOnPostgres, airflow_home


@pytest.fixture(scope="session")
def airflow_on_postgres() -> Iterator[AirflowOnPostgres]:
    with airflow_home() as setup:
        yield setup
