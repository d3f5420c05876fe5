"""Reading a round's marks and segments, the row-local sanity rules as columns (``core.controller``'s
quarantine reasons), and the fast path's one scan: per (stream, writer, segment) aggregates of the round."""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StructType,
)

from airflow_provider_wm.contracts import ControllerRequest
from airflow_provider_wm.core.controller import (
    MarkKind,
    Quarantine,
)
from airflow_provider_wm.core.names import STREAM_NAME_PATTERN
from airflow_provider_wm.core.segments import Segment, overlapping_in_epoch
from spark_jobs.common import (
    conform,
    empty_frame,
    read_dataset,
    read_parquet_or_empty,
)
from spark_jobs.controller.schemas import (
    DEFERRED,
    KEYS,
    MARKS_SCHEMA,
    OPTIONAL_COLUMNS,
    PROGRESS_COLUMNS,
    SEGMENTS_SCHEMA,
    SHUTDOWN,
    STREAM_NAME_REGEX,
    VALUE,
    VALUE_KINDS,
)
from spark_jobs.sql_text import invalid_time

__all__ = [
    "aggregate_marks",
    "count_marks",
    "in_round",
    "invalid_key",
    "is_known",
    "is_sequenced",
    "known_segment_sql",
    "names_unknown_segment",
    "nullable_key",
    "read_marks",
    "read_segments",
    "round_marks",
    "row_local_reason",
    "sequenced_in_round",
    "tag_marks",
    "with_key",
]


def read_marks(spark: SparkSession, path: str) -> DataFrame:
    """The marks with ``MARKS_SCHEMA``'s columns, types checked (:func:`spark_jobs.common.conform`); the
    optional progress and key columns are null when absent. No dataset yet is no marks."""
    marks = read_dataset(spark, path)
    if marks is None:
        return with_key(empty_frame(spark, MARKS_SCHEMA))
    present = set(marks.columns)
    missing = [c for c in OPTIONAL_COLUMNS if c not in present]
    required = StructType([f for f in MARKS_SCHEMA.fields if f.name not in missing])
    marks = conform(marks, required, path)
    for name in missing:
        marks = marks.withColumn(name, F.lit(None).cast(MARKS_SCHEMA[name].dataType))
    return with_key(marks.select(*MARKS_SCHEMA.fieldNames()))


def with_key(frame: DataFrame) -> DataFrame:
    """``wm_key`` as the job uses it: ``""`` for none (marks and older states have nulls)."""
    return frame.withColumn("wm_key", F.coalesce("wm_key", F.lit("")))


def nullable_key() -> Column:
    """``wm_key`` as the job writes it for people to read (quarantine rows): null for none."""
    return F.when(F.col("wm_key") != "", F.col("wm_key")).alias("wm_key")


def read_segments(spark: SparkSession, path: str) -> tuple[dict[str, dict[int, Segment]], int]:
    """Valid segments per stream (kept on the driver: the job uses them as literals), and how many segment
    rows were invalid.

    Segments are few (a stream has tens to thousands), so they are collected and validated by the reference
    (``core.segments.Segment``); a row with a bad range or id, an id defined twice with different ranges, or
    segments of one epoch whose ranges overlap (:func:`~airflow_provider_wm.core.segments.overlapping_in_epoch`)
    are left out and counted.
    """
    segments = read_parquet_or_empty(spark, path, SEGMENTS_SCHEMA)
    rows = list(dict.fromkeys(segments.collect()))  # one row per segment: small; duplicates dropped here, no shuffle
    by_stream: dict[str, dict[int, Segment]] = {}
    invalid = 0
    conflicting: set[tuple[str, int]] = set()
    for row in rows:
        try:
            segment = Segment(row["segment_id"], row["key_start"], row["key_end"])
        except (TypeError, ValueError):
            invalid += 1
            continue
        if row["stream"] is None:
            invalid += 1
            continue
        known = by_stream.setdefault(row["stream"], {})
        if segment.segment_id in known:
            conflicting.add((row["stream"], segment.segment_id))
        known[segment.segment_id] = segment
    for stream, known in by_stream.items():
        conflicting.update((stream, segment_id) for segment_id in overlapping_in_epoch(known.values()))
    for stream, segment_id in conflicting:
        invalid += sum(1 for r in rows if (r["stream"], r["segment_id"]) == (stream, segment_id))
        del by_stream[stream][segment_id]
    return by_stream, invalid


