"""The watcher example under a real scheduler and triggerer: the DAG runs once per hour the ``orders`` watermark
passes, and a triggerer restart between two advances neither loses nor repeats an hour.

Airflow runs on a SQLite metadata DB (tests/integration/airflow_on_sqlite.py, the scaffolding of
airflow_on_postgres.py on a SQLite file): its api-server, dag-processor and scheduler stay up, the triggerer is
started, stopped and started again. The test advances
the watermark the way the controller does, by publishing to the watermark store; the trigger's cursor is
read back from Airflow's asset state store table.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.demo import order_events
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.dags.test_example_watermark_watcher import expected_orders
from tests.hooks.test_watermark_store import record
from tests.integration.airflow_on_postgres import AirflowOnPostgres, airflow_components, wait_for
from tests.integration.airflow_on_sqlite import airflow_on_sqlite

pytestmark = pytest.mark.slow

DAG_ID = "example_watermark_watcher"
ASSET = "orders_watermark_hours"
CURSOR_KEY = "wm_advance_cursor/orders/3600000"
EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / f"{DAG_ID}.py"
HOUR = 3_600_000
START_MS = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)
WAIT = 120  # seconds for one advance to become a finished run


@pytest.fixture
def airflow_sqlite() -> Iterator[AirflowOnPostgres]:
    with airflow_on_sqlite() as setup:
        yield setup


def as_json(value: Any) -> Any:
    """A JSON column's value (a string on some drivers)."""
    return json.loads(value) if isinstance(value, str) else value


def runs(setup: AirflowOnPostgres) -> list[tuple[str, str, list[int]]]:
    """The DAG's runs, oldest first: run id, state and the boundaries of the asset events that triggered it."""
    found = []
    for run_pk, run_id, state in setup.query(
        "select id, run_id, state from dag_run where dag_id = :d order by id", d=DAG_ID
    ):
        extras = setup.query(
            "select e.extra from asset_event e join dagrun_asset_event l on l.event_id = e.id where l.dag_run_id = :r",
            r=run_pk,
        )
        found.append((run_id, state, sorted(as_json(extra)["payload"]["boundary_ms"] for (extra,) in extras)))
    return found


def fired(setup: AirflowOnPostgres) -> list[int]:
    """The boundary of every event of the watched asset, in the order they were stored."""
    rows = setup.query(
        "select e.extra from asset_event e join asset a on a.id = e.asset_id where a.name = :n order by e.id", n=ASSET
    )
    return [as_json(extra)["payload"]["boundary_ms"] for (extra,) in rows]


def cursor(setup: AirflowOnPostgres) -> int | None:
    value = setup.scalar(
        "select s.value from asset_state_store s join asset a on a.id = s.asset_id where a.name = :n and s.key = :k",
        n=ASSET,
        k=CURSOR_KEY,
    )
    return None if value is None else int(as_json(value)["boundary_ms"])


def reports(setup: AirflowOnPostgres) -> list[dict[str, Any]]:
    rows = setup.query(
        "select x.value from xcom x join dag_run r on r.run_id = x.run_id and r.dag_id = x.dag_id "
        "where x.dag_id = :d and x.task_id = 'hourly_orders_report' and x.key = 'return_value' order by r.id",
        d=DAG_ID,
    )
    return [report for (value,) in rows for report in as_json(value)]


def test_the_watcher_dag_runs_once_per_boundary_across_a_triggerer_restart(airflow_sqlite, tmp_path):
    setup = airflow_sqlite
    base, dags = tmp_path / "example", tmp_path / "dags"
    dags.mkdir()
    order_events.write(base)
    shutil.copy(EXAMPLE, dags)
    store = WatermarkStoreHook(str(base / "store"))
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        # a watcher is registered when its DAG is parsed unpaused (the session's setup pauses new DAGs)
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "WM_EXAMPLE_BASE": str(base),
        "WM_EXAMPLE_WATCHER_POLL": "1",
    }

    def advance(to_ms: int) -> None:
        assert store.publish({**record(to_ms), "run_id": f"advance-{to_ms}"})

    def finished_runs(count: int) -> bool:
        found = runs(setup)
        return len(found) >= count and all(state in ("success", "failed") for _, state, _ in found)

    def the_cursor_at(boundary_ms: int) -> bool:
        return cursor(setup) == boundary_ms

    timings: dict[str, float] = {}
    started = time.monotonic()
    with airflow_components(setup, "api-server", "dag-processor", "scheduler", extra_env=env) as processes:
        wait_for(
            lambda: setup.scalar("select count(*) from serialized_dag where dag_id = :d", d=DAG_ID),
            f"the dag-processor to store {DAG_ID}",
            90,
            processes,
        )
        assert not setup.scalar("select is_paused from dag where dag_id = :d", d=DAG_ID)
        advance(START_MS + HOUR + 60_000)  # 01:01: passes 01:00

        with airflow_components(setup, "triggerer", extra_env=env) as triggerer:
            both = {**processes, **triggerer}
            wait_for(lambda: finished_runs(1), "the run of 01:00", WAIT + 60, both)
            timings["first run"] = time.monotonic() - started
            advance(START_MS + 2 * HOUR + 30_000)  # 02:00:30: passes 02:00
            wait_for(lambda: finished_runs(2), "the run of 02:00", WAIT, both)
            wait_for(lambda: the_cursor_at(START_MS + 2 * HOUR), "the cursor at 02:00", 30, both)
        with suppress(OSError):
            (setup.logs / "triggerer.log").rename(setup.logs / "triggerer-first.log")
        timings["triggerer stopped"] = time.monotonic() - started

        advance(START_MS + 3 * HOUR + 600_000)  # 03:10 while no triggerer runs: passes 03:00
        time.sleep(5)
        assert len(runs(setup)) == 2, "a run started with no triggerer"

        with airflow_components(setup, "triggerer", extra_env=env) as triggerer:
            both = {**processes, **triggerer}
            wait_for(lambda: finished_runs(3), "the run of 03:00 after the restart", WAIT + 60, both)
            timings["run after restart"] = time.monotonic() - started
            advance(START_MS + 5 * HOUR + 1_200_000)  # 05:20, a jump: passes 04:00 and 05:00, event_spacing apart
            wait_for(lambda: finished_runs(5), "the runs of 04:00 and 05:00", WAIT, both)
            wait_for(lambda: the_cursor_at(START_MS + 5 * HOUR), "the cursor at 05:00", 30, both)
            time.sleep(3)  # two more polls: nothing more may fire
            found, events, reported = runs(setup), fired(setup), reports(setup)
    print(f"\nwatcher test timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    print(f"runs: {found}")

    hours = [START_MS + h * HOUR for h in range(1, 6)]
    assert events == hours, "each boundary fired once, in order, none lost or repeated across the restart"
    assert [state for _, state, _ in found] == ["success"] * len(found)
    assert [boundaries for *_, boundaries in found] == [[hour] for hour in hours], "one run per boundary"
    assert [report["hour_end"] for report in reported] == [f"2026-01-05T{h:02d}:00:00.000Z" for h in range(1, 6)]
    assert [report["regions"] for report in reported] == [expected_orders(h) for h in range(5)]
    assert cursor(setup) == hours[-1]
