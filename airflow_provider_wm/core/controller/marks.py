"""Rules 1-2 of a round: which marks belong to it (:func:`in_round`), which cannot be interpreted
(:func:`quarantine_reason`), and marks that arrived after their round was committed (:func:`late_marks`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from airflow_provider_wm.core.controller.records import ControllerState, MarkKind, Quarantine, WriterMark
from airflow_provider_wm.core.names import is_valid_stream_name
from airflow_provider_wm.core.progress import MAX_CHUNKS
from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.core.times import is_valid_time_ms

__all__ = ["in_round", "late_marks", "offsets_of", "quarantine_label", "quarantine_reason"]


def quarantine_reason(mark: WriterMark, segments: Mapping[int, Segment]) -> Quarantine | None:
    if not is_valid_stream_name(mark.stream):
        return Quarantine.INVALID_STREAM
    if mark.key is not None and not is_valid_stream_name(mark.key):
        return Quarantine.INVALID_WM_KEY
    if not mark.writer_id:
        return Quarantine.INVALID_WRITER
    if mark.kind not in tuple(MarkKind):
        return Quarantine.UNKNOWN_KIND
    if not is_valid_time_ms(mark.reported_at_ms):
        return Quarantine.INVALID_REPORTED_AT
    if not mark.is_value:
        return None
    if not is_valid_time_ms(mark.time_ms):
        return Quarantine.INVALID_TIME_VALUE
    if mark.position is None:
        return Quarantine.MISSING_POSITION
    if any(offset is None or offset < 0 for offset in mark.position.values()):
        return Quarantine.NEGATIVE_OFFSET
    if any(seg not in segments for seg in mark.position):
        return Quarantine.UNKNOWN_SEGMENT
    if mark.is_sequenced and (
        mark.seq is None
        or mark.seq < 1
        or mark.chunk is None
        or not 1 <= mark.chunk <= MAX_CHUNKS
        or mark.last_chunk is None
    ):
        return Quarantine.INVALID_SEQUENCE
    return None


def quarantine_label(mark: WriterMark, reason: Quarantine) -> str | None:
    """The watermark whose report counts a quarantined mark; ``None`` when its stream or key is not valid
    (those are counted in the round's totals only)."""
    if reason in (Quarantine.INVALID_STREAM, Quarantine.INVALID_WM_KEY):
        return None
    return mark.label


def late_marks(state: ControllerState, marks: Iterable[WriterMark]) -> int:
    """Marks that became visible after the round that covered their report time: never applied.

    A round takes the marks with ``processed_until < reported_at <= now``; one that lands in the dataset
    later than that (a slow upload) would be skipped without a trace. The state remembers how many marks
    had a report time at or before ``processed_until``; any growth of that number is late marks, counted
    and reported (they cannot be applied: their round is committed). Fewer (retention deleted old marks)
    is not late.

    >>> seen_one = ControllerState(processed_until_ms=10, processed_marks=1)
    >>> late_marks(seen_one, [WriterMark("s", "w", 1, {}, "note", 5)] * 3)
    2
    """
    if state.processed_until_ms is None:
        return 0
    past = sum(1 for m in marks if m.reported_at_ms is not None and m.reported_at_ms <= state.processed_until_ms)
    return max(0, past - state.processed_marks)


def in_round(reported_at_ms: int | None, processed_until_ms: int | None, now_ms: int) -> bool:
    """``processed_until < reported_at <= now``; a missing report time is in every round (quarantined)."""
    if reported_at_ms is None:
        return True
    if reported_at_ms > now_ms:
        return False
    return processed_until_ms is None or reported_at_ms > processed_until_ms


def offsets_of(mark: WriterMark) -> dict[int, int]:
    return {seg: off for seg, off in (mark.position or {}).items() if off is not None}
