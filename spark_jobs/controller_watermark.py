"""Spark job: one controller-watermark round (Pravega), DataFrame-native.

The rules are those of :mod:`airflow_provider_wm.core.controller` (the reference); a differential test feeds
random rounds to both and requires identical results.

Plan, chosen so that the marks are scanned once in the common case:

1. *Fast path.* One scan tags every mark of the round (row-local sanity checks, no joins) and explodes
   positions into a hash aggregation per ``(stream, writer, segment)`` of primitive columns only
   (min/max time, min/max offset, min/max report time, mark count). The result has one row per writer
   and segment, so everything after it is small.
2. *Suspect writers.* From those aggregates and the stored state, a writer whose marks might be rejected
   (earliest time below its stored time, lowest offset below a stored offset, unknown segment, shutdown
   of an unknown writer) is a suspect. For every other writer, all sane marks are accepted, and the
   aggregates are exactly what the rules need.
3. *Exact path* (only when there are bad rows or suspects): a second scan keeps bad rows and the
   suspects' marks, decides each mark exactly, writes the bad ones to the quarantine with their reason,
   and re-aggregates the suspects' accepted marks.
4. Writer states, participation, emission and the stream cut (upper bound by a self-join on overlapping
   key ranges) run on the small frames: the writers' state is written and read back, and one query gives
   every watermark's verdict and upper bound, completed on the driver by ``core.segments.complete_cut``.

Spark actions are the fixed cost of a small round (a few hundred milliseconds each, most of a round over
Spark Connect), so each one is accounted for: a round with no sequenced and no bad mark runs seven (the
segments, one count over the report-time and progress columns, the scan, the round's checks, the writers'
state, the verdicts, the streams' state); the exact path, gap-free progress and a previous progress state
add their own.

Outputs: the next controller state (``writers/``, ``streams/`` Parquet), the quarantine of bad and
rejected marks with a ``reason``, and ``manifest.json`` written atomically last.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from airflow_provider_wm.contracts import ControllerManifest, ControllerRequest
from airflow_provider_wm.core.controller import (
    MarkKind,
    Quarantine,
    Rejection,
    StreamStatus,
)
from airflow_provider_wm.core.names import STREAM_NAME_PATTERN, watermark_label
from airflow_provider_wm.core.progress import MAX_CHUNKS, MAX_PENDING_SEQUENCES
from airflow_provider_wm.core.segments import Segment, complete_cut, upper_bound
from spark_jobs.common import (
    active_session,
    conform,
    empty_frame,
    invalid_time,
    read_dataset,
    read_parquet_or_empty,
    size_shuffles,
    submit_main,
)

POSITION = MapType(LongType(), LongType())

MARKS_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("writer_id", StringType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("kind", StringType()),
        StructField("reported_at_ms", LongType()),
        # optional (gap-free progress): absent columns read as nulls
        StructField("origin_id", StringType()),
        StructField("seq", LongType()),
        StructField("chunk", LongType()),
        StructField("last_chunk", BooleanType()),
        # optional (keyed watermarks): absent or null is the stream's unkeyed watermark
        StructField("wm_key", StringType()),
    ]
)
PROGRESS_COLUMNS = ("origin_id", "seq", "chunk", "last_chunk")
OPTIONAL_COLUMNS = (*PROGRESS_COLUMNS, "wm_key")
SEGMENTS_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("segment_id", LongType()),
        StructField("key_start", DoubleType()),
        StructField("key_end", DoubleType()),
    ]
)
WRITERS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("alive", BooleanType()),
        StructField("lagging_since_ms", LongType()),
    ]
)
STREAMS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("first_mark_at_ms", LongType()),
        StructField("wm_lower_ms", LongType()),
        StructField("wm_upper_ms", LongType()),
        StructField("wm_cut", POSITION),
        StructField("wm_computed_at_ms", LongType()),
    ]
)

ORIGINS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("origin_id", StringType()),
        StructField("committed_seq", LongType()),
    ]
)
PENDING_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("origin_id", StringType()),
        StructField("seq", LongType()),
        StructField("chunk", LongType()),
        StructField("last_chunk", BooleanType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("reported_at_ms", LongType()),
        StructField("kind", StringType()),
    ]
)

VALUE, SHUTDOWN, DEFERRED = "VALUE", "SHUTDOWN", "DEFERRED"
VALUE_KINDS = (MarkKind.NOTE.value, MarkKind.COMMIT.value)
#: Inside the job ``wm_key`` is never null: ``""`` is the stream's unkeyed watermark, so that joins on it
#: match (null never equals null). A watermark is identified by ``STREAM_KEYS``, a writer of it by ``KEYS``.
STREAM_KEYS = ["stream", "wm_key"]
KEYS = [*STREAM_KEYS, "writer_id"]
#: Java regex of a whole valid stream name (``\z``: no trailing newline, as Python's fullmatch).
STREAM_NAME_REGEX = f"^(?:{STREAM_NAME_PATTERN})\\z"
WAITING_SAMPLE = 20
#: Reasons counted in the round's totals only: the row names no valid watermark (``core`` does the same).
UNREPORTED = (Quarantine.INVALID_STREAM.value, Quarantine.INVALID_WM_KEY.value)


# --------------------------------------------------------------------------------------------- inputs


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


def read_segments(spark: SparkSession, path: str) -> tuple[DataFrame, dict[str, dict[int, Segment]], int]:
    """Valid segments as a frame and per stream, and how many segment rows were invalid.

    Segments are few (a stream has tens to thousands), so they are collected and validated by the reference
    (``core.segments.Segment``); a row with a bad range or id, or an id defined twice with different ranges,
    is left out and counted.
    """
    # small: a stream has few segments; duplicates are dropped here, not by a shuffle
    rows = list(dict.fromkeys(read_parquet_or_empty(spark, path, SEGMENTS_SCHEMA).collect()))
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
    for stream, segment_id in conflicting:
        invalid += sum(1 for r in rows if (r["stream"], r["segment_id"]) == (stream, segment_id))
        del by_stream[stream][segment_id]
    frame = spark.createDataFrame(
        [(stream, s.segment_id, s.key_start, s.key_end) for stream, segs in by_stream.items() for s in segs.values()],
        SEGMENTS_SCHEMA,
    )
    return frame, by_stream, invalid


def _row_local_reason(*, cheap_only: bool = False) -> Column:
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
        .when(invalid_time(F.col("reported_at_ms")), Quarantine.INVALID_REPORTED_AT.value)
        .when(value & invalid_time(F.col("time_ms")), Quarantine.INVALID_TIME_VALUE.value)
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


def count_marks(marks: DataFrame, request: ControllerRequest) -> tuple[int, int, bool]:
    """(late marks, marks reported up to now, whether the round has a sequenced mark) in one pass over the
    report-time and progress columns only, so the main scan can still skip old row groups. Late marks: see
    ``core.controller.late_marks``."""
    reported = F.col("reported_at_ms")
    past = F.lit(False) if request.processed_until_ms is None else reported <= F.lit(request.processed_until_ms)
    row = marks.agg(
        F.count(F.when(past, 1)).alias("past"),
        F.count(F.when(reported <= F.lit(request.now_ms), 1)).alias("total"),
        F.count(F.when(sequenced_in_round(request), 1)).alias("sequenced"),
    ).first()
    assert row is not None
    late = 0 if request.processed_until_ms is None else max(0, int(row["past"]) - request.processed_marks)
    return late, int(row["total"]), int(row["sequenced"]) > 0


def sequenced_in_round(request: ControllerRequest) -> Column:
    """A sequenced mark of this round: it goes to gap-free progress, not to the plain marks' scan."""
    return F.coalesce(is_sequenced() & in_round_condition(request.now_ms, request.processed_until_ms), F.lit(False))


