"""The writers' next state, which writers participate (Jet's idle rule, Pravega's timeout and shutdown), and
every watermark's verdict: emitted, waiting for writers, or no active writers."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
)

from airflow_provider_wm.core.controller import (
    StreamStatus,
)
from airflow_provider_wm.core.segments import Segment
from spark_jobs.common import local_frame, string_struct, with_constants
from spark_jobs.controller.acceptance import time_goes_back
from spark_jobs.controller.marks import invalid_key, is_known
from spark_jobs.controller.schemas import (
    DEFERRED,
    KEYS,
    SHUTDOWN,
    STREAM_KEYS,
    STREAM_NAME_REGEX,
    STREAMS_STATE_SCHEMA,
    VALUE,
)

__all__ = ["NOW", "stream_results", "with_now", "writer_rounds"]

NOW = "wm_round_now"
"""The column of the round's ``now_ms`` in the frames of one row per writer or watermark (:func:`with_now`)."""


def with_now(frame: DataFrame, now_ms: int) -> DataFrame:
    """``frame`` with the round's ``now_ms`` as the column :data:`NOW`, the same on every row
    (:func:`~spark_jobs.common.with_constants`): every round has a new ``now``, and as a literal it made each round
    compile the stages that read it again. The filter of the round's marks by report time and the counts over all
    marks keep their literals: Parquet skips row groups by the filter, and a generated column on every mark ever
    reported costs more than compiling the scan (about 0.07 s over 11 million marks, against 0.02 s).

    Example: ``with_now(writers, 60_000)`` adds ``wm_round_now`` (60000 on every row)."""
    return with_constants(frame, {NOW: f"CAST({now_ms} AS BIGINT)"})


SINGLE_TASK_MARKS = 2_000_000
"""The most marks a round may have for its per-writer and per-watermark aggregations to run in one task each
(``coalesce(1)``: no shuffle, so no Spark job of their own). That task also merges the scan tasks' partial
aggregates and reads the stored state, so its rows grow with the marks; a larger round shuffles them over the
session's partitions instead (one more Spark job each)."""


def in_one_task(frame: DataFrame, single_task: bool) -> DataFrame:
    """``frame`` in one partition when ``single_task`` (:data:`SINGLE_TASK_MARKS`), else as it is."""
    return frame.coalesce(1) if single_task else frame


