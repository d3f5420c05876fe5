"""WatermarkAdvanceTrigger: schedule a DAG on watermark advance, through an ``AssetWatcher``.

An asset watcher runs one event trigger in the triggerer for as long as the DAG that declares it exists; every
event it yields becomes an asset event, and a DAG scheduled on the asset runs. This trigger yields one event
per boundary (:mod:`airflow_provider_wm.core.boundaries`) that the watermark of a stream, or the coalesced
watermark of several (:func:`~airflow_provider_wm.core.coalescing.check_watermarks`, the sensors' rule),
passes. It only waits: the rules live in ``core``, the reads in
:meth:`~airflow_provider_wm.hooks.watermark_store.WatermarkStoreHook.read_latest_inputs`.

Its cursor (the last boundary it fired) lives in the watched asset's state store (Airflow 3.3 injects it into
event triggers), not in its kwargs: a watcher's kwargs are its identity (the DAG processor compares their
hash), and a triggerer restart builds the trigger from them again. So a restarted trigger reads the cursor
back and neither repeats nor skips a boundary.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_wm.arguments import require_paths
from airflow_provider_wm.core.boundaries import (
    BoundaryEvent,
    boundary_events,
    is_boundary,
    last_boundary,
    passed_in_turn,
)
from airflow_provider_wm.core.coalescing import AllIdlePolicy, check_policy, check_watermarks
from airflow_provider_wm.core.names import Input, parse_inputs, watermark_label
from airflow_provider_wm.hooks.watermark_store import UnknownNameError, WatermarkStoreHook, is_transient
from airflow_provider_wm.timeutil import duration_ms, format_ms, to_epoch_ms

__all__ = ["CURSOR_KEY_PREFIX", "WatermarkAdvanceTrigger"]

CURSOR_KEY_PREFIX = "wm_advance_cursor"
"""Asset state store keys of the cursors: ``wm_advance_cursor/<label>[,<label>...]/<every_ms>``, the labels
sorted."""


def every_ms_of(every: Any) -> int:
    """``every`` checked: a fixed, positive length of time (``PT1H``, ``P1D``, a ``timedelta`` or seconds).
    Months and years have no fixed length, so a grid of them cannot be aligned to the epoch.

    >>> every_ms_of("PT1H"), every_ms_of(dt.timedelta(minutes=15)), every_ms_of(90)
    (3600000, 900000, 90000)
    >>> every_ms_of("P1M")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: every='P1M' has a years or months component: months and years have no fixed length; ...
    """
    return duration_ms(every, "every", positive=True)


def _iso(ms: int) -> str:
    """Milliseconds as an ISO-8601 duration that :func:`every_ms_of` reads back exactly: ``PT3600S``."""
    seconds, rest = divmod(ms, 1000)
    return f"PT{seconds}S" if not rest else f"PT{seconds}.{rest:03d}S"


class WatermarkAdvanceTrigger(BaseEventTrigger):
    """Fire one event per boundary of ``every`` (aligned to the UTC epoch) that the watermark passes.

    The watermark is ``stream``'s, or the one coalesced from ``streams`` exactly as the stream sensor coalesces
    it (idle inputs with ``idle_timeout``, ``when_all_idle``); it passes the boundary ``b`` when it is at or
    past ``b``, i.e. the interval ``[b - every, b)`` is complete. Each poll reads one small record per input.

    Per boundary, not per poll: a watermark that jumps from 10:20 to 13:05 passes 11:00, 12:00 and 13:00 and
    the trigger fires three events, oldest first, each with its own interval, ``event_spacing`` seconds
    apart. Each boundary is judged as a sensor with that boundary as its threshold would judge it (inputs
    idle *at that boundary* left out), so a watcher fires exactly when such a sensor would pass. A backlog
    longer than ``max_backlog`` boundaries is merged into its first event (see the payload's ``intervals``).
    Airflow starts one run for the events queued when its scheduler next looks, so events may still share a
    run: the consumer handles each of its ``triggering_asset_events``, as the example DAG does. The
    spacing is there because Airflow 3.3 leaves an asset event that arrives while its scheduler creates a run
    for the previous one to no run until the next event comes (the run consumes the events up to the
    previous one's queue time, then deletes the queue row the new event found already there).

    Event payload (the asset event's ``extra["payload"]``)::

        {"boundary_ms": 1767574800000, "boundary": "2026-01-05T01:00:00.000Z",
         "interval_start_ms": 1767571200000, "interval_end_ms": 1767574800000,
         "watermark_ms": 1767575100000, "inputs": ["orders"], "every_ms": 3600000, "intervals": 1}

    ``intervals`` is how many grid intervals ``[interval_start_ms, interval_end_ms)`` spans: 1, or more for an
    event a backlog was merged into.

    The cursor, the last boundary fired, is kept in the watched asset's state store under
    ``wm_advance_cursor/<inputs>/<every_ms>``. Where it starts when the store holds none: at ``start_after``
    (a boundary; the first event is for the boundary after it), else at the last boundary the watermark has
    passed when the trigger first sees one (no backlog: the first event is for the next boundary). Once
    stored, the cursor wins over ``start_after``.

    Delivery: the cursor moves to each boundary :attr:`commit_delay` seconds after its event was handed to
    the triggerer (longer than the triggerer's one-second sync of events to the database). A triggerer
    stopped or restarted while the trigger waits loses and repeats nothing; one killed in the seconds
    between firing and writing the cursor fires that boundary again after the restart (at least once, never
    lost).

    :param store_path: base path or fsspec URL of the watermark store.
    :param stream: the one stream to watch (``"name"`` or ``"name:key"``). Exactly one of ``stream``, ``streams``.
    :param streams: several streams, coalesced.
    :param every: the boundary grid: a fixed ISO-8601 duration (``PT1H``, ``PT15M``, ``P1D``), a
        ``timedelta`` or seconds. Default each full hour.
    :param start_after: a boundary (ISO-8601 time, datetime or epoch ms) to start after when no cursor is stored.
    :param idle_timeout: as the stream sensor's: an input whose watermark last advanced this long before the
        boundary is idle and left out. Default: none is ever idle.
    :param when_all_idle: ``"wait"`` (default) or ``"highest"``, as the stream sensor's.
    :param poll_interval: seconds between reads of the store.
    :param event_spacing: least seconds between two events (default 10), see above; kept across a restart
        (the cursor records when its event fired).
    :param max_backlog: at most this many events for the boundaries passed at once (a watermark that jumps a
        week on an hourly grid, say ``24``): the oldest are merged into the first event, whose interval then
        starts at the last boundary fired, so no interval is skipped. Default: no limit, an event per boundary.
    :param storage_options: fsspec options of a remote store.
    """

    commit_delay: float = 3.0
    """Seconds between firing a boundary's event and moving the cursor to it (see Delivery)."""

    def __init__(
        self,
        *,
        store_path: str,
        stream: str | None = None,
        streams: Sequence[str] | None = None,
        every: str | dt.timedelta | float = "PT1H",
        start_after: str | int | dt.datetime | None = None,
        idle_timeout: str | dt.timedelta | float | None = None,
        when_all_idle: AllIdlePolicy = "wait",
        poll_interval: float = 30.0,
        event_spacing: float = 10.0,
        max_backlog: int | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if (stream is None) == (streams is None):
            raise ValueError(
                f"pass exactly one of stream= (one stream) and streams= (several), "
                f"got stream={stream!r} and streams={streams!r}"
            )
        self.inputs: list[Input] = (
            parse_inputs([stream], "stream") if stream is not None else parse_inputs(streams, "streams")
        )
        require_paths(store_path=store_path)
        self.every_ms = every_ms_of(every)
        self.start_after_ms = None if start_after is None else to_epoch_ms(start_after, "start_after")
        if self.start_after_ms is not None and not is_boundary(self.start_after_ms, self.every_ms):
            raise ValueError(
                f"start_after={start_after!r} is not a boundary of every={every!r}: boundaries are multiples of "
                f"it from the epoch, e.g. {format_ms(last_boundary(self.start_after_ms, self.every_ms))}"
            )
        self.idle_timeout_ms = None if idle_timeout is None else duration_ms(idle_timeout, "idle_timeout")
        if self.idle_timeout_ms == 0:
            raise ValueError(f"idle_timeout={idle_timeout!r} must be positive (zero would make every stream idle)")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or not poll_interval > 0:
            raise ValueError(f"poll_interval={poll_interval!r} must be a positive number of seconds")
        if isinstance(event_spacing, bool) or not isinstance(event_spacing, (int, float)) or not event_spacing >= 0:
            raise ValueError(f"event_spacing={event_spacing!r} must be a number of seconds, 0 or more")
        if max_backlog is not None and (
            isinstance(max_backlog, bool) or not isinstance(max_backlog, int) or max_backlog < 1
        ):
            raise ValueError(f"max_backlog={max_backlog!r} must be a whole number of events, 1 or more, or None")
        self.max_backlog = max_backlog
        self.store_path = store_path
        self.stream = stream
        self.streams = None if streams is None else list(streams)
        self.when_all_idle: AllIdlePolicy = check_policy(when_all_idle)
        self.poll_interval = float(poll_interval)
        self.event_spacing = float(event_spacing)
        self.storage_options = dict(storage_options or {})

    @property
    def labels(self) -> list[str]:
        return [watermark_label(stream, key) for stream, key in self.inputs]

    @property
    def argument(self) -> str:
        """The argument that names the streams, as given: ``stream='orders'``."""
        return f"stream={self.stream!r}" if self.stream is not None else f"streams={self.streams!r}"

    @property
    def cursor_key(self) -> str:
        """``wm_advance_cursor/orders,payments/3600000``: one cursor per set of inputs and grid on the watched
        asset. The labels are sorted: ``streams=["payments", "orders"]`` watches what ``["orders", "payments"]``
        does and keeps its cursor when the list is reordered."""
        return f"{CURSOR_KEY_PREFIX}/{','.join(sorted(self.labels))}/{self.every_ms}"

    @property
    def legacy_cursor_key(self) -> str:
        """The key of versions that kept the labels in the order of ``streams=``: read when :attr:`cursor_key`
        holds no cursor, so a cursor stored before the upgrade is not lost."""
        return f"{CURSOR_KEY_PREFIX}/{','.join(self.labels)}/{self.every_ms}"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "store_path": self.store_path,
                "stream": self.stream,
                "streams": self.streams,
                "every": _iso(self.every_ms),
                "start_after": self.start_after_ms,
                "idle_timeout": None if self.idle_timeout_ms is None else _iso(self.idle_timeout_ms),
                "when_all_idle": self.when_all_idle,
                "poll_interval": self.poll_interval,
                "event_spacing": self.event_spacing,
                "max_backlog": self.max_backlog,
                "storage_options": self.storage_options,
            },
        )

    def _state_store(self) -> Any:
        if self.asset_state_store is None:
            raise RuntimeError(
                "WatermarkAdvanceTrigger keeps its cursor in the watched asset's state store, which the triggerer "
                "gives only to an AssetWatcher's trigger: use it as Asset(..., watchers=[AssetWatcher(name=..., "
                "trigger=WatermarkAdvanceTrigger(...))])"
            )
        return self.asset_state_store

    async def read_cursor(self) -> int | None:
        """The last boundary fired, from the asset state store (``None``: never fired)."""
        stored = await self._stored_cursor()
        return None if stored is None else int(stored["boundary_ms"])

    async def _stored_cursor(self) -> dict[str, Any] | None:
        try:
            stored = await self._state_store().aget(self.cursor_key)
            if stored is None and self.legacy_cursor_key != self.cursor_key:
                stored = await self._state_store().aget(self.legacy_cursor_key)
        except ValueError as several:  # one trigger (equal kwargs) shared by the watchers of several assets
            raise RuntimeError(
                f"{self!r} watches several assets ({self._state_store()!r}) and keeps one cursor: give each asset "
                "a trigger of its own (the triggerer shares one among watchers whose triggers are equal)"
            ) from several
        return stored if isinstance(stored, dict) else None

    async def write_cursor(self, boundary_ms: int, watermark_ms: int | None, fired_at_ms: int | None = None) -> None:
        """Store the last boundary fired; ``fired_at_ms`` (wall clock) keeps ``event_spacing`` across a restart."""
        value = {
            "boundary_ms": boundary_ms,
            "boundary": format_ms(boundary_ms),
            "watermark_ms": watermark_ms,
            "fired_at_ms": fired_at_ms,
        }
        await self._state_store().aset(self.cursor_key, value)

    def event(self, fired: BoundaryEvent) -> TriggerEvent:
        return TriggerEvent(
            {
                "boundary_ms": fired.boundary_ms,
                "boundary": format_ms(fired.boundary_ms),
                "interval_start_ms": fired.interval_start_ms,
                "interval_end_ms": fired.boundary_ms,
                "watermark_ms": fired.watermark_ms,
                "inputs": self.labels,
                "every_ms": self.every_ms,
                "intervals": fired.intervals,
            }
        )

    def events_after(self, records: dict[str, Any], cursor_ms: int) -> list[BoundaryEvent]:
        """The events for the boundaries after ``cursor_ms`` that the inputs' watermark passes, each judged at
        its own boundary (:func:`~airflow_provider_wm.core.boundaries.passed_in_turn`)."""

        def watermark_at(boundary_ms: int) -> int | None:
            return check_watermarks(
                records, boundary_ms, idle_timeout_ms=self.idle_timeout_ms, when_all_idle=self.when_all_idle
            ).watermark_ms

        passed = passed_in_turn(watermark_at, cursor_ms=cursor_ms, every_ms=self.every_ms)
        return boundary_events(passed, cursor_ms=cursor_ms, every_ms=self.every_ms, max_backlog=self.max_backlog)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        stored = await self._stored_cursor()
        cursor = self.start_after_ms if stored is None else int(stored["boundary_ms"])
        self.log.info(
            "Watching %s every %s; last boundary fired: %s", self.labels, _iso(self.every_ms), format_ms(cursor)
        )
        loop = asyncio.get_running_loop()
        # the previous life's last event counts for the spacing too (a restart right after an event)
        fired_at_ms = (stored or {}).get("fired_at_ms")
        since = (time.time() * 1000 - fired_at_ms) / 1000 if isinstance(fired_at_ms, int) else self.event_spacing
        last_fired = loop.time() - max(0.0, since)
        while True:
            try:
                records = await asyncio.to_thread(store.read_latest_inputs, self.inputs, fail_on_unknown=True)
            except UnknownNameError as unknown:  # a watcher outlives typos and new deployments: say so, keep waiting
                self.log.warning("%s: %s; waiting", self.argument, unknown)
                records = None
            except Exception as error:  # a network blip or an unmounted store passes: say so, keep waiting
                if not is_transient(error):
                    raise
                self.log.warning(
                    "%s: reading the store at %s failed (%s: %s); reading again in %ss",
                    self.argument,
                    self.store_path,
                    type(error).__name__,
                    error,
                    self.poll_interval,
                )
                records = None
            if records is not None and cursor is None:
                watermark_ms = check_watermarks(
                    records, 0, idle_timeout_ms=self.idle_timeout_ms, when_all_idle=self.when_all_idle
                ).watermark_ms
                if watermark_ms is not None:
                    cursor = last_boundary(watermark_ms, self.every_ms)
                    await self.write_cursor(cursor, watermark_ms)
                    self.log.info(
                        "First watermark %s: firing from the boundary after %s",
                        format_ms(watermark_ms),
                        format_ms(cursor),
                    )
            elif records is not None and cursor is not None:
                # in a thread: a long backlog is one check per boundary
                for fired in await asyncio.to_thread(self.events_after, records, cursor):
                    await asyncio.sleep(max(0.0, last_fired + self.event_spacing - loop.time()))
                    self.log.info(
                        "Watermark %s passed %s (%d interval(s))",
                        format_ms(fired.watermark_ms),
                        format_ms(fired.boundary_ms),
                        fired.intervals,
                    )
                    fired_at_ms = int(time.time() * 1000)
                    # the time first, under the previous boundary: a restart within the commit delay repeats this
                    # event (at least once) and still keeps the spacing
                    await self.write_cursor(cursor, fired.watermark_ms, fired_at_ms)
                    yield self.event(fired)
                    last_fired = loop.time()
                    await asyncio.sleep(self.commit_delay)
                    cursor = fired.boundary_ms
                    await self.write_cursor(cursor, fired.watermark_ms, fired_at_ms)
            await asyncio.sleep(self.poll_interval)
