"""``python -m airflow_provider_wm.demo``: the README's main job.

Sets up an embedded Airflow (SQLite) in ``$WM_DEMO_DIR`` (default ``./.demo``, wiped first), generates the
example data, starts the embedded Spark Connect server (``local[*]``; stopped at the end, Ctrl-C included)
and runs the example DAGs through ``dag.test()`` (each Spark task a Spark Connect client of that server;
sensors defer and their triggers run inline):

1. ``dags/example_stream_watermark.py``, ``dags/example_joined_streams.py``,
   ``dags/example_windowed_aggregate.py``, ``dags/example_pipeline_chain.py`` and
   ``dags/example_orders_deliveries.py`` once per hour of example marks, order and delivery events; prints
   per stream and run what the controller decided, what the sensor saw, and which streams the join excluded
   as idle, then per run of the windowed aggregate its watermark, events and panes (EARLY, ON_TIME, LATE
   and their retractions), and the windows that received late data; then the chain (5-minute aggregate ->
   hourly rollup of its panes, each waiting on the previous output watermark) and the merge of orders and
   deliveries per 10-minute window;
2. ``dags/example_incremental_partitions.py`` once per simulated day, with late orders every day and one
   work unit's transformation failing once (its retry re-executes only that unit); prints each run's plan.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

DEMO_DIR = Path(os.environ.get("WM_DEMO_DIR", ".demo")).resolve()
REPO_DAGS = Path(__file__).resolve().parents[2] / "dags"


def _prepare_environment() -> None:
    """Must run before anything imports airflow: Airflow reads AIRFLOW_HOME at import."""
    if DEMO_DIR.exists():
        shutil.rmtree(DEMO_DIR)
    (DEMO_DIR / "airflow").mkdir(parents=True)
    os.environ["AIRFLOW_HOME"] = str(DEMO_DIR / "airflow")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO_DAGS)
    os.environ["WM_EXAMPLE_BASE"] = str(DEMO_DIR / "data")
    os.environ.setdefault("WM_EXAMPLE_SENSOR_TIMEOUT", "3")  # each run follows the one that publishes
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def main() -> int:
    _prepare_environment()
    from airflow_provider_wm.spark_connect_server import embedded_server

    print("Starting the embedded Spark Connect server (local[*]) ...", flush=True)
    with embedded_server() as url:
        print(f"Spark Connect server at {url}", flush=True)
        return _run_demo()


def run_interval(dag: Any, logical_date: datetime) -> Any:
    """``dag.test()`` for one interval, with its progress line printed as soon as the run ends."""
    from airflow_provider_wm.demo import report

    started = time.monotonic()
    run = dag.test(logical_date=logical_date)
    print(report.progress_line(run, time.monotonic() - started), flush=True)
    return run


def _run_demo() -> int:
    from airflow_provider_wm.demo import data, order_events, report

    print(f"Demo directory: {DEMO_DIR}")
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    print("Airflow metadata DB migrated (SQLite).")
    counts = data.write(DEMO_DIR / "data")
    print(f"Generated writer marks: {counts}")
    print(f"Generated order events (by arrival hour): {order_events.write(DEMO_DIR / 'data')}")

    from airflow.dag_processing.dagbag import DagBag

    # dag.test()'s "No tasks to run" while a sensor's trigger runs inline, and the plugin found twice (entry point
    # and plugins folder scan) in one process: expected here, noise in the demo's output (set after Airflow's own
    # logging configuration, which resets levels when it is imported)
    for name in ("airflow.sdk.definitions.dag", "airflow.plugins_manager"):
        logging.getLogger(name).setLevel(logging.ERROR)
    bag = DagBag(dag_folder=str(REPO_DAGS / "example_stream_watermark.py"))
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}")
        return 1
    dag = bag.get_dag("example_stream_watermark")
    join_bag = DagBag(dag_folder=str(REPO_DAGS / "example_joined_streams.py"))
    if join_bag.import_errors:
        print(f"DAG import errors: {join_bag.import_errors}")
        return 1
    join_dag = join_bag.get_dag("example_joined_streams")
    windows_bag = DagBag(dag_folder=str(REPO_DAGS / "example_windowed_aggregate.py"))
    if windows_bag.import_errors:
        print(f"DAG import errors: {windows_bag.import_errors}")
        return 1
    windows_dag = windows_bag.get_dag("example_windowed_aggregate")
    downstream = {}
    for dag_id in ("example_pipeline_chain", "example_orders_deliveries"):
        downstream_bag = DagBag(dag_folder=str(REPO_DAGS / f"{dag_id}.py"))
        if downstream_bag.import_errors:
            print(f"DAG import errors: {downstream_bag.import_errors}")
            return 1
        downstream[dag_id] = downstream_bag.get_dag(dag_id)
    outcomes = []
    window_outcomes: list[dict[str, Any]] = []
    chain_outcomes: list[dict[str, Any]] = []
    for hour in range(data.HOURS):
        # With CronDataIntervalTimetable a run's logical date is the end of its data interval.
        logical_date = data.START + timedelta(hours=hour + 1)
        print(f"Running the DAGs for data interval {logical_date - timedelta(hours=1):%H:%M}-{logical_date:%H:%M} UTC")
        run = run_interval(dag, logical_date)
        outcome = report.run_outcome(run)
        join_run = run_interval(join_dag, logical_date)
        outcome["join"] = {
            **report.run_outcome(join_run),
            "progress": report.xcom_value(join_run, "orders_and_refunds_complete"),
        }
        outcomes.append(outcome)
        windows_run = run_interval(windows_dag, logical_date)  # after the controller published the hour
        window_outcomes.append(
            {
                **report.run_outcome(windows_run),
                "sensor": report.xcom_value(windows_run, "wait_for_orders"),
                "summary": report.xcom_value(windows_run, "orders_15m"),
            }
        )
        chain_run = run_interval(downstream["example_pipeline_chain"], logical_date)
        merge_run = run_interval(downstream["example_orders_deliveries"], logical_date)
        chain_outcomes.append(
            {
                **report.run_outcome(chain_run),
                "summaries": {t: report.xcom_value(chain_run, t) for t in ("orders_5m", "orders_1h")},
                "merge": {
                    **report.run_outcome(merge_run),
                    "summary": report.xcom_value(merge_run, "orders_deliveries_10m"),
                },
            }
        )
    print(report.render(DEMO_DIR / "data" / "store", outcomes))
    print(report.render_windows(DEMO_DIR / "data", "orders_15m", window_outcomes))
    print(report.render_chain(DEMO_DIR / "data", chain_outcomes))
    outcomes += window_outcomes
    outcomes += [*chain_outcomes, *(o["merge"] for o in chain_outcomes)]
    outcomes += _run_partitions_demo()
    failed = [o for o in outcomes if o["state"] != "success" or o.get("join", {}).get("state", "success") != "success"]
    return 1 if failed else 0


def _run_partitions_demo() -> list[dict[str, object]]:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider_wm.demo import orders_data, report
    from airflow_provider_wm.demo.transforms import FAIL_ONCE_ENV

    base = DEMO_DIR / "data"
    source = base / "orders"
    history = orders_data.write_history(source, orders_data.FIRST_RUN - timedelta(days=1))
    print(f"\nGenerated {history} orders before the first run")
    bag = DagBag(dag_folder=str(REPO_DAGS / "example_incremental_partitions.py"))
    if bag.import_errors:
        raise RuntimeError(f"DAG import errors: {bag.import_errors}")
    dag = bag.get_dag("example_incremental_partitions")
    marker = base / "fail-once"
    os.environ[FAIL_ONCE_ENV] = str(marker)
    outcomes = []
    for day in range(orders_data.DAYS):
        now = orders_data.FIRST_RUN + timedelta(days=day)
        arrived = orders_data.write_day(source, now)
        if day == 1:  # one unit of this run fails once: the task's retry re-executes only that unit
            marker.write_text(f"{(now - timedelta(days=1)):%Y%m%dT%H%M%SZ} us")
            print("  (planned: the 'us' unit of this day fails once; the error below is expected, a retry follows)")
        print(f"Running the DAG for {now - timedelta(days=1):%Y-%m-%d} (arrived before the run: {arrived})")
        outcomes.append(report.run_outcome(run_interval(dag, now)))
    print(report.render_partitions(base / "store", "orders_daily", outcomes))
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
