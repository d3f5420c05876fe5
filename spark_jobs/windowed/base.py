"""What every step of a windowed-aggregate run shares: the request's spec and cut-offs (:class:`JobBase`),
the partial-aggregate columns of the spec's aggregates, and the job's column names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StructType

from airflow_provider_wm.contracts import WindowedRequest
from airflow_provider_wm.core.windowing import (
    Aggregate,
    AggregationSpec,
    SqlAggregate,
)
from spark_jobs.common import observe, observed_below, read_schema_document, with_constants
from spark_jobs.sql_text import any_of, ident, number, string

RUN_PARTITION = "wm_run"
_SESSION_PARKING_MS = -(2**45)
"""Where too-late and invalid events sit in the session scan: about 1,100 years before any valid time."""
INVALID_ARRIVAL_FLAG = "wm_invalid_arrival"
"""Per row read: whether its arrival is null, unparseable or out of range (rule 0: read by every run)."""
INVALID_VALUE_FLAG = "wm_invalid_value"
"""Per row read: whether a floating column an aggregate reads holds NaN or +/-infinity (:func:`unusable_value`)."""
STATE_FLAGS = ("pending", "on_time_fired", "last_pane", "owed")
"""Per window, after its keys, bounds and partials: events since its last firing, whether it fired ON_TIME, its
last pane and the panes it owes retractions for (rule 4)."""
RUN_COUNTERS = ("wm_rows", "wm_too_late", "wm_invalid", "wm_invalid_value", "wm_invalid_arrival", "wm_max_t")
"""Per group of :meth:`Events.new_partials`: rows read, too-late and invalid rows, the highest time; summed (the
highest time: its maximum) over a run's partials, they are the run's totals."""
RUN_ROWS = ("wm_events", *RUN_COUNTERS)
"""What :meth:`Events.new_partials` adds after a window's partials: its pending count, then :data:`RUN_COUNTERS`."""
JOB_COLUMNS = ("wm_t", INVALID_ARRIVAL_FLAG, INVALID_VALUE_FLAG)
"""What :meth:`Job.read_events` adds to the events' own columns (not written to the late output)."""
OUT_OF_RANGE = "wm_out_of_range"
"""Per pane row fetched to the driver: whether it fires a sum past a long (counted, not written)."""
EXACT_SUMS = "exact_sums"
"""In the state's schema document: the aggregates whose partial is :func:`exact_sum` (``DECIMAL(38,0)``)."""
LIVE_META = ("pane_index", "retraction", "upstream_run")
"""Per live upstream pane of a rollup, after its keys and window: what ranks it against newer rows."""


HORIZON = "wm_cut_horizon"
"""The cut-off column of ``W_prev - L``, the horizon of rule 2 for the rows a run reads (:func:`with_cut_offs`)."""
WATERMARK = "wm_cut_watermark"
"""The cut-off column of the run's watermark ``W`` (:func:`with_cut_offs`)."""
NEXT_HORIZON = "wm_cut_next_horizon"
"""The cut-off column of the run's own horizon ``W - L``: which windows stay open after it (:func:`with_cut_offs`)."""


def with_cut_offs(frame: DataFrame, cut_offs: dict[str, int]) -> DataFrame:
    """``frame`` with a long column per cut-off (:data:`HORIZON`, :data:`WATERMARK`, :data:`NEXT_HORIZON`), the
    same on every row (:func:`~spark_jobs.common.with_constants`): they move with every scheduled run, and as
    literals they made every run compile its stages again (a rollup run compiled eight). The arrival range stays a
    literal: Parquet skips row groups by it, and a native read of the same range compiles it too.

    Example: ``with_cut_offs(windows, {WATERMARK: 60_000})`` adds ``wm_cut_watermark`` (60000 on every row), and
    ``f"{WATERMARK} >= window_end"`` is the rule of a complete window."""
    return with_constants(frame, {name: f"CAST({number(value)} AS BIGINT)" for name, value in cut_offs.items()})


def is_open(window_end: str, horizon: str | None) -> str:
    """``core.windowing.is_open``: a window still takes data while it ends after the horizon ``W - L`` (SQL text;
    ``window_end`` and ``horizon`` expressions, ``horizon`` usually a cut-off column of :func:`with_cut_offs`;
    ``None``: no watermark yet, every window is open)."""
    return "true" if horizon is None else f"{window_end} > {horizon}"


def unusable_value(columns: Sequence[str]) -> str:
    """``not core.windowing.values_are_usable`` over ``columns``, the floating (float or double) columns that
    aggregates read (a decimal or an integer cannot be NaN or infinite): one of them is NaN or +/-infinity. A
    null is usable (false, not null)."""
    return any_of([f"isnan({ident(c)}) OR abs({ident(c)}) <=> CAST('Infinity' AS DOUBLE)" for c in columns])


