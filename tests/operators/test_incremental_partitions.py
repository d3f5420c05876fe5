"""IncrementalPartitionsOperator on real Airflow (dag.test, SQLite) submitting the real job through SparkSubmitHook."""

from __future__ import annotations

import doctest
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.models.variable import Variable
from airflow.sdk import Asset

from airflow_provider_wm.core.partitions import PartitionState, UnitStatus, iso_ms
from airflow_provider_wm.demo import orders_data
from airflow_provider_wm.demo.transforms import FAIL_ONCE_ENV, daily_orders
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators import partitions_arguments
from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.state import pipeline_variable_key
from tests.airflow_helpers import asset_event_extras, asset_event_partition_keys, asset_state, fresh_dag, run_dag, xcom

JAN_6 = datetime(2026, 1, 6, tzinfo=UTC)
REQUIRED = {
    "task_id": "p",
    "pipeline": "p1",
    "source": "/src",
    "time_column": "event_time",
    "target": "/t",
    "store_path": "/s",
    "watermark": {"from": "2026-01-01", "to": "P0D"},
}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "../etc"}, "pipeline='../etc'"),
        ({"output_stream": ".."}, "output_stream='..'"),
        ({"watermark": {"from": "someday"}}, r"watermark\['from'\]='someday' is not a time watermark bound"),
        ({"watermark": {"from": "2026-02-01", "to": "2026-01-01"}}, "from='2026-02-01' is not before to='2026-01-01'"),
        (
            {"watermark": {"from": "P1D", "to": "P5D"}},
            r"watermark=\{'from': 'P1D', 'to': 'P5D'\}: from='P1D' is at or after to='P5D' at every time of day",
        ),
        ({"watermark": {"from": "-"}}, r"watermark=\{'from': '-'\}: from='-' is at or after to='-'"),
        (
            {"watermark": None, "partition": {"daily": ["P0D", "P0DT1H"], "monthly": ["P2D", "P3D"]}},
            r"partition\['monthly'\]=\['P2D', 'P3D'\]: from='P2D' is at or after to='P3D'",
        ),
        ({"partition": "biweekly"}, "partition='biweekly' is not a partitioning"),
        ({"grace_period": -1}, "grace_period=-1 must not be negative"),
        ({"abstinent_period": "P1Q"}, "abstinent_period='P1Q'"),
        ({"units": ["eu"]}, "needs unit_column"),
        ({"unit_column": "region"}, "unit_column='region' needs units"),
        ({"units": ["eu", "../x"], "unit_column": "r"}, r"units\[\]='../x'"),
        ({"units": "eu,us", "unit_column": "r"}, "units='eu,us' must be a list"),
        ({"units": {"path": "/x"}, "unit_column": "r"}, "units=.* must be a list of unit values or"),
        ({"transform": "DROP TABLE x"}, "transform='DROP TABLE x' is neither a SQL statement"),
        ({"transform": lambda df: df}, "must be a module-level function"),
        ({"backfill": ("2026-01-05", "2026-01-01")}, "start must be before end"),
        ({"max_work_units": 0}, "max_work_units=0 must be a positive whole number"),
        ({"max_work_units": "abc"}, "max_work_units=.abc. must be a positive whole number"),
        ({"grace_period": float("nan")}, "grace_period=nan is not a finite number of seconds"),
        ({"timezone": "Europe/Nowhere"}, "timezone='Europe/Nowhere'"),
        ({"source": ""}, "source='' must be a non-empty path"),
        ({"max_active_tis_per_dag": None}, "max_active_tis_per_dag=None: a pipeline's runs share one state"),
        ({"emit_partition_keys": True}, r"emit_partition_keys=True needs asset=Asset\(...\)"),
        ({"emit_partition_keys": "yes"}, "emit_partition_keys='yes' must be True or False"),
        ({"dry_run": "no"}, "dry_run='no' must be True or False"),
        ({"allow_partial_success": "no"}, "allow_partial_success='no' must be True or False"),
        ({"source_format": "csv"}, "source_format='csv' must be one of 'parquet', 'orc', 'json', 'avro', 'delta'"),
        ({"source_format": None}, "source_format=None must be one of"),
        ({"source_partition_column": "a b"}, "source_partition_column='a b' must be a column name"),
        ({"source_partition_timezone": "UTC"}, "source_partition_timezone='UTC' needs source_partition_column"),
        (
            {"source_partition_column": "d", "source_partition_timezone": "Mars/Base"},
            "source_partition_timezone='Mars/Base' is not an IANA time zone",
        ),
        ({"time_column": None}, "time_column=None must be a column name"),
        ({"units": {"path": 5, "column": "id"}, "unit_column": "r"}, r"units\['path'\]=5 must be a non-empty path"),
        ({"units": {"path": "/u", "column": "a b"}, "unit_column": "r"}, r"units\['column'\]='a b' must be a column"),
        (
            {"units": {"path": "/u", "column": "id", "format": "bogus"}, "unit_column": "r"},
            r"units\['format'\]='bogus' must be one of parquet",
        ),
        ({"target": "/src/"}, "target='/src/' is the same path as source='/src': give each its own"),
        ({"target": "/src/daily"}, "target='/src/daily' lies inside source='/src'"),
        ({"target": "/"}, "source='/src' lies inside target='/'"),
        ({"store_path": "wm-store"}, "store_path='wm-store' must be an absolute path or a URL"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IncrementalPartitionsOperator(**{**REQUIRED, **kwargs})


def test_the_argument_helpers_worked_examples_hold():
    assert doctest.testmod(partitions_arguments).failed == 0


@pytest.mark.parametrize(
    "watermark", [{"from": "P5D", "to": "P1D"}, {"from": "P0D", "to": "-"}, {"from": "P0D", "to": "P0DT1H"}]
)
def test_a_relative_range_that_is_non_empty_at_some_time_of_day_is_accepted(watermark):
    op = IncrementalPartitionsOperator(**{**REQUIRED, "watermark": watermark})
    assert op.spec.pieces[0].from_.text == watermark["from"]


def test_a_transform_function_is_passed_to_the_job_by_its_import_path():
    op = IncrementalPartitionsOperator(**REQUIRED, transform=daily_orders)
    assert op.transform_callable == "airflow_provider_wm.demo.transforms:daily_orders"
    op = IncrementalPartitionsOperator(**REQUIRED, transform="WITH x AS (SELECT * FROM source) SELECT * FROM x")
    assert op.transform_sql is not None and op.transform_callable is None


def test_the_source_format_and_a_units_dataset_are_kept_as_given():
    op = IncrementalPartitionsOperator(
        **{**REQUIRED, "source_format": "ORC", "source_partition_column": "event_date", "target": "/src_daily"},
        units={"path": "s3://lake/regions", "column": "region_id", "format": "CSV"},
        unit_column="region",
    )
    assert (op.source_format, op.source_partition_column) == ("orc", "event_date")
    assert op.units == {"path": "s3://lake/regions", "column": "region_id", "format": "csv"}


def test_a_transform_defined_in_the_dag_file_parses_and_is_passed_by_its_module_path(airflow_db, tmp_path):
    """Connect mode runs the job in the task's process, which imported the DAG file: the function is found there."""
    from airflow.dag_processing.dagbag import DagBag

    dag_file = tmp_path / "partitions_with_local_transform.py"
    dag_file.write_text(
        "import datetime as dt\n"
        "from airflow.sdk import DAG\n"
        "from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator\n\n"
        "def my_transform(df):\n"
        "    return df\n\n"
        "with DAG('local_transform', schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)):\n"
        "    IncrementalPartitionsOperator(task_id='p', pipeline='p', source='/src', time_column='t', target='/t',\n"
        "        store_path='/s', watermark={'from': '2026-01-01', 'to': 'P0D'}, transform=my_transform)\n"
    )
    bag = DagBag(dag_folder=str(dag_file))
    assert bag.import_errors == {}
    (task,) = bag.get_dag("local_transform").tasks
    assert task.transform_callable.startswith("unusual_prefix_") and task.transform_callable.endswith(":my_transform")


def test_one_task_instance_at_a_time_by_default_and_the_asset_is_an_outlet():
    asset = Asset(name="orders_daily", uri="file:///t")
    op = IncrementalPartitionsOperator(**REQUIRED, asset=asset)
    assert op.max_active_tis_per_dag == 1 and op.outlets == [asset]


def pipeline_dag(tmp_path, pipeline: str, **kwargs):
    dag = fresh_dag("partitions")
    with dag:
        IncrementalPartitionsOperator(
            task_id="orders",
            pipeline=pipeline,
            source=str(tmp_path / "orders"),
            source_partition_column="event_date",
            time_column="event_time",
            watermark={"from": "2026-01-01", "to": "P0D"},
            partition="daily",
            grace_period=timedelta(days=1),
            unit_column="region",
            transform="airflow_provider_wm.demo.transforms:daily_orders",
            target=str(tmp_path / "target"),
            store_path=str(tmp_path / "store"),
            **{"units": ["eu", "us"], **kwargs},
        )
    return dag


def committed(pipeline: str):
    return Variable.get(pipeline_variable_key(pipeline), default_var=None, deserialize_json=True)


def target_ids(tmp_path) -> list[str]:
    table = pq.read_table(tmp_path / "target", columns=["order_id"])
    return table.column("order_id").to_pylist()


def test_dry_run_plans_and_shows_without_running_or_committing(airflow_db, tmp_path):
    run, states = run_dag(pipeline_dag(tmp_path, "p_dry", dry_run=True), JAN_6)
    assert states == {"orders": "success"}
    summary = xcom(run, "orders")
    assert summary["dry_run"] is True
    assert summary["plan"][0][:4] == ["2026-01-01..2026-01-02", "executes", "eu", 1]
    assert len(summary["plan"]) == 10 and all("new" in row[4] for row in summary["plan"])
    assert committed("p_dry") is None
    assert not (tmp_path / "store").exists() and not (tmp_path / "target").exists()


def test_a_logical_time_in_the_future_is_refused(airflow_db, tmp_path):
    future = datetime.now(UTC) + timedelta(days=1)
    _run, states = run_dag(pipeline_dag(tmp_path, "p_future", logical_time=future.isoformat()), JAN_6)
    assert states == {"orders": "failed"}
    assert committed("p_future") is None


@pytest.mark.slow
def test_runs_commit_high_watermarks_and_the_next_run_executes_only_grace_and_new_days(airflow_db, tmp_path):
    orders_data.write_history(tmp_path / "orders", JAN_6)
    units = tmp_path / "regions"
    pq.write_table(pa.table({"region": ["us", "eu", "eu", None]}), tmp_path / "regions.parquet")
    units.mkdir()
    (tmp_path / "regions.parquet").rename(units / "part-0.parquet")
    asset = Asset(name="orders_daily_test", uri=f"file://{tmp_path / 'target'}")
    dag = pipeline_dag(
        tmp_path, "p_two", units={"path": str(units), "column": "region"}, asset=asset, emit_partition_keys=True
    )

    run1, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    first = committed("p_two")
    assert first["version"] == 1 and first["units"] == ["eu", "us"]
    state = PartitionState.from_json(first["state"])
    assert state.max_high_watermark() == iso_ms("2026-01-06")
    assert xcom(run1, "orders", "state") == first
    store_doc = WatermarkStoreHook(str(tmp_path / "store")).read_pipeline_state("p_two")
    assert store_doc is not None and store_doc["version"] == 1 and store_doc["last_plan"]
    ids = target_ids(tmp_path)
    assert len(ids) == len(set(ids)) == 5 * orders_data.ORDERS_PER_DAY

    orders_data.write_day(tmp_path / "orders", JAN_6 + timedelta(days=1))  # day 01-06 + late orders for 01-05
    run2, states = run_dag(dag, JAN_6 + timedelta(days=1))
    assert states == {"orders": "success"}
    summary = xcom(run2, "orders")
    executed = [row[:3] for row in summary["plan"] if row[1] == "executes"]
    assert executed == [
        ["2026-01-05..2026-01-06", "executes", "eu"],
        ["2026-01-06..2026-01-07", "executes", "eu"],
        ["2026-01-05..2026-01-06", "executes", "us"],
        ["2026-01-06..2026-01-07", "executes", "us"],
    ]
    assert summary["quarantined"] == 1  # the day's row without a time
    ids = target_ids(tmp_path)
    assert len(ids) == len(set(ids)) == 6 * orders_data.ORDERS_PER_DAY + 12
    second = committed("p_two")
    assert second["version"] == 2 and second["processed_until_ms"] == iso_ms("2026-01-07")
    # its output watermark, a derived stream named after the pipeline: every day up to 01-07 is done in both units
    derived = WatermarkStoreHook(str(tmp_path / "store"))
    assert [(r["lower_ms"], r["pipeline"]) for r in derived.read_history("p_two")] == [
        (iso_ms("2026-01-06"), "p_two"),
        (iso_ms("2026-01-07"), "p_two"),
    ]

    # an older interval run after a newer one (catch-up, a manual run) has nothing to do and changes nothing
    run_old, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"} and xcom(run_old, "orders")["covered_by"] == second["run_id"]
    assert committed("p_two") == second and target_ids(tmp_path) == ids

    extras = asset_event_extras("orders_daily_test")
    # an event per partition key (below); the older run's one event says nothing changed
    assert [e["version"] for e in extras] == [1] * 10 + [2] * 4 + [2]
    assert extras[10]["high_watermark"].startswith("2026-01-07") and extras[-1]["covered_by"] == second["run_id"]
    assert asset_state("orders_daily_test", "partition_state/p_two") == committed("p_two")
    # one keyed event per work unit written: run 1 the five days, run 2 the grace day 01-05 (late orders) and the
    # new 01-06; the covered run one event without a key
    days = [f"2026-01-0{day}T00:00:00" for day in range(1, 7)]
    assert asset_event_partition_keys("orders_daily_test") == [
        *sorted((1, f"{unit}|{day}") for unit in ("eu", "us") for day in days[:5]),
        (2, None),
        *sorted((2, f"{unit}|{day}") for unit in ("eu", "us") for day in days[4:]),
    ]

    # without its Variable, the pipeline starts from the asset state store's copy (not from scratch)
    Variable.delete(pipeline_variable_key("p_two"))
    planner = pipeline_dag(tmp_path, "p_two", units=["eu", "us"], asset=asset, dry_run=True)
    run3, states = run_dag(planner, JAN_6 + timedelta(days=2))
    assert states == {"orders": "success"}
    executes = [row[0] for row in xcom(run3, "orders")["plan"] if row[1] == "executes"]
    assert executes == ["2026-01-06..2026-01-07", "2026-01-07..2026-01-08"] * 2


@pytest.mark.slow
def test_a_failed_unit_fails_the_task_without_committing_and_the_retry_runs_only_that_unit(
    airflow_db, tmp_path, monkeypatch
):
    orders_data.write_history(tmp_path / "orders", JAN_6)
    marker = tmp_path / "fail-once"
    monkeypatch.setenv(FAIL_ONCE_ENV, str(marker))

    marker.write_text("20260103T000000Z us")
    _run, states = run_dag(pipeline_dag(tmp_path, "p_fail"), JAN_6)
    assert states == {"orders": "failed"}
    assert committed("p_fail") is None
    assert not (tmp_path / "store" / "pipelines" / "p_fail" / "state.json").exists()

    marker.write_text("20260103T000000Z us")
    asset = Asset(name="orders_retry_test", uri=f"file://{tmp_path / 'target'}")
    dag = pipeline_dag(
        tmp_path, "p_retry", retries=1, retry_delay=timedelta(seconds=0), asset=asset, emit_partition_keys=True
    )
    run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    run_dir = next((tmp_path / "store" / "pipelines" / "p_retry" / "runs").iterdir())
    second = json.loads((run_dir / "attempt-2" / "request.json").read_text())
    assert [(u["partition_start"], u["unit"]) for u in second["work_units"]] == [(iso_ms("2026-01-03"), "us")]
    state = PartitionState.from_json(committed("p_retry")["state"])
    assert all(
        state.history(unit, iso_ms(f"2026-01-0{d}"), iso_ms(f"2026-01-0{d + 1}")).status is UnitStatus.SUCCEEDED
        for d in range(1, 6)
        for unit in ("eu", "us")
    )
    ids = target_ids(tmp_path)
    assert len(ids) == len(set(ids)) == 5 * orders_data.ORDERS_PER_DAY
    assert xcom(run, "orders")["executed"] == 10
    # the run wrote every unit, in its first attempt or its retry: a key each
    assert asset_event_partition_keys("orders_retry_test") == sorted(
        (1, f"{unit}|2026-01-0{d}T00:00:00") for d in range(1, 6) for unit in ("eu", "us")
    )


@pytest.mark.slow
def test_with_partial_success_allowed_the_failed_unit_is_committed_failed_and_runs_next_time(
    airflow_db, tmp_path, monkeypatch
):
    orders_data.write_history(tmp_path / "orders", JAN_6)
    marker = tmp_path / "fail-once"
    monkeypatch.setenv(FAIL_ONCE_ENV, str(marker))
    marker.write_text("20260102T000000Z eu")
    asset = Asset(name="orders_partial_test", uri=f"file://{tmp_path / 'target'}")
    dag = pipeline_dag(tmp_path, "p_partial", allow_partial_success=True, asset=asset, emit_partition_keys=True)
    run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    assert xcom(run, "orders")["failed"] == [["2026-01-02", "eu"]]
    state = PartitionState.from_json(committed("p_partial")["state"])
    assert state.history("eu", iso_ms("2026-01-02"), iso_ms("2026-01-03")).status is UnitStatus.FAILED

    run, states = run_dag(dag, JAN_6 + timedelta(days=1))
    plan = xcom(run, "orders")["plan"]
    assert plan[1][:4] == ["2026-01-02..2026-01-03", "executes", "eu", 1] and "failed before" in plan[1][4]
    assert xcom(run, "orders")["failed"] == []
    # the failed unit has no key in run 1; run 2 writes it (failed before) with the grace day and the new day
    keys = asset_event_partition_keys("orders_partial_test")
    assert [key for version, key in keys if version == 1] == sorted(
        f"{unit}|2026-01-0{d}T00:00:00" for d in range(1, 6) for unit in ("eu", "us") if (unit, d) != ("eu", 2)
    )
    assert [key for version, key in keys if version == 2] == [
        "eu|2026-01-02T00:00:00",
        "eu|2026-01-05T00:00:00",
        "eu|2026-01-06T00:00:00",
        "us|2026-01-05T00:00:00",
        "us|2026-01-06T00:00:00",
    ]


def write_orders(folder, rows: list[dict]) -> None:
    """Extra order rows (the demo's columns) as one more file of a day's source partition."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_pylist(rows, schema=orders_data.SCHEMA).drop_columns(["event_date"]), folder / "x.parquet"
    )


@pytest.mark.slow
def test_bad_rows_are_quarantined_once_over_runs_and_rows_of_unknown_units_are_counted_with_a_warning(
    airflow_db, tmp_path, capsys
):
    orders_data.write_history(tmp_path / "orders", JAN_6)
    noon = datetime(2026, 1, 5, 12, tzinfo=UTC)
    bad = [
        {"order_id": "asia-1", "region": "asia", "event_time": noon, "amount": 1.0, "event_date": noon.date()},
        {"order_id": "no-region", "region": None, "event_time": noon, "amount": 1.0, "event_date": noon.date()},
        {"order_id": "no-time", "region": "eu", "event_time": None, "amount": 1.0, "event_date": noon.date()},
    ]
    write_orders(tmp_path / "orders" / "event_date=2026-01-05", bad)
    dag = pipeline_dag(tmp_path, "p_bad")
    capsys.readouterr()
    run1, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    assert (xcom(run1, "orders")["quarantined"], xcom(run1, "orders")["quarantined_seen_before"]) == (3, 0)
    log = capsys.readouterr().out
    assert (
        "2 new rows of " in log
        and "have a null or unknown region (unit_column): 1 null, 1 of no configured unit such as ['asia']" in log
    )

    orders_data.write_day(tmp_path / "orders", JAN_6 + timedelta(days=1))  # 01-06, late 01-05 rows, one without time
    run2, states = run_dag(dag, JAN_6 + timedelta(days=1))  # its grace period re-reads 01-05's partition
    assert states == {"orders": "success"}
    assert (xcom(run2, "orders")["quarantined"], xcom(run2, "orders")["quarantined_seen_before"]) == (1, 3)
    table = pq.read_table(tmp_path / "store" / "pipelines" / "p_bad" / "quarantine").to_pylist()
    assert sorted((r["order_id"], r["reason"], str(r["wm_version"])) for r in table) == [
        ("asia-1", "unknown_unit", "1"),
        ("bad-20260106", "null_time", "2"),
        ("no-region", "null_unit", "1"),
        ("no-time", "null_time", "1"),
    ]


@pytest.mark.slow
def test_an_empty_source_folder_runs_every_unit_with_no_rows_and_commits(airflow_db, tmp_path):
    (tmp_path / "orders").mkdir()
    run, states = run_dag(pipeline_dag(tmp_path, "p_empty"), JAN_6)
    assert states == {"orders": "success"}
    summary = xcom(run, "orders")
    assert (summary["executed"], summary["failed"], summary["rows_read"], summary["rows_written"]) == (10, [], 0, 0)
    state = PartitionState.from_json(committed("p_empty")["state"])
    assert state.max_high_watermark() == iso_ms("2026-01-06")
