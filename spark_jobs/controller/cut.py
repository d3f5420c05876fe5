"""The stream cut (Pravega): the highest offset per segment over the participating writers, completed on the
driver by ``core.segments.upper_bound`` and ``complete_cut``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_wm.core.controller import (
    StreamStatus,
)
from airflow_provider_wm.core.segments import Segment, complete_cut, upper_bound
from spark_jobs.controller.schemas import STREAM_KEYS

__all__ = ["emitted_cuts", "highest_offsets"]


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
