"""WatermarkAdvanceTrigger against a real watermark store on disk. The asset state store, which only a triggerer
can give (tests/integration/test_watermark_watcher.py runs it there), is an in-memory one with the same
async ``aget``/``aset`` and JSON values."""

from __future__ import annotations

import asyncio
import contextlib
import doctest
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.triggers.watermark_advance import WatermarkAdvanceTrigger
from tests.flaky_store import failing_opens
from tests.hooks.test_watermark_store import record

HOUR = 3_600_000
T0 = 1_767_571_200_000  # 2026-01-05T00:00:00Z, a boundary of every grid up to a day


class MemoryAssetState:
    """An asset state store accessor: JSON values by key."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return json.loads(self.values[key]) if key in self.values else default

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.dumps(value)


def watcher(store: Path, state: MemoryAssetState, **kwargs: Any) -> WatermarkAdvanceTrigger:
    """A trigger as the triggerer builds it: from its serialised kwargs, with the asset state store injected."""
    defaults: dict[str, Any] = {"store_path": str(store), "stream": "orders", "poll_interval": 0.01, "event_spacing": 0}
    trigger = WatermarkAdvanceTrigger(**{**defaults, **kwargs})
    trigger = WatermarkAdvanceTrigger(**trigger.serialize()[1])
    trigger.commit_delay = 0
    trigger.asset_state_store = state
    return trigger


class Running:
    """A trigger's ``run()`` driven in the background, as the triggerer drives it: its events queue up."""

    def __init__(self, trigger: WatermarkAdvanceTrigger) -> None:
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.times: list[float] = []
        self.task = asyncio.create_task(self._drive(trigger))

    async def _drive(self, trigger: WatermarkAdvanceTrigger) -> None:
        async for event in trigger.run():
            self.times.append(asyncio.get_running_loop().time())
            await self.events.put(event)

    async def take(self, count: int, quiet: float = 0.3) -> list[int]:
        """The boundaries of the next ``count`` events, after checking that no further one comes within
        ``quiet`` s (which also lets the trigger store its cursor past them)."""
        boundaries = [(await asyncio.wait_for(self.events.get(), 5)).payload["boundary_ms"] for _ in range(count)]
        await asyncio.sleep(quiet)
        if self.task.done():
            self.task.result()  # raise what ended the trigger
        assert self.events.empty(), f"more events than {count}: {self.events.get_nowait().payload}"
        return boundaries

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def publish(store: Path, lower: int, stream: str = "orders") -> None:
    assert WatermarkStoreHook(str(store)).publish(record(lower, stream=stream))


def test_a_jump_of_three_hours_fires_one_event_per_boundary_oldest_first(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + 3 * HOUR + 5)

    async def scenario() -> tuple[dict[str, Any], list[int]]:
        running = Running(watcher(tmp_path, state, start_after=T0))
        first = await asyncio.wait_for(running.events.get(), 5)
        rest = await running.take(2)
        await running.stop()
        return first.payload, rest

    first, rest = asyncio.run(scenario())
    assert first == {
        "boundary_ms": T0 + HOUR,
        "boundary": "2026-01-05T01:00:00.000Z",
        "interval_start_ms": T0,
        "interval_end_ms": T0 + HOUR,
        "watermark_ms": T0 + 3 * HOUR + 5,
        "inputs": ["orders"],
        "every_ms": HOUR,
        "intervals": 1,
    }
    assert rest == [T0 + 2 * HOUR, T0 + 3 * HOUR]
    cursor = json.loads(state.values["wm_advance_cursor/orders/3600000"])
    assert abs(cursor.pop("fired_at_ms") - time.time() * 1000) < 60_000
    assert cursor == {
        "boundary_ms": T0 + 3 * HOUR,
        "boundary": "2026-01-05T03:00:00.000Z",
        "watermark_ms": T0 + 3 * HOUR + 5,
    }


