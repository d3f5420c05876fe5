from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_provider_wm.contracts import InputWatermark, WatermarkReached
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.sensors.base import DEFERRAL_MARGIN
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
from airflow_provider_wm.triggers.watermark import WatermarkTrigger
from tests.airflow_helpers import fresh_dag, run_dag, xcom
from tests.hooks.test_watermark_store import record

THRESHOLD = datetime(2026, 1, 1, 1, tzinfo=UTC)


def seen_without_watermark(store_path, *labels: str) -> None:
    """Streams (``"orders"``) or keys of streams (``"orders:eu"``) as a controller round leaves those it has seen
    but not emitted a watermark for: a status only."""
    store = WatermarkStoreHook(str(store_path))
    for label in labels:
        stream, _, key = label.partition(":")
        store.write_stream_status(stream, {"status": "WAITING_FOR_WRITERS"}, key or None)


THRESHOLD_MS = int(THRESHOLD.timestamp() * 1000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": "yesterday-ish"}, "threshold='yesterday-ish'"),
        ({"stream": "../etc"}, "stream='../etc'"),
        ({"store_path": ""}, "store_path=''"),
        ({"store_path": "store"}, "store_path='store' must be an absolute path or a URL"),
        ({"deferrable": "false"}, "deferrable='false' must be True or False"),
        ({"soft_fail": "no"}, "soft_fail='no' must be True or False"),  # truthy: every failure would skip
        ({"soft_fail": 0}, "soft_fail=0 must be True or False"),
        ({"never_fail": "no"}, "never_fail='no' must be True or False"),
        ({"storage_options": "anon=true"}, "storage_options='anon=true' must be a mapping of fsspec options"),
        ({"timeout": -5}, "timeout=-5 must be a finite, non-negative number of seconds or a timedelta"),
        ({"timeout": timedelta(seconds=-5)}, r"timeout=datetime.timedelta\(days=-1, seconds=86395\) must be"),
        ({"timeout": "PT1H"}, "timeout='PT1H' must be a finite, non-negative number of seconds"),
        ({"poke_interval": -1}, "poke_interval=-1 must be a finite, non-negative number of seconds"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    args = {"task_id": "t", "stream": "orders", "store_path": "/tmp/x", **kwargs}
    with pytest.raises(ValueError, match=message):
        StreamWatermarkSensor(**args)


def test_a_soft_fail_that_is_not_a_bool_fails_at_parse_time_from_default_args_too():
    with DAG("soft_fail_default", schedule=None, default_args={"soft_fail": "no"}):
        with pytest.raises(ValueError, match="soft_fail='no' must be True or False"):
            StreamWatermarkSensor(task_id="t", stream="orders", store_path="/tmp/x")
        assert StreamWatermarkSensor(task_id="u", stream="orders", store_path="/tmp/x", soft_fail=True).soft_fail


def test_templated_arguments_are_checked_when_rendered():
    sensor = StreamWatermarkSensor(task_id="t", stream="{{ params.s }}", store_path="/x", threshold="{{ ds }}")
    assert sensor.threshold == "{{ ds }}"


def test_a_templated_store_path_is_checked_as_rendered_before_anything_is_read():
    sensor = StreamWatermarkSensor(task_id="t", stream="orders", store_path="{{ var.value.wm_store }}")
    sensor.store_path = "data/wm"  # what the template rendered to
    with pytest.raises(ValueError, match=r"^store_path='data/wm' must be an absolute path or a URL"):
        sensor.execute({})  # type: ignore[arg-type]


def test_deferrable_execute_hands_waiting_to_the_trigger_with_the_timeout(tmp_path):
    seen_without_watermark(tmp_path, "orders")
    sensor = StreamWatermarkSensor(
        task_id="t", stream="orders", store_path=str(tmp_path), threshold=THRESHOLD_MS, deferrable=True, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, WatermarkTrigger) and trigger.threshold_ms == THRESHOLD_MS
    # Airflow's deferral timeout leaves the trigger's own deadline a poll and a margin to report first
    assert deferred.value.timeout.total_seconds() == 60 + sensor.poke_interval + DEFERRAL_MARGIN
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
    assert xcom(run, "wait") == {
        "watermark_ms": THRESHOLD_MS + 1,
        "threshold_ms": THRESHOLD_MS,
        "all_idle": False,
        "idle": [],
        "waiting": [],
        "streams": {
            "orders": {
                "lower_ms": THRESHOLD_MS + 1,
                "last_advanced_ms": THRESHOLD_MS + 1,
                "idle": False,
                "upper_ms": THRESHOLD_MS + 6,
                "stream_cut": {"0": THRESHOLD_MS + 1},
            }
        },
    }


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_times_out_and_fails_the_run_when_the_watermark_stays_behind(airflow_db, tmp_path, mode):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS - 1))
    run, states = run_dag(sensor_dag(str(tmp_path), mode=mode, timeout=1, threshold=THRESHOLD_MS))
    assert states == {"wait": "failed"}
    assert str(run.state) == "failed"


