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
1. **Sanity.** An event whose time is not a valid time (null, negative, or after 9999-12-31:
   :func:`~airflow_provider_wm.core.times.is_valid_time_ms`) is quarantined ``INVALID_EVENT_TIME``; no
   window arithmetic is done on it.
2. **Too late** (:func:`too_late_reason`, by the spec's :class:`LateData` policy). ``"event_time"`` (the
   default, Apex): an event with ``t < W_prev - L`` is not aggregated: it goes to the late-data output with
   reason ``TOO_LATE`` and is counted (Flink's side output for late data). ``"window_end"`` (Spark Structured
   Streaming, Flink, Beam): an event is dropped from a window only when that window has closed,
   ``end <= W_prev - L``; an event all of whose windows have closed goes to the late-data output with reason
   ``WINDOW_CLOSED``. A sliding event whose older windows have closed still counts in its open ones.
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
not one an upstream can emit (:func:`pane_window_is_valid`) is quarantined ``INVALID_WINDOW``. It is too late
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

import enum
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS, is_valid_time_ms
from airflow_provider_wm.core.windows import (
    Session,
    Sliding,
    Tumbling,
    Window,
    WindowFn,
    merge_sessions,
    window_from_json,
)

__all__ = [
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
    "WindowState",
    "input_column",
    "is_open",
    "merge_inputs",
    "next_watermark",
    "pane_window_is_valid",
    "read_by_run",
    "run",
    "run_on_panes",
    "too_late_reason",
]


class Accumulation(enum.StrEnum):
    DISCARDING = "DISCARDING"
    ACCUMULATING = "ACCUMULATING"
    ACCUMULATING_AND_RETRACTING = "ACCUMULATING_AND_RETRACTING"


