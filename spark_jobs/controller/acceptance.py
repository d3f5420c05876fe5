"""Which marks a round accepts (``core.controller``'s rejection rules): the suspect writers whose marks might
be rejected, the exact decision for their marks, and the round's accepted aggregates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from airflow_provider_wm.core.controller import (
    Quarantine,
    Rejection,
)
from airflow_provider_wm.core.segments import Segment
from spark_jobs.common import local_frame, string_struct
from spark_jobs.controller.marks import aggregate_marks, names_unknown_segment, nullable_key, row_local_reason
from spark_jobs.controller.progress import Progress
from spark_jobs.controller.schemas import DEFERRED, KEYS, MARKS_SCHEMA, SHUTDOWN, STREAM_KEYS, VALUE

__all__ = [
    "Accepted",
    "Flags",
    "accept_exactly",
    "decide_exactly",
    "decided_writers",
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
    (:func:`~spark_jobs.controller.marks.known_segment_sql`), not a join: no Spark job of their own. A shutdown
    is of a known writer when the writer is stored or has an accepted mark among the candidates (a window over
    the writer's candidates: one shuffle, where a join with the known writers would read the marks twice)."""
    stored = writers0.select(
        *KEYS,
        F.col("time_ms").alias("stored_time_ms"),
        F.col("position").alias("stored_position"),
        F.lit(True).alias("stored"),
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
    accepted_value = F.max(value & F.col("reason").isNull()).over(Window.partitionBy(*KEYS))
    known_writer = F.coalesce(F.col("stored"), F.lit(False)) | accepted_value
    unknown_writer = (F.col("tag") == SHUTDOWN) & F.col("reason").isNull() & ~known_writer
    return (
        rows.withColumn("reason", reason)
        .withColumn("reason", F.when(unknown_writer, Rejection.UNKNOWN_WRITER.value).otherwise(F.col("reason")))
        .drop("stored_time_ms", "stored_position", "stored")
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

    groups: DataFrame | None  # the exact path's accepted aggregates of the writers it decided; None: fast path
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
    flags: Flags,
    writers0: DataFrame,
    segments: dict[str, dict[int, Segment]],
    quarantine_path: str,
    progress_bad: DataFrame | None,
    fast: Accepted,
) -> Accepted:
    """The exact path (a second scan) for the marks of ``flags``' suspect writers and bad names and for rows
    with a row-local reason. Its ``groups`` are the accepted aggregates of the writers it decided
    (:func:`decided_writers`); the other writers' sane marks are all accepted, and the fast path's rows of them
    stand. The quarantine also receives the sequenced marks that gap-free progress found bad (one write)."""
    suspect_mark = F.col("decided") & F.col("tag").isin(VALUE, SHUTDOWN)
    candidates = (
        _with_decided(spark, tagged, flags)
        .where(~F.col("tag").isin(VALUE, SHUTDOWN, DEFERRED) | suspect_mark)
        .drop("decided")
    )
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
    sane = F.col("tag").isin(VALUE, SHUTDOWN) & (F.col("reason").isNull() | F.col("reason").isin(*rejected))
    reason_counts = bad.groupBy(*STREAM_KEYS, "reason").count().collect()  # small: one row per watermark and reason
    return Accepted(
        aggregate_marks(accepted_exact),
        [decided.where(sane).select(*KEYS), *fast.seen],
        [*reason_counts, *fast.reason_counts],
    )


def decided_writers(spark: SparkSession, frame: DataFrame, flags: Flags, *, decided: bool) -> DataFrame:
    """The rows of ``frame`` (with ``KEYS``) of the writers whose marks the exact path decides (``decided``: a
    suspect writer, or any writer of a watermark whose stream or key fails the pattern), or of the others.

    E.g. suspects ``[("s", "", "w2")]``, bad names ``[("../x", "")]``: the rows of ``s/w2`` and of every writer
    of ``../x`` are decided; ``s/w1`` is not."""
    flagged = _with_decided(spark, frame, flags)
    return flagged.where(F.col("decided") if decided else ~F.col("decided")).drop("decided")


def _with_decided(spark: SparkSession, frame: DataFrame, flags: Flags) -> DataFrame:
    """``frame`` with ``decided`` (:func:`decided_writers`), from two broadcast joins with ``flags``' lists."""
    suspects = local_frame(spark, flags.suspects, string_struct(*KEYS))
    bad_names = local_frame(spark, flags.bad_names, string_struct(*STREAM_KEYS))
    flagged = frame.join(F.broadcast(suspects.withColumn("is_suspect", F.lit(True))), KEYS, "left").join(
        F.broadcast(bad_names.withColumn("is_bad_name", F.lit(True))), STREAM_KEYS, "left"
    )
    decided = F.col("is_suspect").isNotNull() | F.col("is_bad_name").isNotNull()
    return flagged.withColumn("decided", decided).drop("is_suspect", "is_bad_name")


def write_progress_quarantine(progress_bad: DataFrame | None, fast: Accepted, quarantine_path: str) -> None:
    """The fast path's quarantine: the bad sequenced marks, when there are any."""
    if progress_bad is not None and fast.reason_counts:
        progress_bad.select(*quarantine_columns()).write.mode("overwrite").parquet(quarantine_path)
