"""Rule 2: when a row is too late for its windows, and why a row goes to the late-data output instead."""

from __future__ import annotations

import enum
from collections.abc import Sequence

from airflow_provider_wm.core.windows import Window

__all__ = ["TOO_LATE_REASONS", "LateData", "LateReason", "is_open", "too_late_reason"]


class LateReason(enum.StrEnum):
    """Why a row went to the late-data output instead of a window (the ``reason`` column)."""

    INVALID_ARRIVAL = "INVALID_ARRIVAL"
    INVALID_EVENT_TIME = "INVALID_EVENT_TIME"
    INVALID_VALUE = "INVALID_VALUE"
    INVALID_WINDOW = "INVALID_WINDOW"
    TOO_LATE = "TOO_LATE"
    WINDOW_CLOSED = "WINDOW_CLOSED"


TOO_LATE_REASONS = (LateReason.TOO_LATE.value, LateReason.WINDOW_CLOSED.value)
"""The reasons counted as too late (``too_late`` in the totals), one per :class:`LateData` policy."""


class LateData(enum.StrEnum):
    """When an event is too late to be aggregated (rule 2), given the horizon ``H = W_prev - L``.

    - ``EVENT_TIME`` (default; Apex): its own time is below the horizon, ``t < H``.
    - ``WINDOW_END`` (Spark Structured Streaming, Flink, Beam): its window has closed, ``end <= H``; the event
      still counts in every window of it that ends after ``H``.

    They differ for an event just below the horizon whose window is still open. Tumbling 10 s windows,
    ``H = 25 s``: an event at 22 s is ``TOO_LATE`` under ``EVENT_TIME``, but under ``WINDOW_END`` it lands in
    ``[20 s, 30 s)``, which has not closed; an event at 18 s is late under both (``[10 s, 20 s)`` closed).

    >>> too_late_reason(LateData.EVENT_TIME, 22_000, [Window(20_000, 30_000)], 25_000)
    <LateReason.TOO_LATE: 'TOO_LATE'>
    >>> too_late_reason(LateData.WINDOW_END, 22_000, [Window(20_000, 30_000)], 25_000) is None
    True
    >>> too_late_reason(LateData.WINDOW_END, 18_000, [Window(10_000, 20_000)], 25_000)
    <LateReason.WINDOW_CLOSED: 'WINDOW_CLOSED'>

    **Sessions.** Under ``WINDOW_END`` a session event is judged by its own session window ``[t, t + gap)``,
    *before* any merging: it is ``WINDOW_CLOSED`` when ``t + gap <= H``, even when it overlaps or touches a
    stored session that is still open, or an accepted event of the same run. This is Spark Structured
    Streaming's rule (Spark 4: ``SessionWindowStateStoreRestoreExec`` drops the input rows whose own
    ``session_window.end <= watermark`` before ``MergingSessionsExec`` merges them with the stored sessions),
    and the test ``tests/spark_jobs/test_windowed_aggregate_streaming.py`` checks it against a real streaming
    query. So "the merged session's end" decides only in one direction: an event whose own window is open
    always lands in a session that ends after ``H`` (a merged session ends no earlier than its members) and
    may extend a stored session that has not closed; an event whose own window has closed never reopens or
    extends anything. An event's fate thus depends on its time and ``H`` only, not on the other events of its
    run or on the stored sessions, and a dropped event never bridges two sessions.

    Worked example: gap 10 s, ``H = 33 s``, a stored open session ``[30 s, 48 s)`` of events at 30 s and 38 s.
    An event at 25 s (own window ``[25 s, 35 s)``, open) counts and extends the session to ``[25 s, 48 s)``;
    an event at 22 s (own window ``[22 s, 32 s)``, closed) is ``WINDOW_CLOSED`` although ``[22 s, 32 s)``
    overlaps both ``[30 s, 48 s)`` and ``[25 s, 35 s)``. Under ``EVENT_TIME`` both are ``TOO_LATE``
    (``22 s, 25 s < 33 s``).

    >>> from airflow_provider_wm.core.windows import Session
    >>> gap = Session(10_000)
    >>> too_late_reason(LateData.WINDOW_END, 25_000, gap.assign(25_000), 33_000) is None
    True
    >>> too_late_reason(LateData.WINDOW_END, 22_000, gap.assign(22_000), 33_000)
    <LateReason.WINDOW_CLOSED: 'WINDOW_CLOSED'>
    """

    EVENT_TIME = "event_time"
    WINDOW_END = "window_end"


def too_late_reason(policy: LateData, t: int, windows: Sequence[Window], horizon: int | None) -> LateReason | None:
    """Rule 2 for an event at ``t`` whose windows are ``windows`` (``WindowFn.assign(t)``; for a session the
    event's own ``[t, t + gap)``, before merging): why it is too late, or ``None``."""
    if horizon is None:
        return None
    if policy is LateData.EVENT_TIME:
        return LateReason.TOO_LATE if t < horizon else None
    return None if any(is_open(window, horizon) for window in windows) else LateReason.WINDOW_CLOSED


def is_open(window: Window, horizon: int | None) -> bool:
    """A window still takes data while it ends after the horizon ``W - L``; once it does not, rule 7 purges it,
    a rollup's pane rows for it are too late, and under ``WINDOW_END`` so are its events.

    >>> is_open(Window(0, 1000), 1000), is_open(Window(0, 1000), 999), is_open(Window(0, 1000), None)
    (False, True, True)
    """
    return horizon is None or window.end > horizon
