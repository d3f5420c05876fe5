"""Steps 1-2 of a run: read the events that arrived since the previous run (and those no run's range can
hold), classify each row (invalid, too late, accepted: ``core.windowing.too_late_reason``) and aggregate the
accepted ones per (keys, window)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType, IntegralType, StructType, TimestampType

from airflow_provider_wm.contracts import WindowedInput
from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    ROW_COLUMN,
    TOO_LATE_REASONS,
    LateData,
    LateReason,
    aggregated_columns,
    input_column,
)
from airflow_provider_wm.core.windows import GLOBAL_END, GLOBAL_START, Global, Session, Sliding, Tumbling
from spark_jobs.common import invalid_time, read_dataset, time_ms
from spark_jobs.windowed.base import (
    _SESSION_PARKING_MS,
    INVALID_ARRIVAL_FLAG,
    INVALID_VALUE_FLAG,
    JOB_COLUMNS,
    JobBase,
    is_open,
    unusable_value,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
TIME_SEEN_REASONS = (*TOO_LATE_REASONS, LateReason.INVALID_VALUE.value)
"""The quarantined rows whose valid time counts in the run's highest event time (rule 3), as accepted ones do."""


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


class Events(JobBase):
    """Reading and classifying events, and their partial aggregates per window."""

    def read_events(self, source: WindowedInput | None = None) -> DataFrame | None:
        """The run's events of the request's input (or of one of its ``inputs``), with ``wm_t``, their time in
        epoch ms, ``INVALID_ARRIVAL_FLAG`` (rule 0: the rows whose arrival no run's range can hold are read
        too, see the module docstring) and ``INVALID_VALUE_FLAG`` (:meth:`checked_columns`); ``None`` when there
        is no data (no path, or a folder with no data file).
        """
        request = self.request
        input_name = None if source is None else source.name
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
            arrival = time_ms(F.col(arrival_column), raw_type, f"arrival_column={arrival_column!r} of {source.events}")
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
        event_time = time_ms(F.col(name), schema[name].dataType, f"event_time={name!r} of {source.events}")
        return events.withColumns({
            "wm_t": event_time,
            INVALID_ARRIVAL_FLAG: invalid_arrival,
            INVALID_VALUE_FLAG: unusable_value(self.checked_columns(schema, input_name)),
        })  # fmt: skip

    def checked_columns(self, schema: StructType, input_name: str | None) -> list[str]:
        """The columns of an input (``input_name``: one of the request's ``inputs``; ``None``: its ``events``)
        whose NaN or infinite values make a row ``INVALID_VALUE`` (``core.windowing.values_are_usable``): those
        the built-in aggregates read (of a merged input, as ``input_column(input_name, column)``), compared
        without case as Spark resolves them, and of a floating type (a decimal or an integer is always finite).
        """
        read = {c.lower() for c in aggregated_columns(self.spec.aggregates)}
        return [
            f.name
            for f in schema.fields
            if isinstance(f.dataType, FloatType | DoubleType)
            and (f.name if input_name is None else input_column(input_name, f.name)).lower() in read
        ]

    def read_merged_events(self) -> DataFrame:
        """The events of every input (:func:`merge_inputs`): keys as they are, every other column prefixed with
        the input's name, plus the input's row marker. Every input needs data: its columns' types come from its
        files, and the state keeps them."""
        frames = []
        for source in self.request.inputs or []:
            events = self.read_events(source)
            if events is None:
                raise ValueError(
                    f"inputs[{source.name!r}] has no data at {source.events} yet: a merged aggregate reads the types "
                    "of every input's columns from its files, so its runs fail until each input has written one"
                )
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
        merged = frames[0]
        for frame in frames[1:]:
            merged = merged.unionByName(frame, allowMissingColumns=True)
        return merged

    def classified(self, events: DataFrame) -> DataFrame:
        """The rows with ``wm_reason`` (null: accepted): ``INVALID_ARRIVAL`` (rule 0), then from their time
        ``wm_t`` ``INVALID_EVENT_TIME`` (``not is_valid_time_ms``: rule 1), then ``INVALID_VALUE`` (NaN or
        infinity in an aggregated column, ``not values_are_usable``: rule 1), then ``TOO_LATE`` (rule 2). The
        first matching condition wins, so later steps only see valid times and finite values of accepted events.
        """
        t = F.col("wm_t")
        reason = (
            F.when(F.col(INVALID_ARRIVAL_FLAG), LateReason.INVALID_ARRIVAL.value)
            .when(invalid_time(t), LateReason.INVALID_EVENT_TIME.value)
            .when(F.col(INVALID_VALUE_FLAG), LateReason.INVALID_VALUE.value)
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
        the event's last window (the one that ends latest) has closed, ``end <= H``, so all of them have; for a
        session, the event's own window ``[t, t + gap)`` before merging (``core.windowing.LateData``), which is
        Spark Structured Streaming's filter on a row's ``session_window`` ahead of the merge."""
        window = self.spec.output_window
        if self.spec.late_data is LateData.EVENT_TIME:
            return t < F.lit(horizon)
        if isinstance(window, Tumbling):
            last_end = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.size_ms)) + F.lit(window.size_ms)
        elif isinstance(window, Sliding):
            last_end = t - F.pmod(t - F.lit(window.offset_ms), F.lit(window.slide_ms)) + F.lit(window.size_ms)
        elif isinstance(window, Session):
            last_end = t + F.lit(window.gap_ms)
        else:  # the global window never closes
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
            # a row has a start only when accepted, so a group with a start is a group of accepted rows: the start is
            # passed on as it is, and the partials stay hash-partitioned by (keys, window_start) (see combine)
            is_accepted_group = F.col("wm_start").isNotNull()
        if isinstance(window, Session):
            return self._session_partials(frame, groups, starts, ends)
        aggregated = frame.groupBy(*groups).agg(
            *self.partial_exprs(),
            F.count(F.lit(1)).alias("wm_events"),
            F.count(F.when(first_copy, 1)).alias("wm_rows"),
            F.count(F.when(reason.isin(*TOO_LATE_REASONS), 1)).alias("wm_too_late"),
            F.count(F.when(reason == LateReason.INVALID_EVENT_TIME.value, 1)).alias("wm_invalid"),
            F.count(F.when(reason == LateReason.INVALID_VALUE.value, 1)).alias("wm_invalid_value"),
            F.count(F.when(reason == LateReason.INVALID_ARRIVAL.value, 1)).alias("wm_invalid_arrival"),
            F.max(F.when(reason.isNull() | reason.isin(*TIME_SEEN_REASONS), t)).alias("wm_max_t"),
        )
        return aggregated.select(
            *self.keys,
            starts.cast("long").alias("window_start"),
            F.when(is_accepted_group, ends.cast("long")).alias("window_end"),
            *self.partial_columns(),
            "wm_events",
            "wm_rows",
            "wm_too_late",
            "wm_invalid",
            "wm_invalid_value",
            "wm_invalid_arrival",
            "wm_max_t",
        )

    def _session_partials(
        self, frame: DataFrame, groups: list[Column | str], starts: Column, ends: Column
    ) -> DataFrame:
        """:meth:`new_partials` for sessions: grouped by the row's reason too, so each group's rows share it and
        the counters are its row count under that reason, set after the aggregation. Spark merges sessions in a
        sort-based aggregation whose every aggregate costs per row (a conditional count per reason made the scan
        about half as slow again); a grouping key that is null on every accepted row costs next to nothing and
        leaves their sessions as they are. Accepted: ``wm_reason`` null, in one group per session; a too-late
        row and an invalid one of the same key sit in groups of their own (at the parking time)."""
        reason = F.col("wm_reason")
        aggregated = frame.groupBy(*groups, reason).agg(
            *self.partial_exprs(), F.count(F.lit(1)).alias("wm_events"), F.max("wm_t").alias("wm_max_t")
        )
        accepted = reason.isNull()
        events = F.col("wm_events")
        return aggregated.select(
            *self.keys,
            F.when(accepted, starts).cast("long").alias("window_start"),
            F.when(accepted, ends.cast("long")).alias("window_end"),
            *self.partial_columns(),
            "wm_events",
            F.col("wm_events").alias("wm_rows"),
            F.when(reason.isin(*TOO_LATE_REASONS), events).otherwise(0).alias("wm_too_late"),
            F.when(reason == LateReason.INVALID_EVENT_TIME.value, events).otherwise(0).alias("wm_invalid"),
            F.when(reason == LateReason.INVALID_VALUE.value, events).otherwise(0).alias("wm_invalid_value"),
            F.when(reason == LateReason.INVALID_ARRIVAL.value, events).otherwise(0).alias("wm_invalid_arrival"),
            # an invalid time is no event time: only accepted, too-late and invalid-value rows count in the run's
            # highest one
            F.when(accepted | reason.isin(*TIME_SEEN_REASONS), F.col("wm_max_t")).alias("wm_max_t"),
        )