def test_a_restarted_trigger_resumes_after_its_stored_cursor_repeating_nothing(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + HOUR)

    async def life(advance_to: int | None) -> tuple[list[int], list[int]]:
        running = Running(watcher(tmp_path, state, start_after=T0))
        at_start = await running.take(0) if advance_to else await running.take(1)
        after = []
        if advance_to:
            publish(tmp_path, advance_to)
            after = await running.take(1)
        await running.stop()
        return at_start, after

    assert asyncio.run(life(None)) == ([T0 + HOUR], [])
    assert asyncio.run(life(T0 + 2 * HOUR + 30_000)) == ([], [T0 + 2 * HOUR])
    assert asyncio.run(life(T0 + 3 * HOUR)) == ([], [T0 + 3 * HOUR])


def test_without_start_after_it_starts_at_the_first_watermark_seen_with_no_backlog(tmp_path: Path) -> None:
    state = MemoryAssetState()

    async def scenario() -> tuple[list[int], dict[str, Any], list[int]]:
        running = Running(watcher(tmp_path, state))
        publish(tmp_path, T0 + 5 * HOUR + 10)
        quiet = await running.take(0)
        cursor = json.loads(state.values["wm_advance_cursor/orders/3600000"])
        publish(tmp_path, T0 + 6 * HOUR)
        fired = await running.take(1)
        await running.stop()
        return quiet, cursor, fired

    quiet, cursor, fired = asyncio.run(scenario())
    assert quiet == [] and cursor["boundary_ms"] == T0 + 5 * HOUR
    assert fired == [T0 + 6 * HOUR]


def test_several_streams_fire_on_their_coalesced_watermark_the_slowest(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + 3 * HOUR, stream="orders")
    publish(tmp_path, T0 + HOUR + 1, stream="payments")

    async def scenario() -> tuple[list[int], list[int]]:
        running = Running(watcher(tmp_path, state, stream=None, streams=["orders", "payments"], start_after=T0))
        held_back = await running.take(1)
        publish(tmp_path, T0 + 4 * HOUR, stream="payments")
        caught_up = await running.take(2)
        await running.stop()
        return held_back, caught_up

    assert asyncio.run(scenario()) == ([T0 + HOUR], [T0 + 2 * HOUR, T0 + 3 * HOUR])
    assert "wm_advance_cursor/orders,payments/3600000" in state.values


def test_reordering_streams_keeps_the_cursor_and_a_cursor_of_the_old_order_is_read(tmp_path: Path) -> None:
    publish(tmp_path, T0 + 2 * HOUR, stream="orders")
    publish(tmp_path, T0 + 2 * HOUR, stream="payments")
    reordered = MemoryAssetState()
    upgraded = MemoryAssetState()  # a cursor stored under the order of streams= by an older version
    upgraded.values["wm_advance_cursor/payments,orders/3600000"] = json.dumps({"boundary_ms": T0 + HOUR})

    async def fired(state: MemoryAssetState, streams: list[str], count: int) -> list[int]:
        running = Running(watcher(tmp_path, state, stream=None, streams=streams, start_after=T0))
        boundaries = await running.take(count)
        await running.stop()
        return boundaries

    assert asyncio.run(fired(reordered, ["orders", "payments"], 2)) == [T0 + HOUR, T0 + 2 * HOUR]
    assert asyncio.run(fired(reordered, ["payments", "orders"], 0)) == []  # the same cursor: nothing fires again
    assert asyncio.run(fired(upgraded, ["payments", "orders"], 1)) == [T0 + 2 * HOUR]
    assert json.loads(upgraded.values["wm_advance_cursor/orders,payments/3600000"])["boundary_ms"] == T0 + 2 * HOUR


def test_a_network_blip_is_a_warning_and_the_watcher_keeps_watching(tmp_path: Path) -> None:
    publish(tmp_path, T0 + HOUR)

    async def scenario() -> list[int]:
        with failing_opens(3) as left:
            running = Running(watcher(tmp_path, MemoryAssetState(), store_path=f"flaky://{tmp_path}", start_after=T0))
            boundaries = await running.take(1)
            assert not left
        await running.stop()
        return boundaries

    assert asyncio.run(scenario()) == [T0 + HOUR]


