"""Steps 1-2 of a run: read the events that arrived since the previous run (and those no run's range can
hold), classify each row (invalid, too late, accepted: ``core.windowing.too_late_reason``) and aggregate the
accepted ones per (keys, window)."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame
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
from spark_jobs.common import path_exists, read_dataset_and_schema
from spark_jobs.sql_text import case, ident, invalid_time, number, string, time_ms, timestamp
from spark_jobs.windowed.base import (
    _SESSION_PARKING_MS,
    HORIZON,
    INVALID_ARRIVAL_FLAG,
    INVALID_VALUE_FLAG,
    JOB_COLUMNS,
    RUN_ROWS,
    JobBase,
    is_open,
    unusable_value,
    with_cut_offs,
)

log = logging.getLogger(__name__)

TIME_SEEN_REASONS = (*TOO_LATE_REASONS, LateReason.INVALID_VALUE.value)
"""The quarantined rows whose valid time counts in the run's highest event time (rule 3), as accepted ones do."""
ACCEPTED = "wm_reason IS NULL"


def _reason_is(*reasons: str) -> str:
    return f"wm_reason IN ({', '.join(string(r) for r in reasons)})"


def _counters_by_reason(rows: str) -> list[str]:
    """:data:`RUN_ROWS` of a group whose rows share a reason (``wm_reason``, a grouping key), from its ``wm_events``,
    its rows read (``rows``) and its highest time (``wm_max_t``), SQL text. An invalid time is no event time: only
    accepted, too-late and invalid-value rows count in the run's highest one."""

    def count_of(*reasons: str) -> str:
        return f"CASE WHEN {_reason_is(*reasons)} THEN {rows} ELSE 0 END"

    return [
        "wm_events",
        f"{rows} AS wm_rows" if rows != "wm_rows" else "wm_rows",
        f"{count_of(*TOO_LATE_REASONS)} AS wm_too_late",
        f"{count_of(LateReason.INVALID_EVENT_TIME.value)} AS wm_invalid",
        f"{count_of(LateReason.INVALID_VALUE.value)} AS wm_invalid_value",
        f"{count_of(LateReason.INVALID_ARRIVAL.value)} AS wm_invalid_arrival",
        f"CASE WHEN {ACCEPTED} OR {_reason_is(*TIME_SEEN_REASONS)} THEN wm_max_t END AS wm_max_t",
    ]


def _pushable(raw: str, data_type: Any, since: int | None, until: int) -> str:
    """The arrival range, or an arrival that is null or out of the valid range (rule 0), as comparisons of the
    raw column with literals, which Parquet can push down to skip row groups by their min/max and null-count
    statistics (the exact filter on the parsed time follows it; this one only needs to keep every row it
    keeps)."""

    def literal(ms: int) -> str:
        return timestamp(ms) if isinstance(data_type, TimestampType) else number(ms)  # exact

    if not isinstance(data_type, TimestampType | IntegralType):
        return "true"
    # a timestamp can hold microseconds, and the exact filter compares whole milliseconds (unix_millis rounds
    # down): 10.5 ms arrived at 10 ms, so it is compared with the millisecond after each bound
    in_range = f"{raw} < {literal(until + 1)}"
    if since is not None:
        in_range = f"{in_range} AND {raw} >= {literal(since + 1)}"
    return f"({in_range}) OR {raw} IS NULL OR {raw} < {literal(MIN_TIME_MS)} OR {raw} > {literal(MAX_TIME_MS)}"


RESERVED_PREFIX = "wm_"
"""The prefix of the columns the job adds to the events' own (``wm_t``, ``wm_reason``, ...): an events column may not
start with it."""


def late_columns(columns: list[str]) -> list[str]:
    """The events' own ``columns`` as the late output selects them (SQL): each under its name, but ``reason`` and
    ``run_id``, which the late output adds, as ``event_reason`` and ``event_run_id`` (``event_`` again while taken).

    >>> late_columns(["k", "reason", "event_reason"])
    ['`k`', '`reason` AS `event_event_reason`', '`event_reason`']
    """
    taken = set(columns) | set(LATE_OUTPUT_COLUMNS)
    selected = []
    for column in columns:
        if column not in LATE_OUTPUT_COLUMNS:
            selected.append(ident(column))
            continue
        name = f"event_{column}"
        while name in taken:
            name = f"event_{name}"
        taken.add(name)
        selected.append(f"{ident(column)} AS {ident(name)}")
    return selected


