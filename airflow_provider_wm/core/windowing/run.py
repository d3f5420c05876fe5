"""One run of a windowed aggregate over events: rules 0-7 of the package docstring (:func:`run`), and the
assignment, firing and purging that a rollup's run (:mod:`.rollup`) shares."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from airflow_provider_wm.core.times import disjoint_union, is_valid_time_ms
from airflow_provider_wm.core.windowing.aggregates import Aggregate, values_are_usable
from airflow_provider_wm.core.windowing.lateness import LateReason, is_open, too_late_reason
from airflow_provider_wm.core.windowing.modes import Accumulation, Timing
from airflow_provider_wm.core.windowing.spec import AggregationSpec
from airflow_provider_wm.core.windowing.state import (
    AggregationState,
    Event,
    FiredPane,
    Pane,
    RunResult,
    UpstreamPane,
    WindowState,
)
from airflow_provider_wm.core.windowing.watermark import next_watermark
from airflow_provider_wm.core.windows import Window, merge_sessions

__all__ = ["MAX_READ_INTERVALS", "fire_all", "interval_read", "partial_of", "read_by_run", "run", "with_interval_read"]


def read_by_run(arrival_ms: object, arrival_from_ms: int | None, arrival_until_ms: int) -> bool:
    """Rule 0: whether the run with input cut-offs ``(arrival_from_ms, arrival_until_ms]`` reads a row that
    arrived at ``arrival_ms`` (``None``: null or unparseable). A valid arrival is read by the one run whose range
    holds it; an invalid one (not :func:`~airflow_provider_wm.core.times.is_valid_time_ms`) by every run, which
    quarantines it ``INVALID_ARRIVAL``: no range can ever hold it, and a row is never dropped silently.

    >>> read_by_run(5, 0, 10), read_by_run(5, 5, 10), read_by_run(11, None, 10)
    (True, False, False)
    >>> read_by_run(None, 5, 10), read_by_run(-1, 5, 10), read_by_run(10**15, 5, 10)
    (True, True, True)
    """
    if not is_valid_time_ms(arrival_ms):
        return True
    assert isinstance(arrival_ms, int)
    return (arrival_from_ms is None or arrival_ms > arrival_from_ms) and arrival_ms <= arrival_until_ms


MAX_READ_INTERVALS = 100
"""How many disjoint ranges :func:`with_interval_read` keeps before it closes the oldest gap."""


def interval_read(read: Sequence[tuple[int, int]], interval: tuple[int, int]) -> bool:
    """Rule 0 without an arrival column: each run reads the folder of its own interval (``events`` templated per
    run), so a run is done when its interval ``[start, end)`` lies within one of the disjoint ranges ``read``
    (:func:`with_interval_read`) holds, whatever order the runs went in; an empty interval (a run whose data
    interval starts where it ends) is the instant ``start``.

    >>> interval_read([(0, 20), (30, 40)], (10, 20)), interval_read([(0, 20), (30, 40)], (20, 30))
    (True, False)
    >>> interval_read([(0, 20)], (5, 5)), interval_read([(0, 20)], (20, 20))
    (True, False)
    """
    start, end = interval[0], max(interval[1], interval[0] + 1)
    return any(first <= start and end <= last for first, last in read)


def with_interval_read(read: Sequence[tuple[int, int]], interval: tuple[int, int]) -> list[tuple[int, int]]:
    """``read`` with ``interval`` added, as few disjoint ranges, ascending: consecutive data intervals merge into
    one, so a pipeline whose runs go in order keeps one range. Above :data:`MAX_READ_INTERVALS` ranges (runs whose
    intervals never touch, such as a trigger timetable's instants) the oldest gaps close: a run that old counts as
    read.

    >>> with_interval_read([(0, 10), (20, 30)], (10, 20))
    [(0, 30)]
    >>> with_interval_read([(0, 10)], (40, 40))
    [(0, 10), (40, 41)]
    """
    merged = disjoint_union([*read, (interval[0], max(interval[1], interval[0] + 1))])
    while len(merged) > MAX_READ_INTERVALS:
        (first, _), (_, second_end) = merged[0], merged[1]
        merged[:2] = [(first, second_end)]
    return merged


def run(
    spec: AggregationSpec,
    state: AggregationState,
    events: Iterable[Event],
    source_watermark_ms: int | None = None,
) -> RunResult:
    """One run: rules 1-7 of the module docstring. ``source_watermark_ms`` is the store's watermark
    (:class:`StoreWatermark`); it is ignored under :class:`BoundedOutOfOrderness`."""
    if spec.upstream is not None:
        raise ValueError(f"pipeline reads the panes of {spec.upstream.pipeline!r}: use run_on_panes")
    aggregates = spec.builtin_aggregates()
    horizon = None if state.watermark_ms is None else state.watermark_ms - spec.allowed_lateness_ms
    late: list[tuple[Event | UpstreamPane, str]] = []
    accepted: list[Event] = []
    max_seen = state.max_event_time_ms
    for event in events:
        t = event.time_ms
        if not is_valid_time_ms(t):
            late.append((event, LateReason.INVALID_EVENT_TIME.value))
            continue
        assert isinstance(t, int)
        max_seen = t if max_seen is None else max(max_seen, t)
        if not values_are_usable(aggregates, event.values):
            late.append((event, LateReason.INVALID_VALUE.value))
            continue
        reason = too_late_reason(spec.late_data, t, spec.output_window.assign(t), horizon)
        if reason is not None:
            late.append((event, reason.value))
        else:
            accepted.append(event)
    watermark = next_watermark(spec.watermark, state.watermark_ms, max_seen, source_watermark_ms)

    windows = _assign(spec, aggregates, state.windows, accepted, horizon)
    panes, kept = fire_all(spec, aggregates, windows, watermark)
    return RunResult(panes, late, AggregationState(watermark, max_seen, tuple(kept)), watermark)


def fire_all(
    spec: AggregationSpec, aggregates: Sequence[Aggregate], windows: Iterable[WindowState], watermark: int | None
) -> tuple[list[Pane], list[WindowState]]:
    """Rules 5-7 over every window: the run's pane rows and the windows that stay open."""
    panes: list[Pane] = []
    kept: list[WindowState] = []
    for ws in sorted(windows, key=lambda w: (w.window, repr(w.key))):
        complete = watermark is not None and watermark >= ws.window.end
        purged = watermark is not None and not is_open(ws.window, watermark - spec.allowed_lateness_ms)
        fired, ws = _fire(spec, aggregates, ws, complete, purged, watermark)
        panes.extend(fired)
        if not purged:
            kept.append(ws)
    return panes, kept


def partial_of(aggregates: Sequence[Aggregate], events: Iterable[Event]) -> tuple[Any, ...]:
    partial = tuple(a.empty() for a in aggregates)
    for event in events:
        partial = _merge(aggregates, partial, tuple(a.of(event.values) for a in aggregates))
    return partial


def _merge(aggregates: Sequence[Aggregate], a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(agg.merge(x, y) for agg, x, y in zip(aggregates, a, b, strict=True))


def _assign(
    spec: AggregationSpec,
    aggregates: Sequence[Aggregate],
    stored: Sequence[WindowState],
    events: Sequence[Event],
    horizon: int | None = None,
) -> list[WindowState]:
    """Rule 4: the windows after adding the run's events, each only to its windows that are still open
    (:func:`is_open`; under ``EVENT_TIME`` every window of an accepted event is)."""
    window_fn = spec.output_window
    if not window_fn.merging:
        by_window: dict[tuple[Any, Window], WindowState] = {(w.key, w.window): w for w in stored}
        new: dict[tuple[Any, Window], list[Event]] = defaultdict(list)
        for event in events:
            for window in window_fn.assign(event.time_ms):  # type: ignore[arg-type]
                if is_open(window, horizon):
                    new[(event.key, window)].append(event)
        for (key, window), window_events in new.items():
            partial = partial_of(aggregates, window_events)
            old = by_window.get((key, window))
            if old is None:
                by_window[(key, window)] = WindowState(key, window, partial, pending=len(window_events))
            else:
                combined = _merge(aggregates, old.partial, partial)
                by_window[(key, window)] = replace(old, partial=combined, pending=old.pending + len(window_events))
        return list(by_window.values())

    sessions: dict[Any, list[WindowState]] = defaultdict(list)
    arrivals: dict[Any, list[Event]] = defaultdict(list)
    for ws in stored:
        sessions[ws.key].append(ws)
    for event in events:
        arrivals[event.key].append(event)
    result: list[WindowState] = []
    for key in [*sessions, *(k for k in arrivals if k not in sessions)]:
        kept, arrived = sessions.get(key, []), arrivals.get(key, [])
        intervals = [w.window for w in kept] + [window_fn.assign(e.time_ms)[0] for e in arrived]  # type: ignore[arg-type]
        for merged, indexes in merge_sessions(intervals):
            old_members = [kept[i] for i in indexes if i < len(kept)]
            event_members = [arrived[i - len(kept)] for i in indexes if i >= len(kept)]
            partial = partial_of(aggregates, event_members)
            if len(old_members) == 1 and old_members[0].window == merged:
                only = old_members[0]
                if event_members:
                    merged_partial = _merge(aggregates, only.partial, partial)
                    only = replace(only, partial=merged_partial, pending=only.pending + len(event_members))
                result.append(only)
                continue
            for member in old_members:
                partial = _merge(aggregates, member.partial, partial)
            owed: tuple[FiredPane, ...] = ()
            if spec.retracting:
                owed = tuple(p for m in old_members for p in (*m.owed, *((m.last_pane,) if m.last_pane else ())))
            pending = sum(m.pending for m in old_members) + len(event_members)
            result.append(WindowState(key, merged, partial, pending=pending, owed=owed))
    return result


def _fire(
    spec: AggregationSpec,
    aggregates: Sequence[Aggregate],
    ws: WindowState,
    complete: bool,
    purged: bool,
    watermark: int | None,
) -> tuple[list[Pane], WindowState]:
    """Rules 5 and 6 for one window: its rows of this run and its state after them."""
    early = spec.early_firing if spec.early_firing_count is None else ws.pending >= spec.early_firing_count
    late = spec.late_firing if spec.late_firing_count is None else ws.pending >= spec.late_firing_count
    if complete and not ws.on_time_fired:
        timing = Timing.ON_TIME
    elif complete and ws.pending and (late or purged):
        timing = Timing.LATE
    elif not complete and ws.pending and early:
        timing = Timing.EARLY
    else:
        return [], ws
    values = tuple(a.finish(p) for a, p in zip(aggregates, ws.partial, strict=True))
    after = replace(ws, pending=0, on_time_fired=ws.on_time_fired or timing is Timing.ON_TIME)
    last = ws.last_pane
    if spec.fire_only_updated_panes and not ws.owed and last is not None and last.values == values:
        return [], after
    rows: list[Pane] = []
    if spec.retracting:
        for old in (*ws.owed, *((last,) if last else ())):
            rows.append(Pane(ws.key, old.window, old.values, old.timing, old.index, True, watermark))
    index = 0 if last is None else last.index + 1
    rows.append(Pane(ws.key, ws.window, values, timing, index, False, watermark))
    partial = tuple(a.empty() for a in aggregates) if spec.accumulation is Accumulation.DISCARDING else ws.partial
    return rows, replace(after, partial=partial, last_pane=FiredPane(ws.window, timing, index, values), owed=())