def in_round_condition(now_ms: int, processed_until_ms: int | None) -> Column:
    """``core.controller.in_round``: ``processed_until < reported_at <= now``, or no report time."""
    reported = F.col("reported_at_ms")
    after_previous = F.lit(True) if processed_until_ms is None else reported > F.lit(processed_until_ms)
    return reported.isNull() | ((reported <= F.lit(now_ms)) & after_previous)


def tag_marks(marks: DataFrame, now_ms: int, processed_until_ms: int | None) -> DataFrame:
    """Marks of this round (and deferred ones) with a ``tag``: a cheap row-local quarantine reason, VALUE,
    SHUTDOWN, or DEFERRED for marks reported after ``now_ms`` (they wait for a later round)."""
    reported = F.col("reported_at_ms")
    in_round = in_round_condition(now_ms, processed_until_ms)
    deferred = reported > F.lit(now_ms)
    kind_tag = F.when(F.col("kind") == MarkKind.SHUTDOWN.value, SHUTDOWN).otherwise(VALUE)
    tag = F.when(deferred, DEFERRED).otherwise(F.coalesce(_row_local_reason(cheap_only=True), kind_tag))
    return marks.where(in_round | deferred).withColumn("tag", tag)


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


# ------------------------------------------------------------------------------------ suspects & exact


def find_suspects(groups: DataFrame, writers0: DataFrame, segments: DataFrame) -> DataFrame:
    """Writers for which "every sane mark is accepted" might not hold; see the module docstring."""
    value = groups.where(F.col("tag") == VALUE)
    unknown_segment = (
        value.where(F.col("segment_id").isNotNull())
        .join(F.broadcast(segments.select("stream", "segment_id")), ["stream", "segment_id"], "left_anti")
        .select(*KEYS)
    )
    earliest = value.groupBy(*KEYS).agg(F.min("min_time_ms").alias("earliest"))
    time_back = (
        earliest.join(F.broadcast(writers0.select(*KEYS, "time_ms")), KEYS)
        .where(F.col("earliest") < F.col("time_ms"))
        .select(*KEYS)
    )
    stored_offsets = writers0.select(*KEYS, F.explode("position").alias("segment_id", "stored_offset"))
    position_back = (
        value.join(F.broadcast(stored_offsets), [*KEYS, "segment_id"])
        .where(F.col("min_offset") < F.col("stored_offset"))
        .select(*KEYS)
    )
    bad_offsets = value.where((F.col("min_offset") < 0) | (F.col("null_offsets") > 0)).select(*KEYS)
    unknown_writer = (
        groups.where(F.col("tag") == SHUTDOWN)
        .select(*KEYS)
        .join(F.broadcast(writers0.select(*KEYS)), KEYS, "left_anti")
        .join(F.broadcast(value.select(*KEYS)), KEYS, "left_anti")
    )
    return unknown_segment.union(time_back).union(position_back).union(bad_offsets).union(unknown_writer).distinct()


def decide_exactly(candidates: DataFrame, writers0: DataFrame, segments: DataFrame) -> DataFrame:
    """Each candidate mark with its final ``reason`` (null: accepted). Uses joins and a higher-order
    function, so it only runs on bad rows and suspect writers' marks."""
    known = segments.groupBy("stream").agg(F.collect_set("segment_id").alias("known_segments"))
    stored = writers0.select(
        *KEYS, F.col("time_ms").alias("stored_time_ms"), F.col("position").alias("stored_position")
    )
    rows = candidates.join(F.broadcast(known), "stream", "left").join(F.broadcast(stored), KEYS, "left")
    value = F.col("tag") == VALUE
    unknown_segment = (
        F.size(
            F.array_except(F.map_keys("position"), F.coalesce("known_segments", F.array().cast(ArrayType(LongType()))))
        )
        > 0
    )
    goes_back = F.exists(
        F.map_entries("position"),
        lambda e: e["value"] < F.coalesce(F.element_at(F.col("stored_position"), e["key"]), F.lit(-1)),
    )
    row_local = _row_local_reason()
    reason = (
        F.when(row_local.isNotNull(), row_local)
        .when(value & unknown_segment, Quarantine.UNKNOWN_SEGMENT.value)
        .when(
            value & F.col("stored_time_ms").isNotNull() & (F.col("time_ms") < F.col("stored_time_ms")),
            Rejection.INVALID_TIME.value,
        )
        .when(value & F.col("stored_position").isNotNull() & goes_back, Rejection.INVALID_POSITION.value)
    )
    decided = rows.withColumn("reason", reason).localCheckpoint()  # read twice below: scan the marks once
    known_writers = (
        decided.where(value & F.col("reason").isNull())
        .select(*KEYS)
        .union(writers0.select(*KEYS))
        .distinct()
        .withColumn("known_writer", F.lit(True))
    )
    unknown_writer = (F.col("tag") == SHUTDOWN) & F.col("reason").isNull() & F.col("known_writer").isNull()
    return (
        decided.join(F.broadcast(known_writers), KEYS, "left")
        .withColumn("reason", F.when(unknown_writer, Rejection.UNKNOWN_WRITER.value).otherwise(F.col("reason")))
        .drop("known_segments", "stored_time_ms", "stored_position", "known_writer")
    )


# ---------------------------------------------------------------------------------- gap-free progress

ORIGIN_KEYS = [*KEYS, "origin_id"]


def is_sequenced() -> Column:
    """A note or commit with any progress column set (``core.controller.WriterMark.is_sequenced``)."""
    return F.col("kind").isin(*VALUE_KINDS) & (
        F.col("origin_id").isNotNull()
        | F.col("seq").isNotNull()
        | F.col("chunk").isNotNull()
        | F.col("last_chunk").isNotNull()
    )


@dataclass(frozen=True)
class _Progress:
    released: DataFrame  # one mark (MARKS_SCHEMA, progress columns null) per released sequence
    bad: DataFrame  # quarantined sequenced marks: MARKS_SCHEMA + reason
    seen: DataFrame  # KEYS of writers with a sane sequenced mark in the round
    origins: DataFrame  # next ORIGINS_STATE_SCHEMA
    pending: DataFrame  # next PENDING_STATE_SCHEMA


