from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.triggers.watermark import WatermarkTrigger
from tests.hooks.test_watermark_store import record

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
    assert event["status"] == "success" and event["watermark"]["lower_ms"] == 100


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
    assert event["watermark"]["lower_ms"] == 150
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
    assert event == {"status": "timeout", "stream": "orders", "threshold_ms": 100, "last_seen_lower_ms": 50}
