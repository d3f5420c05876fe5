from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.triggers.watermark import WatermarkTrigger
from airflow_provider_wm.triggers.watermark_advance import WatermarkAdvanceTrigger
from tests.hooks.test_watermark_store import record

MINUTE = 60_000

ALL_TRIGGERS = [
    WatermarkTrigger(store_path="/tmp/x", stream="orders", threshold_ms=5),
    WatermarkTrigger(
        store_path="memory://s",
        stream="orders",
        threshold_ms=5,
        poll_interval=0.5,
        timeout_at_ms=123,
        storage_options={"a": 1},
        last_seen_lower_ms=4,
    ),
    WatermarkTrigger(
        store_path="/tmp/x",
        inputs=[["orders", None], ["orders", "eu"], ["payments", None]],
        threshold_ms=5,
        idle_timeout_ms=600_000,
        reference_ms=7,
        when_all_idle="highest",
        last_seen_lower_ms=3,
        last_seen_inputs={"orders": {"lower_ms": 3, "last_advanced_ms": 1, "idle": False}},
    ),
    WatermarkTrigger(store_path="/tmp/x", stream="orders", threshold_ms=5, idle_timeout_ms=1000),
    WatermarkTrigger(store_path="/tmp/x", stream="orders", threshold_ms=5, unknown_stream_argument="stream='orders'"),
    WatermarkTrigger(
        store_path="/tmp/x",
        stream="orders",
        threshold_ms=5,
        unknown_stream_argument="stream='orders'",
        seen_inputs=["orders"],
        last_error="ConnectionError: reset",
    ),
    WatermarkTrigger(
        store_path="/tmp/x",
        inputs=[["orders", "eu"]],
        threshold_ms=5,
        unknown_stream_argument="streams=['orders:eu']",
        last_seen_inputs={"orders:eu": {"lower_ms": None, "last_advanced_ms": None, "idle": False}},
    ),
    WatermarkAdvanceTrigger(store_path="/tmp/x", stream="orders"),
    WatermarkAdvanceTrigger(
        store_path="memory://s",
        streams=["orders", "orders:eu", "payments"],
        every="PT15M",
        start_after="2026-01-05T00:15:00Z",
        idle_timeout="PT30M",
        when_all_idle="highest",
        poll_interval=0.5,
        storage_options={"a": 1},
    ),
    WatermarkAdvanceTrigger(store_path="/tmp/x", stream="orders", every=1.5, start_after=3000, event_spacing=0),
]


@pytest.mark.parametrize("trigger", ALL_TRIGGERS)
def test_every_trigger_round_trips_through_serialize(trigger):
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    cls = getattr(__import__(module, fromlist=[name]), name)
    assert cls(**kwargs).serialize() == (classpath, kwargs)


def first_event(trigger: WatermarkTrigger):
    async def run():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(run())


def test_fires_when_the_watermark_reaches_the_threshold(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(100))
    event = first_event(WatermarkTrigger(store_path=str(tmp_path), stream="orders", threshold_ms=100))
    assert event["status"] == "success" and event["watermark"]["watermark_ms"] == 100
    assert event["watermark"]["streams"]["orders"] == {
        "lower_ms": 100, "last_advanced_ms": 100, "idle": False, "upper_ms": 105, "stream_cut": {"0": 100}
    }  # fmt: skip


def test_keeps_polling_until_a_later_watermark_arrives(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(50))
    trigger = WatermarkTrigger(store_path=str(tmp_path), stream="orders", threshold_ms=100, poll_interval=0.05)

    async def scenario():
        task = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.3)
        assert not task.done()
        await asyncio.to_thread(store.publish, record(150))
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(scenario())
    assert event["watermark"]["watermark_ms"] == 150
    assert trigger.serialize()[1]["last_seen_lower_ms"] == 150


async def first_event_async(trigger):
    async for event in trigger.run():
        return event.payload


def test_fires_a_timeout_event_past_its_deadline(tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(50))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        stream="orders",
        threshold_ms=100,
        poll_interval=0.05,
        timeout_at_ms=int(time.time() * 1000) + 200,
    )
    event = first_event(trigger)
    assert event["status"] == "timeout" and event["stream"] == "orders"
    assert (event["threshold_ms"], event["last_seen_lower_ms"], event["watermark_ms"]) == (100, 50, 50)
    assert event["streams"]["orders"]["lower_ms"] == 50


def test_a_trigger_serialised_by_the_previous_version_still_loads_and_fires(tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(100))
    old_kwargs = {
        "store_path": str(tmp_path),
        "stream": "orders",
        "threshold_ms": 100,
        "poll_interval": 0.05,
        "timeout_at_ms": None,
        "storage_options": {},
        "last_seen_lower_ms": None,
    }
    event = first_event(WatermarkTrigger(**old_kwargs))
    assert event["status"] == "success" and event["stream"] == "orders" and event["watermark"]["watermark_ms"] == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of stream= and inputs="),
        ({"stream": "orders", "inputs": [["orders", None]]}, "exactly one of stream= and inputs="),
        ({"inputs": []}, "inputs=\\[\\] must be"),
        ({"inputs": [["orders"]]}, "must be a non-empty list of \\[stream, wm_key or None\\]"),
        ({"stream": "orders", "when_all_idle": "never"}, "when_all_idle='never'"),
    ],
)
def test_bad_trigger_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WatermarkTrigger(store_path="/tmp/x", threshold_ms=5, **kwargs)


