"""Spark job: one run of a windowed aggregate (Apex), DataFrame-native.

The rules are those of :mod:`airflow_provider_wm.core.windowing` (the reference); a differential test feeds
random runs to both and requires identical panes.

A run reads a request (JSON, written by the operator) and:

1. reads the events that arrived since the previous run: ``arrival_from < arrival <= arrival_until`` on the
   arrival column (a filter on a partition column prunes partitions), and the rows whose arrival is null,
   unparseable or not a valid time (rule 0 of :mod:`~airflow_provider_wm.core.windowing`,
   :func:`~airflow_provider_wm.core.windowing.read_by_run`); a missing events path or a folder with no data
   file yet is a run with no events; a merge of several ``inputs`` reads each one so and unions them, each
   input's columns prefixed with its name (:func:`merge_inputs`);
2. classifies each row: ``INVALID_ARRIVAL`` (see below), ``INVALID_EVENT_TIME`` (a null, unparseable or
   out-of-range time, :func:`~spark_jobs.common.invalid_time`), ``TOO_LATE`` (``t < W_prev - L``), or
   accepted; and, in the same aggregation, computes the partial aggregates per ``(keys, window)`` of the
   accepted events (tumbling and sliding windows by arithmetic, ``explode`` for the slides, Spark's
   ``session_window`` for sessions, one window for global). No window arithmetic is evaluated on a row
   that is not accepted, so a time such as ``2**63 - 1`` cannot overflow;
3. writes the late and invalid rows (original columns + ``reason``) only when there are any;
4. merges the partials with the stored open windows (a union and a group-by; sessions first merge
   overlapping intervals per key with window functions), decides each window's firing row by row, and
   writes the panes (with retraction rows) and the next state (open windows, a versioned snapshot);
5. writes ``manifest.json`` atomically last: panes by timing, events read, too-late and invalid counts,
   the new watermark and the highest event time seen.

Panes and late events are written under ``wm_run=<version>`` with dynamic partition overwrite, so a retried
or re-run task replaces its own rows. The state is written to a new folder per version.

**Rows without a usable arrival.** A row whose arrival column is null, unparseable or outside the valid time
range can never fall in a run's ``(arrival_from, arrival_until]``: a filter on the range alone would drop it
silently, forever. So every run also reads those rows (``OR arrival IS NULL`` and the out-of-range bounds are
part of the filter pushed down to Parquet, whose row-group statistics skip the groups without any: about no
cost while there are none), quarantines them with reason ``INVALID_ARRIVAL`` in its own ``wm_run`` partition of
the late output and counts them (``totals.invalid_arrival``, not part of ``events_read``); the operator logs a
warning naming the column. They are not aggregated and do not move the highest event time. Such a row stays in
the source, so it is reported again by every run until it is fixed or removed there: the count is "rows in the
source that no run can read", a standing alarm, not this run's share. Reading each such row exactly once would
need a record of what was reported (a row has no identity but its file and position, and a rewritten file
changes both), or the file's modification time as its arrival, which loses rows of a file that becomes visible
after a run covering its time; a repeated report is preferred to a silent loss.

A rollup (``spec.upstream``, window propagation) reads the upstream's pane rows of the upstream versions
``arrival_from < wm_run <= arrival_until`` instead of events (:meth:`Job.rollup_partials`): it keeps the
live pane of each upstream window in a second snapshot (``live_out``), recomputes the partials of the windows
that got rows from their live panes, and the windows replace their stored partials; steps 4 and 5 follow.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StructType, TimestampType

from airflow_provider_wm.contracts import WindowedInput, WindowedManifest, WindowedRequest
from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    OUTPUT_COLUMNS,
    ROW_COLUMN,
    TOO_LATE_REASONS,
    Accumulation,
    Aggregate,
    AggregationSpec,
    LateData,
    LateReason,
    SqlAggregate,
    Timing,
    input_column,
    next_watermark,
)
from airflow_provider_wm.core.windows import GLOBAL_END, GLOBAL_START, Global, Session, Sliding, Tumbling
from spark_jobs.common import active_session, invalid_time, path_exists, read_dataset, submit_main, time_ms

RUN_PARTITION = "wm_run"
_SESSION_PARKING_MS = -(2**45)
"""Where too-late and invalid events sit in the session scan: about 1,100 years before any valid time."""
INVALID_ARRIVAL_FLAG = "wm_invalid_arrival"
"""Per row read: whether its arrival is null, unparseable or out of range (rule 0: read by every run)."""
STATE_FLAGS = ("pending", "on_time_fired", "last_pane", "owed")
"""Per window, after its keys, bounds and partials: events since its last firing, whether it fired ON_TIME, its
last pane and the panes it owes retractions for (rule 4)."""
JOB_COLUMNS = ("wm_t", INVALID_ARRIVAL_FLAG)
"""What :meth:`Job.read_events` adds to the events' own columns (not written to the late output)."""
LIVE_META = ("pane_index", "retraction", "upstream_run")
"""Per live upstream pane of a rollup, after its keys and window: what ranks it against newer rows."""


def is_open(window_end: Column, horizon: int | None) -> Column:
    """``core.windowing.is_open``: a window still takes data while it ends after the horizon ``W - L``."""
    return F.lit(True) if horizon is None else window_end > F.lit(horizon)