def writer_rounds(
    groups: DataFrame,
    writers0: DataFrame,
    streams0: DataFrame,
    segments: dict[str, dict[int, Segment]],
    now_ms: int,
    writer_timeout_ms: int,
    *,
    single_task: bool = True,
) -> DataFrame:
    """One row per writer with marks in the round or a stored state: its next state, its round's figures, and
    the checks that decide whether the fast path holds, from one aggregation of the round's aggregates and the
    stored writers: a union, so no join, aggregated in one task with no shuffle of its own (``single_task``, for
    a round of at most :data:`SINGLE_TASK_MARKS` marks). Both are one row per writer (and segment), small next
    to the marks, and Spark runs each shuffle as a Spark job of its own.

    State (as ``core.controller``): the largest accepted time counts; the position is the segments of the marks
    at that time, each at the round's highest offset; the last event (shutdown wins a tie) decides whether the
    writer is alive. Then participation (time above the watermark's previous lower bound) and the writer
    timeout: ``in_state`` rows are the next writers' state, ``active`` ones are kept in it.

    Checks (:func:`round_flags` reads them): ``suspect``, a writer for which "every sane mark is accepted" might
    not hold (earliest time below its stored time, lowest offset below a stored one, a negative or missing
    offset, an unknown segment, a shutdown of an unknown writer); ``bad_name``, a stream or key failing the
    pattern (checked once per writer instead of once per mark); ``row_local``, how many of its groups have a
    cheap row-local reason. ``seen``: the writer has a mark that is accepted by the fast path.
    """
    tag = F.col("tag")
    value = tag == VALUE
    unknown_segment = ~is_known(segments)
    bad_offsets = (F.col("min_offset") < 0) | (F.col("null_offsets") > 0)
    stored = writers0.select(
        *KEYS,
        F.col("time_ms").alias("stored_time_ms"),
        F.col("position").alias("stored_position"),
        F.col("alive").alias("stored_alive"),
        F.col("lagging_since_ms").alias("stored_lagging_since_ms"),
        F.lit(True).alias("stored"),
    )
    with_segment = value & F.col("segment_id").isNotNull()
    per_writer = (
        in_one_task(groups.unionByName(stored, allowMissingColumns=True), single_task)
        .groupBy(*KEYS)
        .agg(
            F.max(F.when(value, F.col("max_time_ms"))).alias("new_time_ms"),
            F.sum(F.when(value, F.col("marks"))).alias("accepted_marks"),
            F.sum(F.when(tag == SHUTDOWN, F.col("marks"))).alias("accepted_shutdowns"),
            F.min(F.when(value, F.col("min_reported_at_ms"))).alias("first_reported_at_ms"),
            F.max(F.when(value, F.col("max_reported_at_ms"))).alias("last_value_at_ms"),
            F.max(F.when(tag == SHUTDOWN, F.col("max_reported_at_ms"))).alias("last_shutdown_at_ms"),
            F.collect_list(
                F.when(with_segment, F.struct("max_time_ms", "segment_id", "max_offset", "min_offset"))
            ).alias("segments"),
            F.min(F.when(value, F.col("min_time_ms"))).alias("earliest"),
            F.count(F.when(tag.isin(VALUE, SHUTDOWN), 1)).alias("sane_groups"),
            F.count(F.when(value, 1)).alias("value_groups"),
            F.count(F.when(tag == SHUTDOWN, 1)).alias("shutdowns"),
            F.count(tag).alias("groups"),
            F.count(F.when(value & bad_offsets, 1)).alias("bad_offsets"),
            F.count(F.when(with_segment & unknown_segment, 1)).alias("unknown_segments"),
            F.count(F.when(~tag.isin(VALUE, SHUTDOWN, DEFERRED), 1)).alias("row_local"),
            F.max("stored").alias("stored"),
            F.max("stored_time_ms").alias("stored_time_ms"),
            F.first("stored_position", ignorenulls=True).alias("stored_position"),
            F.first("stored_alive", ignorenulls=True).alias("stored_alive"),
            F.max("stored_lagging_since_ms").alias("stored_lagging_since_ms"),
        )
    )
    is_stored = F.coalesce("stored", F.lit(False))
    offset_back = F.exists(
        "segments",
        lambda s: s["min_offset"] < F.coalesce(F.element_at(F.col("stored_position"), s["segment_id"]), F.lit(-1)),
    )
    suspect = (
        (F.col("unknown_segments") > 0)
        | time_goes_back(F.col("stored_time_ms"), F.col("earliest"))
        | F.coalesce(offset_back, F.lit(False))
        | (F.col("bad_offsets") > 0)
        | ((F.col("shutdowns") > 0) & ~is_stored & (F.col("value_groups") == 0))
    )
    bad_name = (F.col("groups") > 0) & F.coalesce(
        ~F.col("stream").rlike(STREAM_NAME_REGEX) | invalid_key(), F.lit(False)
    )
    at_new_time = F.filter("segments", lambda s: s["max_time_ms"] == F.col("new_time_ms"))
    new_position = F.map_from_entries(F.transform(at_new_time, lambda s: F.struct(s["segment_id"], s["max_offset"])))
    has_new = F.col("new_time_ms").isNotNull()
    stopped = F.col("last_shutdown_at_ms").isNotNull() & (
        F.col("last_value_at_ms").isNull() | (F.col("last_shutdown_at_ms") >= F.col("last_value_at_ms"))
    )
    time_ms = F.coalesce("new_time_ms", "stored_time_ms")
    alive = (
        F.when(stopped, F.lit(False))
        .when(F.col("last_value_at_ms").isNotNull(), F.lit(True))
        .otherwise(F.coalesce("stored_alive", F.lit(True)))
    )
    now = F.col(NOW)
    participating = F.col("wm_lower_ms").isNull() | (F.col("time_ms") > F.col("wm_lower_ms"))
    since = F.coalesce("stored_lagging_since_ms", now)
    return (
        # in one task, the streams' state (one row per watermark) joins in it: a broadcast is a Spark job of its own
        with_now(per_writer, now_ms)
        .join(
            in_one_task(streams0.select(*STREAM_KEYS, "wm_lower_ms"), single_task).hint("shuffle_hash"),
            STREAM_KEYS,
            "left",
        )
        .select(
            *KEYS,
            time_ms.alias("time_ms"),
            F.when(has_new, new_position).otherwise(F.col("stored_position")).alias("position"),
            alive.alias("alive"),
            "wm_lower_ms",
            time_ms.isNotNull().alias("in_state"),
            "stored_lagging_since_ms",
            (F.col("sane_groups") > 0).alias("seen"),
            "accepted_marks",
            "accepted_shutdowns",
            "first_reported_at_ms",
            suspect.alias("suspect"),
            bad_name.alias("bad_name"),
            "row_local",
            NOW,
        )
        .select(
            "*",
            participating.alias("participating"),
            F.when(participating, F.lit(None).cast(LongType())).otherwise(since).alias("lagging_since_ms"),
        )
        .withColumn(
            "active",
            F.col("in_state") & (F.col("participating") | (F.col("alive") & (now - since < F.lit(writer_timeout_ms)))),
        )
        .drop("wm_lower_ms", "stored_lagging_since_ms", NOW)
    )


