"""Windowed aggregation across DAG runs (Apache Apex windowed operator, Beam/Flink triggers): the reference.

Each DAG run is one firing opportunity. A run gets the events that arrived since the previous run and the
state of the open windows, and returns panes, too-late events and the next state.

Rules, in the order a run applies them (``W_prev`` is the previous run's watermark, ``L`` the allowed
lateness):

0. **Input.** With an arrival column, a run with input cut-offs ``(from, until]`` reads the rows that arrived
   in that range (the runs' ranges tile the arrival axis, so each such row is one run's) and also every row
   whose arrival is not a valid time (null, unparseable, or outside :mod:`~airflow_provider_wm.core.times`'
   range): no run's range can hold it, so every run quarantines it ``INVALID_ARRIVAL`` and counts it, until
   it is fixed at the source (:func:`read_by_run`). Those rows are not the run's events: rules 1-7 skip them.
   Without an arrival column each run reads the folder of its own data interval, whatever order the runs go
   in: a run is done once its interval is among those the state has read (:func:`interval_read`), and an
   older interval that runs after a newer one is read then, its events late or not by rule 2.
1. **Sanity.** An event whose time is not a valid time (null, negative, or after 9999-12-31:
   :func:`~airflow_provider_wm.core.times.is_valid_time_ms`) is quarantined ``INVALID_EVENT_TIME``; no
   window arithmetic is done on it. An event with a valid time that holds NaN or +/-infinity in a column an
   aggregate reads (:func:`values_are_usable`) is quarantined ``INVALID_VALUE``: one such value would make its
   windows' sums, averages, minima and maxima NaN or infinite, for good in an accumulating window's state. Its
   time still counts as seen (rule 3). This comes before rule 2: a row both too late and unusable is
   ``INVALID_VALUE``, a fault of the row itself that its source must fix whenever the row is read (a replay
   that arrives in time would hit it again), where lateness is only a matter of when it arrived; every
   ``INVALID_*`` reason is a property of the row alone, the same whichever run reads it.
2. **Too late** (:func:`too_late_reason`, by the spec's :class:`LateData` policy). ``"event_time"`` (the
   default, Apex): an event with ``t < W_prev - L`` is not aggregated: it goes to the late-data output with
   reason ``TOO_LATE`` and is counted (Flink's side output for late data). ``"window_end"`` (Spark Structured
   Streaming, Flink, Beam): an event is dropped from a window only when that window has closed,
   ``end <= W_prev - L``; an event all of whose windows have closed goes to the late-data output with reason
   ``WINDOW_CLOSED``. A sliding event whose older windows have closed still counts in its open ones. A
   session event is judged by its own window ``[t, t + gap)`` before merging, as Spark does: it is dropped
   when ``t + gap <= W_prev - L`` even if it would merge into a session still open (:class:`LateData`).
3. **Watermark.** ``W`` is the stream's watermark from the store (:class:`StoreWatermark`) or the highest
   event time seen so far minus a delay (:class:`BoundedOutOfOrderness`); never lower than ``W_prev``.
   ``W`` means that every event with a time below ``W`` has arrived.
4. **Assignment.** Every other event is added to the partial aggregates of its windows (per key), whose
   *pending* count (events since the window's last firing; *dirty* when above 0) it raises by one. Session
   windows of a key merge when they overlap; a merged session is a new window: not yet fired, pending the
   sum of its members' pending events and the new ones, and (retracting) it owes the retraction of every
   pane its members fired.
5. **Firing.** A window ``[s, e)`` is complete when ``W >= e``. A complete window that has not fired
   ON_TIME fires its ON_TIME pane (even an empty one under DISCARDING). A complete, dirty window fires a
   LATE pane (``late_firing``; when it is off, one LATE pane when the window is purged). An incomplete,
   dirty window fires an EARLY pane (``early_firing``). Count triggers replace the per-run trigger of
   their timing: with ``early_firing_count=N`` an incomplete window fires EARLY once N events are pending;
   with ``late_firing_count=N`` a complete one fires LATE once N are pending (and, with any pending, when
   it is purged). Firing resets the pending count. Pane indexes count a window's firings from 0.
6. **Accumulation.** DISCARDING: a pane holds the data since the window's last firing. ACCUMULATING (the
   default): everything so far. ACCUMULATING_AND_RETRACTING: as accumulating, and before the pane a
   retraction row (``retraction = True``) repeats each pane it replaces: the window's own last pane and
   the last panes of the sessions merged into it. ``fire_only_updated_panes`` skips a pane equal to the
   window's last one (accumulating modes only).
7. **Purge.** After firing, a window with ``e <= W - L`` is dropped from the state.

**Merging streams** (Apex MergeWindowedOperator): the events of several inputs are assigned to the same
windows; :func:`merge_inputs` prefixes each input's columns with its name (``orders__amount``) and marks
its rows (``orders__wm_row``), so aggregates of both inputs sit side by side in one pane and a key joins
them within the window. The watermark is :class:`MergedWatermark`: the minimum of the inputs' watermarks
over those that are not idle (Jet's coalescing), so a window fires once every live input has passed it.

**Window propagation** (Apex): a rollup (``upstream=UpstreamPanes(...)``) reads the panes of an upstream
aggregate instead of events (:func:`run_on_panes`). A pane row lands in the window it carries (``window=None``)
or in the coarse tumbling window that contains it (a multiple of the upstream's size). A row whose window is
not one an upstream can emit (:func:`pane_window_is_valid`) is quarantined ``INVALID_WINDOW``. Pane values are
not checked by :func:`values_are_usable`: the upstream quarantined its NaN and infinite inputs, so a pane holds
one only when a sum of finite values exceeds a double's range (about 1.8e308) or a :class:`SqlAggregate` made
it, and a rollup recomputes a window from its live panes, so the value leaves the window once a pane replaces
it (quarantining a replacing pane instead would leave the pane it replaces live). It is too late
when that window is purged (``end <= W_prev - L``). Each upstream window has one *live* pane: the row with the
highest ``(upstream run, pane_index, not retraction)`` (a retraction is followed by the pane that replaces
it; a retraction left on top undoes its pane); a DISCARDING upstream's panes are all live (each holds new
data). A window that got rows has its partials recomputed from its live panes, so an EARLY pane counts
until its ON_TIME or LATE pane replaces it and a retracting upstream's rollup stays exact; the rows raise
its pending count. Firing and purging are rules 5-7; a purged window's live panes are dropped.

Worked example (tumbling 1000 ms, lateness 1000 ms, watermark from the store):

>>> from airflow_provider_wm.core.windows import Tumbling
>>> spec = AggregationSpec(Tumbling(1000), (Aggregate("v", "sum", "v"),), keys=(),
...                        watermark=StoreWatermark("s"), allowed_lateness_ms=1000)
>>> r1 = run(spec, AggregationState(), [Event(100, (), {"v": 2}), Event(200, (), {"v": 3})], 1200)
>>> [(p.window, p.timing.value, p.values) for p in r1.panes]
[(Window(start=0, end=1000), 'ON_TIME', (5,))]
>>> r2 = run(spec, r1.state, [Event(900, (), {"v": 4})], 3000)
>>> [(p.timing.value, p.values) for p in r2.panes], r2.state.windows
([('LATE', (9,))], ())
>>> r3 = run(spec, r2.state, [Event(120, (), {"v": 5})], 3000)
>>> r3.panes, [(e.time_ms, reason) for e, reason in r3.late]
([], [(120, 'TOO_LATE')])
"""

