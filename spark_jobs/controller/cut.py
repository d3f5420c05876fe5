"""The stream cut (Pravega): the highest offset per segment over the participating writers, completed on the
driver by ``core.segments.upper_bound`` and ``complete_cut``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_wm.core.controller import (
    StreamStatus,
)
from airflow_provider_wm.core.segments import Segment, complete_cut, upper_bound

__all__ = ["emitted_cuts"]


def emitted_cuts(rows: Sequence[dict[str, Any]], segments: dict[str, dict[int, Segment]]) -> list[dict[str, Any]]:
    """The rows, each emitting watermark with its stream cut, computed on the driver by the reference rules
    themselves from the highest offsets (``highest``: segment id to offset): ``core.segments.upper_bound`` (a
    segment with a successor drops out) and ``complete_cut`` (uncovered key ranges filled by the newest epoch's
    segments at offset 0). A stream has a handful of segments: each distributed step would cost more Spark jobs
    than the work."""
    completed = []
    for row in rows:
        entry = dict(row)
        entry["cut_complete"] = True
        if entry["status"] == StreamStatus.EMITTED.value:
            known = segments.get(entry["stream"], {})
            highest = {s: o for s, o in (entry["highest"] or {}).items() if s in known}
            entry["wm_cut"], entry["cut_complete"] = complete_cut(upper_bound([highest], known), known)
        completed.append(entry)
    return completed
