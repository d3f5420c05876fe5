"""``python -m airflow_provider_wm.demo``: the README's main job.

Sets up an embedded Airflow (SQLite) in ``$WM_DEMO_DIR`` (default ``./.demo``, wiped first), generates the
example marks, runs ``dags/example_stream_watermark.py`` once per hour of example data through
``dag.test()`` (Spark ``local[*]`` through ``SparkSubmitHook``; the sensor defers and its trigger runs
inline), and prints what happened per stream and run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

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
    os.environ.setdefault("WM_EXAMPLE_SENSOR_TIMEOUT", "15")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def main() -> int:
    _prepare_environment()
    from airflow_provider_wm.demo import data, report

    print(f"Demo directory: {DEMO_DIR}")
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    print("Airflow metadata DB migrated (SQLite).")
    counts = data.write(DEMO_DIR / "data")
    print(f"Generated writer marks: {counts}")

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_DAGS / "example_stream_watermark.py"))
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}")
        return 1
    dag = bag.get_dag("example_stream_watermark")
    outcomes = []
    for hour in range(data.HOURS):
        # With CronDataIntervalTimetable a run's logical date is the end of its data interval.
        logical_date = data.START + timedelta(hours=hour + 1)
        print(f"Running the DAG for data interval {logical_date - timedelta(hours=1):%H:%M}-{logical_date:%H:%M} UTC")
        run = dag.test(logical_date=logical_date)
        outcomes.append(report.run_outcome(run))
    print(report.render(DEMO_DIR / "data" / "store", outcomes))
    failed = [o for o in outcomes if o["state"] != "success"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
