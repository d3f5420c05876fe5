"""One controller round: read, accept, advance, emit, write the state and the quarantine, and return the
manifest (``run``); ``main`` is the spark-submit entry point."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructType,
)

from airflow_provider_wm.contracts import ControllerManifest, ControllerRequest
from airflow_provider_wm.core.controller import (
    Rejection,
    StreamStatus,
)
from airflow_provider_wm.core.names import watermark_label
from spark_jobs.common import (
    empty_frame,
    job_session,
    read_schema_document,
    size_shuffles,
    submit_main,
    write_schema_document,
)
from spark_jobs.controller.acceptance import (
    Accepted,
    accept_exactly,
    decided_writers,
    progress_outcome,
    round_flags,
    write_progress_quarantine,
)
from spark_jobs.controller.cut import emitted_cuts
from spark_jobs.controller.emission import NOW, SINGLE_TASK_MARKS, stream_results, writer_rounds
from spark_jobs.controller.marks import (
    aggregate_marks,
    count_marks,
    in_round,
    read_marks,
    read_segments,
    round_marks,
    sequenced_in_round,
    with_key,
)
from spark_jobs.controller.progress import Progress, advance_origins
from spark_jobs.controller.schemas import (
    ORIGINS_STATE_SCHEMA,
    PENDING_STATE_SCHEMA,
    STREAM_KEYS,
    STREAMS_STATE_SCHEMA,
    UNREPORTED,
    VALUE,
    WAITING_SAMPLE,
    WRITERS_STATE_SCHEMA,
)
from spark_jobs.controller.state import carry_state, read_state, write_driver_state, write_state

__all__ = ["main", "run"]


def _run(spark: SparkSession, request: ControllerRequest) -> ControllerManifest:
    """Compute one round, write the state and the quarantine, and return the manifest (not yet written).

    Spark actions of a round with no sequenced and no bad mark (the common case): the segments, the counts of
    late, sequenced and deferred marks, the one scan of the marks into one row per writer (checkpointed), the
    per-watermark verdicts with the highest offsets and the round's checks, the writers' state (the streams' state
    is written from the driver); each extra is named where it is spent."""
    started = time.time()
    size_shuffles(spark)
    segments_by_stream, invalid_segments = read_segments(spark, request.segments_path)
    writers0 = read_state(spark, request.state_in, "writers", WRITERS_STATE_SCHEMA)
    streams0 = read_state(spark, request.state_in, "streams", STREAMS_STATE_SCHEMA)
    origins0 = read_state(spark, request.state_in, "origins", ORIGINS_STATE_SCHEMA)
    pending0 = read_state(spark, request.state_in, "pending", PENDING_STATE_SCHEMA)
    writers0 = writers0 if writers0 is not None else with_key(empty_frame(spark, WRITERS_STATE_SCHEMA))
    streams0 = streams0 if streams0 is not None else with_key(empty_frame(spark, STREAMS_STATE_SCHEMA))

    marks = read_marks(spark, request.marks_path)
    late, processed_marks, has_sequenced, deferred, round_size = count_marks(marks, request)
    progress = None
    if has_sequenced:  # gap-free progress: jobs of its own, only for rounds with sequenced marks
        progress = advance_origins(
            # in_round alone is a filter Parquet can push down (the sequenced test is not)
            marks.where(in_round(request.now_ms, request.processed_until_ms)).where(sequenced_in_round(request)),
            origins0 if origins0 is not None else with_key(empty_frame(spark, ORIGINS_STATE_SCHEMA)),
            pending0 if pending0 is not None else with_key(empty_frame(spark, PENDING_STATE_SCHEMA)),
            segments_by_stream,
        )
    # one scan of the marks: the plain ones and the sequenced ones released by dense origins
    tagged = round_marks(marks, request, None if progress is None else progress.dense)
    if progress is not None:
        tagged = tagged.unionByName(progress.released.withColumn("tag", F.lit(VALUE)))
    groups = aggregate_marks(tagged)
    single_task = round_size <= SINGLE_TASK_MARKS

    def per_writer(aggregates: DataFrame, stored: DataFrame) -> DataFrame:
        return writer_rounds(
            aggregates,
            stored,
            streams0,
            segments_by_stream,
            request.now_ms,
            request.writer_timeout_ms,
            single_task=single_task,
        )

    def verdicts(rounds: DataFrame, accepted: Accepted) -> list[Row]:
        reason_keys = [
            (r["stream"], r["wm_key"] or "") for r in accepted.reason_counts if r["reason"] not in UNREPORTED
        ]
        results = stream_results(
            spark,
            streams0,
            rounds,
            accepted.seen,
            reason_keys,
            request.now_ms,
            request.initial_delay_ms,
            single_task=single_task,
        )
        is_emitted = F.col("status") == StreamStatus.EMITTED.value
        return results.select(
            *STREAM_KEYS,
            "listed",
            "segment_id",
            "offset",
            "suspects",
            "bad_name",
            "row_local",
            "status",
            F.col("first_mark").alias("first_mark_at_ms"),
            F.coalesce("writers_seen", F.lit(0)).alias("writers_seen"),
            F.coalesce("active_writers", F.lit(0)).alias("active_writers"),
            F.coalesce("marks_accepted", F.lit(0)).cast(LongType()).alias("marks_accepted"),
            F.coalesce("shutdowns_accepted", F.lit(0)).cast(LongType()).alias("shutdowns_accepted"),
            F.coalesce("waiting", F.array().cast(ArrayType(StringType()))).alias("waiting"),
            F.when(is_emitted, F.col("lower_ms")).otherwise(F.col("wm_lower_ms")).alias("wm_lower_ms"),
            F.when(is_emitted, F.col("upper_ms")).otherwise(F.col("wm_upper_ms")).alias("wm_upper_ms"),
            "wm_cut",
            F.when(is_emitted, F.col(NOW)).otherwise(F.col("wm_computed_at_ms")).alias("wm_computed_at_ms"),
        ).collect()  # one row per watermark and one per watermark and segment: small

    quarantine_path = f"{request.round_out}/quarantine"
    progress_bad, accepted = progress_outcome(progress)
    # one row per writer, read by the verdicts and the writers' state; the one scan of the marks in the common case
    rounds = per_writer(groups, writers0).localCheckpoint()
    collected = verdicts(rounds, accepted)
    flags = round_flags([r for r in collected if r["segment_id"] is None])
    if flags.exact:  # some marks are decided one by one: their writers' rows and the verdicts again
        accepted = accept_exactly(
            spark, tagged, flags, writers0, segments_by_stream, quarantine_path, progress_bad, accepted
        )
        assert accepted.groups is not None
        redone = per_writer(accepted.groups, decided_writers(spark, writers0, flags, decided=True))
        rounds = decided_writers(spark, rounds, flags, decided=False).unionByName(redone).localCheckpoint()
        collected = verdicts(rounds, accepted)
    else:
        write_progress_quarantine(progress_bad, accepted, quarantine_path)
    write_state(rounds.where("active"), f"{request.state_out}/writers", WRITERS_STATE_SCHEMA)
    highest: dict[tuple[str, str], dict[int, int]] = {}
    for r in collected:
        if r["segment_id"] is not None:
            highest.setdefault((r["stream"], r["wm_key"]), {})[r["segment_id"]] = r["offset"]
    per_watermark = [
        {**r.asDict(), "highest": highest.get((r["stream"], r["wm_key"]))}
        for r in collected
        if r["segment_id"] is None and r["listed"]
    ]
    per_stream = emitted_cuts(per_watermark, segments_by_stream)  # one row per watermark
    write_driver_state(spark, per_stream, f"{request.state_out}/streams", STREAMS_STATE_SCHEMA)  # no Spark job

    pending_sequences = _write_progress_state(spark, request, progress, origins0, pending0)
    manifest = _manifest(request, per_stream, accepted.reason_counts, deferred, invalid_segments, started)
    manifest["totals"]["marks_read"] = round_size
    for label, entry in manifest["streams"].items():
        entry["pending_sequences"] = pending_sequences.get(label, 0)
    manifest["processed_marks"] = processed_marks
    manifest["totals"]["late_marks"] = late
    return ControllerManifest.from_json(manifest)


def _write_progress_state(
    spark: SparkSession,
    request: ControllerRequest,
    progress: Progress | None,
    origins0: DataFrame | None,
    pending0: DataFrame | None,
) -> dict[str, int]:
    """Write gap-free progress's next state (``origins``, ``pending``) and return the sequences waiting per
    watermark label. A round with no sequenced mark (``progress`` None) leaves that state as it was: its parts
    are copied (:func:`~spark_jobs.controller.state.carry_state`, no Spark job) and the counts are read from the
    document the round that wrote ``pending`` stored beside it. A round with none and no earlier one writes no
    progress state."""
    if progress is None:
        if origins0 is None and pending0 is None:
            return {}
        assert request.state_in is not None, "a progress state was read from it"
        if origins0 is not None and carry_state(request.state_in, request.state_out, "origins") is None:
            write_state(origins0, f"{request.state_out}/origins", ORIGINS_STATE_SCHEMA)
        if pending0 is None:
            return {}
        carried = carry_state(request.state_in, request.state_out, "pending")
        if carried is not None and carried.get("rows") == 0:
            return {}
        if carried is not None and PENDING_SEQUENCES in carried:
            return {str(label): int(n) for label, n in carried[PENDING_SEQUENCES].items()}
        if carried is None:
            write_state(pending0, f"{request.state_out}/pending", PENDING_STATE_SCHEMA)
        return _count_pending(spark, request.state_out)
    write_state(progress.origins, f"{request.state_out}/origins", ORIGINS_STATE_SCHEMA)
    if progress.pending is None:  # progress knows that no chunk waits: no read of the state
        write_driver_state(spark, [], f"{request.state_out}/pending", PENDING_STATE_SCHEMA)
        return {}
    write_state(progress.pending, f"{request.state_out}/pending", PENDING_STATE_SCHEMA)
    return _count_pending(spark, request.state_out)


PENDING_SEQUENCES = "sequences"
"""The key of the pending part's schema document under which the round that wrote it stores the sequences
waiting per watermark label, for the rounds that carry the part over unchanged."""


def _count_pending(spark: SparkSession, state_out: str) -> dict[str, int]:
    """The sequences waiting per watermark label in the pending part just written (or carried over from a state
    that did not record them), recorded in its schema document (:data:`PENDING_SEQUENCES`) beside the schema
    the part has."""
    path = f"{state_out}/pending"
    document = read_schema_document(path)
    written = read_state(spark, state_out, "pending", PENDING_STATE_SCHEMA)
    assert written is not None, "written a moment ago"
    counts = {
        _label(r): int(r["sequences"])
        for r in written.groupBy(*STREAM_KEYS)
        .agg(F.countDistinct("writer_id", "origin_id", "seq").alias("sequences"))
        .collect()  # small: one row per watermark with waiting sequences
    }
    if document is not None:
        stored = StructType.fromJson(document)
        write_schema_document(path, stored, document.get("rows"), extra={PENDING_SEQUENCES: counts})
    return counts


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
            "shutdowns_accepted": int(row["shutdowns_accepted"]),
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
            "marks_accepted": sum(s["marks_accepted"] for s in streams.values()),
            "shutdowns_accepted": sum(s["shutdowns_accepted"] for s in streams.values()),
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


def run(spark: SparkSession, request: ControllerRequest) -> ControllerManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with job_session(spark):
        return _run(spark, request)


def main(argv: Sequence[str] | None = None) -> int:
    """``controller_watermark.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(ControllerRequest, run, argv)
