"""The writers' next state, which writers participate (Jet's idle rule, Pravega's timeout and shutdown), and
every watermark's verdict: emitted, waiting for writers, or no active writers."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StructType,
)

from airflow_provider_wm.core.controller import (
    StreamStatus,
)
from spark_jobs.common import (
    conform,
    read_dataset,
)
from spark_jobs.controller.acceptance import Accepted
from spark_jobs.controller.marks import with_key
from spark_jobs.controller.schemas import KEYS, SHUTDOWN, STREAM_KEYS, STREAMS_STATE_SCHEMA, UNREPORTED, VALUE

__all__ = ["active_writers", "next_writer_states", "read_state", "stream_decisions"]


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
    accepted: Accepted,
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