class Timing(enum.StrEnum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


class LateReason(enum.StrEnum):
    """Why a row went to the late-data output instead of a window (the ``reason`` column)."""

    INVALID_ARRIVAL = "INVALID_ARRIVAL"
    INVALID_EVENT_TIME = "INVALID_EVENT_TIME"
    INVALID_WINDOW = "INVALID_WINDOW"
    TOO_LATE = "TOO_LATE"
    WINDOW_CLOSED = "WINDOW_CLOSED"


TOO_LATE_REASONS = (LateReason.TOO_LATE.value, LateReason.WINDOW_CLOSED.value)
"""The reasons counted as too late (``too_late`` in the totals), one per :class:`LateData` policy."""


class LateData(enum.StrEnum):
    """When an event is too late to be aggregated (rule 2), given the horizon ``H = W_prev - L``.

    - ``EVENT_TIME`` (default; Apex): its own time is below the horizon, ``t < H``.
    - ``WINDOW_END`` (Spark Structured Streaming, Flink, Beam): its window has closed, ``end <= H``; the event
      still counts in every window of it that ends after ``H``.

    They differ for an event just below the horizon whose window is still open. Tumbling 10 s windows,
    ``H = 25 s``: an event at 22 s is ``TOO_LATE`` under ``EVENT_TIME``, but under ``WINDOW_END`` it lands in
    ``[20 s, 30 s)``, which has not closed; an event at 18 s is late under both (``[10 s, 20 s)`` closed).

    >>> too_late_reason(LateData.EVENT_TIME, 22_000, [Window(20_000, 30_000)], 25_000)
    <LateReason.TOO_LATE: 'TOO_LATE'>
    >>> too_late_reason(LateData.WINDOW_END, 22_000, [Window(20_000, 30_000)], 25_000) is None
    True
    >>> too_late_reason(LateData.WINDOW_END, 18_000, [Window(10_000, 20_000)], 25_000)
    <LateReason.WINDOW_CLOSED: 'WINDOW_CLOSED'>
    """

    EVENT_TIME = "event_time"
    WINDOW_END = "window_end"


def too_late_reason(policy: LateData, t: int, windows: Sequence[Window], horizon: int | None) -> LateReason | None:
    """Rule 2 for an event at ``t`` whose windows are ``windows``: why it is too late, or ``None``."""
    if horizon is None:
        return None
    if policy is LateData.EVENT_TIME:
        return LateReason.TOO_LATE if t < horizon else None
    return None if any(is_open(window, horizon) for window in windows) else LateReason.WINDOW_CLOSED


def is_open(window: Window, horizon: int | None) -> bool:
    """A window still takes data while it ends after the horizon ``W - L``; once it does not, rule 7 purges it,
    a rollup's pane rows for it are too late, and under ``WINDOW_END`` so are its events.

    >>> is_open(Window(0, 1000), 1000), is_open(Window(0, 1000), 999), is_open(Window(0, 1000), None)
    (False, True, True)
    """
    return horizon is None or window.end > horizon


BUILTIN_FUNCTIONS = ("count", "sum", "min", "max", "avg")
OUTPUT_COLUMNS = ("window_start", "window_end", "pane", "pane_index", "retraction", "watermark_ms", "run_id")
"""Columns every pane row has; an aggregate or key may not use these names."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _identifier(value: Any, argument: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{argument}={value!r} must be a column name (letters, digits, _)")
    return value


@dataclass(frozen=True)
class Aggregate:
    """A built-in aggregate: ``count`` (of rows, or of non-null ``column``), ``sum``, ``min``, ``max``,
    ``avg`` of ``column``; nulls are ignored, as in SQL.

    >>> Aggregate("n", "count")
    Aggregate(name='n', function='count', column=None)
    >>> Aggregate("total", "median", "amount")
    Traceback (most recent call last):
    ...
    ValueError: aggregates[total].function='median' must be one of count, sum, min, max, avg (or use SqlAggregate)
    """

    name: str
    function: str
    column: str | None = None

    def __post_init__(self) -> None:
        _identifier(self.name, "aggregates[].name")
        if self.function not in BUILTIN_FUNCTIONS:
            raise ValueError(
                f"aggregates[{self.name}].function={self.function!r} must be one of {', '.join(BUILTIN_FUNCTIONS)} "
                "(or use SqlAggregate)"
            )
        if self.column is None and self.function != "count":
            raise ValueError(f"aggregates[{self.name}]: {self.function} needs a column")
        if self.column is not None:
            _identifier(self.column, f"aggregates[{self.name}].column")

    # partial aggregates: count -> int; sum, min, max -> value or None; avg -> (sum or None, count)

    def empty(self) -> Any:
        return {"count": 0, "avg": (None, 0)}.get(self.function)

    def of(self, values: Mapping[str, Any]) -> Any:
        """The partial of one event."""
        if self.column is None:
            return 1
        value = values.get(self.column)
        if self.function == "count":
            return 0 if value is None else 1
        if self.function == "avg":
            return (value, 0 if value is None else 1)
        return value

    def merge(self, a: Any, b: Any) -> Any:
        if self.function == "count":
            return a + b
        if self.function == "avg":
            return (_merge_nullable(a[0], b[0], _add), a[1] + b[1])
        return _merge_nullable(a, b, {"sum": _add, "min": min, "max": max}[self.function])

    def finish(self, partial: Any) -> Any:
        if self.function == "avg":
            total, count = partial
            return None if not count else total / count
        return partial


def _add(a: Any, b: Any) -> Any:
    return a + b


def _merge_nullable(a: Any, b: Any, combine: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return combine(a, b)


@dataclass(frozen=True)
class SqlAggregate:
    """A user-supplied mergeable aggregate, evaluated by Spark only (the reference covers the built-ins).

    ``partial`` aggregates a run's events of a window; ``merge`` aggregates partials (``{partial}`` stands
    for the partial column); ``final`` turns the merged partial into the pane's value. Example, distinct
    users with mergeable sketches::

        SqlAggregate("users", partial="hll_sketch_agg(user_id)", merge="hll_union_agg({partial})",
                     final="hll_sketch_estimate({partial})")
    """

    name: str
    partial: str
    merge: str
    final: str = "{partial}"

    def __post_init__(self) -> None:
        _identifier(self.name, "aggregates[].name")
        for argument in ("partial", "merge", "final"):
            value = getattr(self, argument)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"aggregates[{self.name}].{argument}={value!r} must be a Spark SQL expression")
        for argument in ("merge", "final"):
            if "{partial}" not in getattr(self, argument):
                raise ValueError(
                    f"aggregates[{self.name}].{argument}={getattr(self, argument)!r} must refer to {{partial}}"
                )


@dataclass(frozen=True)
class StoreWatermark:
    """The watermark is a stream's watermark in the store (the controller's lower time)."""

    stream: str
    wm_key: str | None = None


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """The watermark is the highest event time seen so far minus ``max_delay_ms``."""

    max_delay_ms: int

    def __post_init__(self) -> None:
        if isinstance(self.max_delay_ms, bool) or not isinstance(self.max_delay_ms, int) or self.max_delay_ms < 0:
            raise ValueError(f"watermark max_delay_ms={self.max_delay_ms!r} must be milliseconds >= 0")


@dataclass(frozen=True)
class MergedWatermark:
    """The watermark of merged inputs: the minimum of their streams' watermarks over the inputs that are not
    idle (an input whose watermark has not advanced for ``idle_timeout_ms``); when all are idle,
    ``when_all_idle`` says ``"wait"`` or ``"highest"`` (:mod:`airflow_provider_wm.core.coalescing`).
    ``inputs`` maps each input's name to its stream watermark."""

    inputs: tuple[tuple[str, StoreWatermark], ...]
    idle_timeout_ms: int | None = None
    when_all_idle: str = "wait"

    def __post_init__(self) -> None:
        if len(self.inputs) < 2:
            raise ValueError(f"inputs={[name for name, _ in self.inputs]} must name at least two inputs to merge")
        for name, policy in self.inputs:
            _identifier(name, "inputs[]")
            if "__" in name or not isinstance(policy, StoreWatermark):
                raise ValueError(f"inputs[{name!r}]: a name without '__' and a stream watermark are needed")
        timeout = self.idle_timeout_ms
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0):
            raise ValueError(f"idle_timeout_ms={timeout!r} must be positive milliseconds (or None)")
        if self.when_all_idle not in ("wait", "highest"):
            raise ValueError(f"when_all_idle={self.when_all_idle!r} must be 'wait' or 'highest'")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)