def advance_origins(sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: DataFrame) -> _Progress:
    """``core.progress.advance`` for every origin with marks in the round.

    Two paths. A *dense* origin, the common case, is decided by fixed-width aggregates per origin
    (:func:`origin_decisions`): every chunk of it in the round and waiting in the state is a whole one-chunk
    sequence, none is bad, all numbers are distinct, past the committed one and within reach. Its prefix
    then ends one before the first number missing after the committed one (committed 3, sequences 4 5 7
    -> 5; 6 is missing), and its rows are released or kept waiting through a broadcast join, with no
    per-sequence shuffle. Every other origin with marks in the round takes the exact path
    (:func:`exact_origins`).
    """
    sequenced = sequenced.withColumn("origin_id", F.coalesce("origin_id", F.lit("")))
    # one row per origin with marks in the round: small
    decisions = origin_decisions(sequenced, origins0, pending0, segments).localCheckpoint()
    dense = F.broadcast(decisions.where("dense").select(*ORIGIN_KEYS, "committed_seq", "prefix_end"))
    released_now = F.col("seq") <= F.col("prefix_end")
    pending_columns = PENDING_STATE_SCHEMA.fieldNames()
    dense_rows = (
        sequenced.join(dense, ORIGIN_KEYS)
        .select(*pending_columns, "prefix_end")
        .unionByName(pending0.join(dense, ORIGIN_KEYS).select(*pending_columns, "prefix_end"))
    )
    progress_nulls = [F.lit(None).cast(MARKS_SCHEMA[c].dataType).alias(c) for c in PROGRESS_COLUMNS]
    released = dense_rows.where(released_now).select(
        "stream", "writer_id", "time_ms", "position", "kind", "reported_at_ms", *progress_nulls, "wm_key"
    )
    dense_origins = (
        decisions.where("dense")
        .select(*ORIGIN_KEYS, F.greatest("committed_seq", "prefix_end").alias("committed_seq"))
        .where(F.col("committed_seq") > 0)
    )
    waiting = dense_rows.where(~released_now).select(*pending_columns)
    seen = decisions.where("dense").select(*KEYS)
    other_origins0 = origins0.join(dense, ORIGIN_KEYS, "left_anti")
    other_pending0 = pending0.join(dense, ORIGIN_KEYS, "left_anti")
    if decisions.where(~F.col("dense")).isEmpty():
        bad_schema = StructType([*MARKS_SCHEMA.fields, StructField("reason", StringType())])
        return _Progress(
            released,
            empty_frame(sequenced.sparkSession, bad_schema),
            seen,
            other_origins0.unionByName(dense_origins),
            other_pending0.unionByName(waiting),
        )
    exact = exact_origins(sequenced.join(dense, ORIGIN_KEYS, "left_anti"), other_origins0, other_pending0, segments)
    return _Progress(
        exact.released.unionByName(released),
        exact.bad,
        exact.seen.unionByName(seen),
        exact.origins.unionByName(dense_origins),
        exact.pending.unionByName(waiting),
    )


def sequence_reason() -> Column:
    """Why a sequenced mark is bad on its own (row-local checks, unknown segment, bad numbers), or null;
    needs the stream's ``known_segments``."""
    unknown_segment = (
        F.size(
            F.array_except(F.map_keys("position"), F.coalesce("known_segments", F.array().cast(ArrayType(LongType()))))
        )
        > 0
    )
    invalid_sequence = (
        F.col("seq").isNull()
        | (F.col("seq") < 1)
        | F.col("chunk").isNull()
        | (F.col("chunk") < 1)
        | (F.col("chunk") > MAX_CHUNKS)
        | F.col("last_chunk").isNull()
    )
    row_local = _row_local_reason()
    return (
        F.when(row_local.isNotNull(), row_local)
        .when(unknown_segment, Quarantine.UNKNOWN_SEGMENT.value)
        .when(invalid_sequence, Quarantine.INVALID_SEQUENCE.value)
    )


def origin_decisions(sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: DataFrame) -> DataFrame:
    """Per origin with marks in the round: ``dense`` (see :func:`advance_origins`), its committed sequence
    and, when dense, the end of its gap-free prefix.

    Fixed-width aggregates only (no per-origin lists, which Spark sorts once an aggregation holds more
    than a few hundred groups). Each sequence number sets bit ``seq - committed - 1`` of a 64-bit word
    (word ``(seq - committed - 1) div 64``); a word's mark count above its bit count is a duplicate; the
    prefix ends at the first unset bit: committed 3, sequences 4 5 7 -> word 0 = ``0b1011`` -> 5. The
    checks of a mark's stream, key and writer are made once per origin, and those of its position (offsets,
    unknown segments) on the exploded positions, where they are scalar comparisons and a broadcast join.
    """
    committed_seq = F.coalesce("committed_seq", F.lit(0).cast(LongType()))
    committed = F.broadcast(origins0.select(*ORIGIN_KEYS, "committed_seq"))
    lone = (F.col("chunk") == 1) & F.col("last_chunk")
    valid_numbers = F.col("seq").isNotNull() & F.col("chunk").isNotNull() & F.col("last_chunk").isNotNull()
    clean = _row_local_reason(cheap_only=True).isNull() & F.coalesce(valid_numbers & lone, F.lit(False))
    numbers = (
        sequenced.select(*ORIGIN_KEYS, "seq", clean.alias("clean"), F.lit(1).alias("arrived"))
        .unionByName(pending0.select(*ORIGIN_KEYS, "seq", lone.alias("clean"), F.lit(0).alias("arrived")))
        .join(committed, ORIGIN_KEYS, "left")
        .select(
            *ORIGIN_KEYS,
            committed_seq.alias("committed_seq"),
            # null for a number below 1 (not clean), so that no number can overflow
            F.when(F.col("seq") >= 1, F.col("seq") - committed_seq - 1).alias("bit"),
            "clean",
            "arrived",
        )
    )
    in_reach = (F.col("bit") >= 0) & (F.col("bit") < F.lit(MAX_PENDING_SEQUENCES))
    words = numbers.groupBy(*ORIGIN_KEYS, "committed_seq", F.floor(F.col("bit") / 64).alias("word")).agg(
        F.min(F.coalesce(F.col("clean") & in_reach, F.lit(False)).cast("int")).alias("clean"),
        F.max("arrived").alias("arrived"),
        F.count("*").alias("marks"),
        F.bit_or(F.when(in_reach, F.expr("shiftleft(CAST(1 AS BIGINT), CAST(pmod(bit, 64) AS INT))"))).alias("bits"),
    )
    full = F.col("bits") == F.lit(-1)
    per_origin = words.groupBy(*ORIGIN_KEYS, "committed_seq").agg(
        F.min("clean").alias("clean"),
        F.max("arrived").alias("arrived"),
        (F.sum("marks") == F.sum(F.bit_count(F.coalesce("bits", F.lit(0))))).alias("distinct"),
        F.collect_list(F.when(full, F.col("word"))).alias("full_words"),
        # no entry for a null word (a mark without a number: not clean)
        F.map_from_entries(F.collect_list(F.when(F.col("word").isNotNull(), F.struct("word", "bits")))).alias("words"),
    )
    exploded = sequenced.select(*ORIGIN_KEYS, F.explode("position").alias("segment_id", "offset"))
    known = F.broadcast(segments.select("stream", "segment_id", F.lit(True).alias("known")))
    bad_positions = (
        exploded.join(known, ["stream", "segment_id"], "left")
        .where(F.col("known").isNull() | F.col("offset").isNull() | (F.col("offset") < 0))
        .select(*ORIGIN_KEYS)
        .distinct()
        .withColumn("bad_position", F.lit(True))
    )
    valid_keys = F.col("stream").rlike(STREAM_NAME_REGEX) & ~invalid_key()
    dense = (F.col("clean") == 1) & F.col("distinct") & valid_keys & F.col("bad_position").isNull()
    # the first word that is not full, and the first unset bit in it (the trailing ones of its bits)
    first_open = F.array_min(
        F.array_except(F.sequence(F.lit(0).cast(LongType()), F.size("full_words").cast(LongType())), "full_words")
    )
    open_bits = F.coalesce(F.try_element_at("words", first_open), F.lit(0).cast(LongType()))
    trailing_ones = F.bit_count(open_bits.bitwiseXOR(open_bits + 1)) - 1
    # an origin with chunks waiting but none arriving is not touched by the round (as in core)
    arrivals = per_origin.where(F.col("arrived") == 1)
    return arrivals.join(F.broadcast(bad_positions), ORIGIN_KEYS, "left").select(
        *ORIGIN_KEYS,
        "committed_seq",
        F.coalesce(dense, F.lit(False)).alias("dense"),
        F.when(dense, F.col("committed_seq") + first_open * 64 + trailing_ones).alias("prefix_end"),
    )


