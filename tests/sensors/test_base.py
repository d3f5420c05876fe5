"""What the store sensors share (:mod:`airflow_provider_wm.sensors.base`): a failed read of the store, the first
poke of a deferrable sensor, the deferral, the trigger's error event, a run without a data interval."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException, TaskDeferred

from airflow_provider_wm.core.partitions import iso_ms
from airflow_provider_wm.hooks.watermark_store import DamagedRecordError, WatermarkStoreHook
from airflow_provider_wm.sensors.base import StoreReadError
from airflow_provider_wm.sensors.partition_watermark import PartitionWatermarkSensor
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
from tests.airflow_helpers import fresh_dag, run_dag, xcom
from tests.flaky_store import failing_opens
from tests.hooks.test_watermark_store import record
from tests.triggers.test_partitions import ran_until, state_document, write

THRESHOLD_MS = 1_000


def stream_sensor(store: str, **kwargs: Any) -> StreamWatermarkSensor:
    defaults: dict[str, Any] = {
        "task_id": "t",
        "stream": "orders",
        "threshold": THRESHOLD_MS,
        "poke_interval": 0.01,
        "timeout": 5,
    }
    return StreamWatermarkSensor(store_path=store, **{**defaults, **kwargs})


def partitions_sensor(store: str, **kwargs: Any) -> PartitionWatermarkSensor:
    defaults: dict[str, Any] = {"start": "2026-01-08", "end": "2026-01-10", "poke_interval": 0.01, "timeout": 5}
    return PartitionWatermarkSensor(task_id="t", pipeline="orders", store_path=store, **{**defaults, **kwargs})


def damaged_latest(store: Path) -> None:
    (store / "streams" / "orders").mkdir(parents=True)
    (store / "streams" / "orders" / "latest.json").write_text('{"stream": "orders"}')


# --- a read of the store that fails --------------------------------------------------------------------------


def test_in_poke_mode_a_network_blip_is_not_yet_and_the_next_poke_passes(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS))
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    for sensor in (stream_sensor(f"flaky://{tmp_path}"), partitions_sensor(f"flaky://{tmp_path}")):
        with failing_opens(1) as left:
            result = sensor.execute({})
        assert not left and result is not None


def test_a_deferred_soft_fail_sensor_lives_through_blips_instead_of_being_skipped(
    airflow_db: Path, tmp_path: Path
) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS))
    dag = fresh_dag("blips")
    with dag:
        stream_sensor(f"flaky://{tmp_path}", task_id="wait", deferrable=True, soft_fail=True, poke_interval=0.1)
    with failing_opens(3) as left:  # the first poke's read, then the trigger's first two
        run, states = run_dag(dag)
    assert not left and states == {"wait": "success"}
    assert xcom(run, "wait")["watermark_ms"] == THRESHOLD_MS


def test_a_stream_or_pipeline_read_once_is_waited_for_while_the_store_is_briefly_gone(tmp_path: Path) -> None:
    base = tmp_path / "store"
    WatermarkStoreHook(str(base)).publish(record(THRESHOLD_MS - 1))
    write(str(base), state_document(state=ran_until("2026-01-08")))
    stream, partitions = stream_sensor(str(base)), partitions_sensor(str(base))
    assert not stream.poke({}).is_done and not partitions.poke({}).is_done
    os.rename(base, tmp_path / "away")
    assert not stream.poke({}).is_done and not partitions.poke({}).is_done  # not "unknown", not an error
    os.rename(tmp_path / "away", base)
    WatermarkStoreHook(str(base)).publish(record(THRESHOLD_MS))
    assert stream.poke({}).is_done


def test_a_partitions_sensor_on_a_windowed_pipeline_fails_saying_which_sensor_to_use(tmp_path: Path) -> None:
    write(str(tmp_path), {"pipeline": "orders", "kind": "windowed", "version": 1, "spec": {}})
    with pytest.raises(AirflowFailException, match=r"pipeline='orders': pipeline 'orders' is a windowed pipeline.*"):
        partitions_sensor(str(tmp_path)).poke({})


# --- the first poke of a deferrable sensor, as BaseSensorOperator.execute handles a poke ---------------------


def test_never_fail_skips_a_deferrable_sensors_failing_first_poke(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS))
    with pytest.raises(AirflowSkipException, match=r"never_fail.*unknown stream 'ordres'"):
        stream_sensor(str(tmp_path), stream="ordres", deferrable=True, never_fail=True).execute({})


def test_a_first_poke_that_raises_fails_the_task_or_is_skipped_with_never_fail_or_defers_with_silent_fail(
    tmp_path: Path,
) -> None:
    damaged_latest(tmp_path)
    with pytest.raises(DamagedRecordError):
        stream_sensor(str(tmp_path), deferrable=True).execute({})
    with pytest.raises(AirflowSkipException, match=r"never_fail.*damaged record"):
        stream_sensor(str(tmp_path), deferrable=True, never_fail=True).execute({})
    with pytest.raises(TaskDeferred):
        stream_sensor(str(tmp_path), deferrable=True, silent_fail=True).execute({})


# --- the trigger's events ------------------------------------------------------------------------------------


def test_an_error_event_fails_the_task_with_the_triggers_message(tmp_path: Path) -> None:
    message = "Streams orders: reading the store at /x failed: DamagedRecordError: damaged record /x/..."
    error = {"status": "error", "message": message, "no_retry": False}
    with pytest.raises(StoreReadError, match="damaged record /x/"):
        stream_sensor("/x", deferrable=True).resume_execution("execute_complete", {"event": error}, {})
    with pytest.raises(StoreReadError):  # soft_fail skips a failure, not an error (as in poke mode)
        stream_sensor("/x", deferrable=True, soft_fail=True).resume_execution("execute_complete", {"event": error}, {})
    with pytest.raises(AirflowSkipException):
        stream_sensor("/x", deferrable=True, never_fail=True).execute_complete({}, error)
    with pytest.raises(AirflowFailException, match="windowed"):
        partitions_sensor("/x").execute_complete({}, {"status": "error", "message": "windowed", "no_retry": True})


def test_a_timeout_message_names_the_last_failed_read(tmp_path: Path) -> None:
    event = {
        "status": "timeout",
        "stream": "orders",
        "threshold_ms": THRESHOLD_MS,
        "streams": {"orders": {"lower_ms": None}},
        "last_error": "ConnectionError: connection reset by peer",
    }
    with pytest.raises(AirflowSensorTimeout, match="last read of the store failed: ConnectionError: connection reset"):
        stream_sensor("/x").execute_complete({}, event)
    event = {"status": "timeout", "pipeline": "orders", "pending": None, "last_error": "TimeoutError: timed out"}
    with pytest.raises(AirflowSensorTimeout, match="last read of the store failed: TimeoutError: timed out"):
        partitions_sensor("/x").execute_complete({}, event)


# --- a run without a data interval ---------------------------------------------------------------------------


def test_in_a_run_without_a_data_interval_a_stream_waits_for_run_after_and_partitions_say_what_to_pass(
    tmp_path: Path,
) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS))
    run_after = datetime.fromtimestamp(THRESHOLD_MS / 1000, tz=UTC)
    asset_run = {"run_id": "asset_triggered__1", "ds": None, "dag_run": SimpleNamespace(run_after=run_after)}
    stream = StreamWatermarkSensor(task_id="t", stream="orders", store_path=str(tmp_path))
    partitions = PartitionWatermarkSensor(task_id="p", pipeline="orders", store_path=str(tmp_path))
    stream.render_template_fields(asset_run)  # type: ignore[arg-type]
    partitions.render_template_fields(asset_run)  # type: ignore[arg-type]
    assert stream.poke(asset_run).is_done  # type: ignore[arg-type, union-attr]
    asset_run["dag_run"] = SimpleNamespace(run_after=run_after + timedelta(milliseconds=1))
    assert not stream.poke(asset_run).is_done  # type: ignore[arg-type, union-attr]
    with pytest.raises(ValueError, match=r"no data interval .* pass start= and end= to the sensor"):
        partitions.poke(asset_run)  # type: ignore[arg-type]


def test_default_thresholds_are_the_runs_data_interval(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(iso_ms("2026-01-10")))
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    run = {"data_interval_start": "2026-01-08T00:00:00Z", "data_interval_end": "2026-01-10T00:00:00Z"}
    assert StreamWatermarkSensor(task_id="t", stream="orders", store_path=str(tmp_path)).poke(run).is_done  # type: ignore[arg-type]
    done = PartitionWatermarkSensor(task_id="p", pipeline="orders", store_path=str(tmp_path)).poke(run)  # type: ignore[arg-type]
    assert done.is_done and done.xcom_value["start_ms"] == iso_ms("2026-01-08")


def test_the_trigger_of_a_sensor_whose_first_poke_read_a_record_does_not_check_its_name_again(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS - 1))
    write(str(tmp_path), state_document(state=ran_until("2026-01-08")))
    with pytest.raises(TaskDeferred) as stream:
        stream_sensor(str(tmp_path), deferrable=True).execute({})
    with pytest.raises(TaskDeferred) as partitions:
        partitions_sensor(str(tmp_path), deferrable=True).execute({})
    assert stream.value.trigger.serialize()[1]["seen_inputs"] == ["orders"]
    assert partitions.value.trigger.serialize()[1]["seen_document"] is True