def test_several_inputs_fire_the_coalesced_result_once_the_slowest_passes(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(150, "orders", wm_key="eu"))
    store.publish(record(50, "payments"))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path), inputs=[["orders", "eu"], ["payments", None]], threshold_ms=100, poll_interval=0.05
    )

    async def scenario():
        task = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.3)
        assert not task.done()
        assert trigger.serialize()[1]["last_seen_inputs"]["payments"]["lower_ms"] == 50
        await asyncio.to_thread(store.publish, record(120, "payments"))
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(scenario())
    assert event["status"] == "success"
    assert event["watermark"]["watermark_ms"] == 120
    assert event["watermark"]["streams"]["orders:eu"]["lower_ms"] == 150
    assert event["watermark"]["idle"] == []
    assert trigger.serialize()[1]["last_seen_lower_ms"] == 120


def test_an_idle_input_is_left_out_in_the_triggerer_too(tmp_path):
    reference = 1_000 * MINUTE
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(reference + 1, "orders", computed_at=reference - MINUTE))
    store.publish(record(5, "payments", computed_at=reference - 60 * MINUTE))
    event = first_event(
        WatermarkTrigger(
            store_path=str(tmp_path),
            inputs=[["orders", None], ["payments", None]],
            threshold_ms=reference,
            idle_timeout_ms=30 * MINUTE,
        )
    )
    assert event["status"] == "success" and event["watermark"]["idle"] == ["payments"]
    assert event["watermark"]["streams"]["payments"] == {
        "lower_ms": 5,
        "last_advanced_ms": reference - 60 * MINUTE,
        "idle": True,
        "upper_ms": 10,
        "stream_cut": {"0": 5},
    }


def test_the_timeout_event_names_each_inputs_watermark_and_idleness(tmp_path):
    reference = 1_000 * MINUTE
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(reference + 5, "orders", computed_at=0))
    store.publish(record(reference + 7, "payments", computed_at=0))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        inputs=[["orders", None], ["payments", None], ["returns", None]],
        threshold_ms=reference,
        idle_timeout_ms=MINUTE,
        poll_interval=0.05,
        timeout_at_ms=int(time.time() * 1000) + 200,
    )
    event = first_event(trigger)
    assert event["status"] == "timeout" and event["stream"] is None
    assert event["watermark_ms"] is None and event["waiting"] == ["returns"]
    assert event["idle"] == ["orders", "payments"] and event["all_idle"] is False
    assert event["streams"]["returns"] == {
        "lower_ms": None, "last_advanced_ms": None, "idle": False, "upper_ms": None, "stream_cut": {}
    }  # fmt: skip
    assert event["streams"]["orders"]["idle"] is True and event["when_all_idle"] == "wait"


def test_an_input_the_store_has_never_seen_ends_the_wait_with_the_sensors_argument_and_the_known_names(tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(50))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        inputs=[["orders", None], ["ordres", "eu"]],
        threshold_ms=100,
        unknown_stream_argument="streams=['orders', 'ordres:eu']",
    )
    event = first_event(trigger)
    assert event == {
        "status": "unknown_stream",
        "message": f"streams=['orders', 'ordres:eu']: unknown stream 'ordres': the store at {tmp_path} has orders",
    }


def test_without_the_argument_an_unseen_input_is_waited_for_like_a_trigger_of_an_older_version(tmp_path):
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        stream="orders",
        threshold_ms=100,
        poll_interval=0.05,
        timeout_at_ms=int(time.time() * 1000) + 200,
    )
    event = first_event(trigger)
    assert event["status"] == "timeout" and event["streams"]["orders"]["lower_ms"] is None


def test_an_unknown_key_of_a_known_stream_ends_the_wait_too(tmp_path):
    WatermarkStoreHook(str(tmp_path)).publish(record(50, wm_key="eu"))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path), inputs=[["orders", "ue"]], threshold_ms=100, unknown_stream_argument="x"
    )
    assert first_event(trigger) == {
        "status": "unknown_stream",
        "message": f"x: unknown key 'ue' of stream 'orders': the store at {tmp_path} has orders:eu",
    }


def test_a_known_stream_without_a_watermark_keeps_the_trigger_waiting_until_one_arrives(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.write_stream_status("orders", {"status": "WAITING_FOR_WRITERS"})  # a controller round saw it
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        stream="orders",
        threshold_ms=100,
        poll_interval=0.05,
        unknown_stream_argument="stream='orders'",
    )

    async def scenario():
        task = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.3)
        assert not task.done()  # known, no watermark yet: not an unknown stream
        await asyncio.to_thread(store.publish, record(100))
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(scenario())
    assert event["status"] == "success" and event["watermark"]["watermark_ms"] == 100


def test_the_triggers_log_lines_show_times_in_iso_utc_not_epoch_milliseconds(tmp_path, capfd):
    threshold = 1_767_229_200_000  # 2026-01-01T01:00:00Z
    WatermarkStoreHook(str(tmp_path)).publish(record(threshold - 5, computed_at=threshold - MINUTE))
    trigger = WatermarkTrigger(
        store_path=str(tmp_path),
        stream="orders",
        threshold_ms=threshold,
        poll_interval=0.05,
        timeout_at_ms=int(time.time() * 1000) + 200,
        unknown_stream_argument="stream='orders'",
    )
    capfd.readouterr()
    assert first_event(trigger)["status"] == "timeout"
    out = capfd.readouterr().out  # the triggerer's logger writes to its stdout
    polls = [line[line.index("] ") + 2 :] for line in out.splitlines() if "next poll in" in line]
    assert polls, out
    assert polls[0].startswith(
        "Streams orders: coalesced watermark 2026-01-01T00:59:59.995Z, threshold 2026-01-01T01:00:00.000Z; "
        "orders: 2026-01-01T00:59:59.995Z (advanced 2026-01-01T00:59:00.000Z)"
    )
    assert not any(str(value) in line for line in polls for value in (threshold, threshold - 5))