def known_segment_sql(segments: dict[str, dict[int, Segment]], segment: str) -> str:
    """A SQL expression: whether ``segment`` (a SQL expression of a segment id) is a valid segment of the row's
    ``stream``, never null. The segments are on the driver already (:func:`read_segments`), so the lookup is
    a literal, not a broadcast join (a Spark job of its own): one ``IN`` list per stream, which Spark turns into
    a hash set once it has more than ten ids, so a row costs one lookup however many segments a stream has.
    One string is one Py4J call, where a literal per id would cost a few round trips each in a classic session.

    Streams whose name fails ``STREAM_NAME_PATTERN`` (the only names that would need quoting) are left out:
    their marks are quarantined for the name before a segment is looked at.

    Example: ``{"s": {0: ..., 1: ...}}``, ``"segment_id"`` ->
    ``coalesce(CASE stream WHEN 's' THEN segment_id IN (0,1) ELSE false END, false)``.
    """
    cases = [
        f"WHEN '{stream}' THEN {segment} IN ({','.join(str(i) for i in sorted(by_id))})"
        for stream, by_id in sorted(segments.items())
        if by_id and re.fullmatch(STREAM_NAME_PATTERN, stream)
    ]
    if not cases:
        return "false"
    return f"coalesce(CASE stream {' '.join(cases)} ELSE false END, false)"


def is_known(segments: dict[str, dict[int, Segment]], segment_id: str = "segment_id") -> Column:
    """Whether the column ``segment_id`` is a valid segment of the row's ``stream`` (:func:`known_segment_sql`)."""
    return F.expr(known_segment_sql(segments, segment_id))


def names_unknown_segment(segments: dict[str, dict[int, Segment]]) -> Column:
    """Whether a mark's ``position`` names a segment that is not a valid segment of its stream (null for a
    mark without a position)."""
    return F.expr(f"exists(map_keys(position), segment -> NOT {known_segment_sql(segments, 'segment')})")


def row_local_reason(*, cheap_only: bool = False) -> Column:
    """The sanity checks that need nothing but the row itself, in the reference's order.

    ``cheap_only`` leaves out the stream-name regex and the per-row offset arrays (most of the scan's
    cost): the fast path finds those rows from its aggregates instead (a stream whose name fails the
    pattern, a segment group with a negative or missing offset) and sends them to the exact path, which
    applies every check.
    """
    value = F.col("kind").isin(*VALUE_KINDS)
    offsets = F.map_values("position")
    bad_stream = F.col("stream").isNull()
    bad_key = F.lit(False)
    if not cheap_only:
        bad_stream = bad_stream | ~F.col("stream").rlike(STREAM_NAME_REGEX)
        bad_key = invalid_key()
    reason = (
        F.when(bad_stream, Quarantine.INVALID_STREAM.value)
        .when(bad_key, Quarantine.INVALID_WM_KEY.value)
        .when(F.col("writer_id").isNull() | (F.col("writer_id") == ""), Quarantine.INVALID_WRITER.value)
        .when(
            F.col("kind").isNull() | ~F.col("kind").isin(*[k.value for k in MarkKind]),
            Quarantine.UNKNOWN_KIND.value,
        )
        .when(F.expr(invalid_time("reported_at_ms")), Quarantine.INVALID_REPORTED_AT.value)
        .when(value & F.expr(invalid_time("time_ms")), Quarantine.INVALID_TIME_VALUE.value)
        .when(value & F.col("position").isNull(), Quarantine.MISSING_POSITION.value)
    )
    if cheap_only:
        return reason
    return reason.when(
        value
        & ((F.size(F.array_compact(offsets)) < F.size(offsets)) | (F.coalesce(F.array_min(offsets), F.lit(0)) < 0)),
        Quarantine.NEGATIVE_OFFSET.value,
    )


def invalid_key() -> Column:
    """A ``wm_key`` that is set but not a valid name (``core.controller.Quarantine.INVALID_WM_KEY``)."""
    return (F.col("wm_key") != "") & ~F.col("wm_key").rlike(STREAM_NAME_REGEX)


def count_marks(marks: DataFrame, request: ControllerRequest) -> tuple[int, int, bool, int, int]:
    """(late marks, marks reported up to now, whether the round has a sequenced mark, deferred marks, the round's
    marks: :func:`in_round`). The counts are one pass over the report times alone, every mark's; whether a mark
    of the round is sequenced is a second one over the round's row groups only (the report-time filter is pushed
    down to Parquet), stopping at the first: reading the kind and progress columns of every mark ever reported
    would cost more than both. Neither reads the columns the main scan needs. Late marks: see
    ``core.controller.late_marks``; deferred ones are reported after ``now_ms`` and wait for a later round
    (:func:`tag_marks`)."""
    reported = F.col("reported_at_ms")
    this_round = in_round(request.now_ms, request.processed_until_ms)
    past = F.lit(False) if request.processed_until_ms is None else reported <= F.lit(request.processed_until_ms)
    row = marks.agg(
        F.count(F.when(past, 1)).alias("past"),
        F.count(F.when(reported <= F.lit(request.now_ms), 1)).alias("total"),
        F.count(F.when(reported > F.lit(request.now_ms), 1)).alias("deferred"),
        F.count(F.when(this_round, 1)).alias("in_round"),
    ).first()  # small: one row of counts
    assert row is not None
    round_size = int(row["in_round"])
    has_sequenced = round_size > 0 and marks.where(this_round).where(is_sequenced()).limit(1).count() > 0
    late = 0 if request.processed_until_ms is None else max(0, int(row["past"]) - request.processed_marks)
    return late, int(row["total"]), has_sequenced, int(row["deferred"]), round_size


