"""The incremental-partitions example DAG: loads cleanly and runs a day end to end (Spark, sensor, report)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from airflow_provider_wm.demo import orders_data
from tests.airflow_helpers import run_dag, xcom

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_example_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "example_incremental_partitions.py"))
    assert bag.import_errors == {}
    return bag.get_dag("example_incremental_partitions")


def test_the_example_declares_its_asset_grace_and_units(airflow_db):
    dag = load_example_dag()
    op = dag.get_task("orders_daily")
    assert op.grace_ms == 2 * 86_400_000 and op.units == ["eu", "us"]
    assert [a.name for a in op.outlets] == ["orders_daily"]
    assert dag.get_task("day_complete").pipeline == "orders_daily"


@pytest.mark.slow
def test_a_day_runs_end_to_end_and_reports_that_days_revenue(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("WM_EXAMPLE_BASE", str(tmp_path))
    monkeypatch.setenv("WM_EXAMPLE_SENSOR_TIMEOUT", "20")
    orders_data.write_history(tmp_path / "orders", orders_data.FIRST_RUN)
    dag = load_example_dag()  # parsed now, so it sees WM_EXAMPLE_BASE
    run, states = run_dag(dag, orders_data.FIRST_RUN)
    assert states == {"orders_daily": "success", "day_complete": "success", "daily_revenue": "success"}
    assert xcom(run, "day_complete")["work_units"] == 2
    table = ds.dataset(tmp_path / "orders", format="parquet", partitioning="hive").to_table()
    last_day = orders_data.FIRST_RUN.date().replace(day=orders_data.FIRST_RUN.day - 1)
    revenue: dict[str, float] = {}
    for row in table.to_pylist():
        if row["event_time"].date() == last_day:
            revenue[row["region"]] = revenue.get(row["region"], 0.0) + round(row["amount"] * 0.92, 2)
    assert xcom(run, "daily_revenue") == pytest.approx(revenue)