def test_each_boundary_is_judged_with_the_inputs_idle_at_it_as_a_sensor_with_that_threshold_would(
    tmp_path: Path,
) -> None:
    state = MemoryAssetState()
    # both at 5h, both last advanced at 0:30: with idle_timeout 2h they are idle from the boundary 3h on, and
    # "wait" (all idle) holds 3h back, as a sensor for the interval ending 3h waits
    for stream in ("orders", "payments"):
        assert WatermarkStoreHook(str(tmp_path)).publish(
            record(T0 + 5 * HOUR, stream=stream, computed_at=T0 + HOUR // 2)
        )
    trigger = watcher(tmp_path, state, stream=None, streams=["orders", "payments"], idle_timeout="PT2H")
    records = WatermarkStoreHook(str(tmp_path)).read_latest_inputs(trigger.inputs, fail_on_unknown=True)

    assert [event.boundary_ms for event in trigger.events_after(records, T0)] == [T0 + HOUR, T0 + 2 * HOUR]
    assert trigger.events_after(records, T0 + 2 * HOUR) == []
    highest = watcher(
        tmp_path, state, stream=None, streams=["orders", "payments"], idle_timeout="PT2H", when_all_idle="highest"
    )
    assert len(highest.events_after(records, T0)) == 5


def test_a_backlog_longer_than_max_backlog_is_merged_into_its_first_event_skipping_no_interval(
    tmp_path: Path,
) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + 5 * HOUR + 5)

    async def scenario() -> list[dict[str, Any]]:
        running = Running(watcher(tmp_path, state, start_after=T0, max_backlog=2))
        events = [(await asyncio.wait_for(running.events.get(), 5)).payload for _ in range(2)]
        assert await running.take(0) == []
        await running.stop()
        return events

    merged, last = asyncio.run(scenario())
    spans = [(e["interval_start_ms"], e["interval_end_ms"], e["intervals"]) for e in (merged, last)]
    assert spans == [(T0, T0 + 4 * HOUR, 4), (T0 + 4 * HOUR, T0 + 5 * HOUR, 1)]
    assert json.loads(state.values["wm_advance_cursor/orders/3600000"])["boundary_ms"] == T0 + 5 * HOUR


def test_a_watermark_between_two_boundaries_and_an_unknown_stream_fire_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + HOUR - 1)

    async def scenario(stream: str) -> list[int]:
        running = Running(watcher(tmp_path, state, stream=stream, start_after=T0))
        quiet = await running.take(0)
        await running.stop()
        return quiet

    assert asyncio.run(scenario("orders")) == []
    assert asyncio.run(scenario("refunds")) == []
    assert state.values == {}
    out = capfd.readouterr().out  # the triggerer's logger writes to its stdout
    assert "stream='refunds': unknown stream 'refunds': the store at" in out and "has orders" in out


def test_a_daily_grid_given_as_a_timedelta_fires_at_utc_midnight(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + 2 * 24 * HOUR + 7)

    async def scenario() -> list[int]:
        running = Running(
            watcher(tmp_path, state, every=timedelta(days=1), start_after=datetime(2026, 1, 5, tzinfo=UTC))
        )
        fired = await running.take(2)
        await running.stop()
        return fired

    assert asyncio.run(scenario()) == [T0 + 24 * HOUR, T0 + 48 * HOUR]


def test_the_events_of_one_jump_are_event_spacing_apart_and_each_moves_the_cursor(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + 2 * HOUR)
    cursors: list[int] = []

    class Recording(MemoryAssetState):
        async def aset(self, key: str, value: Any) -> None:
            cursors.append(value["boundary_ms"])
            await state.aset(key, value)

    async def scenario() -> tuple[list[int], list[float]]:
        running = Running(watcher(tmp_path, Recording(), start_after=T0, event_spacing=0.4))
        fired = await running.take(2, quiet=0.6)
        await running.stop()
        return fired, running.times

    fired, times = asyncio.run(scenario())
    assert fired == [T0 + HOUR, T0 + 2 * HOUR]
    # before each event its time is stored under the previous boundary; after it, the cursor moves
    assert cursors == [T0, T0 + HOUR, T0 + HOUR, T0 + 2 * HOUR]
    assert times[1] - times[0] >= 0.4


