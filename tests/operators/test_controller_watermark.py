"""The operator on real Airflow (dag.test, SQLite) submitting the real job through SparkSubmitHook."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.models.variable import Variable
from airflow.sdk import Asset

from airflow_provider_wm.contracts import ControllerTotals, StreamEntry
from airflow_provider_wm.demo import data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
from airflow_provider_wm.state import cutoff_variable_key
from tests.airflow_helpers import asset_state, fresh_dag, run_dag, xcom
from tests.factories import THIRDS, mark, write_marks, write_segments

HOUR_1_END = data.START + timedelta(hours=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"controller": "../x"}, "controller='../x'"),
        ({"writer_timeout": -5}, "writer_timeout=-5"),
        ({"initial_delay": "P1X"}, "initial_delay='P1X'"),
        ({"marks_path": ""}, "marks_path=''"),
        ({"logical_time": "noon-ish"}, "logical_time='noon-ish'"),
        ({"max_active_tis_per_dag": 3}, "max_active_tis_per_dag=3: a pipeline's runs share one state"),
        ({"spark_conf": "a=b"}, "spark_conf='a=b' must be a mapping of Spark options"),
        ({"spark_conf": ["a", "b"]}, r"spark_conf=\['a', 'b'\] must be a mapping of Spark options"),
        ({"spark_conf": {"spark.x": None}}, r"spark_conf\['spark.x'\]=None must be a string or a number"),
        ({"spark_conf": {5: "1"}}, "spark_conf: option name 5 must be a non-empty string"),
        ({"asset": "orders"}, "asset='orders' must be an airflow.sdk.Asset"),
        ({"asset": 5}, "asset=5 must be an airflow.sdk.Asset"),
        ({"store_path": "relative/store"}, "store_path='relative/store' must be an absolute path or a URL"),
        ({"store_path": "s3:/bad"}, "store_path='s3:/bad' is not a URL: write s3://"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    args = {
        "task_id": "c",
        "controller": "c1",
        "marks_path": "/m",
        "segments_path": "/s",
        "store_path": "/st",
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        ControllerWatermarkOperator(**args)


def test_one_task_instance_at_a_time_by_default():
    op = ControllerWatermarkOperator(task_id="c", controller="c1", marks_path="/m", segments_path="/s", store_path="/x")
    assert op.max_active_tis_per_dag == 1


def test_spark_options_may_be_numbers_and_the_store_a_url_or_a_template():
    op = ControllerWatermarkOperator(
        task_id="c", controller="c1", marks_path="/m", segments_path="/s", store_path="s3://lake/wm",
        spark_conf={"spark.sql.shuffle.partitions": 8, "spark.executor.memory": "2g"},
    )  # fmt: skip
    assert op.spark_conf == {"spark.sql.shuffle.partitions": 8, "spark.executor.memory": "2g"}
    templated = "{{ var.value.wm_store }}"
    op = ControllerWatermarkOperator(
        task_id="d", controller="c1", marks_path="/m", segments_path="/s", store_path=templated
    )
    assert op.store_path == templated


def test_the_round_log_gives_every_count_a_mark_can_land_in(capsys):
    op = ControllerWatermarkOperator(task_id="c", controller="c1", marks_path="/m", segments_path="/s", store_path="/x")
    totals = ControllerTotals(
        marks_read=7, marks_accepted=2, shutdowns_accepted=3, rejected={"UNKNOWN_WRITER": 1},
        quarantined={"NEGATIVE_OFFSET": 1}, deferred_marks=4,
    )  # fmt: skip
    entry = StreamEntry(stream="s", wm_key=None, status="NO_ACTIVE_WRITERS", marks_accepted=2, shutdowns_accepted=3)
    op._log_summary({"totals": totals.to_json(), "streams": {"s": entry.to_json()}})
    logged = capsys.readouterr().out
    assert (
        "7 marks read: 2 accepted, 3 shutdowns accepted, rejected {'UNKNOWN_WRITER': 1}, quarantined "
        "{'NEGATIVE_OFFSET': 1}; 4 deferred to a later round" in logged
    )
    header = next(line for line in logged.splitlines() if line.startswith("stream "))
    row = next(line for line in logged.splitlines() if line.startswith("s "))
    assert header.split()[:5] == ["stream", "status", "writers", "accepted", "shutdowns"]
    assert row.split()[:5] == ["s", "NO_ACTIVE_WRITERS", "0", "2", "3"]


def controller_dag(base, controller: str, **kwargs):
    dag = fresh_dag("controller")
    with dag:
        ControllerWatermarkOperator(
            task_id="controller",
            controller=controller,
            marks_path=kwargs.pop("marks_path", f"{base}/marks"),
            segments_path=f"{base}/segments",
            store_path=f"{base}/store",
            writer_timeout=timedelta(minutes=30),
            **kwargs,
        )
    return dag


def cutoff(controller: str):
    return Variable.get(cutoff_variable_key(controller), default_var=None, deserialize_json=True)


@pytest.mark.slow
def test_a_missing_spark_connection_fails_clearly_and_changes_nothing(airflow_db, tmp_path):
    data.write(tmp_path)
    _run, states = run_dag(controller_dag(tmp_path, "c_noconn", spark_conn_id="no_such_spark"), HOUR_1_END)
    assert states == {"controller": "failed"}
    assert cutoff("c_noconn") is None


@pytest.mark.slow
def test_a_failed_spark_job_leaves_the_cutoff_unchanged_and_a_retry_continues(airflow_db, tmp_path, spark):
    data.write(tmp_path)
    broken = tmp_path / "broken-marks"
    spark.createDataFrame([("orders", "w1")], "stream string, writer_id string").write.parquet(str(broken))

    run, states = run_dag(controller_dag(tmp_path, "c_fail", marks_path=str(broken)), HOUR_1_END)
    assert states == {"controller": "failed"}
    assert cutoff("c_fail") is None
    assert not (tmp_path / "store" / "streams").exists()  # nothing published

    run, states = run_dag(controller_dag(tmp_path, "c_fail"), HOUR_1_END)
    assert states == {"controller": "success"}
    committed = cutoff("c_fail")
    assert committed["version"] == 1
    assert committed["processed_until_ms"] == int(HOUR_1_END.timestamp() * 1000)
    summary = xcom(run, "controller")
    assert summary["streams"]["orders"]["watermark"]["lower_ms"] == committed["processed_until_ms"]
    assert summary["published"] == {"orders": True, "payments": True, "deliveries": True, "refunds": True}
    assert xcom(run, "controller", "cutoff") == committed

    # the snapshot the cut-off points to is lost: the next round fails naming it, and nothing moves back
    shutil.rmtree(committed["state_path"])
    _run, states = run_dag(controller_dag(tmp_path, "c_fail"), HOUR_1_END + timedelta(hours=1))
    assert states == {"controller": "failed"}
    assert cutoff("c_fail") == committed


def test_a_logical_time_in_the_future_is_refused(airflow_db, tmp_path):
    future = datetime.now(UTC) + timedelta(days=1)
    _run, states = run_dag(controller_dag(tmp_path, "c_future", logical_time=future.isoformat()), HOUR_1_END)
    assert states == {"controller": "failed"}
    assert cutoff("c_future") is None


@pytest.mark.slow
def test_keyed_marks_publish_one_watermark_per_key_that_a_sensor_waits_on(airflow_db, tmp_path, spark):
    end_ms = int(HOUR_1_END.timestamp() * 1000)
    start_ms = int(data.START.timestamp() * 1000)
    marks = [
        mark("w1", end_ms + 5, {0: 10}, stream="orders", wm_key="eu", reported_at_ms=start_ms),
        mark("w2", end_ms + 9, {1: 20}, stream="orders", wm_key="us", reported_at_ms=start_ms),
        mark("w3", end_ms - 60_000, {2: 30}, stream="orders", reported_at_ms=start_ms),  # unkeyed, behind
    ]
    write_marks(marks, tmp_path / "marks")
    write_segments({"orders": THIRDS}, tmp_path / "segments")
    dag = controller_dag(tmp_path, "c_keyed")
    with dag:
        wait = StreamWatermarkSensor(
            task_id="wait", streams=["orders:eu", "orders:us"], store_path=f"{tmp_path}/store", timeout=30
        )
        dag.task_dict["controller"] >> wait
    run, states = run_dag(dag, HOUR_1_END)
    assert states == {"controller": "success", "wait": "success"}
    assert xcom(run, "wait")["watermark_ms"] == end_ms + 5
    store = WatermarkStoreHook(str(tmp_path / "store"))
    assert store.read_latest("orders", "us")["lower_ms"] == end_ms + 9
    assert store.read_latest("orders")["lower_ms"] == end_ms - 60_000
    assert store.read_stream_status("orders", "eu")["status"] == "EMITTED"
    assert sorted(xcom(run, "controller")["published"]) == ["orders", "orders:eu", "orders:us"]


@pytest.mark.slow
def test_an_unreadable_file_in_the_committed_snapshot_fails_the_round_saying_the_state_is_damaged(
    airflow_db, tmp_path, spark, capfd
):
    data.write(tmp_path)
    _run, states = run_dag(controller_dag(tmp_path, "c_damaged"), HOUR_1_END)
    assert states == {"controller": "success"}
    committed = cutoff("c_damaged")
    for folder in (p for p in Path(committed["state_path"]).iterdir() if p.is_dir()):
        (folder / "part-damaged.parquet").write_bytes(b"not Parquet")

    _run, states = run_dag(controller_dag(tmp_path, "c_damaged"), HOUR_1_END + timedelta(hours=1))
    assert states == {"controller": "failed"}
    assert cutoff("c_damaged") == committed
    captured = capfd.readouterr()
    assert (
        f"StateDamaged: the committed state (version 1) points to state_path={committed['state_path']}, a file of "
        "which cannot be read: restore it" in captured.out + captured.err
    )


def test_a_missing_marks_path_is_a_round_with_no_marks_and_a_warning_naming_it(airflow_db, tmp_path, spark, capfd):
    data.write(tmp_path)
    missing = tmp_path / "no-marks-here"
    _run, states = run_dag(controller_dag(tmp_path, "c_nomarks", marks_path=str(missing)), HOUR_1_END)
    assert states == {"controller": "success"}
    captured = capfd.readouterr()
    assert f"marks_path={str(missing)!r} does not exist" in captured.out + captured.err
    assert cutoff("c_nomarks")["processed_marks"] == 0


@pytest.mark.slow
def test_the_asset_state_store_holds_the_cutoff_migrated_from_a_variable_and_unchanged_by_a_failed_run(
    airflow_db, tmp_path, spark, capfd
):
    data.write(tmp_path)
    broken = tmp_path / "broken-marks"
    spark.createDataFrame([("orders", "w1")], "stream string, writer_id string").write.parquet(str(broken))
    asset = Asset(name="c_asset_watermarks", uri=f"file://{tmp_path}/store/streams")

    # a pipeline committed by an older version of the provider: only its Variable holds the cut-off
    _run, states = run_dag(controller_dag(tmp_path, "c_asset"), HOUR_1_END)
    assert states == {"controller": "success"} and cutoff("c_asset")["version"] == 1

    run, states = run_dag(controller_dag(tmp_path, "c_asset", asset=asset), HOUR_1_END + timedelta(hours=1))
    assert states == {"controller": "success"}
    second = cutoff("c_asset")
    assert second["version"] == 2 and asset_state(asset.name, "controller_cutoff/c_asset") == second
    assert xcom(run, "controller", "cutoff") == second
    assert "migrated from the Variable wm_controller__c_asset to the asset state store" in "".join(capfd.readouterr())

    # a failed attempt (the Spark job fails) leaves both copies as they were
    failing = controller_dag(tmp_path, "c_asset", asset=asset, marks_path=str(broken))
    _run, states = run_dag(failing, HOUR_1_END + timedelta(hours=2))
    assert states == {"controller": "failed"}
    assert asset_state(asset.name, "controller_cutoff/c_asset") == cutoff("c_asset") == second

    # the Variable restored from an older backup: the asset state store (higher version) wins, the run continues
    # from version 2 and the commit rewrites the Variable
    Variable.set(cutoff_variable_key("c_asset"), json.dumps({**second, "version": 1}))
    _run, states = run_dag(controller_dag(tmp_path, "c_asset", asset=asset), HOUR_1_END + timedelta(hours=2))
    assert states == {"controller": "success"}
    third = asset_state(asset.name, "controller_cutoff/c_asset")
    assert third["version"] == 3 and cutoff("c_asset") == third
    assert third["processed_until_ms"] > second["processed_until_ms"]
    assert "the asset state store wins" in "".join(capfd.readouterr())
