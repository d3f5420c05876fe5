"""Rules 6-7 of a round: which writers participate, the writer timeout, and whether a stream's watermark is due
(:func:`emit`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from airflow_provider_wm.core.controller.records import (
    ControllerConfig,
    StreamReport,
    StreamState,
    StreamStatus,
    Watermark,
    WriterState,
)
from airflow_provider_wm.core.segments import Segment, stream_cut

__all__ = ["emit"]


def emit(
    stream: str,
    wm_key: str | None,
    previous: StreamState,
    writers: Mapping[str, WriterState],
    first_mark_at_ms: int | None,
    segments: Mapping[int, Segment],
    now_ms: int,
    config: ControllerConfig,
) -> tuple[StreamState, StreamReport]:
    """Rules 6-7: participation, writer timeout, and the watermark if one is due.

    Two writers at 100 and 300 after the initial delay emit lower 100, upper 300; a stream whose writer has
    not passed the previous lower bound waits for it (until the writer timeout):

    >>> writers = {"w1": WriterState(100, {0: 5}), "w2": WriterState(300, {0: 9})}
    >>> config, one_segment = ControllerConfig(initial_delay_ms=0), {0: Segment(0, 0.0, 1.0)}
    >>> state, report = emit("orders", None, StreamState(), writers, 0, one_segment, 1_000, config)
    >>> report.status.value, report.watermark.lower_ms, report.watermark.upper_ms
    ('EMITTED', 100, 300)
    >>> emit("orders", None, state, writers, 0, one_segment, 2_000, config)[1].waiting_for
    ('w1',)
    """
    prev = previous.watermark
    active: dict[str, WriterState] = {}
    waiting: list[str] = []
    for writer_id, writer in sorted(writers.items()):
        if prev is None or writer.time_ms > prev.lower_ms:
            active[writer_id] = replace(writer, lagging_since_ms=None)
            continue
        since = now_ms if writer.lagging_since_ms is None else writer.lagging_since_ms
        if writer.alive and now_ms - since < config.writer_timeout_ms:
            active[writer_id] = replace(writer, lagging_since_ms=since)
            waiting.append(writer_id)

    def result(
        status: StreamStatus, watermark: Watermark | None = None, complete: bool = True
    ) -> tuple[StreamState, StreamReport]:
        new_state = StreamState(first_mark_at_ms=first_mark_at_ms, watermark=watermark or prev, writers=active)
        report = StreamReport(
            stream=stream,
            wm_key=wm_key,
            status=status,
            writers_seen=0,
            active_writers=len(active),
            marks_accepted=0,
            rejected={},
            quarantined={},
            waiting_for=tuple(waiting),
            watermark=watermark,
            cut_complete=complete,
        )
        return new_state, report

    if not active:
        return result(StreamStatus.NO_ACTIVE_WRITERS)
    if first_mark_at_ms is None or now_ms - first_mark_at_ms < config.initial_delay_ms:
        return result(StreamStatus.INITIAL_DELAY)
    if waiting:
        return result(StreamStatus.WAITING_FOR_WRITERS)
    lower = min(w.time_ms for w in active.values())
    if prev is not None and lower <= prev.lower_ms:
        return result(StreamStatus.TIME_NOT_ADVANCED)
    cut, complete = stream_cut([w.position for w in active.values()], prev.stream_cut if prev else None, segments)
    watermark = Watermark(
        stream=stream,
        lower_ms=lower,
        upper_ms=max(w.time_ms for w in active.values()),
        stream_cut=cut,
        computed_at_ms=now_ms,
        wm_key=wm_key,
    )
    return result(StreamStatus.EMITTED, watermark, complete)