def test_a_trigger_restarted_right_after_an_event_still_waits_the_rest_of_event_spacing(tmp_path: Path) -> None:
    state = MemoryAssetState()
    publish(tmp_path, T0 + HOUR)

    async def two_lives() -> float:
        first = Running(watcher(tmp_path, state, start_after=T0, event_spacing=1.0))
        assert await first.take(1, quiet=0.1) == [T0 + HOUR]
        await first.stop()  # restarted at once; the next boundary is already passed
        publish(tmp_path, T0 + 2 * HOUR)
        second = Running(watcher(tmp_path, state, start_after=T0, event_spacing=1.0))
        assert await second.take(1, quiet=0.1) == [T0 + 2 * HOUR]
        await second.stop()
        return second.times[0] - first.times[0]

    assert asyncio.run(two_lives()) >= 0.9  # the wall clock's milliseconds, not the loop's clock, carry it over


def test_outside_an_asset_watcher_it_says_where_it_must_run(tmp_path: Path) -> None:
    trigger = WatermarkAdvanceTrigger(store_path=str(tmp_path), stream="orders")

    async def scenario() -> None:
        await anext(trigger.run())

    with pytest.raises(RuntimeError, match=r"AssetWatcher\(name=\.\.\., trigger=WatermarkAdvanceTrigger"):
        asyncio.run(scenario())


def test_a_trigger_shared_by_the_watchers_of_two_assets_says_it_keeps_one_cursor(tmp_path: Path) -> None:
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    trigger = WatermarkAdvanceTrigger(store_path=str(tmp_path), stream="orders")
    trigger.asset_state_store = AssetStateStoreAccessors(
        inlets=[Asset(name="a", uri="file:///a"), Asset(name="b", uri="file:///b")]
    )

    with pytest.raises(RuntimeError, match=r"watches several assets .*name='a', name='b'.*a trigger of its own"):
        asyncio.run(trigger.read_cursor())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"exactly one of stream= .* got stream=None and streams=None"),
        ({"stream": "orders", "streams": ["a"]}, r"exactly one of stream="),
        ({"stream": "../etc"}, r"stream entry '../etc' is not 'stream' or 'stream:key'"),
        ({"streams": []}, r"streams=\[\] names no stream"),
        ({"stream": "orders", "store_path": " "}, r"store_path=' ' must be a non-empty path"),
        ({"stream": "orders", "every": "P1M"}, r"every='P1M' has a years or months component"),
        ({"stream": "orders", "every": "hourly"}, r"every='hourly' is not an ISO-8601 duration"),
        ({"stream": "orders", "every": 0}, r"every=0 must be positive"),
        (
            {"stream": "orders", "start_after": "2026-01-05T00:30:00Z"},
            r"start_after='2026-01-05T00:30:00Z' is not a boundary of every='PT1H'.*2026-01-05T00:00:00.000Z",
        ),
        ({"stream": "orders", "start_after": "soon"}, r"start_after='soon' is not an ISO-8601 date-time"),
        ({"stream": "orders", "idle_timeout": "PT0S"}, r"idle_timeout='PT0S' must be positive"),
        ({"stream": "orders", "when_all_idle": "never"}, r"when_all_idle='never' must be one of"),
        ({"stream": "orders", "poll_interval": 0}, r"poll_interval=0 must be a positive number of seconds"),
        ({"stream": "orders", "event_spacing": -1}, r"event_spacing=-1 must be a number of seconds, 0 or more"),
        ({"stream": "orders", "max_backlog": 0}, r"max_backlog=0 must be a whole number of events, 1 or more"),
        ({"stream": "orders", "max_backlog": True}, r"max_backlog=True must be a whole number"),
    ],
)
def test_bad_arguments_fail_at_construction_naming_the_argument_and_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WatermarkAdvanceTrigger(**{"store_path": "/data/store", **kwargs})


def test_the_examples_in_the_modules_docstrings_hold() -> None:
    from airflow_provider_wm.triggers import watermark_advance

    result = doctest.testmod(watermark_advance)
    assert result.attempted > 0 and result.failed == 0
