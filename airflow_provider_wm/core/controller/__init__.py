"""The controller watermark (Pravega), one round at a time.

Writers report *marks*: ``(writer_id, time_ms, position)`` where ``position`` maps segment ids to offsets.
A controller *round* (one DAG run) consumes the marks reported since the previous round, updates each
writer's state and emits at most one watermark per stream: ``lower`` is the minimum time over the
stream's active writers, ``upper`` the maximum, and the stream cut the least upper bound of their
positions (see :mod:`airflow_provider_wm.core.segments`).

Rules, in the order a round applies them:

1. **Marks in the round.** A mark belongs to the round whose logical time ``now`` first reaches its
   ``reported_at_ms``: ``processed_until < reported_at_ms <= now``. Later marks wait for a later round.
2. **Sanity.** A mark that cannot be interpreted is quarantined with a :class:`Quarantine` reason
   (bad stream name, missing writer, unknown kind, a time that is missing or outside
   :func:`~airflow_provider_wm.core.times.is_valid_time_ms`, a missing or negative offset, unknown segment).
3. **Validation against the stored state.** A writer's state is what the previous round stored. A note or
   commit mark is rejected ``INVALID_TIME`` when its time is lower than the stored time (equal is fine),
   and ``INVALID_POSITION`` when, over the segments present in both positions, an offset decreases.
   Rejected marks change nothing and are reported.
4. **Largest time counts.** Of a writer's accepted marks in one round, the largest time becomes its time
   (for transaction commits this is Pravega's rule; re-committing is idempotent). Its position is the
   set of segments of the marks at that time, each at the highest offset any accepted mark of the round
   reported for it. Within one round, marks are not validated against each other: nothing is stored
   between them.
   Sequenced marks (``origin_id, seq, chunk, last_chunk``) first pass the gap-free progress rules of
   :mod:`airflow_provider_wm.core.progress`: only complete sequences continuing their origin's gap-free
   prefix take effect, each as one mark; the rest wait in the state (``StreamState.origins``).
5. **Shutdown.** A ``shutdown`` mark stops the writer if it is the writer's last event of the round (by
   ``reported_at_ms``; a shutdown wins a tie). A later accepted mark revives it. A shutdown of a writer
   the controller does not know is rejected ``UNKNOWN_WRITER``.
6. **Participation.** A writer participates when its time is greater than the previous watermark's
   lower bound (always, before the first watermark). A writer that does not participate stays active
   until ``writer_timeout_ms`` has passed since it was first seen not participating, or at once if it
   is shut down; inactive writers are dropped from the state.
7. **Emission.** No watermark while the stream has no active writers, while ``initial_delay_ms`` has not
   passed since its first accepted mark, or while any active writer does not participate (time would
   otherwise jump past its data). No watermark either when ``lower`` does not advance past the previous
   lower bound. So the lower bound is strictly increasing.

The clock is the round's logical time, never the wall clock, so that a re-run computes the same result.

**Keyed watermarks** (Jet): a mark may carry a ``wm_key``. Each ``(stream, wm_key)`` is a watermark of its
own, labelled ``stream:wm_key`` (:func:`watermark_label`), and every rule above applies to it on its own: its
writers, their states and timeouts, its initial delay, its lower and upper bound and its cut (over the
stream's segments). A writer that reports marks for two keys is a writer of each. Marks without a key (or
with an empty one) make the stream's unkeyed watermark, labelled ``stream``. For example, ``w1`` reporting
``t=100`` for key ``eu`` and ``w2`` reporting ``t=300`` for key ``us`` give ``orders:eu`` lower 100 and
``orders:us`` lower 300; ``eu`` lagging never holds ``us`` back.

Worked example (three segments of one epoch), round 1 ``w1 t=100 {0:100, 1:200}; w2 t=101 {1:100, 2:200};
w3 t=102 {2:100, 0:200}`` gives lower 100, upper 102, cut ``{0:200, 1:200, 2:200}``; round 2
``w1 t=200 {1:300}; w2 t=201 {1:100, 2:300}; w3 t=202 {2:300}`` gives lower 200, cut
``{0:200, 1:300, 2:300}``:

>>> from airflow_provider_wm.core.segments import Segment
>>> segments = {"s": {i: Segment(i, i / 3, (i + 1) / 3) for i in range(3)}}
>>> def marks(reported_at, *rows):
...     return [WriterMark("s", w, t, position, "note", reported_at) for w, t, position in rows]
>>> config = ControllerConfig(initial_delay_ms=0)
>>> one = run_round(ControllerState(), marks(1, ("w1", 100, {0: 100, 1: 200}), ("w2", 101, {1: 100, 2: 200}),
...                 ("w3", 102, {2: 100, 0: 200})), segments, 1, config)
>>> w = one.watermarks["s"]; w.lower_ms, w.upper_ms, w.stream_cut
(100, 102, {0: 200, 1: 200, 2: 200})
>>> two = run_round(one.state, marks(2, ("w1", 200, {1: 300}), ("w2", 201, {1: 100, 2: 300}),
...                 ("w3", 202, {2: 300})), segments, 2, config)
>>> two.watermarks["s"].lower_ms, sorted(two.watermarks["s"].stream_cut.items())
(200, [(0, 200), (1, 300), (2, 300)])
"""

from __future__ import annotations

from airflow_provider_wm.core.controller.acceptance import apply_writer_marks, position_goes_back, time_goes_back
from airflow_provider_wm.core.controller.emission import emit
from airflow_provider_wm.core.controller.marks import in_round, late_marks, quarantine_reason
from airflow_provider_wm.core.controller.records import (
    ControllerConfig,
    ControllerState,
    MarkKind,
    Quarantine,
    Rejection,
    RoundResult,
    StreamReport,
    StreamState,
    StreamStatus,
    Watermark,
    WriterMark,
    WriterState,
)
from airflow_provider_wm.core.controller.round import run_round

__all__ = [
    "ControllerConfig",
    "ControllerState",
    "MarkKind",
    "Quarantine",
    "Rejection",
    "RoundResult",
    "StreamReport",
    "StreamState",
    "StreamStatus",
    "Watermark",
    "WriterMark",
    "WriterState",
    "apply_writer_marks",
    "emit",
    "in_round",
    "late_marks",
    "position_goes_back",
    "quarantine_reason",
    "run_round",
    "time_goes_back",
]
