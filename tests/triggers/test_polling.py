"""How the polling triggers live through failed reads of the store and keep their deadline
(:mod:`airflow_provider_wm.triggers.polling`), against a real store on disk and the ``flaky://`` fault injector."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from airflow_provider_wm.core.partitions import iso_ms
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.triggers.partitions import PartitionWatermarkTrigger
from airflow_provider_wm.triggers.watermark import WatermarkTrigger
from tests.flaky_store import failing_opens
from tests.hooks.test_watermark_store import record
from tests.triggers.test_partitions import known_pipeline, ran_until, state_document, write


async def first_event_async(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


def first_event(trigger: Any) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(first_event_async(trigger), 10))


def deadline_in(ms: int) -> int:
    return int(time.time() * 1000) + ms


def stream_trigger(store_path: str, **kwargs: Any) -> WatermarkTrigger:
    defaults: dict[str, Any] = {"stream": "orders", "threshold_ms": 100, "poll_interval": 0.02}
    return WatermarkTrigger(store_path=store_path, **{**defaults, **kwargs})


def partitions_trigger(store_path: str, **kwargs: Any) -> PartitionWatermarkTrigger:
    defaults: dict[str, Any] = {
        "pipeline": "orders",
        "start_ms": iso_ms("2026-01-08"),
        "end_ms": iso_ms("2026-01-10"),
        "poll_interval": 0.02,
    }
    return PartitionWatermarkTrigger(store_path=store_path, **{**defaults, **kwargs})


def test_a_network_blip_is_a_warning_and_the_stream_trigger_reads_again(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(150))
    trigger = stream_trigger(f"flaky://{tmp_path}", timeout_at_ms=deadline_in(5_000))
    with failing_opens(2) as left:
        event = first_event(trigger)
    assert not left  # both reads failed, the third passed
    assert event["status"] == "success" and event["watermark"]["watermark_ms"] == 150


def test_a_network_blip_is_a_warning_and_the_partitions_trigger_reads_again(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    with failing_opens(2, TimeoutError("read timed out")) as left:
        event = first_event(partitions_trigger(f"flaky://{tmp_path}", timeout_at_ms=deadline_in(5_000)))
    assert not left
    assert event["status"] == "success" and event["work_units"] == 4


def test_a_store_failing_until_the_deadline_times_out_naming_the_last_failure(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(150))
    with failing_opens(10_000):
        stream = first_event(stream_trigger(f"flaky://{tmp_path}", timeout_at_ms=deadline_in(200)))
        partitions = first_event(partitions_trigger(f"flaky://{tmp_path}", timeout_at_ms=deadline_in(200)))
    assert stream["status"] == partitions["status"] == "timeout"
    assert stream["last_error"] == partitions["last_error"] == "ConnectionError: connection reset by peer"
    assert stream["waiting"] == ["orders"] and partitions["pending"] is None


def test_a_damaged_record_ends_the_wait_with_an_error_event_naming_it(tmp_path: Path) -> None:
    (tmp_path / "streams" / "orders").mkdir(parents=True)
    (tmp_path / "streams" / "orders" / "latest.json").write_text('{"stream": "orders"}')
    event = first_event(stream_trigger(str(tmp_path), timeout_at_ms=deadline_in(5_000)))
    assert event == {
        "status": "error",
        "message": f"Streams orders: reading the store at {tmp_path} failed: DamagedRecordError: damaged record "
        f"{tmp_path}/streams/orders/latest.json: lower_ms=None is not epoch milliseconds",
        "no_retry": False,
    }


def test_a_windowed_pipelines_document_ends_the_partitions_wait_for_good(tmp_path: Path) -> None:
    write(str(tmp_path), {"pipeline": "orders", "kind": "windowed", "version": 1, "spec": {"window": {}}})
    event = first_event(partitions_trigger(str(tmp_path), timeout_at_ms=deadline_in(5_000)))
    assert event["status"] == "error" and event["no_retry"] is True
    assert "pipeline 'orders' is a windowed pipeline" in event["message"]
    assert "StreamWatermarkSensor on its output stream" in event["message"]


def test_a_stream_read_once_is_not_unknown_while_the_store_is_briefly_gone(tmp_path: Path) -> None:
    base = tmp_path / "store"
    store = WatermarkStoreHook(str(base))
    store.publish(record(50))
    trigger = stream_trigger(str(base), unknown_stream_argument="stream='orders'", timeout_at_ms=deadline_in(5_000))

    async def scenario() -> dict[str, Any]:
        waiting = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.1)
        os.rename(base, tmp_path / "away")  # unmounted: nothing under the store's path
        await asyncio.sleep(0.2)
        os.rename(tmp_path / "away", base)
        await asyncio.to_thread(store.publish, record(150))
        return await asyncio.wait_for(waiting, 5)

    event = asyncio.run(scenario())
    assert event["status"] == "success" and event["watermark"]["watermark_ms"] == 150
    assert trigger.serialize()[1]["seen_inputs"] == ["orders"]


def test_a_trigger_that_has_read_the_stream_before_a_restart_does_not_call_it_unknown(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()  # the store is there, its stream's folder is (briefly) not
    trigger = stream_trigger(
        str(tmp_path),
        unknown_stream_argument="stream='orders'",
        seen_inputs=["orders"],
        timeout_at_ms=deadline_in(100),
    )
    assert first_event(trigger)["status"] == "timeout"


def test_a_pipeline_read_once_is_not_unknown_while_its_folder_is_briefly_gone(tmp_path: Path) -> None:
    known_pipeline(str(tmp_path), "other")
    trigger = partitions_trigger(
        str(tmp_path), unknown_pipeline_argument="pipeline='orders'", seen_document=True, timeout_at_ms=deadline_in(100)
    )
    assert first_event(trigger)["status"] == "timeout"


def test_a_store_whose_base_path_is_missing_is_unreachable_not_a_store_without_that_stream(tmp_path: Path) -> None:
    gone = tmp_path / "unmounted"
    stream = first_event(
        stream_trigger(str(gone), unknown_stream_argument="stream='orders'", timeout_at_ms=deadline_in(100))
    )
    partitions = first_event(
        partitions_trigger(str(gone), unknown_pipeline_argument="pipeline='orders'", timeout_at_ms=deadline_in(100))
    )
    assert stream["status"] == partitions["status"] == "timeout"
    assert (
        stream["last_error"]
        == partitions["last_error"]
        == (
            f"StoreUnreachableError: the store at {gone} is unreachable: its base path does not exist "
            "(check store_path)"
        )
    )


def test_the_last_poll_is_at_the_deadline_not_a_poll_interval_later(tmp_path: Path) -> None:
    WatermarkStoreHook(str(tmp_path)).publish(record(50))
    known_pipeline(str(tmp_path))
    for trigger in (
        stream_trigger(str(tmp_path), poll_interval=30, timeout_at_ms=deadline_in(300)),
        partitions_trigger(str(tmp_path), poll_interval=30, timeout_at_ms=deadline_in(300)),
    ):
        started = time.monotonic()
        assert first_event(trigger)["status"] == "timeout"
        assert time.monotonic() - started < 2
