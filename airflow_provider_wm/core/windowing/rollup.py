"""Window propagation (Apex): a rollup's run over the pane rows of an upstream aggregate (:func:`run_on_panes`)
and the windows such a row may carry (:func:`pane_window_is_valid`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing.lateness import LateReason, is_open
from airflow_provider_wm.core.windowing.modes import Accumulation
from airflow_provider_wm.core.windowing.run import fire_all, partial_of
from airflow_provider_wm.core.windowing.spec import AggregationSpec
from airflow_provider_wm.core.windowing.state import AggregationState, Event, RunResult, UpstreamPane, WindowState
from airflow_provider_wm.core.windowing.watermark import next_watermark
from airflow_provider_wm.core.windows import Sliding, Tumbling, Window, WindowFn

__all__ = ["pane_window_is_valid", "rollup_watermark", "run_on_panes"]


def rollup_watermark(
    store_watermark_ms: int | None, upstream_window: WindowFn, upstream_committed_watermark_ms: int | None
) -> int | None:
    """A rollup's watermark: the store's watermark of the upstream's output stream, but never past the output
    watermark of what the upstream has *committed* (an upstream publishes its output stream before it commits,
    and a failed commit must not let the rollup fire windows whose panes it cannot read). ``None`` when either
    is unknown.

    >>> five = Tumbling(300_000)
    >>> rollup_watermark(900_000, five, 700_000), rollup_watermark(500_000, five, 700_000)
    (600000, 500000)
    >>> rollup_watermark(900_000, five, None) is None
    True
    """
    if store_watermark_ms is None or upstream_committed_watermark_ms is None:
        return None
    committed_output = upstream_window.output_watermark(upstream_committed_watermark_ms)
    return None if committed_output is None else min(store_watermark_ms, committed_output)


def pane_window_is_valid(window: Window | None, upstream: WindowFn) -> bool:
    """Whether a rollup can place an upstream pane row of ``window``: a window an upstream emits for a valid
    event time is non-empty, holds a valid time (``start <= MAX_TIME_MS`` and ``end > MIN_TIME_MS``) and is no
    longer than the upstream's windows (the global window has no size). Any other row (``None``: no window)
    is quarantined ``INVALID_WINDOW``, before any window arithmetic.

    >>> five = Tumbling(300_000)
    >>> pane_window_is_valid(Window(-60_000, 240_000), five), pane_window_is_valid(Window(0, 10**15), five)
    (True, False)
    >>> pane_window_is_valid(Window(10**15, 10**15 + 300_000), five), pane_window_is_valid(None, five)
    (False, False)
    """
    if window is None or window.start >= window.end:
        return False
    if window.start > MAX_TIME_MS or window.end <= MIN_TIME_MS:
        return False
    size = _window_size_ms(upstream)
    return size is None or window.start >= window.end - size


def _window_size_ms(window_fn: WindowFn) -> int | None:
    """The length of every window of a fixed window function; ``None`` for the global window."""
    return window_fn.size_ms if isinstance(window_fn, Tumbling | Sliding) else None


def run_on_panes(
    spec: AggregationSpec,
    state: AggregationState,
    panes: Iterable[UpstreamPane],
    source_watermark_ms: int | None,
) -> RunResult:
    """One run of a rollup over the upstream pane rows that arrived (window propagation, module docstring).

    Worked example: hourly sums of 5-minute panes from a retracting upstream. The EARLY pane of
    ``[0, 5m)`` is retracted and replaced by its ON_TIME pane; the hour counts only the live one.

    >>> from airflow_provider_wm.core.windowing import Aggregate, StoreWatermark, UpstreamPanes
    >>> up = UpstreamPanes("orders_5m", Tumbling(300_000), Accumulation.ACCUMULATING_AND_RETRACTING)
    >>> spec = AggregationSpec(Tumbling(3_600_000), (Aggregate("n", "sum", "n"),), (), StoreWatermark("orders_5m"),
    ...                        upstream=up)
    >>> five = Window(0, 300_000)
    >>> r1 = run_on_panes(spec, AggregationState(), [UpstreamPane((), five, {"n": 2}, 0, run=1)], 0)
    >>> rows = [UpstreamPane((), five, {"n": 2}, 0, True, run=2), UpstreamPane((), five, {"n": 3}, 1, run=2),
    ...         UpstreamPane((), Window(300_000, 600_000), {"n": 4}, 0, run=2)]
    >>> r2 = run_on_panes(spec, r1.state, rows, 3_600_000)
    >>> [(p.window.end, p.timing.value, p.values) for p in r2.panes]
    [(3600000, 'ON_TIME', (7,))]
    """
    aggregates = spec.builtin_aggregates()
    horizon = None if state.watermark_ms is None else state.watermark_ms - spec.allowed_lateness_ms
    late: list[tuple[Event | UpstreamPane, str]] = []
    live = {_identity(spec, pane): pane for pane in state.live}
    touched: dict[tuple[Any, Window], int] = defaultdict(int)
    max_seen = state.max_event_time_ms
    upstream_window = spec.output_window if spec.upstream is None else spec.upstream.window
    for pane in panes:
        if pane.window is None or not pane_window_is_valid(pane.window, upstream_window):
            late.append((pane, LateReason.INVALID_WINDOW.value))
            continue
        max_seen = pane.window.end - 1 if max_seen is None else max(max_seen, pane.window.end - 1)
        target = spec.target_window(pane.window)
        if not is_open(target, horizon):
            late.append((pane, LateReason.TOO_LATE.value))
            continue
        identity = _identity(spec, pane)
        if identity not in live or pane.rank() > live[identity].rank():
            live[identity] = pane
        touched[(pane.key, target)] += 1
    live = {identity: pane for identity, pane in live.items() if not pane.retraction}
    watermark = next_watermark(spec.watermark, state.watermark_ms, max_seen, source_watermark_ms)

    members: dict[tuple[Any, Window], list[Event]] = defaultdict(list)
    for pane in live.values():
        members[(pane.key, spec.target_window(pane.window))].append(Event(None, pane.key, pane.values))  # type: ignore[arg-type]
    windows = {(ws.key, ws.window): ws for ws in state.windows}
    for (key, target), rows in touched.items():
        partial = partial_of(aggregates, members.get((key, target), []))
        old = windows.get((key, target))
        windows[(key, target)] = (
            WindowState(key, target, partial, pending=rows)
            if old is None
            else replace(old, partial=partial, pending=old.pending + rows)
        )
    fired, kept = fire_all(spec, aggregates, list(windows.values()), watermark)
    open_windows = {(ws.key, ws.window) for ws in kept}
    still_live = tuple(
        sorted(
            (p for p in live.values() if (p.key, spec.target_window(p.window)) in open_windows),  # type: ignore[arg-type]
            key=lambda p: (repr(p.key), p.window, p.index),
        )
    )
    return RunResult(fired, late, AggregationState(watermark, max_seen, tuple(kept), still_live), watermark)


def _identity(spec: AggregationSpec, pane: UpstreamPane) -> tuple[Any, ...]:
    """Which rows replace each other: one window's panes, except that every pane of a DISCARDING upstream
    holds new data."""
    assert spec.upstream is not None
    discarding = spec.upstream.accumulation is Accumulation.DISCARDING
    return (pane.key, pane.window, pane.index) if discarding else (pane.key, pane.window)
