from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.core.partitions import (
    PartitionSpec,
    PartitionState,
    UnitResult,
    UnitStatus,
    iso_ms,
    plan,
    succeeded,
)
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.triggers.partitions import PartitionWatermarkTrigger

DAILY = PartitionSpec.build({"from": "2026-01-01", "to": "P0D"}, "daily")
UNITS = ["eu", "us"]


def state_document(
    spec: PartitionSpec = DAILY,
    state: PartitionState | None = None,
    units: Sequence[str] = UNITS,
    run_id: str = "r1",
) -> dict[str, Any]:
    """A pipeline's committed state document, as the operator writes it (plus a key readers must ignore)."""
    return {
        "pipeline": "orders",
        "version": 1,
        "spec": spec.to_json(),
        "units": list(units),
        "state": (state or PartitionState.empty()).to_json(),
        "run_id": run_id,
        "committed_at": "2026-01-10T00:00:00+00:00",
        "plan_summary": [["ignored"]],
    }


def ran_until(
    day: str, spec: PartitionSpec = DAILY, units: Sequence[str] = UNITS, state: PartitionState | None = None
) -> PartitionState:
    """The state after a fully successful run on ``day`` (every planned work unit succeeded)."""
    state = state or PartitionState.empty()
    return state.apply(succeeded(plan(spec, state, iso_ms(day), units=units)))


def write(store_path: str, document: dict[str, Any], pipeline: str = "orders") -> None:
    WatermarkStoreHook(store_path).write_pipeline_state(pipeline, document)


ALL_TRIGGERS = [
    PartitionWatermarkTrigger(store_path="/tmp/x", pipeline="orders", start_ms=1, end_ms=5),
    PartitionWatermarkTrigger(
        store_path="memory://s",
        pipeline="orders",
        start_ms=1,
        end_ms=5,
        poll_interval=0.5,
        timeout_at_ms=123,
        storage_options={"a": 1},
        last_pending=4,
    ),
    PartitionWatermarkTrigger(
        store_path="/tmp/x", pipeline="orders", start_ms=1, end_ms=5, unknown_pipeline_argument="pipeline='orders'"
    ),
    PartitionWatermarkTrigger(
        store_path="/tmp/x",
        pipeline="orders",
        start_ms=1,
        end_ms=5,
        unknown_pipeline_argument="pipeline='orders'",
        seen_document=True,
        last_error="ConnectionError: reset",
    ),
]


@pytest.mark.parametrize("trigger", ALL_TRIGGERS)
def test_every_trigger_round_trips_through_serialize(trigger: PartitionWatermarkTrigger) -> None:
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    cls = getattr(__import__(module, fromlist=[name]), name)
    assert cls(**kwargs).serialize() == (classpath, kwargs)


async def first_event_async(trigger: PartitionWatermarkTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def first_event(trigger: PartitionWatermarkTrigger) -> dict[str, Any]:
    return asyncio.run(first_event_async(trigger))


def deadline_in(ms: int) -> int:
    return int(time.time() * 1000) + ms


def test_fires_success_with_the_checked_work_units_when_the_range_is_complete(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path), pipeline="orders", start_ms=iso_ms("2026-01-01"), end_ms=iso_ms("2026-01-10")
    )
    assert first_event(trigger) == {
        "status": "success",
        "pipeline": "orders",
        "start_ms": iso_ms("2026-01-01"),
        "end_ms": iso_ms("2026-01-10"),
        "work_units": 18,  # 9 days x 2 units
        "run_id": "r1",
        "committed_at": "2026-01-10T00:00:00+00:00",
    }
    assert trigger.serialize()[1]["last_pending"] == 0


def test_a_pipeline_without_units_checks_one_default_unit_per_partition(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(units=[], state=ran_until("2026-01-10", units=[])))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path), pipeline="orders", start_ms=iso_ms("2026-01-03"), end_ms=iso_ms("2026-01-05")
    )
    event = first_event(trigger)
    assert event["status"] == "success" and event["work_units"] == 2