@pytest.mark.parametrize("deferrable", [False, True])
def test_soft_fail_skips_instead_of_failing(airflow_db, tmp_path, deferrable):
    seen_without_watermark(tmp_path, "orders")
    _run, states = run_dag(sensor_dag(str(tmp_path), timeout=1, soft_fail=True, deferrable=deferrable))
    assert states == {"wait": "skipped"}


def test_deferred_sensor_times_out_in_the_trigger(airflow_db, tmp_path):
    seen_without_watermark(tmp_path, "orders")
    _run, states = run_dag(sensor_dag(str(tmp_path), timeout=1, deferrable=True))
    assert states == {"wait": "failed"}


def test_deferred_sensor_resumes_when_the_watermark_arrives_later(airflow_db, tmp_path):
    seen_without_watermark(tmp_path, "orders")
    store = WatermarkStoreHook(str(tmp_path))
    publisher = threading.Timer(2.0, store.publish, args=(record(THRESHOLD_MS + 7),))
    publisher.start()
    try:
        run, states = run_dag(sensor_dag(str(tmp_path), deferrable=True, timeout=60))
    finally:
        publisher.cancel()
    assert states == {"wait": "success"}
    assert xcom(run, "wait")["watermark_ms"] == THRESHOLD_MS + 7  # nothing was there at the first poke


# --- several streams, keys and idleness --------------------------------------------------------------------

MINUTE = 60_000
IDLE = datetime(2025, 12, 31, 23, tzinfo=UTC)  # two hours before the threshold: idle after 30 minutes
IDLE_MS = int(IDLE.timestamp() * 1000)
FRESH_MS = THRESHOLD_MS - MINUTE  # advanced a minute before the threshold: not idle


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": "orders", "streams": ["payments"]}, "exactly one of stream= .* and streams="),
        ({}, "exactly one of stream= .* and streams="),
        ({"streams": []}, r"streams=\[\] names no stream"),
        ({"streams": "orders"}, "streams='orders' must be a list"),
        ({"streams": ["orders", "../etc"]}, "streams entry '../etc'"),
        ({"streams": ["orders:"]}, "streams entry 'orders:'"),
        ({"streams": ["orders:eu", "orders:eu"]}, "names 'orders:eu' more than once"),
        ({"stream": "orders", "when_all_idle": "never"}, "when_all_idle='never' must be one of 'wait', 'highest'"),
        ({"stream": "orders", "idle_timeout": "soon"}, "idle_timeout='soon'"),
        ({"stream": "orders", "idle_timeout": -1}, "idle_timeout=-1 must not be negative"),
        ({"stream": "orders", "idle_timeout": 0}, "idle_timeout=0 must be positive"),
    ],
)
def test_bad_arguments_of_several_streams_fail_at_parse_time(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StreamWatermarkSensor(task_id="t", store_path="/tmp/x", **kwargs)


def test_templated_stream_entries_are_checked_when_rendered_and_durations_parse():
    sensor = StreamWatermarkSensor(
        task_id="t", streams=["orders", "{{ params.s }}"], store_path="/x", idle_timeout="PT30M"
    )
    assert sensor.streams == ["orders", "{{ params.s }}"] and sensor.idle_timeout_ms == 30 * MINUTE
    assert StreamWatermarkSensor(task_id="u", stream="o", store_path="/x", idle_timeout=90).idle_timeout_ms == 90_000
    sensor = StreamWatermarkSensor(task_id="v", stream="o", store_path="/x", idle_timeout=timedelta(minutes=2))
    assert sensor.idle_timeout_ms == 2 * MINUTE and sensor.when_all_idle == "wait"


def test_deferrable_execute_with_several_streams_hands_all_of_them_to_the_trigger(tmp_path):
    seen_without_watermark(tmp_path, "orders:eu", "payments")
    sensor = StreamWatermarkSensor(
        task_id="t",
        streams=["orders:eu", "payments"],
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        idle_timeout=timedelta(minutes=30),
        when_all_idle="highest",
        deferrable=True,
        timeout=60,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, WatermarkTrigger)
    kwargs = trigger.serialize()[1]
    assert kwargs["inputs"] == [["orders", "eu"], ["payments", None]] and kwargs["stream"] is None
    assert (kwargs["idle_timeout_ms"], kwargs["reference_ms"], kwargs["when_all_idle"]) == (
        30 * MINUTE,
        THRESHOLD_MS,
        "highest",
    )


def streams_dag(store: str, streams: list[str], **kwargs):
    dag = fresh_dag("streams")
    with dag:
        StreamWatermarkSensor(task_id="wait", streams=streams, store_path=store, poke_interval=0.2, **kwargs)
    return dag


@pytest.mark.parametrize("deferrable", [False, True])
def test_several_streams_wait_for_the_slowest(airflow_db, tmp_path, deferrable):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 50, "orders"))
    store.publish(record(THRESHOLD_MS - 1, "payments"))
    _run, states = run_dag(
        streams_dag(str(tmp_path), ["orders", "payments"], timeout=1, soft_fail=True, deferrable=deferrable)
    )
    assert states == {"wait": "skipped"}
    store.publish(record(THRESHOLD_MS + 3, "payments"))
    run, states = run_dag(streams_dag(str(tmp_path), ["orders", "payments"], timeout=30, deferrable=deferrable))
    assert states == {"wait": "success"}
    result = xcom(run, "wait")
    assert result["watermark_ms"] == THRESHOLD_MS + 3 and result["threshold_ms"] == THRESHOLD_MS
    assert result["idle"] == [] and result["all_idle"] is False
    assert result["streams"]["orders"] == {
        "lower_ms": THRESHOLD_MS + 50,
        "last_advanced_ms": THRESHOLD_MS + 50,
        "idle": False,
        "upper_ms": THRESHOLD_MS + 55,
        "stream_cut": {"0": THRESHOLD_MS + 50},
    }


