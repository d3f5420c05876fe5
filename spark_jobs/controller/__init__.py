"""Spark job: one controller-watermark round (Pravega), DataFrame-native.

The rules are those of :mod:`airflow_provider_wm.core.controller` (the reference); a differential test feeds
random rounds to both and requires identical results.

Plan, chosen so that the marks are scanned once in the common case:

1. *Fast path.* One scan tags every mark of the round (row-local sanity checks, no joins) and explodes
   positions into a hash aggregation per ``(stream, writer, segment)`` of primitive columns only
   (min/max time, min/max offset, min/max report time, mark count). The result has one row per writer
   and segment, so everything after it is small.
2. *One row per writer.* A second aggregation of those aggregates together with the stored writers (a
   union, not a join; in one task with no shuffle of its own for a round of at most ``SINGLE_TASK_MARKS``
   marks) gives each writer's next state,
   participation and round figures, and the checks: a writer whose marks might be rejected (earliest time
   below its stored time, lowest offset below a stored offset, unknown segment, shutdown of an unknown
   writer) is a suspect. For every other writer, all sane
   marks are accepted, and the aggregates are exactly what the rules need. This frame is checkpointed.
3. *Verdicts.* One aggregation (one task) of the previous streams' state and the writers' rows gives every
   watermark's verdict, the highest offset per segment and the checks per watermark, collected at once; the
   driver completes the cut with ``core.segments.upper_bound`` and ``complete_cut`` (streams x segments
   rows).
4. *Exact path* (only when there are bad rows, bad names or suspects): a second scan keeps bad rows and the
   suspects' marks, decides each mark exactly, writes the bad ones to the quarantine with their reason, and
   re-aggregates the suspects' accepted marks. Step 2 then runs again for the writers it decided only (the
   other writers' rows of the checkpoint stand, so the marks are not read a third time), and step 3 again.

With sequenced marks, gap-free progress first decides every origin of the round in one more scan of its
sequenced marks (one aggregation per origin); the marks a dense origin releases are then picked out by the
fast path's scan itself (a broadcast join), and the marks are read a third time only to write those that
wait behind a gap.

Modules, in the order a round uses them: :mod:`.schemas`, :mod:`.state` (the state's parts), :mod:`.marks`
(read, sanity, the fast path's scan), :mod:`.progress` (gap-free progress), :mod:`.acceptance` (the checks and
exact decisions), :mod:`.emission` (writers' rows, participation, verdicts), :mod:`.cut`, :mod:`.job` (the
round).

Spark actions are the fixed cost of a small round (a few hundred milliseconds each, most of a round over Spark
Connect), so each one is accounted for: a round with no sequenced and no bad mark runs six (the segments, one
count over the report times, a look for a sequenced mark in the round's row groups, the writers' rows, the
verdicts, the writers' state), plus a job each to infer the schema of the marks and of the segments unless Spark
wrote them (then the schema Spark stored in a file's footer is read on the driver,
:func:`~spark_jobs.screening.stored_spark_schema`); the streams' state, one row per watermark already on the
driver, is written by pyarrow, and the state's parts are read with the schema stored beside them. The exact path
and gap-free progress add their own; a previous progress state that the round leaves as it was (no sequenced
mark) is copied file by file, with no Spark job. Spark runs each shuffle of an action as a job of
its own, so the frames of one row per writer (or fewer) are aggregated and joined in one task instead: eight jobs
in a steady round over marks Spark wrote (``bench/controller_watermark.py``).

Outputs: the next controller state (``writers/``, ``streams/``, with gap-free progress ``origins/`` and
``pending/``: Parquet, each with ``_wm_schema.json``), the quarantine of bad and rejected marks with a
``reason``, and ``manifest.json`` written atomically last.
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