def exact_origins(sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: DataFrame) -> _Progress:
    """The exact path: window functions in arrival order, for origins that are not dense.

    Arrival order is (pending first, report time, chunk, time); the first of duplicates is kept. The
    frame is checkpointed once and read by every output below.
    """
    spark = sequenced.sparkSession
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    # per-sequence aggregations and sorts can be as large as the marks themselves: not the small frames the
    # rest of the round sizes its shuffles for (restored below)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(64, int(shuffle_partitions or 0))))
    try:
        return _exact_origins(sequenced, origins0, pending0, segments)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))


def _exact_origins(sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: DataFrame) -> _Progress:
    known = segments.groupBy("stream").agg(F.collect_set("segment_id").alias("known_segments"))
    checked = (
        sequenced.join(F.broadcast(known), "stream", "left")
        .withColumn("reason", sequence_reason())
        .drop("known_segments")
        .withColumn("origin_id", F.coalesce("origin_id", F.lit("")))
        .localCheckpoint()
    )
    marks_columns = MARKS_SCHEMA.fieldNames()
    locally_bad = checked.where(F.col("reason").isNotNull())
    sane = checked.where(F.col("reason").isNull()).drop("reason")
    touched = sane.select(*ORIGIN_KEYS).distinct()
    committed = origins0.select(*ORIGIN_KEYS, "committed_seq")
    new = (
        sane.join(F.broadcast(committed), ORIGIN_KEYS, "left")
        .withColumn("committed_seq", F.coalesce("committed_seq", F.lit(0).cast(LongType())))
        .withColumn(
            "reason",
            F.when(F.col("seq") <= F.col("committed_seq"), Quarantine.SEQUENCE_ALREADY_COMMITTED.value).when(
                F.col("seq") > F.col("committed_seq") + F.lit(MAX_PENDING_SEQUENCES),
                Quarantine.SEQUENCE_TOO_FAR_AHEAD.value,
            ),
        )
        .withColumn("is_new", F.lit(1))
    )
    old = (
        pending0.join(F.broadcast(touched), ORIGIN_KEYS, "left_semi")
        .join(F.broadcast(committed), ORIGIN_KEYS, "left")
        .withColumn("committed_seq", F.coalesce("committed_seq", F.lit(0).cast(LongType())))
        .withColumn("reason", F.lit(None).cast(StringType()))
        .withColumn("is_new", F.lit(0))
    )
    columns = [*PENDING_STATE_SCHEMA.fieldNames(), "committed_seq", "reason", "is_new"]
    seq_keys = [*ORIGIN_KEYS, "seq"]
    accepted_new = new.where(F.col("reason").isNull()).select(*columns)
    # Fast path: a one-chunk sequence (chunk 1, last) seen once in the round and not waiting in the state
    # cannot conflict with anything. The other sequences (usually few) and their waiting chunks take the
    # exact path: window functions in arrival order. The split is decided on narrow columns.
    per_seq = accepted_new.groupBy(*seq_keys).agg(
        F.count("*").alias("rows"), F.min(((F.col("chunk") == 1) & F.col("last_chunk")).cast("int")).alias("lone")
    )
    slow_keys = (
        per_seq.where((F.col("rows") > 1) | (F.col("lone") == 0))
        .select(*seq_keys)
        .union(per_seq.join(pending0.select(*seq_keys).distinct(), seq_keys, "left_semi").select(*seq_keys))
        .distinct()
        .withColumn("slow", F.lit(True))
        .localCheckpoint()
    )
    routed = accepted_new.join(F.broadcast(slow_keys), seq_keys, "left")
    fast = routed.where(F.col("slow").isNull()).drop("slow")
    slow = routed.where(F.col("slow").isNotNull()).drop("slow")
    arrived = old.join(F.broadcast(slow_keys), seq_keys, "left_semi").select(*columns).unionByName(slow)
    untouched_pending = old.join(F.broadcast(slow_keys), seq_keys, "left_anti").select(*columns)
    order = [F.col("is_new"), F.col("reported_at_ms"), F.col("chunk"), F.col("time_ms")]
    by_chunk = Window.partitionBy(*seq_keys, "chunk").orderBy(*order)
    by_last = Window.partitionBy(*seq_keys, "last_chunk").orderBy(*order)
    by_seq = Window.partitionBy(*seq_keys)
    if slow_keys.isEmpty():  # the common case: every sequence of the round takes the fast path
        arrived = arrived.limit(0)
    deduped = arrived.withColumn("dup", F.row_number().over(by_chunk) > 1)
    first = deduped.where(~F.col("dup"))
    lasts = first.withColumn("extra_last", F.col("last_chunk") & (F.row_number().over(by_last) > 1))
    kept_last = lasts.withColumn(
        "last_number", F.max(F.when(F.col("last_chunk") & ~F.col("extra_last"), F.col("chunk"))).over(by_seq)
    )
    decided = (
        deduped.where(F.col("dup"))
        .withColumn("reason", F.lit(Quarantine.DUPLICATE_CHUNK.value))
        .withColumn("extra_last", F.lit(False))
        .withColumn("last_number", F.lit(None).cast(LongType()))
        .unionByName(
            kept_last.withColumn(
                "reason",
                F.when(F.col("extra_last"), Quarantine.DUPLICATE_LAST_CHUNK.value).when(
                    ~F.col("last_chunk") & (F.col("chunk") > F.col("last_number")), Quarantine.CHUNK_AFTER_LAST.value
                ),
            )
        )
        .drop("dup")
        .localCheckpoint()
    )
    own_last = F.when(F.col("last_chunk"), F.col("chunk")).alias("last_number")
    # the chunks that are not fast and survived: checked ones and the waiting ones of untouched sequences
    others = (
        decided.where(F.col("reason").isNull())
        .select(*columns, "last_number")
        .unionByName(untouched_pending.select(*columns, own_last))
    )
    other_sequences = others.groupBy(*seq_keys, "committed_seq").agg(
        F.count("*").alias("chunks"), F.max("last_number").alias("last_number")
    )
    complete = (
        other_sequences.where(F.col("last_number").isNotNull() & (F.col("chunks") == F.col("last_number")))
        .select(*seq_keys, "committed_seq")
        .unionByName(fast.select(*seq_keys, "committed_seq"))
    )
    # released = the complete sequences continuing the committed one without a gap: seq - rank == committed
    rank = F.row_number().over(Window.partitionBy(*ORIGIN_KEYS).orderBy("seq"))
    prefix_ends = (
        complete.withColumn("gap", F.col("seq") - rank)
        .where(F.col("gap") == F.col("committed_seq"))
        .groupBy(*ORIGIN_KEYS)
        .agg(F.max("seq").alias("prefix_end"))
        .localCheckpoint()
    )  # one row per origin that advanced
    ends = F.broadcast(prefix_ends)
    is_released = F.col("prefix_end").isNotNull() & (F.col("seq") <= F.col("prefix_end"))
    progress_nulls = [F.lit(None).cast(MARKS_SCHEMA[c].dataType).alias(c) for c in PROGRESS_COLUMNS]
    fast_marked = fast.join(ends, ORIGIN_KEYS, "left")
    others_marked = others.join(ends, ORIGIN_KEYS, "left")
    released_fast = fast_marked.where(is_released).select(
        "stream", "writer_id", "time_ms", "position", "kind", "reported_at_ms", *progress_nulls, "wm_key"
    )
    released_rows = others_marked.where(is_released)
    per_segment = (
        released_rows.select(*seq_keys, F.explode("position").alias("segment_id", "offset"))
        .groupBy(*seq_keys, "segment_id")
        .agg(F.max("offset").alias("offset"))
        .groupBy(*seq_keys)
        .agg(F.map_from_entries(F.collect_list(F.struct("segment_id", "offset"))).alias("merged"))
    )
    released = (
        released_rows.groupBy(*seq_keys)
        .agg(
            F.max("time_ms").alias("time_ms"),
            F.max("reported_at_ms").alias("reported_at_ms"),
            F.max((F.col("kind") == MarkKind.COMMIT.value).cast("int")).alias("has_commit"),
        )
        .join(per_segment, seq_keys, "left")
        .select(
            "stream",
            "writer_id",
            "time_ms",
            F.coalesce("merged", F.create_map().cast(POSITION)).alias("position"),
            F.when(F.col("has_commit") == 1, MarkKind.COMMIT.value).otherwise(MarkKind.NOTE.value).alias("kind"),
            "reported_at_ms",
            *progress_nulls,
            "wm_key",
        )
        .unionByName(released_fast)
    )
    origins = (
        origins0.join(prefix_ends, ORIGIN_KEYS, "full")
        .select(
            *ORIGIN_KEYS,
            F.greatest(F.coalesce("committed_seq", F.lit(0)), F.coalesce("prefix_end", F.lit(0)))
            .cast(LongType())
            .alias("committed_seq"),
        )
        .where(F.col("committed_seq") > 0)
    )
    pending_columns = PENDING_STATE_SCHEMA.fieldNames()
    pending = (
        pending0.join(F.broadcast(touched), ORIGIN_KEYS, "left_anti")
        .select(*pending_columns)
        .unionByName(fast_marked.where(~is_released).select(*pending_columns))
        .unionByName(others_marked.where(~is_released).select(*pending_columns))
    )
    as_mark: list[Column | str] = [
        *[c for c in marks_columns if c not in ("origin_id", "wm_key")],
        F.when(F.col("origin_id") != "", F.col("origin_id")).alias("origin_id"),
        nullable_key(),
        "reason",
    ]
    bad = (
        locally_bad.select(*as_mark)
        .unionByName(new.where(F.col("reason").isNotNull()).select(*as_mark))
        .unionByName(decided.where(F.col("reason").isNotNull()).select(*as_mark))
    )
    return _Progress(released, bad, touched.select(*KEYS), origins, pending)


