"""Rules 3-4 of a round: a writer's marks against its stored state (:func:`time_goes_back`,
:func:`position_goes_back`), and what the accepted ones make its new state (:func:`apply_writer_marks`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from airflow_provider_wm.core.controller.marks import offsets_of
from airflow_provider_wm.core.controller.records import Rejection, WriterMark, WriterState

__all__ = ["WriterRound", "apply_writer_marks", "position_goes_back", "time_goes_back"]


def time_goes_back(stored_time_ms: int | None, time_ms: int) -> bool:
    """A note or commit mark whose time is below its writer's stored time is rejected ``INVALID_TIME`` (rule 3;
    an equal time is fine: re-committing is idempotent). A writer with no stored state accepts any time.

    >>> time_goes_back(100, 99), time_goes_back(100, 100), time_goes_back(None, 0)
    (True, False, False)
    """
    return stored_time_ms is not None and time_ms < stored_time_ms


def position_goes_back(stored: Mapping[int, int], new: Mapping[int, int]) -> bool:
    """True when an offset decreases on a segment present in both positions.

    Pravega also compares the highest shared segment id, which is the same on both sides by definition,
    so the offsets decide. Segments present in only one position are not compared.

    >>> position_goes_back({0: 10, 1: 5}, {1: 4, 2: 0})
    True
    >>> position_goes_back({0: 10}, {1: 0})
    False
    """
    return any(offset < stored[seg] for seg, offset in new.items() if seg in stored)


@dataclass
class WriterRound:
    accepted: list[WriterMark] = field(default_factory=list)
    shutdowns: list[WriterMark] = field(default_factory=list)


def apply_writer_marks(
    stored: WriterState | None, marks: WriterRound, rejected: list[tuple[WriterMark, Rejection]]
) -> WriterState | None:
    """Rules 3-5 for one writer; returns its state after the marks (``None``: still unknown)."""
    accepted: list[WriterMark] = []
    for mark in marks.accepted:
        assert mark.time_ms is not None and mark.position is not None
        if time_goes_back(None if stored is None else stored.time_ms, mark.time_ms):
            rejected.append((mark, Rejection.INVALID_TIME))
        elif stored is not None and position_goes_back(stored.position, offsets_of(mark)):
            rejected.append((mark, Rejection.INVALID_POSITION))
        else:
            accepted.append(mark)
    state = stored
    if accepted:
        top_time = max(m.time_ms for m in accepted if m.time_ms is not None)
        highest: dict[int, int] = {}
        for mark in accepted:
            for seg, offset in offsets_of(mark).items():
                highest[seg] = max(offset, highest.get(seg, offset))
        top_segments = {seg for m in accepted if m.time_ms == top_time for seg in offsets_of(m)}
        position = {seg: highest[seg] for seg in top_segments}
        state = WriterState(
            time_ms=top_time,
            position=position,
            alive=True if stored is None else stored.alive,
            lagging_since_ms=None if stored is None else stored.lagging_since_ms,
        )
    if state is None:
        rejected.extend((m, Rejection.UNKNOWN_WRITER) for m in marks.shutdowns)
        return None
    last_value = max((m.reported_at_ms or 0 for m in accepted), default=None)
    last_shutdown = max((m.reported_at_ms or 0 for m in marks.shutdowns), default=None)
    if last_shutdown is not None and (last_value is None or last_shutdown >= last_value):
        return replace(state, alive=False)
    if last_value is not None:
        return replace(state, alive=True)
    return state
