"""Spark job: one run of a windowed aggregate (Apex), DataFrame-native.

The rules are those of :mod:`airflow_provider_wm.core.windowing` (the reference); a differential test feeds
random runs to both and requires identical panes.

A run reads a request (JSON, written by the operator) and:

1. reads the events that arrived since the previous run: ``arrival_from < arrival <= arrival_until`` on the
   arrival column (a filter on a partition column prunes partitions), and the rows whose arrival is null,
   unparseable or not a valid time (rule 0 of :mod:`~airflow_provider_wm.core.windowing`,
   :func:`~airflow_provider_wm.core.windowing.read_by_run`); a folder with no data file yet is a run with no
   events, and so is a missing events path only with ``allow_missing_events`` (else the run fails, naming it:
   :func:`~spark_jobs.windowed.events.missing_events`); a merge of several ``inputs`` reads each one so and
   unions them, each input's columns prefixed with its name (:func:`merge_inputs`);
2. classifies each row: ``INVALID_ARRIVAL`` (see below), ``INVALID_EVENT_TIME`` (a null, unparseable or
   out-of-range time, :func:`~spark_jobs.common.invalid_time`), ``INVALID_VALUE`` (NaN or +/-infinity in a
   float or double column a built-in aggregate reads, ``core.windowing.values_are_usable``: a flag computed as
   the rows are read, one more ``when`` in the classification), ``TOO_LATE`` (``t < W_prev - L``), or
   accepted; and, in the same aggregation, computes the partial aggregates per ``(keys, window)`` of the
   accepted events (tumbling and sliding windows by arithmetic, ``explode`` for the slides, Spark's
   ``session_window`` for sessions, one window for global). No window arithmetic is evaluated on a row
   that is not accepted, so a time such as ``2**63 - 1`` cannot overflow;
3. writes the late and invalid rows (original columns + ``reason``) only when there are any;
4. merges the partials with the stored open windows (a union and a group-by; sessions first merge
   overlapping intervals per key with window functions), decides each window's firing row by row, and
   writes the panes (with retraction rows) and the next state (open windows, a versioned snapshot);
5. writes ``manifest.json`` atomically last: panes by timing, events read, too-late and invalid counts,
   the new watermark and the highest event time seen.

**One pass to the totals, one action for the outputs.** The watermark needs the run's highest event time before
any window is decided, so a run materialises one small frame (``localCheckpoint``) with its totals (observed as
the checkpoint is written in a classic session; over Spark Connect, aggregated from the checkpoint in one more
Spark job): the partials per window on a first run; with stored windows, the partials already merged with them
(the too-late and invalid rows' counters ride along as rows without a window), so the partials' group-by, the
merge and the state's scan run once and the outputs (panes, state) are projections of that checkpoint. Up to
``driver_output_rows`` windows they are fetched together in one Spark action and written by pyarrow from the
driver (:mod:`spark_jobs.driver_outputs`); larger runs write them with Spark, one write each. A rollup's
watermark is its upstream's stream, known before any pane row is read: its pane rows and live panes are
hash-partitioned once by ``(keys, target window start)``, each upstream window's live pane is picked (a hash
aggregate over a rank packed in a long) and each target window's live panes summed in the partitions of that one
exchange, and that result is materialised once with the run's totals (one row per target window that got rows,
one per live pane of a window still open); the live snapshot, the panes and the state are projections of it
(merged with the stored windows when there are any), written as above.

**Expressions as SQL text.** The job writes its expressions as SQL text (:mod:`spark_jobs.sql_text`) for
``selectExpr``, ``where`` and ``F.expr``: in a classic session a ``Column`` function is a Py4J round trip each,
and building a run's plan from a few thousand of them took longer than its Spark jobs.

**Cut-offs as data, not code.** Spark writes a literal number into the Java code it generates for a stage and
compiles each distinct text once, so a run's horizons and watermark, which move with every scheduled run, are
columns generated from an array (:func:`~spark_jobs.windowed.base.with_cut_offs`), read by the rules as any other
column: the next run's stages reuse the code compiled for the last one. The arrival range stays a literal, for
Parquet to skip row groups by (a native read of the same range compiles it as well).

**No shuffle of its own for the merge.** For windows that do not merge, the stored windows are hash-partitioned as
the partials leave their group-by, ``(keys, window_start)``; the union keeps that partitioning, so the events' and
the state's shuffles run side by side and the merge runs in the checkpoint's stage. The state's schema and row
count are stored beside its files (``_wm_schema.json``, which Spark's listing skips), so reading the state starts
no Spark job (a rollup's live snapshot likewise). The pane output's schema is stored at its root the same way,
with the ``wm_run`` partition typed as Spark infers it, so a rollup reads its upstream's panes without a Spark job.

Panes and late events are written to the folder of their ``wm_run=<version>`` partition, replacing it, so a
retried or re-run task replaces its own rows. The state is written to a new folder per version.

**Rows without a usable arrival.** A row whose arrival column is null, unparseable or outside the valid time
range can never fall in a run's ``(arrival_from, arrival_until]``: a filter on the range alone would drop it
silently, forever. So every run also reads those rows (``OR arrival IS NULL`` and the out-of-range bounds are
part of the filter pushed down to Parquet, whose row-group statistics skip the groups without any: about no
cost while there are none), quarantines them with reason ``INVALID_ARRIVAL`` in its own ``wm_run`` partition of
the late output and counts them (``totals.invalid_arrival``, not part of ``events_read``); the operator logs a
warning naming the column. They are not aggregated and do not move the highest event time. Such a row stays in
the source, so it is reported again by every run until it is fixed or removed there: the count is "rows in the
source that no run can read", a standing alarm, not this run's share. Reading each such row exactly once would
need a record of what was reported (a row has no identity but its file and position, and a rewritten file
changes both), or the file's modification time as its arrival, which loses rows of a file that becomes visible
after a run covering its time; a repeated report is preferred to a silent loss.

A rollup (``spec.upstream``, window propagation) reads the upstream's pane rows of the upstream versions
``arrival_from < wm_run <= arrival_until`` instead of events (:meth:`Job.rollup_partials`): it keeps the
live pane of each upstream window in a second snapshot (``live_out``), recomputes the partials of the windows
that got rows from their live panes, and the windows replace their stored partials; steps 4 and 5 follow.
"""

from __future__ import annotations

from spark_jobs.windowed.job import Job, main, run, run_request

__all__ = ["Job", "main", "run", "run_request"]
