"""Running DAGs for real in tests: ``dag.test()`` on the session's SQLite DB."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG


def fresh_dag(prefix: str) -> DAG:
    """A fresh, unscheduled DAG with a unique id (each test gets its own runs and XComs)."""
    return DAG(
        dag_id=f"{prefix}_{uuid.uuid4().hex[:8]}",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
    )


def register(dag: DAG) -> None:
    """Write a DAG defined in a test module to the metadata DB, as the DAG processor would.

    ``dag.test()`` only runs serialized DAGs of a configured bundle; test DAGs live in no file of it.
    """
    import tempfile

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    # dag.test() re-parses the DAGs folder; example DAGs read WM_EXAMPLE_BASE at import, so drop their cached
    # modules (Airflow names them unusual_prefix_*) and let that parse see this test's environment
    for name in [m for m in sys.modules if m.startswith("unusual_prefix_")]:
        del sys.modules[name]
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=tempfile.mkdtemp(), collect_dags=False)
    bag.dags[dag.dag_id] = dag
    sync_bag_to_db(bag, "dags-folder", None)
    _update_asset_orphanage()


def _update_asset_orphanage() -> None:
    """What the scheduler does between parses: an asset no DAG references any more (an example DAG parsed
    again with another ``WM_EXAMPLE_BASE`` changes its asset's URI) is retired, so the new one, with the same
    name, can become active. Without a scheduler, ``dag.test()`` would find the new asset inactive."""
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    with create_session() as session:
        SchedulerJobRunner._update_asset_orphanage(SchedulerJobRunner, session=session)  # type: ignore[arg-type]


def run_dag(dag: DAG, logical_date: datetime | None = None) -> tuple[Any, dict[str, str]]:
    """Run once; returns the DagRun and each task's final state (dag.test() does not raise on failure)."""
    register(dag)
    run = dag.test(logical_date=logical_date or datetime(2026, 1, 1, 1, tzinfo=UTC))
    return run, {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def xcom(run: Any, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def _asset_events(asset_name: str) -> list[Any]:
    """Every event of the active asset named ``asset_name``, oldest first (detached from the session)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == asset_name, AssetModel.active.has())
            .order_by(AssetEvent.id)
            .all()
        )
        session.expunge_all()
        return events


def asset_event_extras(asset_name: str) -> list[dict[str, Any]]:
    """The ``extra`` of every event of the active asset named ``asset_name``, oldest first."""
    return [dict(e.extra or {}) for e in _asset_events(asset_name)]


def asset_event_partition_keys(asset_name: str) -> list[tuple[int | None, str | None]]:
    """``(extra["version"], partition_key)`` of every event of the active asset named ``asset_name``, in the order
    they were recorded (the keys of one task's events sorted)."""
    found = [((e.extra or {}).get("version"), e.partition_key) for e in _asset_events(asset_name)]
    return sorted(found, key=lambda pair: (pair[0] or 0, pair[1] or ""))


def asset_state(asset_name: str, key: str) -> Any:
    """The JSON value stored under ``key`` in the asset state store of the active asset named ``asset_name``."""
    import json

    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(AssetStateStoreModel)
            .join(AssetModel, AssetStateStoreModel.asset_id == AssetModel.id)
            .filter(AssetModel.name == asset_name, AssetModel.active.has(), AssetStateStoreModel.key == key)
            .one()
        )
        return json.loads(row.value)


EXAMPLE_DAGS = Path(__file__).resolve().parents[1] / "dags"


def load_example_dag(dag_id: str) -> DAG:
    """``dags/<dag_id>.py`` parsed now (so it sees the environment), with no import errors."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLE_DAGS / f"{dag_id}.py"))
    assert bag.import_errors == {}
    dag = bag.get_dag(dag_id)
    assert dag is not None
    return dag