# ------------------------------------------------------------------------------------------ stream cut


# ------------------------------------------------------------------------------------------ the round


@dataclass(frozen=True)
class _Accepted:
    """What the marks of a round amount to once every mark is decided."""

    groups: DataFrame  # accepted marks' aggregates per (stream, writer, tag, segment)
    seen: DataFrame  # (stream, writer_id) of every writer with a sane mark
    reason_counts: list[Any]  # rows (stream, wm_key, reason, count) of quarantined and rejected marks
    deferred_marks: int  # marks reported after the round, left for a later one


def round_checks(groups: DataFrame, writers0: DataFrame, segments: DataFrame) -> DataFrame:
    """Everything the fast path must know about the round's aggregates, as one small frame (one Spark job):
    ``check`` is ``suspect`` (a writer for the exact path), ``bad_name`` (a stream or key failing the
    pattern, checked once per name instead of once per mark), ``row_local`` (some mark has a cheap
    row-local reason) or ``deferred`` (``marks``: how many wait for a later round)."""

    def shaped(frame: DataFrame, check: str, *present: str) -> DataFrame:
        nulls = {"stream": StringType(), "wm_key": StringType(), "writer_id": StringType(), "marks": LongType()}
        return frame.select(
            F.lit(check).alias("check"),
            *[F.col(c) if c in present else F.lit(None).cast(kind).alias(c) for c, kind in nulls.items()],
        )

    bad_names = groups.select(*STREAM_KEYS).distinct().where(~F.col("stream").rlike(STREAM_NAME_REGEX) | invalid_key())
    row_local = groups.where(~F.col("tag").isin(VALUE, SHUTDOWN, DEFERRED)).select(*STREAM_KEYS).limit(1)
    deferred = groups.where(F.col("tag") == DEFERRED).agg(F.sum("marks").alias("marks"))
    return (
        shaped(find_suspects(groups, writers0, segments), "suspect", *KEYS)
        .unionByName(shaped(bad_names, "bad_name", *STREAM_KEYS))
        .unionByName(shaped(row_local, "row_local", *STREAM_KEYS))
        .unionByName(shaped(deferred.select(F.col("marks").cast(LongType()).alias("marks")), "deferred", "marks"))
    )