WatermarkPolicy = StoreWatermark | BoundedOutOfOrderness | MergedWatermark
ROW_COLUMN = "wm_row"


def input_column(input_name: str, column: str) -> str:
    """The name of an input's column after the merge: ``input_column("orders", "amount") == "orders__amount"``;
    ``input_column(name, ROW_COLUMN)`` is 1 on the input's rows (``count(orders.*)`` counts it)."""
    return f"{input_name}__{column}"


def merge_inputs(inputs: Mapping[str, Iterable[Event]]) -> list[Event]:
    """The events of every input, each with its columns prefixed by its input's name and its row marker.

    >>> merge_inputs({"orders": [Event(5, ("eu",), {"amount": 3})], "deliveries": [Event(7, ("eu",), {})]})
    ... # doctest: +NORMALIZE_WHITESPACE
    [Event(time_ms=5, key=('eu',), values={'orders__amount': 3, 'orders__wm_row': 1}),
     Event(time_ms=7, key=('eu',), values={'deliveries__wm_row': 1})]
    """
    return [
        Event(
            event.time_ms,
            event.key,
            {input_column(name, c): v for c, v in event.values.items()} | {input_column(name, ROW_COLUMN): 1},
        )
        for name, events in inputs.items()
        for event in events
    ]


@dataclass(frozen=True)
class UpstreamPanes:
    """The windowed aggregate whose panes a rollup reads (window propagation): its pipeline, its window and
    its accumulation mode (which panes are live, see the module docstring).

    >>> UpstreamPanes("orders_5m", Session(60_000), Accumulation.ACCUMULATING)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: upstream window Session(gap_ms=60000) merges windows: a rollup needs fixed windows (...)
    """

    pipeline: str
    window: WindowFn
    accumulation: Accumulation = Accumulation.ACCUMULATING

    def __post_init__(self) -> None:
        if not isinstance(self.pipeline, str) or not self.pipeline:
            raise ValueError(f"upstream pipeline={self.pipeline!r} must be a pipeline name")
        if not isinstance(self.window, WindowFn):
            raise ValueError(f"upstream window={self.window!r} must be a Tumbling, Sliding or Global window")
        if self.window.merging:
            raise ValueError(
                f"upstream window {self.window!r} merges windows: a rollup needs fixed windows (tumbling, sliding or "
                "global)"
            )
        if not isinstance(self.accumulation, Accumulation):
            raise ValueError(f"upstream accumulation={self.accumulation!r} must be one of {list(Accumulation)}")

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "window": self.window.to_json(), "accumulation": self.accumulation.value}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpstreamPanes:
        return cls(data["pipeline"], window_from_json(data["window"]), Accumulation(data["accumulation"]))