def test_deferred_sensor_resumes_when_the_slowest_stream_catches_up(airflow_db, tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 50, "orders", wm_key="eu"))
    store.publish(record(THRESHOLD_MS - 1, "payments"))
    publisher = threading.Timer(2.0, store.publish, args=(record(THRESHOLD_MS + 9, "payments"),))
    publisher.start()
    try:
        run, states = run_dag(streams_dag(str(tmp_path), ["orders:eu", "payments"], deferrable=True, timeout=60))
    finally:
        publisher.cancel()
    assert states == {"wait": "success"}
    result = xcom(run, "wait")
    assert result["watermark_ms"] == THRESHOLD_MS + 9  # payments was behind at the first poke
    assert set(result["streams"]) == {"orders:eu", "payments"}


@pytest.mark.parametrize("deferrable", [False, True])
def test_an_idle_stream_is_left_out_and_the_xcom_says_so(airflow_db, tmp_path, deferrable):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 5, "orders", computed_at=FRESH_MS))
    store.publish(record(THRESHOLD_MS - 3_600_000, "payments", computed_at=IDLE_MS))
    run, states = run_dag(
        streams_dag(
            str(tmp_path),
            ["orders", "payments"],
            idle_timeout=timedelta(minutes=30),
            timeout=30,
            deferrable=deferrable,
        )
    )
    assert states == {"wait": "success"}
    assert xcom(run, "wait") == {
        "watermark_ms": THRESHOLD_MS + 5,
        "threshold_ms": THRESHOLD_MS,
        "all_idle": False,
        "idle": ["payments"],
        "waiting": [],
        "streams": {
            "orders": {
                "lower_ms": THRESHOLD_MS + 5,
                "last_advanced_ms": FRESH_MS,
                "idle": False,
                "upper_ms": THRESHOLD_MS + 10,
                "stream_cut": {"0": THRESHOLD_MS + 5},
            },
            "payments": {
                "lower_ms": THRESHOLD_MS - 3_600_000,
                "last_advanced_ms": IDLE_MS,
                "idle": True,
                "upper_ms": THRESHOLD_MS - 3_599_995,
                "stream_cut": {"0": THRESHOLD_MS - 3_600_000},
            },
        },
    }