_INTEGRAL_TYPE_NAMES = frozenset({"byte", "short", "integer", "long"})
"""Spark's JSON names of the integral types: a stored sum of one of them (a state written before sums were exact)
merges with an exact sum exactly."""


def _sum_partial(spec: AggregationSpec, name: str) -> str:
    """The partial column that holds the sum of the built-in ``sum`` or ``avg`` named ``name``."""
    function = next(a.function for a in spec.aggregates if isinstance(a, Aggregate) and a.name == name)
    return f"p_{name}" if function == "sum" else f"p_{name}_sum"


def exact_sum(column: str) -> str:
    """The exact sum of an integral column (SQL text over the quoted ``column``), a ``DECIMAL(38,0)``, as core sums
    Python integers. Each value is split as ``v = hi * 2**32 + lo`` (``hi = v >> 32``, ``0 <= lo < 2**32``) and
    the two halves are summed as longs, which cannot overflow below 2**31 rows per group: a ``sum`` of longs is
    as fast, and a ``sum`` of decimals, half as slow again. Example: 2**62 and 2**62 sum to 2**63 (hi 2**30 + 2**30,
    lo 0), which a long ``sum`` fails on (``ARITHMETIC_OVERFLOW``)."""
    value = f"CAST({column} AS BIGINT)"
    return f"CAST(sum(shiftright({value}, 32)) AS DECIMAL(38,0)) * 4294967296 + sum({value} & 4294967295)"


def carried(column: str) -> str:
    """The aggregate that carries a :data:`RUN_COUNTERS` column through a group-by (state rows have none)."""
    return f"{'max' if column == 'wm_max_t' else 'sum'}({column}) AS {column}"


def run_totals() -> list[Column]:
    """The run's totals from its partials (:data:`RUN_COUNTERS`), for :func:`checkpoint_with_totals`, and the
    number of ``windows`` (the rows that have one)."""
    return [
        F.expr(total)
        for total in (
            "sum(wm_rows) AS events",
            "sum(wm_too_late) AS too_late",
            "sum(wm_invalid) AS invalid",
            "sum(wm_invalid_value) AS invalid_value",
            "sum(wm_invalid_arrival) AS invalid_arrival",
            "max(wm_max_t) AS max_t",
            "count(window_start) AS windows",
        )
    ]


def checkpoint_with_totals(frame: DataFrame, *totals: Column) -> tuple[DataFrame, Row]:
    """``frame`` materialised once (``localCheckpoint``) and its totals, observed (``observe``) while the checkpoint
    is written: no Spark job of their own.

    Over Spark Connect the server reports the metrics in the checkpoint command's execution info
    (:func:`~spark_jobs.common.observe`). Should it report none, the totals are aggregated from the checkpoint in
    one Spark job, which reads its blocks, not the input again: coalesced into one task first, the partial and final
    aggregation run without a shuffle (the checkpoint holds the small frame after the run's group-by, not the
    input).
    """
    observed, totals_observed = observe(frame, "totals", *totals)
    checkpoint = observed.localCheckpoint()
    metrics = observed_below(observed, totals_observed)
    if metrics is not None:
        return checkpoint, Row(**metrics)
    row = checkpoint.coalesce(1).agg(*totals).first()  # small: one row of totals
    assert row is not None  # an aggregation without grouping has one row
    return checkpoint, row