def accept_marks(
    spark: SparkSession,
    tagged: DataFrame,
    groups: DataFrame,
    writers0: DataFrame,
    segments: DataFrame,
    quarantine_path: str,
    progress: _Progress | None,
) -> _Accepted:
    """Fast path for writers whose sane marks are all accepted; exact path (second scan) for the rest.

    The quarantine also receives the sequenced marks that gap-free progress found bad (one write); with no
    sequenced mark in the round (``progress`` None) there are none."""
    checks = round_checks(groups, writers0, segments).collect()  # small: suspect writers, bad names, 2 flags
    suspect_keys = [(r["stream"], r["wm_key"], r["writer_id"]) for r in checks if r["check"] == "suspect"]
    bad_name_rows = [(r["stream"], r["wm_key"]) for r in checks if r["check"] == "bad_name"]
    row_local_bad = any(r["check"] == "row_local" for r in checks)
    deferred = sum(int(r["marks"] or 0) for r in checks if r["check"] == "deferred")
    accepted = groups.where(F.col("tag").isin(VALUE, SHUTDOWN))
    quarantine_columns: list[Column | str] = [
        *MARKS_SCHEMA.fieldNames(),
        "reason",
        F.lit("quarantined").alias("category"),
    ]
    progress_bad = None if progress is None else progress.bad.localCheckpoint()
    progress_counts = (
        [] if progress_bad is None else progress_bad.groupBy(*STREAM_KEYS, "reason").count().collect()
    )  # per watermark and reason: small
    progress_seen = [] if progress is None else [progress.seen]
    if not (suspect_keys or row_local_bad or bad_name_rows):
        if progress_bad is not None and progress_counts:
            progress_bad.select(*quarantine_columns).write.mode("overwrite").parquet(quarantine_path)
        seen = accepted.select(*KEYS)
        for frame in progress_seen:
            seen = seen.union(frame)
        return _Accepted(accepted, seen, progress_counts, deferred)

    suspects = spark.createDataFrame(suspect_keys, "stream string, wm_key string, writer_id string")
    bad_names = spark.createDataFrame(bad_name_rows, "stream string, wm_key string")
    flagged = tagged.join(F.broadcast(suspects.withColumn("suspect", F.lit(True))), KEYS, "left").join(
        F.broadcast(bad_names.withColumn("bad_name", F.lit(True))), STREAM_KEYS, "left"
    )
    suspect_mark = (F.col("suspect").isNotNull() | F.col("bad_name").isNotNull()) & F.col("tag").isin(VALUE, SHUTDOWN)
    candidates = flagged.where(~F.col("tag").isin(VALUE, SHUTDOWN, DEFERRED) | suspect_mark).drop("suspect", "bad_name")
    decided = decide_exactly(candidates, writers0, segments).localCheckpoint()
    bad = decided.where(F.col("reason").isNotNull())
    rejected = [r.value for r in Rejection]
    category = F.when(F.col("reason").isin(*rejected), "rejected").otherwise("quarantined")
    marks_columns = [nullable_key() if c == "wm_key" else c for c in MARKS_SCHEMA.fieldNames()]
    quarantine = bad.select(*marks_columns, "reason", category.alias("category"))
    if progress_bad is not None:
        quarantine = quarantine.unionByName(progress_bad.select(*quarantine_columns))
    quarantine.write.mode("overwrite").parquet(quarantine_path)
    accepted_exact = decided.where(F.col("reason").isNull() & F.col("tag").isin(VALUE, SHUTDOWN))
    groups_final = (
        accepted.join(F.broadcast(bad_names), STREAM_KEYS, "left_anti")
        .join(F.broadcast(suspects), KEYS, "left_anti")
        .unionByName(aggregate_marks(accepted_exact))
    )
    sane = F.col("tag").isin(VALUE, SHUTDOWN) & (F.col("reason").isNull() | F.col("reason").isin(*rejected))
    seen = groups_final.select(*KEYS).union(decided.where(sane).select(*KEYS))
    for frame in progress_seen:
        seen = seen.union(frame)
    reason_counts = bad.groupBy(*STREAM_KEYS, "reason").count().collect()  # one row per watermark and reason
    return _Accepted(groups_final, seen, [*reason_counts, *progress_counts], deferred)