def stream_results(
    spark: SparkSession,
    streams0: DataFrame,
    rounds: DataFrame,
    seen: Sequence[DataFrame],
    reason_keys: Sequence[tuple[str, str]],
    now_ms: int,
    initial_delay_ms: int,
    *,
    single_task: bool = True,
) -> DataFrame:
    """Per watermark (stream and key, ``segment_id`` null): its figures and its status (EMITTED or why not),
    with the previous watermark, and the fast path's checks of its writers (``suspects``, ``bad_name``,
    ``row_local``; a row that is not ``listed`` carries only those); and per watermark and segment
    (``segment_id`` set): the highest ``offset`` over its active writers' positions and its previous cut, the
    input of the stream cut.

    A watermark is one of the previous state, of a writer with a sane mark (``rounds``' seen ones and
    ``seen``), or of a counted bad mark (``reason_keys``). Each source is a kind of row in one union,
    aggregated once, in one task for a round of at most :data:`SINGLE_TASK_MARKS` marks (``single_task``: no
    shuffle of its own), where a join per source would cost a Spark job each. Every row carries the round's
    ``now_ms`` as :data:`NOW` (:func:`with_now`).
    """
    with_reasons = local_frame(spark, reason_keys, string_struct(*STREAM_KEYS))
    listed = F.lit(True).alias("listed")
    state_columns = [c for c in STREAMS_STATE_SCHEMA.fieldNames() if c not in STREAM_KEYS]
    active = F.col("active")
    rows = (
        streams0.select(*STREAM_KEYS, listed, *state_columns)
        .unionByName(
            rounds.select(
                *STREAM_KEYS,
                F.when(F.col("seen"), F.lit(True)).alias("listed"),
                F.when(F.col("seen"), F.col("writer_id")).alias("seen"),
                F.when(active, F.col("writer_id")).alias("active"),
                F.when(active, F.col("time_ms")).alias("time_ms"),
                F.when(active, F.col("participating")).alias("participating"),
                "accepted_marks",
                "accepted_shutdowns",
                "first_reported_at_ms",
                F.when(F.col("suspect"), F.col("writer_id")).alias("suspect"),
                "bad_name",
                "row_local",
            ),
            True,
        )
        .unionByName(with_reasons.select(*STREAM_KEYS, listed), True)
        .unionByName(
            rounds.where(active).select(*STREAM_KEYS, F.explode("position").alias("segment_id", "offset")), True
        )
        .unionByName(streams0.select(*STREAM_KEYS, F.explode("wm_cut").alias("segment_id", "offset")), True)
    )
    for frame in seen:
        rows = rows.unionByName(frame.select(*STREAM_KEYS, listed, F.col("writer_id").alias("seen")), True)
    decided = (
        in_one_task(rows, single_task)
        .groupBy(*STREAM_KEYS, "segment_id")
        .agg(
            F.max("listed").alias("listed"),
            F.max("first_mark_at_ms").alias("first_mark_at_ms"),
            F.max("wm_lower_ms").alias("wm_lower_ms"),
            F.max("wm_upper_ms").alias("wm_upper_ms"),
            F.first("wm_cut", ignorenulls=True).alias("wm_cut"),
            F.max("wm_computed_at_ms").alias("wm_computed_at_ms"),
            F.size(F.collect_set("seen")).alias("writers_seen"),  # not count_distinct: a shuffle of its own
            F.count("active").alias("active_writers"),
            F.min("time_ms").alias("lower_ms"),
            F.max("time_ms").alias("upper_ms"),
            F.sort_array(F.collect_list(F.when(~F.col("participating"), F.col("active")))).alias("waiting"),
            F.sum("accepted_marks").alias("marks_accepted"),
            F.sum("accepted_shutdowns").alias("shutdowns_accepted"),
            F.min("first_reported_at_ms").alias("first_in_round"),
            F.max("offset").alias("offset"),
            F.collect_set("suspect").alias("suspects"),
            F.coalesce(F.max("bad_name"), F.lit(False)).alias("bad_name"),
            F.coalesce(F.sum("row_local"), F.lit(0)).alias("row_local"),
        )
        .withColumn("listed", F.coalesce("listed", F.lit(False)))
        .where(
            F.col("listed")
            | F.col("segment_id").isNotNull()
            | (F.size("suspects") > 0)
            | F.col("bad_name")
            | (F.col("row_local") > 0)
        )
    )
    first_mark = F.least("first_mark_at_ms", "first_in_round")
    in_initial_delay = first_mark.isNull() | (F.col(NOW) - first_mark < F.lit(initial_delay_ms))
    status = (
        F.when(F.col("active_writers") == 0, StreamStatus.NO_ACTIVE_WRITERS.value)
        .when(in_initial_delay, StreamStatus.INITIAL_DELAY.value)
        .when(F.size("waiting") > 0, StreamStatus.WAITING_FOR_WRITERS.value)
        .when(
            F.col("wm_lower_ms").isNotNull() & (F.col("lower_ms") <= F.col("wm_lower_ms")),
            StreamStatus.TIME_NOT_ADVANCED.value,
        )
        .otherwise(StreamStatus.EMITTED.value)
    )
    return with_now(decided, now_ms).select("*", first_mark.alias("first_mark"), status.alias("status"))
