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
4. Writer states, participation, emission and the stream cut run on the small frames: the writers' state is
   written and read back, one query gives every watermark's verdict and the highest offset per segment, and
   the driver completes the cut with ``core.segments.upper_bound`` and ``complete_cut`` (streams x
   segments rows).

Modules, in the order a round uses them: :mod:`.schemas`, :mod:`.marks` (read, sanity, the fast path's
scan), :mod:`.progress` (gap-free progress), :mod:`.acceptance` (suspects and exact decisions),
:mod:`.emission` (writers' state, participation, verdicts), :mod:`.cut`, :mod:`.job` (the round).

Spark actions are the fixed cost of a small round (a few hundred milliseconds each, most of a round over
Spark Connect), so each one is accounted for: a round with no sequenced and no bad mark runs seven (the
segments, one count over the report-time and progress columns, the scan, the round's checks, the writers'
state, the verdicts, the streams' state); the exact path, gap-free progress and a previous progress state
add their own.

Outputs: the next controller state (``writers/``, ``streams/`` Parquet), the quarantine of bad and
rejected marks with a ``reason``, and ``manifest.json`` written atomically last.
"""

from __future__ import annotations

from spark_jobs.controller.job import main, run
from spark_jobs.controller.schemas import (
    MARKS_SCHEMA,
    ORIGINS_STATE_SCHEMA,
    PENDING_STATE_SCHEMA,
    SEGMENTS_SCHEMA,
    STREAMS_STATE_SCHEMA,
    WRITERS_STATE_SCHEMA,
)

__all__ = [
    "MARKS_SCHEMA",
    "ORIGINS_STATE_SCHEMA",
    "PENDING_STATE_SCHEMA",
    "SEGMENTS_SCHEMA",
    "STREAMS_STATE_SCHEMA",
    "WRITERS_STATE_SCHEMA",
    "main",
    "run",
]