def test_fires_timeout_naming_the_first_five_pending_work_units_when_incomplete(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-08"),
        end_ms=iso_ms("2026-01-15"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(200),
    )
    assert first_event(trigger) == {
        "status": "timeout",
        "pipeline": "orders",
        "start_ms": iso_ms("2026-01-08"),
        "end_ms": iso_ms("2026-01-15"),
        "pending": 10,  # 01-10 .. 01-14 for eu and us
        "first_pending": [
            ["2026-01-10T00:00:00.000Z", "2026-01-11T00:00:00.000Z", "eu"],
            ["2026-01-10T00:00:00.000Z", "2026-01-11T00:00:00.000Z", "us"],
            ["2026-01-11T00:00:00.000Z", "2026-01-12T00:00:00.000Z", "eu"],
            ["2026-01-11T00:00:00.000Z", "2026-01-12T00:00:00.000Z", "us"],
            ["2026-01-12T00:00:00.000Z", "2026-01-13T00:00:00.000Z", "eu"],
        ],
        "last_error": None,  # every read succeeded
    }
    assert trigger.serialize()[1]["last_pending"] == 10


def test_a_failed_work_unit_keeps_the_range_pending(tmp_path: Path) -> None:
    state = ran_until("2026-01-10").apply(
        [UnitResult(iso_ms("2026-01-03"), iso_ms("2026-01-04"), "us", UnitStatus.FAILED)]
    )
    write(str(tmp_path), state_document(state=state))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-01"),
        end_ms=iso_ms("2026-01-10"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(200),
    )
    event = first_event(trigger)
    assert event["pending"] == 1
    assert event["first_pending"] == [["2026-01-03T00:00:00.000Z", "2026-01-04T00:00:00.000Z", "us"]]


def test_without_a_state_document_everything_is_pending_until_the_timeout(tmp_path: Path) -> None:
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-01"),
        end_ms=iso_ms("2026-01-02"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(200),
    )
    event = first_event(trigger)
    assert event["status"] == "timeout"
    assert event["pending"] is None and event["first_pending"] == []  # no spec: the work units are unknown


def test_picks_up_a_state_document_written_while_it_is_polling(tmp_path: Path) -> None:
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-01"),
        end_ms=iso_ms("2026-01-11"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(30_000),
    )

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.3)
        assert not task.done()  # no document yet
        await asyncio.to_thread(write, str(tmp_path), state_document(state=ran_until("2026-01-10")))
        await asyncio.sleep(0.3)
        assert not task.done()  # 01-10 is still missing
        assert trigger.last_pending == 2
        complete = ran_until("2026-01-11", state=ran_until("2026-01-10"))
        await asyncio.to_thread(write, str(tmp_path), state_document(state=complete, run_id="r2"))
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(scenario())
    assert event["status"] == "success" and event["run_id"] == "r2" and event["work_units"] == 20


def known_pipeline(store_path: str, pipeline: str = "orders") -> None:
    """A pipeline whose first run has started (its request is in the store) but not committed yet."""
    store = WatermarkStoreHook(store_path)
    store.write_json_url(store.pipeline_url(pipeline, "runs", "v1", "request.json"), {"pipeline": pipeline})


def test_a_pipeline_the_store_has_never_seen_ends_the_wait_with_the_known_names(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")), pipeline="orders_daily")
    known_pipeline(str(tmp_path), "orders_hourly")
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="ordrs_daily",
        start_ms=iso_ms("2026-01-01"),
        end_ms=iso_ms("2026-01-02"),
        timeout_at_ms=deadline_in(30_000),
        unknown_pipeline_argument="pipeline='ordrs_daily'",
    )
    assert first_event(trigger) == {
        "status": "unknown_pipeline",
        "message": f"pipeline='ordrs_daily': unknown pipeline 'ordrs_daily': the store at {tmp_path} has "
        "orders_daily, orders_hourly",
    }


def test_a_known_pipeline_before_its_first_commit_keeps_the_trigger_waiting(tmp_path: Path) -> None:
    known_pipeline(str(tmp_path))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-01"),
        end_ms=iso_ms("2026-01-02"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(30_000),
        unknown_pipeline_argument="pipeline='orders'",
    )

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event_async(trigger))
        await asyncio.sleep(0.3)
        assert not task.done()  # known, nothing committed yet: not an unknown pipeline
        await asyncio.to_thread(write, str(tmp_path), state_document(state=ran_until("2026-01-10")))
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(scenario())["status"] == "success"


def test_without_the_argument_an_unknown_pipeline_is_waited_for_like_a_trigger_of_an_older_version(
    tmp_path: Path,
) -> None:
    old_kwargs = {
        "store_path": str(tmp_path),
        "pipeline": "orders",
        "start_ms": iso_ms("2026-01-01"),
        "end_ms": iso_ms("2026-01-02"),
        "poll_interval": 0.05,
        "timeout_at_ms": deadline_in(200),
        "storage_options": {},
        "last_pending": None,
    }
    event = first_event(PartitionWatermarkTrigger(**old_kwargs))
    assert event["status"] == "timeout" and event["pending"] is None


def test_the_triggers_log_lines_show_the_range_in_iso_utc(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    trigger = PartitionWatermarkTrigger(
        store_path=str(tmp_path),
        pipeline="orders",
        start_ms=iso_ms("2026-01-09"),
        end_ms=iso_ms("2026-01-11"),
        poll_interval=0.05,
        timeout_at_ms=deadline_in(200),
    )
    capfd.readouterr()
    assert first_event(trigger)["status"] == "timeout"
    out = capfd.readouterr().out  # the triggerer's logger writes to its stdout
    polls = [line[line.index("] ") + 2 :] for line in out.splitlines() if "next poll in" in line]
    assert polls and polls[0].startswith(
        "Pipeline orders: 2 work units pending in [2026-01-09T00:00:00.000Z, 2026-01-11T00:00:00.000Z)"
    )
    assert str(iso_ms("2026-01-09")) not in out
