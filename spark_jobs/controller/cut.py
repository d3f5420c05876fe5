"""The stream cut (Pravega): the highest offset per segment over the participating writers, completed on the
driver by ``core.segments.stream_cut``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_wm.core.controller import (
    StreamStatus,
)
from airflow_provider_wm.core.segments import Segment, stream_cut

__all__ = ["emitted_cuts"]


def emitted_cuts(rows: Sequence[dict[str, Any]], segments: dict[str, dict[int, Segment]]) -> list[dict[str, Any]]:
    """The rows, each emitting watermark with its stream cut, computed on the driver by the reference rules
    themselves from the highest offsets (``highest``: segment id to offset), ``core.segments.stream_cut``: a
    segment with a successor drops out, uncovered key ranges are filled by the newest epoch's segments at offset 0,
    and a segment the segments no longer hold keeps its offset. A stream has a handful of segments: each
    distributed step would cost more Spark jobs than the work."""
    completed = []
    for row in rows:
        entry = dict(row)
        entry["cut_complete"] = True
        if entry["status"] == StreamStatus.EMITTED.value:
            highest = entry["highest"] or {}  # over the writers' positions and the previous cut: one position
            entry["wm_cut"], entry["cut_complete"] = stream_cut([highest], None, segments.get(entry["stream"], {}))
        completed.append(entry)
    return completed
