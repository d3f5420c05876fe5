"""Which marks a round accepts (``core.controller``'s rejection rules): the suspect writers whose marks might
be rejected, the exact decision for their marks, and the round's accepted aggregates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_wm.core.controller import (
    Quarantine,
    Rejection,
)
from airflow_provider_wm.core.segments import Segment
from spark_jobs.controller.marks import aggregate_marks, names_unknown_segment, nullable_key, row_local_reason
from spark_jobs.controller.progress import Progress
from spark_jobs.controller.schemas import DEFERRED, KEYS, MARKS_SCHEMA, SHUTDOWN, STREAM_KEYS, VALUE

__all__ = [
    "Accepted",
    "Flags",
    "accept_exactly",
    "decide_exactly",
    "position_goes_back",
    "progress_outcome",
    "round_flags",
    "time_goes_back",
    "write_progress_quarantine",
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


def decide_exactly(candidates: DataFrame, writers0: DataFrame, segments: dict[str, dict[int, Segment]]) -> DataFrame:
    """Each candidate mark with its final ``reason`` (null: accepted). Uses a join and a higher-order
    function, so it only runs on bad rows and suspect writers' marks. The valid segments are a literal
    (:func:`~spark_jobs.controller.marks.known_segment_sql`), not a join: no Spark job of their own."""
    stored = writers0.select(
        *KEYS, F.col("time_ms").alias("stored_time_ms"), F.col("position").alias("stored_position")
    )
    rows = candidates.join(F.broadcast(stored), KEYS, "left")
    value = F.col("tag") == VALUE
    unknown_segment = names_unknown_segment(segments)
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
        .drop("stored_time_ms", "stored_position", "known_writer")
    )


@dataclass(frozen=True)
class Flags:
    """What the fast path found in a round (:func:`round_flags`): the suspect writers, the watermarks whose
    stream or key fails the pattern, and whether some mark has a cheap row-local reason."""

    suspects: list[tuple[str, str, str]]
    bad_names: list[tuple[str, str]]
    row_local: bool

    @property
    def exact(self) -> bool:
        """Whether some marks must be decided one by one (the exact path)."""
        return bool(self.suspects or self.bad_names or self.row_local)


def round_flags(rows: Sequence[Any]) -> Flags:
    """The checks of :func:`~spark_jobs.controller.emission.writer_rounds`, as gathered per watermark by
    :func:`~spark_jobs.controller.emission.stream_results` (``suspects``, ``bad_name``, ``row_local``)."""
    return Flags(
        sorted({(r["stream"], r["wm_key"], w) for r in rows for w in r["suspects"]}),
        sorted({(r["stream"], r["wm_key"]) for r in rows if r["bad_name"]}),
        any(r["row_local"] for r in rows),
    )


@dataclass(frozen=True)
class Accepted:
    """What the marks of a round amount to once every mark is decided."""

    groups: DataFrame | None  # the exact path's accepted aggregates; None: the fast path's stand
    seen: list[DataFrame]  # KEYS of writers seen besides those with accepted aggregates
    reason_counts: list[Any]  # rows (stream, wm_key, reason, count) of quarantined and rejected marks


def progress_outcome(progress: Progress | None) -> tuple[DataFrame | None, Accepted]:
    """The sequenced marks that gap-free progress found bad (checkpointed: written and counted; none when every
    origin of the round is dense), and what the round amounts to when the fast path holds: their counts and
    the writers progress saw."""
    if progress is None:
        return None, Accepted(None, [], [])
    if progress.bad is None:
        return None, Accepted(None, [progress.seen], [])
    bad = progress.bad.localCheckpoint()
    counts = bad.groupBy(*STREAM_KEYS, "reason").count().collect()  # per watermark and reason: small
    return bad, Accepted(None, [progress.seen], counts)


def quarantine_columns() -> list[Column | str]:
    """The quarantine's columns for bad sequenced marks (MARKS_SCHEMA + reason): all are quarantined."""
    return [*MARKS_SCHEMA.fieldNames(), "reason", F.lit("quarantined").alias("category")]


def accept_exactly(
    spark: SparkSession,
    tagged: DataFrame,
    groups: DataFrame,
    flags: Flags,
    writers0: DataFrame,
    segments: dict[str, dict[int, Segment]],
    quarantine_path: str,
    progress_bad: DataFrame | None,
    fast: Accepted,
) -> Accepted:
    """The exact path (a second scan) for the marks of ``flags``' suspect writers and bad names and for rows
    with a row-local reason; the other writers' sane marks are all accepted (``groups``). The quarantine also
    receives the sequenced marks that gap-free progress found bad (one write)."""
    suspects = spark.createDataFrame(flags.suspects, "stream string, wm_key string, writer_id string")
    bad_names = spark.createDataFrame(flags.bad_names, "stream string, wm_key string")
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
        quarantine = quarantine.unionByName(progress_bad.select(*quarantine_columns()))
    quarantine.write.mode("overwrite").parquet(quarantine_path)
    accepted_exact = decided.where(F.col("reason").isNull() & F.col("tag").isin(VALUE, SHUTDOWN))
    groups_final = (
        groups.where(F.col("tag").isin(VALUE, SHUTDOWN))
        .join(F.broadcast(bad_names), STREAM_KEYS, "left_anti")
        .join(F.broadcast(suspects), KEYS, "left_anti")
        .unionByName(aggregate_marks(accepted_exact))
    )
    sane = F.col("tag").isin(VALUE, SHUTDOWN) & (F.col("reason").isNull() | F.col("reason").isin(*rejected))
    reason_counts = bad.groupBy(*STREAM_KEYS, "reason").count().collect()  # small: one row per watermark and reason
    return Accepted(
        groups_final, [decided.where(sane).select(*KEYS), *fast.seen], [*reason_counts, *fast.reason_counts]
    )


def write_progress_quarantine(progress_bad: DataFrame | None, fast: Accepted, quarantine_path: str) -> None:
    """The fast path's quarantine: the bad sequenced marks, when there are any."""
    if progress_bad is not None and fast.reason_counts:
        progress_bad.select(*quarantine_columns()).write.mode("overwrite").parquet(quarantine_path)