@pytest.mark.parametrize("deferrable", [False, True])
def test_all_streams_idle_with_wait_times_out(airflow_db, tmp_path, deferrable):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 5, "orders", computed_at=IDLE_MS))
    store.publish(record(THRESHOLD_MS + 7, "payments", computed_at=IDLE_MS))
    dag = streams_dag(
        str(tmp_path), ["orders", "payments"], idle_timeout="PT30M", timeout=1, soft_fail=True, deferrable=deferrable
    )
    run, states = run_dag(dag)
    assert states == {"wait": "skipped"}
    assert xcom(run, "wait") is None


@pytest.mark.parametrize("deferrable", [False, True])
def test_all_streams_idle_with_highest_passes_on_the_highest_watermark(airflow_db, tmp_path, deferrable):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS - 5, "orders", computed_at=IDLE_MS))
    store.publish(record(THRESHOLD_MS + 7, "payments", computed_at=IDLE_MS))
    dag = streams_dag(
        str(tmp_path),
        ["orders", "payments"],
        idle_timeout=1800,
        when_all_idle="highest",
        timeout=30,
        deferrable=deferrable,
    )
    run, states = run_dag(dag)
    assert states == {"wait": "success"}
    result = xcom(run, "wait")
    assert result["watermark_ms"] == THRESHOLD_MS + 7 and result["all_idle"] is True
    assert result["idle"] == ["orders", "payments"]


def test_a_stream_that_advances_again_holds_the_watermark_back_again(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    sensor = StreamWatermarkSensor(
        task_id="t",
        streams=["orders", "payments"],
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        idle_timeout=timedelta(minutes=30),
    )
    store.publish(record(THRESHOLD_MS + 5, "orders", computed_at=FRESH_MS))
    store.publish(record(THRESHOLD_MS - 7_200_000, "payments", computed_at=IDLE_MS))
    first = sensor.poke({})
    assert first.is_done and first.xcom_value["idle"] == ["payments"]
    # payments recovers: a new watermark, computed a minute ago, but still behind the threshold
    store.publish(record(THRESHOLD_MS - 60_000, "payments", computed_at=FRESH_MS))
    second = sensor.poke({})
    assert not second.is_done and second.xcom_value is None
    store.publish(record(THRESHOLD_MS + 1, "payments", computed_at=THRESHOLD_MS))
    third = sensor.poke({})
    assert third.is_done and third.xcom_value["watermark_ms"] == THRESHOLD_MS + 1
    assert third.xcom_value["idle"] == []


def test_a_stream_without_any_watermark_is_not_idle_and_holds_the_others_back(tmp_path):
    seen_without_watermark(tmp_path, "payments")
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS + 5, "orders", computed_at=IDLE_MS))
    sensor = StreamWatermarkSensor(
        task_id="t",
        streams=["orders", "payments"],
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        idle_timeout=timedelta(minutes=30),
        when_all_idle="highest",
    )
    assert not sensor.poke({}).is_done


def test_keyed_inputs_read_each_keys_watermark(airflow_db, tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 100, "orders"))  # the unkeyed watermark is not an input here
    store.publish(record(THRESHOLD_MS + 10, "orders", wm_key="eu"))
    store.publish(record(THRESHOLD_MS - 10, "orders", wm_key="us"))
    sensor = StreamWatermarkSensor(
        task_id="t", streams=["orders:eu", "orders:us"], store_path=str(tmp_path), threshold=THRESHOLD_MS
    )
    assert not sensor.poke({}).is_done
    store.publish(record(THRESHOLD_MS + 20, "orders", wm_key="us"))
    run, states = run_dag(streams_dag(str(tmp_path), ["orders:eu", "orders:us"], timeout=30))
    assert states == {"wait": "success"}
    result = xcom(run, "wait")
    assert result["watermark_ms"] == THRESHOLD_MS + 10
    assert result["streams"]["orders:us"]["lower_ms"] == THRESHOLD_MS + 20


def test_one_stream_with_an_idle_timeout_returns_the_same_shape(airflow_db, tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS + 1, computed_at=FRESH_MS))
    run, states = run_dag(sensor_dag(str(tmp_path), idle_timeout=timedelta(minutes=30), timeout=30))
    assert states == {"wait": "success"}
    assert WatermarkReached.from_json(xcom(run, "wait")).streams == {
        "orders": InputWatermark(THRESHOLD_MS + 1, FRESH_MS, False, THRESHOLD_MS + 6, {"0": THRESHOLD_MS + 1})
    }