class JobBase:
    """A run over a request: the spec, the keys and the cut-offs; the partial aggregates of the spec."""

    def __init__(self, spark: SparkSession, request: WindowedRequest) -> None:
        self.spark = spark
        self.request = request
        self.spec = AggregationSpec.from_json(request.spec)
        self.keys = list(self.spec.keys)
        self.run_id = request.run_id
        self.version = request.version
        self.previous_watermark: int | None = request.previous_watermark_ms
        self.previous_max_event: int | None = request.previous_max_event_time_ms
        self.source_watermark: int | None = request.source_watermark_ms
        self._exact_of_input: frozenset[str] | None = None

    @cached_property
    def _state_document(self) -> dict[str, Any] | None:
        """What :func:`~spark_jobs.common.write_schema_document` wrote beside ``state_in`` (``None``: no
        state, or one written before it)."""
        state_in = self.request.state_in
        return read_schema_document(state_in) if state_in else None

    def note_input_types(self, schema: StructType, column_of: Callable[[str], str] = str) -> None:
        """Note which built-in sums and means read an integral column of an input (``column_of``: the name an
        aggregate gives a column of ``schema``): their partials are :func:`exact_sum`."""
        integral = {column_of(f.name).lower() for f in schema.fields if isinstance(f.dataType, IntegralType)}
        exact = {
            a.name
            for a in self.spec.aggregates
            if isinstance(a, Aggregate) and a.function in ("sum", "avg") and str(a.column).lower() in integral
        }
        self._exact_of_input = (self._exact_of_input or frozenset()) | exact

    def exact_sums(self) -> frozenset[str]:
        """The aggregates whose partial is an exact sum of integers: those the state it reads says are
        (:data:`EXACT_SUMS`) when the run reads no input; else those the input's types say are (an integral
        column), unless the state holds the sum as neither an exact sum nor an integer (a double: the column was
        a double in an earlier run, and the merged sum is a double, as core's int plus float)."""
        document = self._state_document
        stored_exact = frozenset(document.get(EXACT_SUMS, ())) if document else frozenset()
        if self._exact_of_input is None:
            return stored_exact
        if not document:
            return self._exact_of_input
        stored = {field["name"]: field["type"] for field in document.get("fields", ())}
        return frozenset(
            name
            for name in self._exact_of_input
            if name in stored_exact or stored.get(_sum_partial(self.spec, name)) in _INTEGRAL_TYPE_NAMES
        )

    def partial_columns(self) -> list[str]:
        names: list[str] = []
        for agg in self.spec.aggregates:
            if isinstance(agg, Aggregate) and agg.function == "avg":
                names += [f"p_{agg.name}_sum", f"p_{agg.name}_count"]
            else:
                names.append(f"p_{agg.name}")
        return names

    def partial_exprs(self, counted: str | None = None) -> list[str]:
        """Aggregates over accepted events (SQL text): one partial column (two for avg) per aggregate.
        ``count(*)`` counts the rows where ``counted`` holds (default: all)."""
        exprs: list[str] = []
        exact = self.exact_sums()
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                exprs.append(f"{agg.partial} AS {ident(name)}")
            elif agg.function == "count":
                row = "1" if counted is None else f"CASE WHEN {counted} THEN 1 END"
                exprs.append(f"count({ident(agg.column) if agg.column else row}) AS {ident(name)}")
            elif agg.function in ("sum", "avg") and agg.name in exact:
                column = ident(str(agg.column))
                total = name if agg.function == "sum" else f"{name}_sum"
                exprs.append(f"{exact_sum(column)} AS {ident(total)}")
                if agg.function == "avg":
                    exprs.append(f"count({column}) AS {ident(name + '_count')}")
            elif agg.function == "avg":
                column = ident(str(agg.column))
                exprs += [f"sum({column}) AS {ident(name + '_sum')}", f"count({column}) AS {ident(name + '_count')}"]
            else:
                exprs.append(f"{agg.function}({ident(str(agg.column))}) AS {ident(name)}")
        return exprs

    def merge_exprs(self) -> list[str]:
        """Aggregates over partials (stored and new) into one partial per window (SQL text)."""
        exprs: list[str] = []
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                exprs.append(f"{agg.merge.format(partial=ident(name))} AS {ident(name)}")
            elif agg.function == "avg":
                exprs += [f"sum({ident(n)}) AS {ident(n)}" for n in (f"{name}_sum", f"{name}_count")]
            else:
                function = "sum" if agg.function in ("count", "sum") else agg.function
                exprs.append(f"{function}({ident(name)}) AS {ident(name)}")
        return exprs

    def counting_partials(self) -> set[str]:
        """The partial columns that count (an empty window's is 0, any other's null)."""
        counting = {f"p_{a.name}" for a in self.spec.aggregates if isinstance(a, Aggregate) and a.function == "count"}
        return counting | {c for c in self.partial_columns() if c.endswith("_count")}

    def final_values(self) -> str:
        """The pane's values, as a struct named after the aggregates (SQL text): ``core.windowing.Aggregate.finish``
        (an exact sum is a long, null past one; a mean the sum as a double over the count)."""
        fields: list[str] = []
        exact = self.exact_sums()
        for agg in self.spec.aggregates:
            name = ident(f"p_{agg.name}")
            if isinstance(agg, SqlAggregate):
                value = agg.final.format(partial=name)
            elif agg.function == "avg":
                total, count = ident(f"p_{agg.name}_sum"), ident(f"p_{agg.name}_count")
                value = f"CASE WHEN {count} > 0 THEN CAST({total} AS DOUBLE) / {count} END"
            elif agg.name in exact:
                value = f"try_cast({name} AS BIGINT)"
            else:
                value = name
            fields.append(f"{string(agg.name)}, {value}")
        return f"named_struct({', '.join(fields)})"

    def out_of_range(self) -> str:
        """Whether a window's exact sum is past a long, so its pane's value is null (SQL text; ``false`` when the
        spec sums no integers)."""
        exact = self.exact_sums()
        sums = [
            ident(f"p_{a.name}")
            for a in self.spec.aggregates
            if isinstance(a, Aggregate) and a.function == "sum" and a.name in exact
        ]
        return any_of([f"{c} IS NOT NULL AND try_cast({c} AS BIGINT) IS NULL" for c in sums])