def next_writer_states(accepted: DataFrame, writers0: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Writers after the round's marks, before participation; and per-writer accepted-mark figures.

    The largest accepted time counts; the position is the segments of the marks at that time, each at the
    round's highest offset; the last event (shutdown wins a tie) decides whether the writer is alive. One
    aggregation per writer computes all of it.
    """
    value = F.col("tag") == VALUE
    per_writer = accepted.groupBy(*KEYS).agg(
        F.max(F.when(value, F.col("max_time_ms"))).alias("new_time_ms"),
        F.sum(F.when(value, F.col("marks"))).alias("accepted_marks"),
        F.min(F.when(value, F.col("min_reported_at_ms"))).alias("first_reported_at_ms"),
        F.max(F.when(value, F.col("max_reported_at_ms"))).alias("last_value_at_ms"),
        F.max(F.when(F.col("tag") == SHUTDOWN, F.col("max_reported_at_ms"))).alias("last_shutdown_at_ms"),
        F.collect_list(
            F.when(value & F.col("segment_id").isNotNull(), F.struct("max_time_ms", "segment_id", "max_offset"))
        ).alias("segments"),
    )
    at_new_time = F.filter("segments", lambda s: s["max_time_ms"] == F.col("new_time_ms"))
    new_position = F.map_from_entries(F.transform(at_new_time, lambda s: F.struct(s["segment_id"], s["max_offset"])))
    merged = writers0.join(per_writer, KEYS, "full").where(
        F.col("time_ms").isNotNull() | F.col("new_time_ms").isNotNull()
    )
    has_new = F.col("new_time_ms").isNotNull()
    stopped = F.col("last_shutdown_at_ms").isNotNull() & (
        F.col("last_value_at_ms").isNull() | (F.col("last_shutdown_at_ms") >= F.col("last_value_at_ms"))
    )
    writers = merged.select(
        *KEYS,
        F.coalesce("new_time_ms", "time_ms").alias("time_ms"),
        F.when(has_new, new_position).otherwise(F.col("position")).alias("position"),
        F.when(stopped, F.lit(False))
        .when(F.col("last_value_at_ms").isNotNull(), F.lit(True))
        .otherwise(F.coalesce("alive", F.lit(True)))
        .alias("alive"),
        "lagging_since_ms",
    )
    return writers, per_writer.drop("segments")


def active_writers(writers: DataFrame, streams0: DataFrame, now_ms: int, writer_timeout_ms: int) -> DataFrame:
    """Participation (time above the previous lower bound) and the writer timeout; drops inactive writers."""
    now = F.lit(now_ms)
    participating = F.col("wm_lower_ms").isNull() | (F.col("time_ms") > F.col("wm_lower_ms"))
    since = F.coalesce("lagging_since_ms", now)
    return (
        writers.join(F.broadcast(streams0.select(*STREAM_KEYS, "wm_lower_ms")), STREAM_KEYS, "left")
        .select(
            *KEYS,
            "time_ms",
            "position",
            "alive",
            participating.alias("participating"),
            F.when(participating, F.lit(None).cast(LongType())).otherwise(since).alias("lagging_since_ms"),
            (participating | (F.col("alive") & (now - since < F.lit(writer_timeout_ms)))).alias("active"),
        )
        .where("active")
    )


def stream_decisions(
    spark: SparkSession,
    streams0: DataFrame,
    active: DataFrame,
    per_writer: DataFrame,
    accepted: _Accepted,
    now_ms: int,
    initial_delay_ms: int,
) -> DataFrame:
    """Per watermark (stream and key): its figures and its status (EMITTED or why not), with the previous
    watermark. A watermark is one of the previous state, of a writer with a sane mark, or of a counted bad
    mark. Each source is a kind of row in one union, aggregated once per watermark (a shuffle), where a join
    per source would cost a Spark job each."""
    now = F.lit(now_ms)
    with_reasons = spark.createDataFrame(
        [(r["stream"], r["wm_key"] or "") for r in accepted.reason_counts if r["reason"] not in UNREPORTED],
        "stream string, wm_key string",
    )
    listed = F.lit(True).alias("listed")
    state_columns = [c for c in STREAMS_STATE_SCHEMA.fieldNames() if c not in STREAM_KEYS]
    rows = (
        streams0.select(*STREAM_KEYS, listed, *state_columns)
        .unionByName(accepted.seen.select(*STREAM_KEYS, listed, F.col("writer_id").alias("seen")), True)
        .unionByName(with_reasons.select(*STREAM_KEYS, listed), True)
        .unionByName(active.select(*STREAM_KEYS, F.col("writer_id").alias("active"), "time_ms", "participating"), True)
        .unionByName(per_writer.select(*STREAM_KEYS, "accepted_marks", "first_reported_at_ms"), True)
    )
    decided = (
        rows.groupBy(*STREAM_KEYS)
        .agg(
            F.max("listed").alias("listed"),
            F.max("first_mark_at_ms").alias("first_mark_at_ms"),
            F.max("wm_lower_ms").alias("wm_lower_ms"),
            F.max("wm_upper_ms").alias("wm_upper_ms"),
            F.first("wm_cut", ignorenulls=True).alias("wm_cut"),
            F.max("wm_computed_at_ms").alias("wm_computed_at_ms"),
            F.count_distinct("seen").alias("writers_seen"),
            F.count("active").alias("active_writers"),
            F.min("time_ms").alias("lower_ms"),
            F.max("time_ms").alias("upper_ms"),
            F.sort_array(F.collect_list(F.when(~F.col("participating"), F.col("active")))).alias("waiting"),
            F.sum("accepted_marks").alias("marks_accepted"),
            F.min("first_reported_at_ms").alias("first_in_round"),
        )
        .where(F.col("listed"))
    )
    first_mark = F.least("first_mark_at_ms", "first_in_round")
    status = (
        F.when(F.col("active_writers") == 0, StreamStatus.NO_ACTIVE_WRITERS.value)
        .when(first_mark.isNull() | (now - first_mark < F.lit(initial_delay_ms)), StreamStatus.INITIAL_DELAY.value)
        .when(F.size("waiting") > 0, StreamStatus.WAITING_FOR_WRITERS.value)
        .when(
            F.col("wm_lower_ms").isNotNull() & (F.col("lower_ms") <= F.col("wm_lower_ms")),
            StreamStatus.TIME_NOT_ADVANCED.value,
        )
        .otherwise(StreamStatus.EMITTED.value)
    )
    return decided.select("*", first_mark.alias("first_mark"), status.alias("status"))


def read_state(spark: SparkSession, state_in: str | None, name: str, schema: StructType) -> DataFrame | None:
    """A part of the previous state, or ``None`` when it has none (first round, or a part never written);
    states written before keyed watermarks have no ``wm_key`` column: read as the unkeyed watermark."""
    if not state_in:
        return None
    path = f"{state_in.rstrip('/')}/{name}"
    frame = read_dataset(spark, path)
    return None if frame is None else with_key(conform(frame, schema, path))


def highest_offsets(active: DataFrame, streams0: DataFrame) -> DataFrame:
    """``(stream, wm_key, highest)``: per watermark, the highest offset of each segment over its active
    writers' positions and its previous cut; small (streams x segments), the input of the stream cut."""
    entries = active.select(*STREAM_KEYS, F.explode("position").alias("segment_id", "offset")).unionByName(
        streams0.select(*STREAM_KEYS, F.explode("wm_cut").alias("segment_id", "offset"))
    )
    return (
        entries.groupBy(*STREAM_KEYS, "segment_id")
        .agg(F.max("offset").alias("offset"))
        .groupBy(*STREAM_KEYS)
        .agg(F.map_from_entries(F.collect_list(F.struct("segment_id", "offset"))).alias("highest"))
    )


def emitted_cuts(rows: Sequence[Any], segments: dict[str, dict[int, Segment]]) -> list[dict[str, Any]]:
    """The rows as dicts, each emitting watermark with its stream cut, computed on the driver by the reference
    rules themselves from the highest offsets: ``core.segments.upper_bound`` (a segment with a successor
    drops out) and ``complete_cut`` (uncovered key ranges filled by the newest epoch's segments at offset 0).
    A stream has a handful of segments: each distributed step would cost more Spark jobs than the work."""
    completed = []
    for row in rows:
        entry = row.asDict()
        entry["cut_complete"] = True
        if entry["status"] == StreamStatus.EMITTED.value:
            known = segments.get(entry["stream"], {})
            highest = {s: o for s, o in (entry["highest"] or {}).items() if s in known}
            entry["wm_cut"], entry["cut_complete"] = complete_cut(upper_bound([highest], known), known)
        completed.append(entry)
    return completed


def _run(spark: SparkSession, request: ControllerRequest) -> ControllerManifest:
    """Compute one round, write the state and the quarantine, and return the manifest (not yet written).

    Spark jobs of a round with no sequenced and no bad mark (the common case): the segments, the counts of
    late and sequenced marks, the one scan of the marks, the round's checks, the writers' state, the
    per-watermark verdicts, the streams' state; each extra is named where it is spent."""
    started = time.time()
    size_shuffles(spark)
    segments, segments_by_stream, invalid_segments = read_segments(spark, request.segments_path)
    writers0 = read_state(spark, request.state_in, "writers", WRITERS_STATE_SCHEMA)
    streams0 = read_state(spark, request.state_in, "streams", STREAMS_STATE_SCHEMA)
    origins0 = read_state(spark, request.state_in, "origins", ORIGINS_STATE_SCHEMA)
    pending0 = read_state(spark, request.state_in, "pending", PENDING_STATE_SCHEMA)
    writers0 = writers0 if writers0 is not None else with_key(empty_frame(spark, WRITERS_STATE_SCHEMA))
    streams0 = streams0 if streams0 is not None else with_key(empty_frame(spark, STREAMS_STATE_SCHEMA))

    marks = read_marks(spark, request.marks_path)
    late, processed_marks, has_sequenced = count_marks(marks, request)
    progress = None
    if has_sequenced:  # gap-free progress: jobs of its own, only for rounds with sequenced marks
        progress = advance_origins(
            marks.where(sequenced_in_round(request)),
            origins0 if origins0 is not None else with_key(empty_frame(spark, ORIGINS_STATE_SCHEMA)),
            pending0 if pending0 is not None else with_key(empty_frame(spark, PENDING_STATE_SCHEMA)),
            segments,
        )
    tagged = tag_marks(marks.where(~sequenced_in_round(request)), request.now_ms, request.processed_until_ms)
    if progress is not None:
        tagged = tagged.unionByName(progress.released.withColumn("tag", F.lit(VALUE)))
    groups = aggregate_marks(tagged).localCheckpoint()  # the one scan of the marks in the common case
    accepted = accept_marks(spark, tagged, groups, writers0, segments, f"{request.round_out}/quarantine", progress)
    writers, per_writer = next_writer_states(accepted.groups, writers0)
    writers_out = f"{request.state_out}/writers"
    active_writers(writers, streams0, request.now_ms, request.writer_timeout_ms).select(
        *WRITERS_STATE_SCHEMA.fieldNames()
    ).write.mode("overwrite").parquet(writers_out)
    # read back instead of a checkpoint: a writer participates exactly when it is not lagging
    active = spark.read.schema(WRITERS_STATE_SCHEMA).parquet(writers_out)
    active = active.withColumn("participating", F.col("lagging_since_ms").isNull())
    decisions = stream_decisions(
        spark, streams0, active, per_writer, accepted, request.now_ms, request.initial_delay_ms
    )

    is_emitted = F.col("status") == StreamStatus.EMITTED.value
    result = decisions.join(F.broadcast(highest_offsets(active, streams0)), STREAM_KEYS, "left").select(
        *STREAM_KEYS,
        "status",
        F.col("first_mark").alias("first_mark_at_ms"),
        F.coalesce("writers_seen", F.lit(0)).alias("writers_seen"),
        F.coalesce("active_writers", F.lit(0)).alias("active_writers"),
        F.coalesce("marks_accepted", F.lit(0)).cast(LongType()).alias("marks_accepted"),
        F.coalesce("waiting", F.array().cast(ArrayType(StringType()))).alias("waiting"),
        F.when(is_emitted, F.col("lower_ms")).otherwise(F.col("wm_lower_ms")).alias("wm_lower_ms"),
        F.when(is_emitted, F.col("upper_ms")).otherwise(F.col("wm_upper_ms")).alias("wm_upper_ms"),
        "highest",
        "wm_cut",
        F.when(is_emitted, F.lit(request.now_ms)).otherwise(F.col("wm_computed_at_ms")).alias("wm_computed_at_ms"),
    )
    per_stream = emitted_cuts(result.collect(), segments_by_stream)  # one row per watermark
    spark.createDataFrame(
        [[r[column] for column in STREAMS_STATE_SCHEMA.fieldNames()] for r in per_stream],
        STREAMS_STATE_SCHEMA,
    ).write.mode("overwrite").parquet(f"{request.state_out}/streams")

    origins = origins0 if progress is None else progress.origins
    pending = pending0 if progress is None else progress.pending
    if origins is not None:  # a round with no sequenced mark and no earlier one writes no progress state
        origins.write.mode("overwrite").parquet(f"{request.state_out}/origins")
    pending_sequences: dict[str, int] = {}
    if pending is not None:
        pending.write.mode("overwrite").parquet(f"{request.state_out}/pending")
        pending_sequences = {
            _label(r): int(r["sequences"])
            for r in spark.read.parquet(f"{request.state_out}/pending")
            .groupBy(*STREAM_KEYS)
            .agg(F.countDistinct("writer_id", "origin_id", "seq").alias("sequences"))
            .collect()  # one row per watermark with waiting sequences
        }
    manifest = _manifest(
        request, per_stream, accepted.reason_counts, accepted.deferred_marks, invalid_segments, started
    )
    for label, entry in manifest["streams"].items():
        entry["pending_sequences"] = pending_sequences.get(label, 0)
    manifest["processed_marks"] = processed_marks
    manifest["totals"]["late_marks"] = late
    return ControllerManifest.from_json(manifest)


def _manifest(
    request: ControllerRequest,
    rows: Sequence[Any],
    reason_counts: Sequence[Any],
    deferred: int,
    invalid_segments: int,
    started: float,
) -> dict[str, Any]:
    per_stream: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for row in reason_counts:
        totals[row["reason"]] = totals.get(row["reason"], 0) + int(row["count"])
        if row["reason"] not in UNREPORTED:
            reasons = per_stream.setdefault(_label(row), {})  # plain and sequenced marks may share a reason
            reasons[row["reason"]] = reasons.get(row["reason"], 0) + int(row["count"])
    rejected_reasons = {r.value for r in Rejection}
    streams: dict[str, Any] = {}
    for row in sorted(rows, key=_label):
        reasons = per_stream.get(_label(row), {})
        emitted = row["status"] == StreamStatus.EMITTED.value
        streams[_label(row)] = {
            "stream": row["stream"],
            "wm_key": row["wm_key"] or None,
            "status": row["status"],
            "writers_seen": int(row["writers_seen"]),
            "active_writers": int(row["active_writers"]),
            "marks_accepted": int(row["marks_accepted"]),
            "rejected": {k: v for k, v in sorted(reasons.items()) if k in rejected_reasons},
            "quarantined": {k: v for k, v in sorted(reasons.items()) if k not in rejected_reasons},
            "waiting_for": list(row["waiting"])[:WAITING_SAMPLE],
            "waiting_count": len(row["waiting"]),
            "watermark": _watermark(row) if emitted else None,
            "previous_watermark": None if emitted else _watermark(row),
            "cut_complete": row["cut_complete"],
        }
    return {
        "status": "succeeded",
        "job": "controller_watermark",
        "controller": request.controller,
        "processed_from_ms": request.processed_until_ms,
        "processed_until_ms": request.now_ms,
        "state_path": request.state_out,
        "quarantine_path": f"{request.round_out}/quarantine" if reason_counts else None,
        "totals": {
            "rejected": {k: v for k, v in sorted(totals.items()) if k in rejected_reasons},
            "quarantined": {k: v for k, v in sorted(totals.items()) if k not in rejected_reasons},
            "deferred_marks": int(deferred),
            "invalid_segments": invalid_segments,
            "streams": len(streams),
            "watermarks_emitted": sum(1 for s in streams.values() if s["watermark"]),
        },
        "streams": streams,
        "duration_s": round(time.time() - started, 3),
    }


def _label(row: Any) -> str:
    """The manifest's name of a row's watermark: ``core.names.watermark_label``."""
    return watermark_label(row["stream"], row["wm_key"] or None)


def _watermark(row: Any) -> dict[str, Any] | None:
    if row["wm_lower_ms"] is None:
        return None
    return {
        "stream": row["stream"],
        "wm_key": row["wm_key"] or None,
        "lower_ms": int(row["wm_lower_ms"]),
        "upper_ms": int(row["wm_upper_ms"]),
        "stream_cut": {str(k): int(v) for k, v in sorted((row["wm_cut"] or {}).items())},
        "computed_at_ms": int(row["wm_computed_at_ms"]),
    }


# ------------------------------------------------------------------------------------------ entry point


def run(spark: SparkSession, request: ControllerRequest) -> ControllerManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with active_session(spark):
        return _run(spark, request)


def main(argv: Sequence[str] | None = None) -> int:
    """``controller_watermark.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(ControllerRequest, run, argv)


if __name__ == "__main__":
    sys.exit(main())