def test_the_poke_log_line_shows_each_stream(tmp_path, capsys):
    seen_without_watermark(tmp_path, "returns")
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 5, "orders", computed_at=FRESH_MS))
    store.publish(record(THRESHOLD_MS - 5, "payments", computed_at=IDLE_MS))
    sensor = StreamWatermarkSensor(
        task_id="t",
        streams=["orders", "payments", "returns"],
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        idle_timeout=timedelta(minutes=30),
    )
    capsys.readouterr()
    assert not sensor.poke({}).is_done
    line = capsys.readouterr().out  # the task logger writes to the task's stdout
    assert "Streams orders, payments, returns: coalesced watermark -, threshold 2026-01-01T01:00:00.000Z" in line
    assert "orders: 2026-01-01T01:00:00.005Z (advanced 2026-01-01T00:59:00.000Z)" in line
    assert "payments: idle, 2026-01-01T00:59:59.995Z (advanced 2025-12-31T23:00:00.000Z)" in line
    assert "returns: no watermark yet" in line
    assert str(THRESHOLD_MS) not in line and str(THRESHOLD_MS + 5) not in line  # no raw epoch milliseconds


def test_the_timeout_names_each_streams_watermark_and_idleness(airflow_db, tmp_path):
    from airflow.sdk.exceptions import AirflowSensorTimeout

    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS + 5, "orders", computed_at=IDLE_MS))
    store.publish(record(THRESHOLD_MS + 7, "payments", computed_at=IDLE_MS))
    sensor = StreamWatermarkSensor(
        task_id="t",
        streams=["orders", "payments"],
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        idle_timeout=timedelta(minutes=30),
        deferrable=True,
        timeout=60,
    )
    trigger = WatermarkTrigger(**{**sensor.trigger({}, int(time.time() * 1000)).serialize()[1], "poll_interval": 0.01})
    event = first_event(trigger)
    assert event["status"] == "timeout"
    all_idle = r"payments: idle, .* all streams idle \(when_all_idle='wait'\)"
    with pytest.raises(AirflowSensorTimeout, match=all_idle) as e:
        sensor.execute_complete({}, event)
    assert "did not reach 2026-01-01T01:00:00.000Z within the timeout of 60" in str(e.value)
    assert "orders: idle, 2026-01-01T01:00:00.005Z (advanced 2025-12-31T23:00:00.000Z)" in str(e.value)


def first_event(trigger: WatermarkTrigger) -> dict:
    async def run():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(run())


# --- streams the store has never seen --------------------------------------------------------------------------


def test_a_stream_the_store_has_never_seen_fails_the_poke_at_once_naming_the_known_streams(tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS - 5, "orders"))
    seen_without_watermark(tmp_path, "payments")
    sensor = StreamWatermarkSensor(task_id="t", stream="ordres", store_path=str(tmp_path), threshold=THRESHOLD_MS)
    with pytest.raises(AirflowFailException) as failed:
        sensor.poke({})
    assert (
        str(failed.value) == f"stream='ordres': unknown stream 'ordres': the store at {tmp_path} has orders, payments"
    )


def test_several_streams_name_every_unknown_one_and_an_empty_store_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    sensor = StreamWatermarkSensor(
        task_id="t", streams=["orders:eu", "payments"], store_path=str(tmp_path / "empty"), threshold=THRESHOLD_MS
    )
    with pytest.raises(
        AirflowFailException,
        match=r"streams=\['orders:eu', 'payments'\]: unknown streams 'orders', "
        r"'payments': the store at .*/empty has no streams yet",
    ):
        sensor.poke({})


def test_a_deferrable_sensor_fails_at_its_first_poke_instead_of_deferring(tmp_path):
    sensor = StreamWatermarkSensor(
        task_id="t", stream="ordres", store_path=str(tmp_path), threshold=THRESHOLD_MS, deferrable=True, timeout=60
    )
    with pytest.raises(AirflowFailException, match="unknown stream 'ordres'"):
        sensor.execute({})


def test_an_unknown_stream_fails_the_run_with_the_stores_names_instead_of_a_timeout(airflow_db, tmp_path, capfd):
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS - 5, "orders"))
    dag = fresh_dag("unknown")
    with dag:
        StreamWatermarkSensor(task_id="wait", stream="ordres", store_path=str(tmp_path), poke_interval=0.2, timeout=600)
    _run, states = run_dag(dag)
    assert states == {"wait": "failed"}
    assert f"stream='ordres': unknown stream 'ordres': the store at {tmp_path} has orders" in capfd.readouterr().out


