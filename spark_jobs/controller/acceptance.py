"""Which marks a round accepts (``core.controller``'s rejection rules): the suspect writers whose marks might
be rejected, the exact decision for their marks, and the round's accepted aggregates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
)

from airflow_provider_wm.core.controller import (
    Quarantine,
    Rejection,
)
from spark_jobs.controller.marks import aggregate_marks, invalid_key, nullable_key, row_local_reason
from spark_jobs.controller.progress import Progress
from spark_jobs.controller.schemas import DEFERRED, KEYS, MARKS_SCHEMA, SHUTDOWN, STREAM_KEYS, STREAM_NAME_REGEX, VALUE

__all__ = [
    "Accepted",
    "accept_marks",
    "decide_exactly",
    "find_suspects",
    "position_goes_back",
    "round_checks",
    "time_goes_back",
]


def position_goes_back(stored: Column, new: Column) -> Column:
    """``core.controller.position_goes_back``: an offset of ``new`` below ``stored``'s on a segment both hold
    (``INVALID_POSITION``); no stored position (null) never goes back."""
    return F.coalesce(
        F.exists(
            F.map_entries(new),
            lambda e: e["value"] < F.coalesce(F.element_at(stored, e["key"]), F.lit(-1)),
        ),
        F.lit(False),
    )


def time_goes_back(stored_time: Column, time: Column) -> Column:
    """``core.controller.time_goes_back``: a time below the writer's stored time (``INVALID_TIME``); no stored
    time (null) never goes back."""
    return F.coalesce(time < stored_time, F.lit(False))


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
        .where(time_goes_back(F.col("time_ms"), F.col("earliest")))
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
    row_local = row_local_reason()
    reason = (
        F.when(row_local.isNotNull(), row_local)
        .when(value & unknown_segment, Quarantine.UNKNOWN_SEGMENT.value)
        .when(
            value & time_goes_back(F.col("stored_time_ms"), F.col("time_ms")),
            Rejection.INVALID_TIME.value,
        )
        .when(value & position_goes_back(F.col("stored_position"), F.col("position")), Rejection.INVALID_POSITION.value)
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


@dataclass(frozen=True)
class Accepted:
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
    progress: Progress | None,
) -> Accepted:
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
        return Accepted(accepted, seen, progress_counts, deferred)

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
    return Accepted(groups_final, seen, [*reason_counts, *progress_counts], deferred)