def sequenced_in_round(request: ControllerRequest) -> Column:
    """A sequenced mark of this round: it goes to gap-free progress, not to the plain marks' scan."""
    return F.coalesce(is_sequenced() & in_round(request.now_ms, request.processed_until_ms), F.lit(False))


def in_round(now_ms: int, processed_until_ms: int | None) -> Column:
    """``core.controller.in_round``: ``processed_until < reported_at <= now``, or no report time."""
    reported = F.col("reported_at_ms")
    after_previous = F.lit(True) if processed_until_ms is None else reported > F.lit(processed_until_ms)
    return reported.isNull() | ((reported <= F.lit(now_ms)) & after_previous)


def tag_marks(marks: DataFrame, now_ms: int, processed_until_ms: int | None) -> DataFrame:
    """Marks of this round (and deferred ones) with a ``tag``: a cheap row-local quarantine reason, VALUE,
    SHUTDOWN, or DEFERRED for marks reported after ``now_ms`` (they wait for a later round)."""
    reported = F.col("reported_at_ms")
    this_round = in_round(now_ms, processed_until_ms)
    deferred = reported > F.lit(now_ms)
    kind_tag = F.when(F.col("kind") == MarkKind.SHUTDOWN.value, SHUTDOWN).otherwise(VALUE)
    tag = F.when(deferred, DEFERRED).otherwise(F.coalesce(row_local_reason(cheap_only=True), kind_tag))
    return marks.where(this_round | deferred).withColumn("tag", tag)


def round_marks(marks: DataFrame, request: ControllerRequest, dense: DataFrame | None) -> DataFrame:
    """The rows of the round's scan (:func:`tag_marks`) in one read of ``marks``: the plain marks and, with
    ``dense`` (``ORIGIN_KEYS`` and ``prefix_end`` of gap-free progress's dense origins), the sequenced marks of
    the round it releases, as VALUE marks with null progress columns. A dense origin's sequences are whole
    one-chunk marks, so each released sequence is its mark: committed 3, prefix end 5 releases the marks of
    sequences 4 and 5. The round's other sequenced marks (waiting, or of an origin on the exact path) are
    left out; without ``dense``, all of them."""
    sequenced = sequenced_in_round(request)
    if dense is None:
        return tag_marks(marks.where(~sequenced), request.now_ms, request.processed_until_ms)
    keys = [*KEYS, "origin_id"]
    decided = F.broadcast(dense.select(*[F.col(k).alias(f"dense_{k}") for k in keys], "prefix_end"))
    rows = marks.withColumn("dense_origin", F.when(sequenced, F.coalesce("origin_id", F.lit(""))))
    on = [F.col(k) == F.col(f"dense_{k}") for k in KEYS] + [F.col("dense_origin") == F.col("dense_origin_id")]
    released = F.coalesce(F.col("seq") <= F.col("prefix_end"), F.lit(False))
    kept = (
        rows.join(decided, on, "left")
        .withColumn("released", released)
        .where(F.col("dense_origin").isNull() | F.col("released"))
        .withColumns({c: F.when(~F.col("released"), F.col(c)) for c in PROGRESS_COLUMNS})
    )
    tagged = tag_marks(kept, request.now_ms, request.processed_until_ms)
    return tagged.select(*marks.columns, F.when(F.col("released"), VALUE).otherwise(F.col("tag")).alias("tag"))


def aggregate_marks(rows: DataFrame) -> DataFrame:
    """Per ``(stream, wm_key, writer_id, tag, segment_id)``: mark count and min/max of time, offset, report time.

    Only VALUE rows are exploded; ``segment_id`` is null for other tags and for empty positions.
    """
    exploded = rows.select(
        *KEYS,
        "tag",
        "time_ms",
        "reported_at_ms",
        F.posexplode_outer(F.when(F.col("tag") == VALUE, F.col("position"))).alias("pos", "segment_id", "offset"),
    )
    first_row_of_mark = F.col("pos").isNull() | (F.col("pos") == 0)
    return exploded.groupBy(*KEYS, "tag", "segment_id").agg(
        F.count(F.when(first_row_of_mark, 1)).alias("marks"),
        F.min("time_ms").alias("min_time_ms"),
        F.max("time_ms").alias("max_time_ms"),
        F.min("offset").alias("min_offset"),
        F.count(F.when(F.col("segment_id").isNotNull() & F.col("offset").isNull(), 1)).alias("null_offsets"),
        F.max("offset").alias("max_offset"),
        F.min("reported_at_ms").alias("min_reported_at_ms"),
        F.max("reported_at_ms").alias("max_reported_at_ms"),
    )


def is_sequenced() -> Column:
    """A note or commit with any progress column set (``core.controller.WriterMark.is_sequenced``)."""
    return F.col("kind").isin(*VALUE_KINDS) & (
        F.col("origin_id").isNotNull()
        | F.col("seq").isNotNull()
        | F.col("chunk").isNotNull()
        | F.col("last_chunk").isNotNull()
    )
