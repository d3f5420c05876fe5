"""``make demo``'s progress: one line per DAG run as it ends, with its interval, outcome and seconds."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, CronDataIntervalTimetable
from airflow.sdk.exceptions import AirflowSkipException

from airflow_provider_wm.demo.__main__ import run_interval
from tests.airflow_helpers import register


def _nothing_to_do() -> None:
    raise AirflowSkipException("no data in this interval")


def test_each_run_prints_its_interval_dag_outcome_and_seconds_as_it_ends(airflow_db, capsys):
    with DAG(
        dag_id="demo_progress_line",
        schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
        start_date=datetime(2026, 1, 5, tzinfo=UTC),
        catchup=False,
    ) as dag:
        EmptyOperator(task_id="ready") >> PythonOperator(task_id="report", python_callable=_nothing_to_do)
    register(dag)

    run = run_interval(dag, datetime(2026, 1, 5, 2, tzinfo=UTC))

    assert run.dag_id == "demo_progress_line"
    line = capsys.readouterr().out.splitlines()[-1]  # dag.test() logs its own lines before it
    assert line.split()[:4] == ["01-05", "01:00-02:00", "demo_progress_line", "success"]
    assert "(report skipped)" in line and line.endswith(" s")