LATE_OUTPUT_COLUMNS = ("reason", "run_id")
"""What the late output adds to the rows' own columns."""


def missing_events(path: str, allowed: bool) -> None:
    """An events path that does not exist fails the run, unless ``allowed`` (``allow_missing_events``): then it is a
    run with no events, and a warning names it. A run that read nothing from a mistyped path would still advance
    the cut-off, and the events that arrived before it would never be read once the path is put right; an
    existing empty folder is a run with no events either way."""
    if not allowed:
        raise ValueError(
            f"events={path!r} does not exist: create it (an empty folder is a run with no events), or set "
            "allow_missing_events=True where a missing folder means no events (a per-run folder written only "
            "when there are some)"
        )
    log.warning("events=%r does not exist: a run with no events (allow_missing_events)", path)


class Events(JobBase):
    """Reading and classifying events, and their partial aggregates per window."""

    def read_events(self, source: WindowedInput | None = None) -> DataFrame | None:
        """The run's events of the request's input (or of one of its ``inputs``), with ``wm_t``, their time in
        epoch ms, ``INVALID_ARRIVAL_FLAG`` (rule 0: the rows whose arrival no run's range can hold are read
        too, see the module docstring) and ``INVALID_VALUE_FLAG`` (:meth:`checked_columns`); ``None`` when there
        is no data: a folder with no data file, or (:func:`missing_events`) no folder at all.
        """
        request = self.request
        input_name = None if source is None else source.name
        if source is None:
            if request.events is None or request.event_time is None:
                raise ValueError("the request names no events and no event_time")
            source = WindowedInput(
                "", request.events, request.event_time, request.arrival_column, request.events_format
            )
        if input_name is None and not path_exists(self.spark, source.events):  # a merge's input: see its caller
            missing_events(source.events, request.allow_missing_events)
            return None
        read = read_dataset_and_schema(self.spark, source.events, source.events_format)
        if read is None:
            return None
        events, schema = read
        if input_name is None:
            self.note_input_types(schema)
        else:
            self.note_input_types(schema, lambda column: input_column(str(input_name), column))
        reserved = [name for name in schema.names if name.lower().startswith(RESERVED_PREFIX)]
        if reserved:
            raise ValueError(
                f"events {source.events} have the columns {reserved}: names starting with {RESERVED_PREFIX!r} are the "
                "job's own (they would clash with the columns it adds); rename them at the source"
            )
        arrival_column = source.arrival_column
        invalid_arrival = "false"
        if arrival_column:
            if arrival_column not in schema.names:
                raise ValueError(f"arrival_column={arrival_column!r} is not a column of {source.events}")
            raw_type = schema[arrival_column].dataType
            until, since = request.arrival_until_ms, request.arrival_from_ms
            argument = f"arrival_column={arrival_column!r} of {source.events}"
            arrival = time_ms(ident(arrival_column), raw_type, argument)
            invalid_arrival = invalid_time(arrival)
            in_range = f"{arrival} <= {number(until)}"
            if since is not None:
                in_range = f"{in_range} AND {arrival} > {number(since)}"
            pushed = _pushable(ident(arrival_column), raw_type, since, until)
            events = events.where(f"({pushed}) AND ({in_range} OR {invalid_arrival})")
        name = source.event_time
        missing = [c for c in [name, *self.keys] if c not in schema.names]
        if missing:
            raise ValueError(f"events {source.events} lack the columns {missing}; they have {schema.names}")
        event_time = time_ms(ident(name), schema[name].dataType, f"event_time={name!r} of {source.events}")
        unusable = unusable_value(self.checked_columns(schema, input_name))
        return events.selectExpr(
            "*",
            f"{event_time} AS wm_t",
            f"{invalid_arrival} AS {INVALID_ARRIVAL_FLAG}",
            f"{unusable} AS {INVALID_VALUE_FLAG}",
        )

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
                events.selectExpr(
                    *[ident(k) for k in self.keys],
                    *[
                        f"{ident(c)} AS {ident(input_column(name, c))}"
                        for c in events.columns
                        if c not in (*self.keys, *JOB_COLUMNS)
                    ],
                    f"1 AS {ident(input_column(name, ROW_COLUMN))}",
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
        With a horizon, the rows carry it as the cut-off column :data:`~spark_jobs.windowed.base.HORIZON`.
        """
        branches = [
            (INVALID_ARRIVAL_FLAG, string(LateReason.INVALID_ARRIVAL.value)),
            (invalid_time("wm_t"), string(LateReason.INVALID_EVENT_TIME.value)),
            (INVALID_VALUE_FLAG, string(LateReason.INVALID_VALUE.value)),
        ]
        if self.horizon is not None:
            late_reason = (
                LateReason.TOO_LATE if self.spec.late_data is LateData.EVENT_TIME else LateReason.WINDOW_CLOSED
            )
            branches.append((self.too_late("wm_t", HORIZON), string(late_reason.value)))
            events = with_cut_offs(events, {HORIZON: self.horizon})
        return events.selectExpr("*", f"{case(*branches)} AS wm_reason")

    @property
    def horizon(self) -> int | None:
        """``W_prev - L``: the horizon of rule 2 (``None`` before the first watermark)."""
        if self.previous_watermark is None:
            return None
        return self.previous_watermark - self.spec.allowed_lateness_ms

    def too_late(self, t: str, horizon: str) -> str:
        """``core.windowing.too_late_reason`` for a valid time ``t`` and a horizon ``H`` (SQL text, as ``t``).
        ``EVENT_TIME``: ``t < H``. ``WINDOW_END``:
        the event's last window (the one that ends latest) has closed, ``end <= H``, so all of them have; for a
        session, the event's own window ``[t, t + gap)`` before merging (``core.windowing.LateData``), which is
        Spark Structured Streaming's filter on a row's ``session_window`` ahead of the merge."""
        window = self.spec.output_window
        if self.spec.late_data is LateData.EVENT_TIME:
            return f"{t} < {horizon}"
        if isinstance(window, Tumbling):
            last_end = f"{t} - pmod({t} - {number(window.offset_ms)}, {window.size_ms}) + {window.size_ms}"
        elif isinstance(window, Sliding):
            last_end = f"{t} - pmod({t} - {number(window.offset_ms)}, {window.slide_ms}) + {window.size_ms}"
        elif isinstance(window, Session):
            last_end = f"{t} + {window.gap_ms}"
        else:  # the global window never closes
            return "false"
        return f"NOT ({is_open(last_end, horizon)})"

    def new_partials(self, classified: DataFrame, by_reason: bool = False) -> DataFrame:
        """Per ``(keys, window_start, window_end)``: partials, events (``wm_events``: the window's pending count),
        rows read (``wm_rows``: a sliding event counts in its first window only), too-late and invalid rows, and
        the highest time.

        Too-late and invalid rows are grouped apart from the accepted ones (their window is null, or for
        sessions far before any valid time) so the same scan counts them; their groups have a null window.
        Window arithmetic sits under ``CASE WHEN accepted``: it is never evaluated on an invalid time.

        ``by_reason``: grouped by the row's reason too (as sessions always are), so each group's counters are its
        row count under its reason, set after the aggregation instead of a conditional count per row. The groups
        are then hash-partitioned by ``(keys, window_start, wm_reason)``, which a merge with stored windows by
        ``(keys, window_start)`` would shuffle again: for a run without stored windows. (Sessions are
        hash-partitioned by their keys: :meth:`_session_partials`.)
        """
        window = self.spec.output_window
        if isinstance(window, Session):
            return self._session_partials(classified, window)
        frame = classified
        first_copy = "true"  # each row read counts once in the totals, a sliding one in its first window
        if isinstance(window, Tumbling):
            start, size = f"wm_t - pmod(wm_t - {number(window.offset_ms)}, {window.size_ms})", window.size_ms
        elif isinstance(window, Sliding):
            slides = f"CASE WHEN {ACCEPTED} THEN sequence(0, {window.windows_per_event - 1}) END"
            frame = frame.selectExpr("*", f"explode_outer({slides}) AS wm_k")
            first_copy = "wm_k IS NULL OR wm_k = 0"
            last = f"wm_t - pmod(wm_t - {number(window.offset_ms)}, {window.slide_ms})"
            start, size = f"{last} - wm_k * {window.slide_ms}", window.size_ms
        elif isinstance(window, Global):
            start, size = str(GLOBAL_START), 0
        else:  # pragma: no cover - the spec validates the kinds
            raise ValueError(f"unknown window {window!r}")
        window_start = F.expr(f"CASE WHEN {ACCEPTED} THEN {start} END").alias("wm_start")
        if isinstance(window, Sliding) and self.spec.late_data is LateData.WINDOW_END and self.horizon is not None:
            # core.windowing.is_open: an accepted event counts only in its windows that have not closed (its last
            # window, wm_k = 0, always is)
            frame = frame.where(f"CASE WHEN {ACCEPTED} THEN {is_open(f'{start} + {size}', HORIZON)} ELSE true END")
        end = str(GLOBAL_END) if isinstance(window, Global) else f"wm_start + {size}"
        rows = f"count(CASE WHEN {first_copy} THEN 1 END) AS wm_rows"
        if by_reason:
            grouped = frame.groupBy(*self.keys, window_start, "wm_reason")
            counters = [*self.partial_exprs(), "count(1) AS wm_events", rows, "max(wm_t) AS wm_max_t"]
        else:
            grouped = frame.groupBy(*self.keys, window_start)
            counters = [
                *self.partial_exprs(),
                "count(1) AS wm_events",
                rows,
                f"count(CASE WHEN {_reason_is(*TOO_LATE_REASONS)} THEN 1 END) AS wm_too_late",
                f"count(CASE WHEN {_reason_is(LateReason.INVALID_EVENT_TIME.value)} THEN 1 END) AS wm_invalid",
                f"count(CASE WHEN {_reason_is(LateReason.INVALID_VALUE.value)} THEN 1 END) AS wm_invalid_value",
                f"count(CASE WHEN {_reason_is(LateReason.INVALID_ARRIVAL.value)} THEN 1 END) AS wm_invalid_arrival",
                f"max(CASE WHEN {ACCEPTED} OR {_reason_is(*TIME_SEEN_REASONS)} THEN wm_t END) AS wm_max_t",
            ]
        aggregated = grouped.agg(*[F.expr(e) for e in counters])
        # a row has a start only when accepted, so a group with a start is a group of accepted rows: the start is
        # passed on as it is, and (not by reason) the partials stay hash-partitioned by (keys, window_start) for
        # the merge (see combine)
        window_columns = [
            *[ident(k) for k in self.keys],
            "CAST(wm_start AS BIGINT) AS window_start",
            f"CASE WHEN wm_start IS NOT NULL THEN CAST({end} AS BIGINT) END AS window_end",
            *[ident(c) for c in self.partial_columns()],
        ]
        if by_reason:
            return aggregated.selectExpr(*window_columns, *_counters_by_reason("wm_rows"))
        return aggregated.selectExpr(*window_columns, *RUN_ROWS)

    def _session_partials(self, classified: DataFrame, window: Session) -> DataFrame:
        """:meth:`new_partials` for sessions: grouped by the row's reason too, so each group's rows share it and
        the counters are its row count under that reason, set after the aggregation. Spark merges sessions in a
        sort-based aggregation whose every aggregate costs per row (a conditional count per reason made the scan
        about half as slow again); a grouping key that is null on every accepted row costs next to nothing and
        leaves their sessions as they are. Accepted: ``wm_reason`` null, in one group per session; a too-late
        row and an invalid one of the same key sit in groups of their own (at the parking time).

        The rows are shuffled by key before they are grouped. Grouped where they are read, Spark first aggregates
        each event's own window ``[t, t + gap)`` before the shuffle, which leaves about one group per event: a
        large first run held a group per event of its scan in each task's hash map, past memory, and spilled it to
        disk. Shuffled by key first, that aggregation runs after the shuffle, on a task's share of the keys, in the
        stage that merges the sessions."""
        # session_window drops rows without a time: the others get one far before any valid time
        ts = f"timestamp_millis(CASE WHEN {ACCEPTED} THEN wm_t ELSE {number(_SESSION_PARKING_MS)} END)"
        session = F.expr(f"session_window({ts}, '{window.gap_ms} milliseconds')").alias("wm_session")
        aggregated = (
            classified.repartition(*self.keys)
            .groupBy(*self.keys, session, "wm_reason")
            .agg(*[F.expr(e) for e in (*self.partial_exprs(), "count(1) AS wm_events", "max(wm_t) AS wm_max_t")])
        )

        return aggregated.selectExpr(
            *[ident(k) for k in self.keys],
            f"CASE WHEN {ACCEPTED} THEN CAST(unix_millis(wm_session.start) AS BIGINT) END AS window_start",
            f"CASE WHEN {ACCEPTED} THEN CAST(unix_millis(wm_session.end) AS BIGINT) END AS window_end",
            *[ident(c) for c in self.partial_columns()],
            *_counters_by_reason("wm_events"),
        )
