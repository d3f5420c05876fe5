from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
from airflow_provider_wm.triggers.watermark import WatermarkTrigger
from tests.airflow_helpers import fresh_dag, run_dag, xcom
from tests.hooks.test_watermark_store import record

THRESHOLD = datetime(2026, 1, 1, 1, tzinfo=UTC)
THRESHOLD_MS = int(THRESHOLD.timestamp() * 1000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": "yesterday-ish"}, "threshold='yesterday-ish'"),
        ({"stream": "../etc"}, "stream='../etc'"),
        ({"store_path": ""}, "store_path=''"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    args = {"task_id": "t", "stream": "orders", "store_path": "/tmp/x", **kwargs}
    with pytest.raises(ValueError, match=message):
        StreamWatermarkSensor(**args)


def test_templated_arguments_are_checked_when_rendered():
    sensor = StreamWatermarkSensor(task_id="t", stream="{{ params.s }}", store_path="/x", threshold="{{ ds }}")
    assert sensor.threshold == "{{ ds }}"


def test_deferrable_execute_hands_waiting_to_the_trigger_with_the_timeout(tmp_path):
    sensor = StreamWatermarkSensor(
        task_id="t", stream="orders", store_path=str(tmp_path), threshold=THRESHOLD_MS, deferrable=True, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, WatermarkTrigger) and trigger.threshold_ms == THRESHOLD_MS
    assert deferred.value.timeout.total_seconds() == 60
    assert 0 < trigger.timeout_at_ms - time.time() * 1000 <= 60_000


def sensor_dag(store: str, **kwargs):
    dag = fresh_dag("sensor")
    with dag:
        StreamWatermarkSensor(task_id="wait", stream="orders", store_path=store, poke_interval=0.2, **kwargs)
    return dag


@pytest.mark.parametrize("deferrable", [False, True])
def test_passes_when_the_watermark_is_past_the_interval_end(airflow_db, tmp_path, deferrable):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS + 1))
    run, states = run_dag(sensor_dag(str(tmp_path), deferrable=deferrable, timeout=30))
    assert states == {"wait": "success"}
    assert xcom(run, "wait")["lower_ms"] == THRESHOLD_MS + 1


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_times_out_and_fails_the_run_when_the_watermark_stays_behind(airflow_db, tmp_path, mode):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS - 1))
    run, states = run_dag(sensor_dag(str(tmp_path), mode=mode, timeout=1, threshold=THRESHOLD_MS))
    assert states == {"wait": "failed"}
    assert str(run.state) == "failed"


@pytest.mark.parametrize("deferrable", [False, True])
def test_soft_fail_skips_instead_of_failing(airflow_db, tmp_path, deferrable):
    _run, states = run_dag(sensor_dag(str(tmp_path), timeout=1, soft_fail=True, deferrable=deferrable))
    assert states == {"wait": "skipped"}


def test_deferred_sensor_times_out_in_the_trigger(airflow_db, tmp_path):
    _run, states = run_dag(sensor_dag(str(tmp_path), timeout=1, deferrable=True))
    assert states == {"wait": "failed"}


def test_deferred_sensor_resumes_when_the_watermark_arrives_later(airflow_db, tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    publisher = threading.Timer(2.0, store.publish, args=(record(THRESHOLD_MS + 7),))
    publisher.start()
    try:
        run, states = run_dag(sensor_dag(str(tmp_path), deferrable=True, timeout=60))
    finally:
        publisher.cancel()
    assert states == {"wait": "success"}
    assert xcom(run, "wait")["lower_ms"] == THRESHOLD_MS + 7  # nothing was there at the first poke