def test_with_fail_on_unknown_stream_off_a_sensor_waits_for_a_stream_not_created_yet(tmp_path):
    sensor = StreamWatermarkSensor(
        task_id="t",
        stream="orders",
        store_path=str(tmp_path),
        threshold=THRESHOLD_MS,
        fail_on_unknown_stream=False,
        deferrable=True,
        timeout=60,
    )
    assert not sensor.poke({}).is_done
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.trigger.serialize()[1]["unknown_stream_argument"] is None


def test_the_trigger_of_a_sensor_that_fails_on_unknown_streams_carries_its_argument(tmp_path):
    seen_without_watermark(tmp_path, "orders")
    sensor = StreamWatermarkSensor(
        task_id="t", stream="orders", store_path=str(tmp_path), threshold=THRESHOLD_MS, deferrable=True, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.trigger.serialize()[1]["unknown_stream_argument"] == "stream='orders'"


def test_an_unknown_stream_event_of_the_trigger_fails_the_task_with_its_message():
    sensor = StreamWatermarkSensor(task_id="t", stream="ordres", store_path="/x", deferrable=True)
    message = "stream='ordres': unknown stream 'ordres': the store at /x has orders"
    with pytest.raises(AirflowFailException, match=message):
        sensor.execute_complete({}, {"status": "unknown_stream", "message": message})


def test_fail_on_unknown_stream_must_be_a_boolean():
    with pytest.raises(ValueError, match="fail_on_unknown_stream='yes' must be True or False"):
        StreamWatermarkSensor(task_id="t", stream="orders", store_path="/x", fail_on_unknown_stream="yes")


@pytest.mark.parametrize("deferrable", [False, True])
def test_with_soft_fail_an_unknown_stream_skips_in_either_mode(airflow_db, tmp_path, deferrable):
    dag = sensor_dag(str(tmp_path), timeout=600, soft_fail=True, deferrable=deferrable)
    _run, states = run_dag(dag)
    assert states == {"wait": "skipped"}


def test_a_known_stream_without_a_watermark_is_waited_for_in_poke_mode(tmp_path):
    seen_without_watermark(tmp_path, "orders")  # a controller round saw it, no watermark yet
    sensor = StreamWatermarkSensor(task_id="t", stream="orders", store_path=str(tmp_path), threshold=THRESHOLD_MS)
    assert not sensor.poke({}).is_done
    WatermarkStoreHook(str(tmp_path)).publish(record(THRESHOLD_MS))
    assert sensor.poke({}).is_done


def test_an_unknown_key_of_a_known_stream_fails_the_poke_naming_the_streams_keys(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(THRESHOLD_MS - 5, "orders", wm_key="eu"))
    store.publish(record(THRESHOLD_MS - 5, "orders", wm_key="us"))
    sensor = StreamWatermarkSensor(
        task_id="t", streams=["orders:eu", "orders:ue"], store_path=str(tmp_path), threshold=THRESHOLD_MS
    )
    with pytest.raises(AirflowFailException) as failed:
        sensor.poke({})
    assert str(failed.value) == (
        f"streams=['orders:eu', 'orders:ue']: unknown key 'ue' of stream 'orders': the store at {tmp_path} has "
        "orders:eu, orders:us"
    )


def test_the_trigger_a_deferrable_sensor_hands_over_ends_with_the_known_names_and_the_sensor_fails(tmp_path):
    """The stream disappears from the store (e.g. a store moved) between the first poke and the trigger."""
    seen_without_watermark(tmp_path, "clicks", "refunds")
    sensor = StreamWatermarkSensor(
        task_id="t", stream="clikcs", store_path=str(tmp_path), threshold=THRESHOLD_MS, deferrable=True, timeout=60
    )
    trigger = sensor.trigger({}, int(time.time() * 1000) + 60_000)
    trigger = WatermarkTrigger(**trigger.serialize()[1])  # as the triggerer loads it
    event = first_event(trigger)
    message = f"stream='clikcs': unknown stream 'clikcs': the store at {tmp_path} has clicks, refunds"
    assert event == {"status": "unknown_stream", "message": message}
    with pytest.raises(AirflowFailException) as failed:
        sensor.execute_complete({}, event)
    assert str(failed.value) == message
