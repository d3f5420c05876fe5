"""Partitioned asset events under a real scheduler and triggerer (SQLite): the partition report runs once per key.

The two example DAGs are copied into a fresh dags folder: ``example_incremental_partitions`` (grace period two
days, regions eu and us, ``emit_partition_keys=True``) and ``example_partition_report``, scheduled by
``PartitionedAssetTimetable`` on its asset. The api-server, dag-processor, scheduler and triggerer run as
subprocesses; the producer's Spark job runs on the test session's Spark Connect server.

- day 1 (the run of 2026-01-03): the partitions of 01-01 .. 01-03 are new: six keys, six report runs;
- day 2 (the run of 2026-01-04), after 01-04's orders and late orders for 01-03 arrived: 01-04 is new, 01-02 and
  01-03 are re-read within the grace period: six more keys; each re-read day gets exactly one more report run,
  and the report of 01-03 sees the late orders.

Every key emitted (the asset events in the metadata DB) is one report run of the key's region and day, no more:
no partition run is left pending.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.demo import orders_data
from tests.integration.airflow_on_postgres import AirflowOnPostgres, airflow_components, wait_for
from tests.integration.airflow_on_sqlite import airflow_on_sqlite
from tests.integration.standalone import Api

pytestmark = pytest.mark.slow

REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"
PRODUCER, REPORT = "example_incremental_partitions", "example_partition_report"
PASSWORD = "wm-partitioned-assets"
RUN_TIMEOUT = 240  # seconds for a producer run (Spark job, deferred sensor, report task) or its report runs


def emitted_keys(setup: AirflowOnPostgres) -> Counter[str]:
    rows = setup.query(
        "select e.partition_key from asset_event e join asset a on a.id = e.asset_id"
        " where a.name = 'orders_daily' and e.partition_key is not null"
    )
    return Counter(str(row[0]) for row in rows)


def report_runs(setup: AirflowOnPostgres) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(partition key, state, the report task's XCom) of every run of the report."""
    rows = setup.query(
        "select r.partition_key, r.state, x.value from dag_run r left join xcom x on x.dag_run_id = r.id"
        " and x.task_id = 'report_partition' and x.key = 'return_value' where r.dag_id = :d order by r.id",
        d=REPORT,
    )
    return [(row[0], row[1], json.loads(row[2]) if isinstance(row[2], str | bytes) else row[2]) for row in rows]


def run_producer(setup: AirflowOnPostgres, processes: dict, day: datetime, expected_reports: int) -> None:
    """Trigger the producer for the interval of ``day`` (through the REST API: the CLI cannot give a data interval,
    and the operator's clock is its end), wait for it and for the report runs its keys start."""
    run_id = f"day_{day:%m%d}"
    Api(f"http://127.0.0.1:{setup.api_port}", PASSWORD).trigger(PRODUCER, run_id, day, day + timedelta(days=1))

    def finished() -> object:
        state = setup.scalar("select state from dag_run where dag_id = :d and run_id = :r", d=PRODUCER, r=run_id)
        return state if state in ("success", "failed") else None

    assert wait_for(finished, f"the producer's run {run_id}", RUN_TIMEOUT, processes) == "success"

    def reports_done() -> object:
        runs = report_runs(setup)
        return len(runs) >= expected_reports and all(state in ("success", "failed") for _, state, _ in runs)

    wait_for(reports_done, f"{expected_reports} report runs", RUN_TIMEOUT, processes)


def test_the_partition_report_runs_once_per_key_emitted_and_once_more_for_a_late_rewrite(spark_connect_url, tmp_path):
    base = tmp_path / "data"
    orders_data.write_history(base / "orders", orders_data.START + timedelta(days=3))  # 01-01 .. 01-03
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    env = {
        "WM_EXAMPLE_BASE": str(base),
        "WM_EXAMPLE_SENSOR_TIMEOUT": "120",
        "WM_SPARK_CONNECT_URL": spark_connect_url,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }
    with airflow_on_sqlite() as setup:
        for name in (PRODUCER, REPORT):
            shutil.copy(REPO_DAGS / f"{name}.py", setup.dags_folder / f"{name}.py")
        with airflow_components(setup, extra_env=env) as processes:
            wait_for(
                lambda: (
                    setup.scalar("select count(*) from serialized_dag where dag_id in (:p, :r)", p=PRODUCER, r=REPORT)
                    == 2
                ),
                "the dag-processor to store both DAGs",
                120,
                processes,
            )
            for name in (PRODUCER, REPORT):
                setup.airflow("dags", "unpause", name)

            run_producer(setup, processes, orders_data.START + timedelta(days=2), expected_reports=6)
            days = [f"2026-01-0{day}" for day in range(1, 5)]
            assert emitted_keys(setup) == Counter(
                f"{region}|{day}T00:00:00" for region in ("eu", "us") for day in days[:3]
            )

            orders_data.write_day(base / "orders", orders_data.START + timedelta(days=4))  # 01-04 + late for 01-03
            run_producer(setup, processes, orders_data.START + timedelta(days=3), expected_reports=12)
            time.sleep(10)  # a run created late would show up here

            emitted = emitted_keys(setup)
            runs = report_runs(setup)
            pending = setup.scalar("select count(*) from asset_partition_dag_run where created_dag_run_id is null")

    twice = {day: 2 if day in ("2026-01-02", "2026-01-03") else 1 for day in days}
    assert emitted == Counter({f"{region}|{day}T00:00:00": n for region in ("eu", "us") for day, n in twice.items()})
    assert [state for _, state, _ in runs] == ["success"] * 12
    assert Counter(key for key, _, _ in runs) == Counter({key[:13]: n for key, n in emitted.items()}), runs
    assert pending == 0
    orders = {key: [report["orders"] for k, _, report in runs if k == key] for key, _, _ in runs}
    eu_late = orders["eu|2026-01-03"]
    assert eu_late[1] > eu_late[0], f"the report after the late rewrite saw no late orders: {orders}"
    assert orders["eu|2026-01-02"][0] == orders["eu|2026-01-02"][1] > 0  # re-read within grace, nothing new