class Job:
    """One run over a request (see :func:`main`); the methods follow the module docstring's steps."""

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

    # ------------------------------------------------------------------------------------------ partials

    def partial_columns(self) -> list[str]:
        names: list[str] = []
        for agg in self.spec.aggregates:
            if isinstance(agg, Aggregate) and agg.function == "avg":
                names += [f"p_{agg.name}_sum", f"p_{agg.name}_count"]
            else:
                names.append(f"p_{agg.name}")
        return names

    def partial_exprs(self, counted: Column | None = None) -> list[Column]:
        """Aggregates over accepted events: one partial column (two for avg) per aggregate. ``count(*)``
        counts the rows where ``counted`` holds (default: all)."""
        exprs: list[Column] = []
        for agg in self.spec.aggregates:
            if isinstance(agg, SqlAggregate):
                exprs.append(F.expr(agg.partial).alias(f"p_{agg.name}"))
            elif agg.function == "count":
                row = F.lit(1) if counted is None else F.when(counted, 1)
                exprs.append(F.count(F.col(agg.column) if agg.column else row).alias(f"p_{agg.name}"))
            elif agg.function == "avg":
                exprs += [
                    F.sum(str(agg.column)).alias(f"p_{agg.name}_sum"),
                    F.count(str(agg.column)).alias(f"p_{agg.name}_count"),
                ]
            else:
                function = {"sum": F.sum, "min": F.min, "max": F.max}[agg.function]
                exprs.append(function(str(agg.column)).alias(f"p_{agg.name}"))
        return exprs

    def merge_exprs(self) -> list[Column]:
        """Aggregates over partials (stored and new) into one partial per window."""
        exprs: list[Column] = []
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                exprs.append(F.expr(agg.merge.format(partial=f"`{name}`")).alias(name))
            elif agg.function == "avg":
                exprs += [F.sum(f"{name}_sum").alias(f"{name}_sum"), F.sum(f"{name}_count").alias(f"{name}_count")]
            else:
                function = {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max}[agg.function]
                exprs.append(function(name).alias(name))
        return exprs

    def empty_partials(self, like: DataFrame) -> list[Column]:
        """DISCARDING resets a fired window to these: count 0, everything else null."""
        columns: list[Column] = []
        for name in self.partial_columns():
            counting = name.endswith("_count") or any(
                isinstance(a, Aggregate) and a.function == "count" and name == f"p_{a.name}"
                for a in self.spec.aggregates
            )
            value = F.lit(0) if counting else F.lit(None)
            columns.append(value.cast(like.schema[name].dataType).alias(name))
        return columns

    def final_values(self) -> Column:
        """The pane's values, as a struct named after the aggregates."""
        fields: list[Column] = []
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                value = F.expr(agg.final.format(partial=f"`{name}`"))
            elif agg.function == "avg":
                count = F.col(f"{name}_count")
                value = F.when(count > 0, F.col(f"{name}_sum").cast("double") / count)
            else:
                value = F.col(name)
            fields.append(value.alias(agg.name))
        return F.struct(*fields)

    # --------------------------------------------------------------------------------------------- read

    def read_events(self, source: WindowedInput | None = None) -> DataFrame | None:
        """The run's events of the request's input (or of one of its ``inputs``), with ``wm_t``, their time in
        epoch ms, and ``INVALID_ARRIVAL_FLAG`` (rule 0: the rows whose arrival no run's range can hold are read
        too, see the module docstring); ``None`` when there is no data (no path, or a folder with no data file).
        """
        request = self.request
        if source is None:
            if request.events is None or request.event_time is None:
                raise ValueError("the request names no events and no event_time")
            source = WindowedInput(
                "", request.events, request.event_time, request.arrival_column, request.events_format
            )
        events = read_dataset(self.spark, source.events, source.events_format)
        if events is None:
            return None
        schema = events.schema  # one round trip for the checks below
        arrival_column = source.arrival_column
        invalid_arrival: Column = F.lit(False)
        if arrival_column:
            if arrival_column not in schema.names:
                raise ValueError(f"arrival_column={arrival_column!r} is not a column of {source.events}")
            raw_type = schema[arrival_column].dataType
            until, since = request.arrival_until_ms, request.arrival_from_ms
            arrival = time_ms(F.col(arrival_column), raw_type, arrival_column)
            invalid_arrival = invalid_time(arrival)
            in_range = arrival <= F.lit(until)
            if since is not None:
                in_range = in_range & (arrival > F.lit(int(since)))
            pushed = _pushable(F.col(arrival_column), raw_type, since, until)
            events = events.where(pushed).where(in_range | invalid_arrival)
        name = source.event_time
        missing = [c for c in [name, *self.keys] if c not in schema.names]
        if missing:
            raise ValueError(f"events {source.events} lack the columns {missing}; they have {schema.names}")
        return events.withColumn("wm_t", time_ms(F.col(name), schema[name].dataType, name)).withColumn(
            INVALID_ARRIVAL_FLAG, invalid_arrival
        )

    def read_merged_events(self) -> DataFrame | None:
        """The events of every input (:func:`merge_inputs`): keys as they are, every other column prefixed with
        the input's name, plus the input's row marker; ``None`` when no input has any."""
        frames = []
        for source in self.request.inputs or []:
            events = self.read_events(source)
            if events is None:
                continue
            name = source.name
            frames.append(
                events.select(
                    *self.keys,
                    *[
                        F.col(c).alias(input_column(name, c))
                        for c in events.columns
                        if c not in (*self.keys, *JOB_COLUMNS)
                    ],
                    F.lit(1).alias(input_column(name, ROW_COLUMN)),
                    *JOB_COLUMNS,
                )
            )
        if not frames:
            return None
        merged = frames[0]
        for frame in frames[1:]:
            merged = merged.unionByName(frame, allowMissingColumns=True)
        return merged

    def classified(self, events: DataFrame) -> DataFrame:
        """The rows with ``wm_reason`` (null: accepted): ``INVALID_ARRIVAL`` (rule 0), then from their time
        ``wm_t`` ``INVALID_EVENT_TIME`` (``not is_valid_time_ms``: rule 1) or ``TOO_LATE`` (rule 2). The first
        matching condition wins, so later steps only see valid times of accepted events."""
        t = F.col("wm_t")
        reason = F.when(F.col(INVALID_ARRIVAL_FLAG), LateReason.INVALID_ARRIVAL.value).when(
            invalid_time(t), LateReason.INVALID_EVENT_TIME.value
        )
        if self.horizon is not None:
            late_reason = (
                LateReason.TOO_LATE if self.spec.late_data is LateData.EVENT_TIME else LateReason.WINDOW_CLOSED
            )
            reason = reason.when(self.too_late(t, self.horizon), late_reason.value)
        return events.withColumn("wm_reason", reason)

    @property
    def horizon(self) -> int | None:
        """``W_prev - L``: the horizon of rule 2 (``None`` before the first watermark)."""
        if self.previous_watermark is None:
            return None
        return self.previous_watermark - self.spec.allowed_lateness_ms

    def too_late(self, t: Column, horizon: int) -> Column:
        """``core.windowing.too_late_reason`` for a valid time ``t``. ``EVENT_TIME``: ``t < H``. ``WINDOW_END``:
        the event's last window (the one that ends latest) has closed, ``end <= H``, so all of them have."""
        window = self.spec.output_window
        if self.spec.late_data is LateData.EVENT_TIME:
            return t < F.lit(horizon)
        if isinstance(window, Tumbling):
            last_end = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.size_ms)) + F.lit(window.size_ms)
        elif isinstance(window, Sliding):
            last_end = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.slide_ms)) + F.lit(window.size_ms)
        else:  # the global window never closes; the spec refuses sessions under WINDOW_END
            return F.lit(False)
        return ~is_open(last_end, horizon)

    def new_partials(self, classified: DataFrame) -> DataFrame:
        """Per ``(keys, window_start, window_end)``: partials, events (``wm_events``: the window's pending count),
        rows read (``wm_rows``: a sliding event counts in its first window only), too-late and invalid rows, and
        the highest time.

        Too-late and invalid rows are grouped apart from the accepted ones (their window is null, or for
        sessions far before any valid time) so the same scan counts them; their groups have a null window.
        Window arithmetic sits under ``when(accepted, ...)``: it is never evaluated on an invalid time.
        """
        window = self.spec.output_window
        t, reason = F.col("wm_t"), F.col("wm_reason")
        accepted = reason.isNull()
        groups: list[Column | str] = list(self.keys)
        frame = classified
        first_copy: Column = F.lit(True)  # each row read counts once in the totals, a sliding one in its first window
        if isinstance(window, Session):
            # session_window drops rows without a time: the others get one far before any valid time
            ts = F.timestamp_millis(F.when(accepted, t).otherwise(F.lit(_SESSION_PARKING_MS)))
            groups.append(F.session_window(ts, f"{window.gap_ms} milliseconds").alias("wm_session"))
            starts = F.unix_millis(F.col("wm_session.start"))
            ends = F.unix_millis(F.col("wm_session.end"))
        else:
            if isinstance(window, Tumbling):
                start = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.size_ms))
                size = window.size_ms
            elif isinstance(window, Sliding):
                last = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.slide_ms))
                slides = F.when(accepted, F.sequence(F.lit(0), F.lit(window.windows_per_event - 1)))
                frame = frame.withColumn("wm_k", F.explode_outer(slides))
                first_copy = F.col("wm_k").isNull() | (F.col("wm_k") == 0)
                start = last - F.col("wm_k") * F.lit(window.slide_ms)
                size = window.size_ms
            elif isinstance(window, Global):
                start, size = F.lit(GLOBAL_START), 0
            else:  # pragma: no cover - the spec validates the kinds
                raise ValueError(f"unknown window {window!r}")
            frame = frame.withColumn("wm_start", F.when(accepted, start))
            if isinstance(window, Sliding) and self.spec.late_data is LateData.WINDOW_END and self.horizon is not None:
                # core.windowing.is_open: an accepted event counts only in its windows that have not closed
                # (its last window, wm_k = 0, always is)
                frame = frame.where(F.col("wm_start").isNull() | is_open(F.col("wm_start") + F.lit(size), self.horizon))
            groups.append("wm_start")
            starts = F.col("wm_start")
            ends = F.lit(GLOBAL_END) if isinstance(window, Global) else F.col("wm_start") + F.lit(size)
        aggregated = frame.groupBy(*groups).agg(
            *self.partial_exprs(),
            F.count(F.lit(1)).alias("wm_events"),
            F.count(F.when(first_copy, 1)).alias("wm_rows"),
            F.count(F.when(reason.isin(*TOO_LATE_REASONS), 1)).alias("wm_too_late"),
            F.count(F.when(reason == LateReason.INVALID_EVENT_TIME.value, 1)).alias("wm_invalid"),
            F.count(F.when(reason == LateReason.INVALID_ARRIVAL.value, 1)).alias("wm_invalid_arrival"),
            F.max(F.when(reason.isNull() | reason.isin(*TOO_LATE_REASONS), t)).alias("wm_max_t"),
        )
        is_accepted_group = F.col("wm_too_late") + F.col("wm_invalid") + F.col("wm_invalid_arrival") == 0
        return aggregated.select(
            *self.keys,
            F.when(is_accepted_group, starts.cast("long")).alias("window_start"),
            F.when(is_accepted_group, ends.cast("long")).alias("window_end"),
            *self.partial_columns(),
            "wm_events",
            "wm_rows",
            "wm_too_late",
            "wm_invalid",
            "wm_invalid_arrival",
            "wm_max_t",
        )

    # ------------------------------------------------------------------------------------------- rollup

    def read_panes(self) -> DataFrame | None:
        """The upstream's pane rows of the versions ``(arrival_from, arrival_until]``; ``None``: none written."""
        request = self.request
        # None also when the upstream has run but not fired yet (a folder with no data file)
        panes = None if request.events is None else read_dataset(self.spark, request.events)
        if panes is None:
            return None
        needed = ["window_start", "window_end", "pane_index", "retraction", RUN_PARTITION, *self.keys]
        missing = [c for c in needed if c not in panes.columns]
        if missing:
            raise ValueError(f"upstream panes {request.events} lack the columns {missing}; have {panes.columns}")
        run = F.col(RUN_PARTITION).cast("long")
        condition = run <= F.lit(request.arrival_until_ms)
        if request.arrival_from_ms is not None:
            condition = condition & (run > F.lit(request.arrival_from_ms))
        return panes.where(condition)

    def target_bounds(self, fine_start: Column, fine_end: Column) -> tuple[Column, Column]:
        """:meth:`AggregationSpec.target_window` as columns."""
        window = self.spec.window
        if window is None:
            return fine_start, fine_end
        assert isinstance(window, Tumbling)  # validated by the spec
        start = fine_start - F.pmod(fine_start - F.lit(window.offset_ms), F.lit(window.size_ms))
        return start, start + F.lit(window.size_ms)

    def value_columns(self, panes: DataFrame) -> list[str]:
        """The upstream's aggregate columns (what the rollup's aggregates read)."""
        return [c for c in panes.columns if c not in (*OUTPUT_COLUMNS, RUN_PARTITION, *self.keys)]

    def read_live(self) -> DataFrame | None:
        live_in = self.request.live_in
        if not live_in or not path_exists(self.spark, live_in):
            return None
        return self.spark.read.parquet(live_in)

    def classify_panes(self, panes: DataFrame) -> DataFrame:
        """The pane rows with ``wm_reason``: ``INVALID_WINDOW`` (not
        :func:`~airflow_provider_wm.core.windowing.pane_window_is_valid`), ``TOO_LATE`` (the window they land
        in is purged: ``end <= W_prev - L``) or null; ``wm_t``: the last time of their window (null for an
        invalid one). No window arithmetic is evaluated on an invalid window."""
        fine_start, fine_end = F.col("window_start").cast("long"), F.col("window_end").cast("long")
        _, target_end = self.target_bounds(fine_start, fine_end)
        reason = F.when(~self.valid_pane_window(fine_start, fine_end), LateReason.INVALID_WINDOW.value)
        if self.previous_watermark is not None:
            reason = reason.when(~is_open(target_end, self.horizon), LateReason.TOO_LATE.value)
        classified = panes.withColumn("wm_reason", reason)
        valid = F.col("wm_reason").isNull() | (F.col("wm_reason") != LateReason.INVALID_WINDOW.value)
        return classified.withColumn("wm_t", F.when(valid, fine_end - 1))

    def valid_pane_window(self, start: Column, end: Column) -> Column:
        """:func:`~airflow_provider_wm.core.windowing.pane_window_is_valid` as a column, never null; each
        comparison is evaluated only when the ones before it hold (``end - size`` cannot overflow once
        ``end > MIN_TIME_MS``)."""
        assert self.spec.upstream is not None
        upstream = self.spec.upstream.window
        size = upstream.size_ms if isinstance(upstream, Tumbling | Sliding) else None
        valid = F.when(start.isNull() | end.isNull(), False).when(start >= end, False)
        valid = valid.when(start > F.lit(MAX_TIME_MS), False).when(end <= F.lit(MIN_TIME_MS), False)
        if size is not None:
            valid = valid.when(start < end - F.lit(size), False)
        return valid.otherwise(True)

    def rollup_partials(
        self, classified: DataFrame | None, live: DataFrame | None
    ) -> tuple[DataFrame | None, DataFrame | None]:
        """Pick each upstream window's live pane and recompute the partials of the windows that got rows.

        Returns the fresh windows (partials and ``wm_events``, as :meth:`with_fresh_flags` takes them) and the
        live panes after the run (``wm_target_end``: the end of the window they belong to)."""
        assert self.spec.upstream is not None
        keys = self.keys
        fresh_rows: DataFrame | None = None
        if classified is not None:
            values = self.value_columns(classified.drop("wm_reason", "wm_t"))
            fresh_rows = classified.where(F.col("wm_reason").isNull()).select(
                *keys,
                F.col("window_start").cast("long").alias("window_start"),
                F.col("window_end").cast("long").alias("window_end"),
                F.col("pane_index").cast("long").alias("pane_index"),
                F.col("retraction").cast("boolean").alias("retraction"),
                F.col(RUN_PARTITION).cast("long").alias("upstream_run"),
                *values,
            )
        candidates = fresh_rows if live is None else live if fresh_rows is None else live.unionByName(fresh_rows)
        if candidates is None:
            return None, None
        identity = [*keys, "window_start", "window_end"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            identity.append("pane_index")
        others = [c for c in candidates.columns if c not in identity]
        rank = F.struct("upstream_run", "pane_index", ~F.col("retraction"))
        winners = (
            candidates.groupBy(*identity)
            .agg(F.max_by(F.struct(*others), rank).alias("wm_winner"))
            .select(*identity, *[F.col(f"wm_winner.{c}").alias(c) for c in others])
            .where(~F.col("retraction"))
            .select(*keys, "window_start", "window_end", *LIVE_META, *[c for c in others if c not in LIVE_META])
        )
        target_start, target_end = self.target_bounds(F.col("window_start"), F.col("window_end"))
        if fresh_rows is None:
            return None, winners.withColumn("wm_target_end", target_end)
        winners = winners.localCheckpoint()  # the fresh windows and the live snapshot both read it: panes, small
        live_after = winners.withColumn("wm_target_end", target_end)
        arrived = fresh_rows.select(
            *keys,
            target_start.alias("wm_ts"),
            target_end.alias("wm_te"),
            F.lit(1).alias("wm_events"),
            F.lit(False).alias("wm_live"),
        )
        members = winners.select(
            *keys,
            target_start.alias("wm_ts"),
            target_end.alias("wm_te"),
            F.lit(0).alias("wm_events"),
            F.lit(True).alias("wm_live"),
            *[c for c in winners.columns if c not in (*keys, "window_start", "window_end")],
        )
        fresh = (
            members.unionByName(arrived, allowMissingColumns=True)
            .groupBy(*keys, "wm_ts", "wm_te")
            .agg(*self.partial_exprs(F.col("wm_live")), F.sum("wm_events").alias("wm_events"))
            .where(F.col("wm_events") > 0)
            .select(
                *keys,
                F.col("wm_ts").alias("window_start"),
                F.col("wm_te").alias("window_end"),
                *self.partial_columns(),
                "wm_events",
            )
        )
        return fresh, live_after

    # ------------------------------------------------------------------------------------------ combine

    def read_state(self) -> DataFrame | None:
        state_in = self.request.state_in
        if not state_in or not path_exists(self.spark, state_in):
            return None
        state = self.spark.read.parquet(state_in)
        if "dirty" in state.columns and "pending" not in state.columns:  # written before count triggers
            state = state.withColumn("dirty", F.col("dirty").cast("long")).withColumnRenamed("dirty", "pending")
            state = state.select(*[c for c in state.columns if c not in STATE_FLAGS], *STATE_FLAGS)
        expected = [*self.keys, "window_start", "window_end", *self.partial_columns(), *STATE_FLAGS]
        if state.columns != expected:
            raise ValueError(
                f"state {state_in} has columns {state.columns}, expected {expected}: the aggregate's spec changed; "
                "start a new pipeline name (or delete its state) to change keys or aggregates"
            )
        return state

    def with_fresh_flags(self, partials: DataFrame) -> DataFrame:
        values = partials.select(self.final_values().alias("v")).schema["v"].dataType
        assert isinstance(values, StructType)
        pane = self.pane_struct_type(values)
        return partials.select(
            *self.keys,
            "window_start",
            "window_end",
            *self.partial_columns(),
            F.col("wm_events").cast("long").alias("pending"),
            F.lit(False).alias("on_time_fired"),
            F.lit(None).cast(pane).alias("last_pane"),
            F.array().cast(f"array<{pane.simpleString()}>").alias("owed"),
        )

    @staticmethod
    def pane_struct_type(values: StructType) -> StructType:
        return StructType.fromJson(
            {
                "type": "struct",
                "fields": [
                    {"name": "window_start", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "window_end", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "timing", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "pane_index", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "values", "type": values.jsonValue(), "nullable": True, "metadata": {}},
                ],
            }
        )

    def combine(self, fresh: DataFrame, state: DataFrame | None) -> DataFrame:
        """Stored windows plus the run's partials: one row per window (rule 4)."""
        if state is None:
            return fresh
        both = state.withColumn("wm_old", F.lit(True)).unionByName(fresh.withColumn("wm_old", F.lit(False)))
        if self.spec.upstream is not None:  # a rollup's fresh partials are recomputed from the live panes
            partials = F.max_by(F.struct(*self.partial_columns()), ~F.col("wm_old")).alias("wm_partials")
            return both.groupBy(*self.keys, "window_start", "window_end").agg(
                partials,
                F.sum("pending").alias("pending"),
                F.bool_or("on_time_fired").alias("on_time_fired"),
                F.first("last_pane", ignorenulls=True).alias("last_pane"),
                F.flatten(F.collect_list("owed")).alias("owed"),
            ).select(
                *self.keys, "window_start", "window_end",
                *[F.col(f"wm_partials.{c}").alias(c) for c in self.partial_columns()],
                *STATE_FLAGS,
            )  # fmt: skip
        if not self.spec.output_window.merging:
            return both.groupBy(*self.keys, "window_start", "window_end").agg(
                *self.merge_exprs(),
                F.sum("pending").alias("pending"),
                F.bool_or("on_time_fired").alias("on_time_fired"),
                F.first("last_pane", ignorenulls=True).alias("last_pane"),
                F.flatten(F.collect_list("owed")).alias("owed"),
            )
        # sessions: a row starts a new group unless it starts at or before the end so far of the key's rows
        ordered = Window.partitionBy(*self.keys).orderBy("window_start", "window_end")
        end_so_far = F.max("window_end").over(ordered.rowsBetween(Window.unboundedPreceding, -1))
        starts_group = F.when(end_so_far.isNull() | (F.col("window_start") > end_so_far), 1).otherwise(0)
        grouped = both.withColumn("wm_starts", starts_group).withColumn(
            "wm_group", F.sum("wm_starts").over(ordered.rowsBetween(Window.unboundedPreceding, 0))
        )
        old = F.col("wm_old")
        member = F.struct("window_start", "window_end", "on_time_fired", "last_pane", "owed")
        merged = grouped.groupBy(*self.keys, "wm_group").agg(
            F.min("window_start").alias("window_start"),
            F.max("window_end").alias("window_end"),
            *self.merge_exprs(),
            F.sum("pending").alias("pending"),  # a session's own pending events, its members' and the new ones
            F.collect_list(F.when(old, member)).alias("wm_members"),
        )
        only = F.get(F.col("wm_members"), 0)
        same = (F.size("wm_members") == 1) & (only["window_start"] == F.col("window_start"))
        same = same & (only["window_end"] == F.col("window_end"))
        owed_type = fresh.schema["owed"].dataType
        owed_by_members: Column = F.array().cast(owed_type)
        if self.spec.retracting:  # a merged session owes every member's retractions and last pane
            owed_by_members = F.flatten(
                F.transform(
                    "wm_members",
                    lambda m: F.concat(m["owed"], F.filter(F.array(m["last_pane"]), lambda p: p.isNotNull())),
                )
            )
        return merged.select(
            *self.keys,
            "window_start",
            "window_end",
            *self.partial_columns(),
            "pending",
            F.when(same, only["on_time_fired"]).otherwise(False).alias("on_time_fired"),
            F.when(same, only["last_pane"]).alias("last_pane"),
            F.when(same, only["owed"]).otherwise(owed_by_members).alias("owed"),
        )

    # --------------------------------------------------------------------------------------------- fire

    def decide(self, windows: DataFrame, watermark: int | None) -> DataFrame:
        """Rules 5-7 row by row: ``wm_timing`` (null: no firing), ``wm_fires``, ``wm_purged``, ``wm_values``."""
        spec = self.spec
        end = F.col("window_end")
        if watermark is None:
            complete, purged = F.lit(False), F.lit(False)
        else:
            complete = F.lit(watermark) >= end
            purged = ~is_open(end, watermark - spec.allowed_lateness_ms)
        pending = F.col("pending")
        dirty = pending > 0
        early = F.lit(spec.early_firing) if spec.early_firing_count is None else pending >= spec.early_firing_count
        late = F.lit(spec.late_firing) if spec.late_firing_count is None else pending >= spec.late_firing_count
        timing = (
            F.when(complete & ~F.col("on_time_fired"), Timing.ON_TIME.value)
            .when(complete & dirty & (late | purged), Timing.LATE.value)
            .when(~complete & dirty & early, Timing.EARLY.value)
        )
        values = self.final_values()
        skip = F.lit(False)
        if spec.fire_only_updated_panes:
            skip = (F.size("owed") == 0) & F.col("last_pane").isNotNull() & F.col("last_pane.values").eqNullSafe(values)
        return windows.select(
            "*",
            timing.alias("wm_timing"),
            (timing.isNotNull() & ~skip).alias("wm_fires"),
            purged.alias("wm_purged"),
            values.alias("wm_values"),
        )

    def panes(self, decided: DataFrame, watermark: int | None) -> DataFrame:
        """The pane rows: retractions (retracting mode) and the new panes of the windows that fire."""
        fired = decided.where("wm_fires")
        index = F.when(F.col("last_pane").isNull(), F.lit(0)).otherwise(F.col("last_pane.pane_index") + 1)
        new_pane = F.struct(
            "window_start",
            "window_end",
            F.col("wm_timing").alias("timing"),
            index.cast("long").alias("pane_index"),
            F.col("wm_values").alias("values"),
        )
        rows = fired.select(*self.keys, F.lit(False).alias("retraction"), new_pane.alias("pane"))
        if self.spec.retracting:
            retracted = F.concat("owed", F.filter(F.array("last_pane"), lambda p: p.isNotNull()))
            rows = fired.select(
                *self.keys, F.lit(True).alias("retraction"), F.explode(retracted).alias("pane")
            ).unionByName(rows)
        names = [a.name for a in self.spec.aggregates]
        return rows.select(
            F.col("pane.window_start").alias("window_start"),
            F.col("pane.window_end").alias("window_end"),
            *self.keys,
            *[F.col(f"pane.values.{n}").alias(n) for n in names],
            F.col("pane.timing").alias("pane"),
            F.col("pane.pane_index").alias("pane_index"),
            "retraction",
            F.lit(watermark).cast("long").alias("watermark_ms"),
            F.lit(self.run_id).alias("run_id"),
        )

    def next_state(self, decided: DataFrame) -> DataFrame:
        fires, timing = F.col("wm_fires"), F.col("wm_timing")
        index = F.when(F.col("last_pane").isNull(), F.lit(0)).otherwise(F.col("last_pane.pane_index") + 1)
        new_pane = F.struct(
            "window_start", "window_end", timing.alias("timing"), index.cast("long").alias("pane_index"),
            F.col("wm_values").alias("values"),
        )  # fmt: skip
        partials: list[Column] = [F.col(c) for c in self.partial_columns()]
        if self.spec.accumulation is Accumulation.DISCARDING:
            partials = [
                F.when(fires, empty).otherwise(F.col(c)).alias(c)
                for c, empty in zip(self.partial_columns(), self.empty_partials(decided), strict=True)
            ]
        return decided.where(~F.col("wm_purged")).select(
            *self.keys,
            "window_start",
            "window_end",
            *partials,
            F.when(timing.isNotNull(), F.lit(0).cast("long")).otherwise(F.col("pending")).alias("pending"),
            (F.col("on_time_fired") | F.coalesce(timing == Timing.ON_TIME.value, F.lit(False))).alias("on_time_fired"),
            F.when(fires, new_pane).otherwise(F.col("last_pane")).alias("last_pane"),
            F.when(fires, F.array().cast(decided.schema["owed"].dataType)).otherwise(F.col("owed")).alias("owed"),
        )

    # ---------------------------------------------------------------------------------------------- run

    def rollup_inputs(self) -> tuple[DataFrame | None, DataFrame | None, dict[str | None, int], int | None]:
        """A rollup's fresh windows and live panes, its row counts by reason and the last time of its panes;
        quarantines the invalid and too-late rows."""
        panes = self.read_panes()
        classified = None
        counts: dict[str | None, int] = {}
        max_time = None
        if panes is not None:
            reason = F.col("wm_reason")
            # read once (the later steps group, write and count from it)
            classified, observed = checkpoint_with_totals(
                self.classify_panes(panes),
                F.count(F.lit(1)).alias("rows"),
                *[F.count(F.when(reason == r.value, 1)).alias(r.value) for r in LateReason],
                F.max("wm_t").alias("max_t"),  # null on invalid windows
            )
            counts = {r.value: int(observed[r.value]) for r in LateReason if observed[r.value]}
            counts[None] = int(observed["rows"]) - sum(counts.values())
            max_time = observed["max_t"]
            if len(counts) > 1:
                late = classified.where(reason.isNotNull()).select(
                    *[
                        F.col(c).alias(f"upstream_{c}") if c == "run_id" else c
                        for c in panes.columns
                        if c != RUN_PARTITION
                    ],
                    # a long, also when the session infers partition columns as strings
                    F.col(RUN_PARTITION).cast("long").alias(f"upstream_{RUN_PARTITION}"),
                    reason.alias("reason"),
                    F.lit(self.run_id).alias("run_id"),
                )
                self._write_run_partition(late, self.request.late_output)
        fresh, live_after = self.rollup_partials(classified, self.read_live())
        if fresh is not None:
            fresh = self.with_fresh_flags(fresh).localCheckpoint()  # one row per window that got rows: small
        return fresh, live_after, counts, max_time

    def watermark(self, max_event_time: int | None) -> int | None:
        """Rule 3; the store's value is passed in the request (``source_watermark_ms``)."""
        return next_watermark(self.spec.watermark, self.previous_watermark, max_event_time, self.source_watermark)

    def run(self) -> WindowedManifest:
        started = time.time()
        request = self.request
        if self.spec.upstream is not None:
            events = None
        else:
            events = self.read_merged_events() if request.inputs else self.read_events()
        counts: dict[str | None, int] = {}
        fresh: DataFrame | None = None
        max_times: list[int | None] = [self.previous_max_event]
        live_after: DataFrame | None = None
        if self.spec.upstream is not None:
            fresh, live_after, counts, max_time = self.rollup_inputs()
            max_times.append(max_time)
        elif events is not None:
            classified = self.classified(events)
            partials, observed = checkpoint_with_totals(  # one row per (keys, window): small
                self.new_partials(classified),
                F.sum("wm_rows").alias("events"),
                F.sum("wm_too_late").alias("too_late"),
                F.sum("wm_invalid").alias("invalid"),
                F.sum("wm_invalid_arrival").alias("invalid_arrival"),
                F.max("wm_max_t").alias("max_t"),
            )
            too_late, invalid = int(observed["too_late"] or 0), int(observed["invalid"] or 0)
            invalid_arrival = int(observed["invalid_arrival"] or 0)
            counts = {
                None: int(observed["events"] or 0) - too_late - invalid - invalid_arrival,
                LateReason.TOO_LATE.value: too_late,
                LateReason.INVALID_EVENT_TIME.value: invalid,
                LateReason.INVALID_ARRIVAL.value: invalid_arrival,
            }
            max_times.append(observed["max_t"])
            if too_late or invalid or invalid_arrival:
                late = classified.where(F.col("wm_reason").isNotNull()).select(
                    *[c for c in events.columns if c not in JOB_COLUMNS],
                    F.col("wm_reason").alias("reason"),
                    F.lit(self.run_id).alias("run_id"),
                )
                self._write_run_partition(late, request.late_output)
            accepted = partials.where(F.col("window_start").isNotNull()).drop(
                "wm_rows", "wm_too_late", "wm_invalid", "wm_invalid_arrival", "wm_max_t"
            )
            fresh = self.with_fresh_flags(accepted)
        seen = [v for v in max_times if v is not None]
        max_event_time = max(seen) if seen else None
        watermark = self.watermark(max_event_time)

        live_path = None
        if live_after is not None:
            horizon = None if watermark is None else watermark - self.spec.allowed_lateness_ms
            kept = live_after if horizon is None else live_after.where(is_open(F.col("wm_target_end"), horizon))
            if request.live_out is None:
                raise ValueError("a rollup's request needs live_out")
            kept.drop("wm_target_end").write.mode("overwrite").parquet(request.live_out)
            live_path = request.live_out
        state = self.read_state()
        if fresh is None and state is None:
            return self._manifest(started, counts, watermark, max_event_time, None, None, live_path)
        windows = self.combine(fresh, state) if fresh is not None else state
        assert windows is not None
        # decided twice (panes, state) from small frames: cheaper than materialising it in between
        decided = self.decide(windows, watermark)
        self._write_run_partition(self.panes(decided, watermark), request.output)
        fired_counts = Observation("fired")
        fires = F.col("wm_fires")
        counted = decided.observe(
            fired_counts,
            *[F.count(F.when(fires & (F.col("wm_timing") == t.value), 1)).alias(t.value) for t in Timing],
            F.sum(F.when(fires, F.size("owed") + F.col("last_pane").isNotNull().cast("int"))).alias("retractions"),
            F.count(F.lit(1)).alias("windows"),
            F.count(F.when(F.col("wm_purged"), 1)).alias("purged"),
        )
        self.next_state(counted).write.mode("overwrite").parquet(request.state_out)
        fired = fired_counts.get
        return self._manifest(started, counts, watermark, max_event_time, fired, request.state_out, live_path)

    def _manifest(
        self,
        started: float,
        counts: dict[str | None, int],
        watermark: int | None,
        max_event_time: int | None,
        fired: Any,
        state_path: str | None,
        live_path: str | None = None,
    ) -> WindowedManifest:
        request = self.request
        pane_counts = {t.value: int(fired[t.value]) if fired else 0 for t in Timing}
        pane_counts["RETRACTION"] = int(fired["retractions"] or 0) if fired and self.spec.retracting else 0
        late = any(n for reason, n in counts.items() if reason is not None)
        invalid_arrival = counts.get(LateReason.INVALID_ARRIVAL.value, 0)
        manifest = {
            "status": "succeeded",
            "job": "windowed_aggregate",
            "pipeline": request.pipeline,
            "run_id": self.run_id,
            "version": self.version,
            "watermark_ms": watermark,
            "previous_watermark_ms": self.previous_watermark,
            "max_event_time_ms": max_event_time,
            "arrival_from_ms": request.arrival_from_ms,
            "arrival_until_ms": request.arrival_until_ms,
            "totals": {
                "events_read": sum(counts.values()) - invalid_arrival,  # rule 0: not the run's events
                "events_aggregated": counts.get(None, 0),
                "too_late": counts.get(LateReason.TOO_LATE.value, 0),
                "invalid_event_time": counts.get(LateReason.INVALID_EVENT_TIME.value, 0),
                "invalid_window": counts.get(LateReason.INVALID_WINDOW.value, 0),
                "invalid_arrival": invalid_arrival,
                "panes": pane_counts,
                "windows_open": int(fired["windows"]) - int(fired["purged"]) if fired else 0,
                "windows_purged": int(fired["purged"]) if fired else 0,
            },
            "output": request.output,
            "late_output": request.late_output if late else None,
            "state_path": state_path,
            "live_path": live_path,
            "duration_s": round(time.time() - started, 3),
        }
        return WindowedManifest.from_json(manifest)

    def _write_run_partition(self, frame: DataFrame, path: str) -> None:
        """Replace this run's partition ``<path>/wm_run=<version>`` only (a retry or re-run overwrites its own
        rows). Written to the partition's path: Spark's dynamic partition overwrite would sort the rows by the
        partition column and stage them first, for a partition known in advance."""
        frame.write.mode("overwrite").parquet(f"{path.rstrip('/')}/{RUN_PARTITION}={self.version}")


def checkpoint_with_totals(frame: DataFrame, *totals: Column) -> tuple[DataFrame, Row]:
    """``frame`` materialised once (``localCheckpoint``) and its totals, aggregated from the checkpoint.

    Not ``observe``: over Spark Connect a checkpoint does not report observed metrics (pyspark 4.2), and the
    aggregation reads the checkpoint's blocks, not the input again.
    """
    checkpoint = frame.localCheckpoint()
    row = checkpoint.agg(*totals).first()
    assert row is not None  # an aggregation without grouping has one row
    return checkpoint, row


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _pushable(raw: Column, data_type: Any, since: int | None, until: int) -> Column:
    """The arrival range, or an arrival that is null or out of the valid range (rule 0), as comparisons of the
    raw column with literals, which Parquet can push down to skip row groups by their min/max and null-count
    statistics (the exact filter on the parsed time follows it; this one only needs to keep every row it
    keeps)."""

    def literal(ms: int) -> Any:
        return _EPOCH + dt.timedelta(milliseconds=ms) if isinstance(data_type, TimestampType) else ms  # exact

    if not isinstance(data_type, TimestampType | IntegralType):
        return F.lit(True)
    in_range = raw <= F.lit(literal(until))
    if since is not None:
        in_range = in_range & (raw > F.lit(literal(since)))
    out_of_range = (raw < F.lit(literal(MIN_TIME_MS))) | (raw > F.lit(literal(MAX_TIME_MS)))
    return in_range | raw.isNull() | out_of_range


def run_request(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """:func:`run` on a request document, returning the manifest document (tests and benchmarks)."""
    return run(spark, WindowedRequest.from_json(request)).to_json()


def run(spark: SparkSession, request: WindowedRequest) -> WindowedManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with active_session(spark):
        return Job(spark, request).run()


def main(argv: Sequence[str] | None = None) -> int:
    """``windowed_aggregate.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(WindowedRequest, run, argv)


if __name__ == "__main__":
    sys.exit(main())