from __future__ import annotations

from airflow_provider_wm.core.windowing.aggregates import (
    OUTPUT_COLUMNS,
    Aggregate,
    SqlAggregate,
    aggregated_columns,
    values_are_usable,
)
from airflow_provider_wm.core.windowing.lateness import TOO_LATE_REASONS, LateData, LateReason, is_open, too_late_reason
from airflow_provider_wm.core.windowing.merge import ROW_COLUMN, input_column, merge_inputs
from airflow_provider_wm.core.windowing.modes import Accumulation, Timing, enum_member
from airflow_provider_wm.core.windowing.rollup import pane_window_is_valid, rollup_watermark, run_on_panes
from airflow_provider_wm.core.windowing.run import (
    MAX_READ_INTERVALS,
    interval_read,
    read_by_run,
    run,
    with_interval_read,
)
from airflow_provider_wm.core.windowing.spec import CARRIED_OVER, AggregationSpec, UpstreamPanes
from airflow_provider_wm.core.windowing.state import (
    AggregationState,
    Event,
    FiredPane,
    Pane,
    RunResult,
    UpstreamPane,
    WindowState,
)
from airflow_provider_wm.core.windowing.watermark import (
    BoundedOutOfOrderness,
    MergedWatermark,
    StoreWatermark,
    WatermarkPolicy,
    next_watermark,
    upstream_streams,
)

__all__ = [
    "CARRIED_OVER",
    "MAX_READ_INTERVALS",
    "OUTPUT_COLUMNS",
    "ROW_COLUMN",
    "TOO_LATE_REASONS",
    "Accumulation",
    "Aggregate",
    "AggregationSpec",
    "AggregationState",
    "BoundedOutOfOrderness",
    "Event",
    "FiredPane",
    "LateData",
    "LateReason",
    "MergedWatermark",
    "Pane",
    "RunResult",
    "SqlAggregate",
    "StoreWatermark",
    "Timing",
    "UpstreamPane",
    "UpstreamPanes",
    "WatermarkPolicy",
    "WindowState",
    "aggregated_columns",
    "enum_member",
    "input_column",
    "interval_read",
    "is_open",
    "merge_inputs",
    "next_watermark",
    "pane_window_is_valid",
    "read_by_run",
    "rollup_watermark",
    "run",
    "run_on_panes",
    "too_late_reason",
    "upstream_streams",
    "values_are_usable",
    "with_interval_read",
]