@dataclass(frozen=True)
class AggregationSpec:
    """What to aggregate and when to fire; validated at construction.

    >>> AggregationSpec(Session(2000), (Aggregate("n", "count"),), keys=(), watermark=BoundedOutOfOrderness(0))
    Traceback (most recent call last):
    ...
    ValueError: window=Session(gap_ms=2000) is keyed only: give keys
    >>> AggregationSpec(Session(2000), (Aggregate("n", "count"),), keys=("k",), watermark=BoundedOutOfOrderness(0),
    ...                 accumulation=Accumulation.DISCARDING, fire_only_updated_panes=True)
    Traceback (most recent call last):
    ...
    ValueError: fire_only_updated_panes=True is invalid with accumulation=DISCARDING: every pane holds new data
    """

    window: WindowFn | None
    aggregates: tuple[Aggregate | SqlAggregate, ...]
    keys: tuple[str, ...]
    watermark: WatermarkPolicy
    allowed_lateness_ms: int = 0
    accumulation: Accumulation = Accumulation.ACCUMULATING
    early_firing: bool = False
    late_firing: bool = True
    fire_only_updated_panes: bool = False
    early_firing_count: int | None = None
    late_firing_count: int | None = None
    upstream: UpstreamPanes | None = None
    late_data: LateData = LateData.EVENT_TIME

    def __post_init__(self) -> None:
        if self.late_data not in tuple(LateData):
            raise ValueError(f"late_data={self.late_data!r} must be one of {[p.value for p in LateData]}")
        object.__setattr__(self, "late_data", LateData(self.late_data))
        if self.late_data is LateData.WINDOW_END and isinstance(self.window, Session):
            raise ValueError(
                f"late_data='window_end' with window={self.window!r}: lateness by the merged session's end is "
                "not supported yet; use late_data='event_time' for sessions"
            )
        if self.upstream is not None:
            self._check_rollup(self.upstream)
        elif not isinstance(self.window, WindowFn):
            raise ValueError(f"window={self.window!r} must be a Tumbling, Sliding, Session or Global window")
        if not self.aggregates:
            raise ValueError("aggregates=() must name at least one aggregate")
        for aggregate in self.aggregates:
            if not isinstance(aggregate, Aggregate | SqlAggregate):
                raise ValueError(f"aggregates: {aggregate!r} is not an Aggregate or SqlAggregate")
        keys = [_identifier(k, "keys[]") for k in self.keys]
        names = [a.name for a in self.aggregates] + keys
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"aggregates and keys: the names {duplicates} are used twice")
        reserved = sorted(set(names) & set(OUTPUT_COLUMNS))
        if reserved:
            raise ValueError(f"aggregates and keys: {reserved} are output columns of every pane; rename them")
        if isinstance(self.window, Session) and not self.keys:
            raise ValueError(f"window={self.window!r} is keyed only: give keys")
        if not isinstance(self.watermark, StoreWatermark | BoundedOutOfOrderness | MergedWatermark):
            raise ValueError(f"watermark={self.watermark!r} must be StoreWatermark or BoundedOutOfOrderness")
        lateness = self.allowed_lateness_ms
        if isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0:
            raise ValueError(f"allowed_lateness_ms={lateness!r} must be milliseconds >= 0")
        if not isinstance(self.accumulation, Accumulation):
            raise ValueError(f"accumulation={self.accumulation!r} must be one of {[a.value for a in Accumulation]}")
        if self.fire_only_updated_panes and self.accumulation is Accumulation.DISCARDING:
            raise ValueError(
                "fire_only_updated_panes=True is invalid with accumulation=DISCARDING: every pane holds new data"
            )
        for name in ("early_firing_count", "late_firing_count"):
            count = getattr(self, name)
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
                raise ValueError(f"{name}={count!r} must be a number of events >= 1 (or None)")
        if self.early_firing and self.early_firing_count is not None:
            raise ValueError(
                f"early_firing=True fires every run with new data, early_firing_count={self.early_firing_count} "
                "once that many events are pending: pass one of them"
            )
        if not self.late_firing and self.late_firing_count is not None:
            raise ValueError(
                f"late_firing=False fires late data only when the window is purged, late_firing_count="
                f"{self.late_firing_count} once that many events are pending: pass one of them"
            )

    def _check_rollup(self, upstream: UpstreamPanes) -> None:
        """A rollup keeps the upstream's windows (``None``) or tumbles over a whole number of them."""
        if not isinstance(upstream, UpstreamPanes):
            raise ValueError(f"upstream={upstream!r} must be UpstreamPanes(pipeline, window, accumulation)")
        fine, coarse = upstream.window, self.window
        if coarse is not None:
            if not isinstance(coarse, Tumbling) or not isinstance(fine, Tumbling):
                raise ValueError(
                    f"window={coarse!r} over upstream window {fine!r}: a coarser window must be tumbling over tumbling "
                    "panes (or window=None to keep the upstream's windows)"
                )
            if coarse.size_ms % fine.size_ms or (coarse.offset_ms - fine.offset_ms) % fine.size_ms:
                raise ValueError(
                    f"window={coarse!r} must be a multiple of the upstream window {fine!r} (size and offset), so that "
                    "every upstream window lies in one coarse window"
                )
        if self.accumulation is Accumulation.DISCARDING:
            raise ValueError(
                "accumulation=DISCARDING: a rollup recomputes its windows from the upstream's live panes; use "
                "ACCUMULATING or ACCUMULATING_AND_RETRACTING"
            )
        if not isinstance(self.watermark, StoreWatermark):
            raise ValueError(
                f"watermark={self.watermark!r}: a rollup's watermark is its upstream's output stream "
                "({'stream': <upstream output stream>})"
            )

    @property
    def output_window(self) -> WindowFn:
        """The windows the panes carry: the rollup's own, else its upstream's."""
        if self.window is not None:
            return self.window
        assert self.upstream is not None  # validated
        return self.upstream.window

    def target_window(self, upstream_window: Window) -> Window:
        """A rollup: the window an upstream pane lands in (its own, or the coarse one containing it).

        >>> spec = AggregationSpec(Tumbling(3_600_000), (Aggregate("n", "sum", "n"),), (), StoreWatermark("up"),
        ...                        upstream=UpstreamPanes("up", Tumbling(300_000)))
        >>> spec.target_window(Window(3_900_000, 4_200_000))
        Window(start=3600000, end=7200000)
        """
        return upstream_window if self.window is None else self.window.assign(upstream_window.start)[0]

    @property
    def retracting(self) -> bool:
        return self.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING

    def to_json(self) -> dict[str, Any]:
        """What the operator hands the Spark job (:meth:`from_json` reads it back, validating again)."""
        policy: dict[str, Any]
        if isinstance(self.watermark, BoundedOutOfOrderness):
            policy = {"max_delay_ms": self.watermark.max_delay_ms}
        elif isinstance(self.watermark, MergedWatermark):
            policy = {
                "inputs": {name: {"stream": w.stream, "wm_key": w.wm_key} for name, w in self.watermark.inputs},
                "idle_timeout_ms": self.watermark.idle_timeout_ms,
                "when_all_idle": self.watermark.when_all_idle,
            }
        else:
            policy = {"stream": self.watermark.stream, "wm_key": self.watermark.wm_key}
        return {
            "window": None if self.window is None else self.window.to_json(),
            "aggregates": [asdict(a) for a in self.aggregates],
            "keys": list(self.keys),
            "watermark": policy,
            "allowed_lateness_ms": self.allowed_lateness_ms,
            "accumulation": self.accumulation.value,
            "early_firing": self.early_firing,
            "late_firing": self.late_firing,
            "fire_only_updated_panes": self.fire_only_updated_panes,
            "early_firing_count": self.early_firing_count,
            "late_firing_count": self.late_firing_count,
            **({"upstream": self.upstream.to_json()} if self.upstream else {}),
            # only when not the default, so the JSON of every existing pipeline's spec stays the same
            **({"late_data": self.late_data.value} if self.late_data is not LateData.EVENT_TIME else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AggregationSpec:
        """
        >>> spec = AggregationSpec(Session(5), (Aggregate("n", "count"),), ("k",), BoundedOutOfOrderness(3))
        >>> AggregationSpec.from_json(spec.to_json()) == spec
        True
        """
        policy = data["watermark"]
        watermark: WatermarkPolicy
        if "max_delay_ms" in policy:
            watermark = BoundedOutOfOrderness(policy["max_delay_ms"])
        elif "inputs" in policy:
            inputs = tuple((name, StoreWatermark(w["stream"], w.get("wm_key"))) for name, w in policy["inputs"].items())
            watermark = MergedWatermark(inputs, policy.get("idle_timeout_ms"), policy.get("when_all_idle", "wait"))
        else:
            watermark = StoreWatermark(policy["stream"], policy.get("wm_key"))
        return cls(
            window=None if data["window"] is None else window_from_json(data["window"]),
            aggregates=tuple(SqlAggregate(**a) if "partial" in a else Aggregate(**a) for a in data["aggregates"]),
            keys=tuple(data["keys"]),
            watermark=watermark,
            allowed_lateness_ms=data["allowed_lateness_ms"],
            accumulation=Accumulation(data["accumulation"]),
            early_firing=data["early_firing"],
            late_firing=data["late_firing"],
            fire_only_updated_panes=data["fire_only_updated_panes"],
            early_firing_count=data.get("early_firing_count"),
            late_firing_count=data.get("late_firing_count"),
            upstream=UpstreamPanes.from_json(data["upstream"]) if data.get("upstream") else None,
            late_data=LateData(data.get("late_data", LateData.EVENT_TIME.value)),
        )

    def builtin_aggregates(self) -> tuple[Aggregate, ...]:
        if any(isinstance(a, SqlAggregate) for a in self.aggregates):
            raise NotImplementedError("SQL aggregates are evaluated by Spark only")
        return tuple(a for a in self.aggregates if isinstance(a, Aggregate))


@dataclass(frozen=True)
class Event:
    time_ms: int | None
    key: tuple[Any, ...]
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpstreamPane:
    """A pane row of an upstream aggregate as a rollup reads it; ``run`` is the upstream's version
    (``wm_run``) that wrote it, ``window`` ``None`` when the row has no valid window."""

    key: tuple[Any, ...]
    window: Window | None
    values: Mapping[str, Any]
    index: int
    retraction: bool = False
    run: int = 0

    def rank(self) -> tuple[int, int, bool]:
        """The live pane of a window is the row of highest rank."""
        return (self.run, self.index, not self.retraction)


@dataclass(frozen=True)
class FiredPane:
    """A pane as fired: what a retraction repeats."""

    window: Window
    timing: Timing
    index: int
    values: tuple[Any, ...]


@dataclass(frozen=True)
class WindowState:
    key: tuple[Any, ...]
    window: Window
    partial: tuple[Any, ...]
    pending: int = 0
    """Events added since the window's last firing."""
    on_time_fired: bool = False
    last_pane: FiredPane | None = None
    owed: tuple[FiredPane, ...] = ()


@dataclass(frozen=True)
class AggregationState:
    watermark_ms: int | None = None
    max_event_time_ms: int | None = None
    windows: tuple[WindowState, ...] = ()
    live: tuple[UpstreamPane, ...] = ()
    """A rollup's live upstream panes, of its open windows."""


@dataclass(frozen=True)
class Pane:
    key: tuple[Any, ...]
    window: Window
    values: tuple[Any, ...]
    timing: Timing
    index: int
    retraction: bool
    watermark_ms: int | None


@dataclass(frozen=True)
class RunResult:
    panes: list[Pane]
    late: list[tuple[Event | UpstreamPane, str]]
    state: AggregationState
    watermark_ms: int | None

    def pane_counts(self) -> dict[str, int]:
        counts = {t.value: 0 for t in Timing} | {"RETRACTION": 0}
        for pane in self.panes:
            counts["RETRACTION" if pane.retraction else pane.timing.value] += 1
        return counts


def next_watermark(
    policy: WatermarkPolicy, previous_ms: int | None, max_event_time_ms: int | None, source_ms: int | None
) -> int | None:
    """Rule 3: the run's watermark, never below the previous one.

    >>> next_watermark(BoundedOutOfOrderness(60_000), 100_000, 150_000, None)
    100000
    >>> next_watermark(StoreWatermark("orders"), None, None, 5)
    5
    """
    if isinstance(policy, BoundedOutOfOrderness):
        candidate = None if max_event_time_ms is None else max_event_time_ms - policy.max_delay_ms
    else:
        candidate = source_ms
    values = [v for v in (previous_ms, candidate) if v is not None]
    return max(values) if values else None


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
        reason = too_late_reason(spec.late_data, t, spec.output_window.assign(t), horizon)
        if reason is not None:
            late.append((event, reason.value))
        else:
            accepted.append(event)
    watermark = next_watermark(spec.watermark, state.watermark_ms, max_seen, source_watermark_ms)

    windows = _assign(spec, aggregates, state.windows, accepted, horizon)
    panes, kept = _fire_all(spec, aggregates, windows, watermark)
    return RunResult(panes, late, AggregationState(watermark, max_seen, tuple(kept)), watermark)


def run_on_panes(
    spec: AggregationSpec,
    state: AggregationState,
    panes: Iterable[UpstreamPane],
    source_watermark_ms: int | None,
) -> RunResult:
    """One run of a rollup over the upstream pane rows that arrived (window propagation, module docstring).

    Worked example: hourly sums of 5-minute panes from a retracting upstream. The EARLY pane of
    ``[0, 5m)`` is retracted and replaced by its ON_TIME pane; the hour counts only the live one.

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
        partial = _partial_of(aggregates, members.get((key, target), []))
        old = windows.get((key, target))
        windows[(key, target)] = (
            WindowState(key, target, partial, pending=rows)
            if old is None
            else replace(old, partial=partial, pending=old.pending + rows)
        )
    fired, kept = _fire_all(spec, aggregates, list(windows.values()), watermark)
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


def _fire_all(
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


def _partial_of(aggregates: Sequence[Aggregate], events: Iterable[Event]) -> tuple[Any, ...]:
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
            partial = _partial_of(aggregates, window_events)
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
            partial = _partial_of(aggregates, event_members)
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
