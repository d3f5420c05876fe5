"""One controller round (:func:`run_round`): rules 1-7 in order, and gap-free progress for sequenced marks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace

from airflow_provider_wm.core.controller.acceptance import WriterRound, apply_writer_marks
from airflow_provider_wm.core.controller.emission import emit
from airflow_provider_wm.core.controller.marks import (
    in_round,
    late_marks,
    offsets_of,
    quarantine_label,
    quarantine_reason,
)
from airflow_provider_wm.core.controller.records import (
    ControllerConfig,
    ControllerState,
    Quarantine,
    Rejection,
    RoundResult,
    StreamReport,
    StreamState,
    WriterMark,
    WriterState,
)
from airflow_provider_wm.core.names import split_label
from airflow_provider_wm.core.progress import Chunk, OriginState, advance
from airflow_provider_wm.core.segments import Segment

__all__ = ["run_round"]


def run_round(
    state: ControllerState,
    marks: Iterable[WriterMark],
    segments: Mapping[str, Mapping[int, Segment]],
    now_ms: int,
    config: ControllerConfig,
) -> RoundResult:
    """One controller round at logical time ``now_ms``; pure: ``state`` is not modified.

    Running the round that produced ``state`` again (same ``now_ms``) returns ``state`` unchanged; the worked
    example of two rounds is in :mod:`airflow_provider_wm.core.controller`.

    >>> done = ControllerState(processed_until_ms=5)
    >>> run_round(done, [], {}, 5, ControllerConfig()).state is done
    True
    """
    if state.processed_until_ms is not None and now_ms < state.processed_until_ms:
        raise ValueError(
            f"now_ms={now_ms} is before the state's processed_until_ms={state.processed_until_ms}: "
            "rounds must not go back in time"
        )
    if state.processed_until_ms == now_ms:  # this round already ran: a re-run changes nothing
        return RoundResult(state=state, reports={}, quarantined=[], rejected=[], deferred_marks=0)
    marks = list(marks)
    late = late_marks(state, marks)
    quarantined: list[tuple[WriterMark, Quarantine]] = []
    rejected: list[tuple[WriterMark, Rejection]] = []
    per_writer: dict[str, dict[str, WriterRound]] = defaultdict(lambda: defaultdict(WriterRound))
    sequenced: dict[str, dict[tuple[str, str], list[WriterMark]]] = defaultdict(lambda: defaultdict(list))
    deferred = read = 0
    for mark in marks:
        if not in_round(mark.reported_at_ms, state.processed_until_ms, now_ms):
            deferred += mark.reported_at_ms is not None and mark.reported_at_ms > now_ms
            continue
        read += 1
        reason = quarantine_reason(mark, segments.get(mark.stream or "", {}))
        if reason is not None:
            quarantined.append((mark, reason))
            continue
        assert mark.stream is not None and mark.writer_id is not None
        if mark.is_sequenced:
            sequenced[mark.label][(mark.writer_id, mark.origin_id or "")].append(mark)
            continue
        bucket = per_writer[mark.label][mark.writer_id]
        (bucket.accepted if mark.is_value else bucket.shutdowns).append(mark)
    origins_after = {
        label: _advance_origins(
            label, state.streams.get(label, StreamState()).origins, by_origin, per_writer, quarantined
        )
        for label, by_origin in sequenced.items()
    }

    new_streams: dict[str, StreamState] = dict(state.streams)
    reports: dict[str, StreamReport] = {}
    quarantined_labels = {label for m, r in quarantined if (label := quarantine_label(m, r))}
    labels = set(state.streams) | set(per_writer) | set(sequenced) | quarantined_labels
    for label in sorted(labels):
        stream, wm_key = split_label(label)
        previous = state.streams.get(label, StreamState())
        stream_rejected: list[tuple[WriterMark, Rejection]] = []
        writers: dict[str, WriterState] = dict(previous.writers)
        first_mark = previous.first_mark_at_ms
        for writer_id, writer_marks in per_writer.get(label, {}).items():
            before = len(stream_rejected)
            updated = apply_writer_marks(writers.get(writer_id), writer_marks, stream_rejected)
            if updated is not None:
                writers[writer_id] = updated
            rejected_now = {id(m) for m, _ in stream_rejected[before:]}
            times = [m.reported_at_ms for m in writer_marks.accepted if id(m) not in rejected_now]
            if times:
                earliest = min(t for t in times if t is not None)
                first_mark = earliest if first_mark is None else min(first_mark, earliest)
        rejected.extend(stream_rejected)
        new_state, report = emit(
            stream, wm_key, previous, writers, first_mark, segments.get(stream, {}), now_ms, config
        )
        origins = origins_after.get(label, previous.origins)
        new_state = replace(new_state, origins=origins)
        by_writer = per_writer.get(label, {}).values()
        accepted_count = sum(len(w.accepted) for w in by_writer) - sum(1 for m, _ in stream_rejected if m.is_value)
        shutdowns_count = sum(len(w.shutdowns) for w in by_writer) - sum(
            1 for m, _ in stream_rejected if not m.is_value
        )
        seen = set(per_writer.get(label, {})) | {writer for writer, _ in sequenced.get(label, {})}
        reports[label] = replace(
            report,
            writers_seen=len(seen),
            pending_sequences=sum(len({c.seq for c in o.pending}) for o in origins.values()),
            marks_accepted=accepted_count,
            shutdowns_accepted=shutdowns_count,
            rejected=_count(r for _, r in stream_rejected),
            quarantined=_count(r for m, r in quarantined if quarantine_label(m, r) == label),
        )
        new_streams[label] = new_state
    return RoundResult(
        state=ControllerState(
            streams=new_streams,
            processed_until_ms=now_ms,
            processed_marks=sum(1 for m in marks if m.reported_at_ms is not None and m.reported_at_ms <= now_ms),
        ),
        reports=reports,
        quarantined=quarantined,
        rejected=rejected,
        deferred_marks=deferred,
        late_marks=late,
        marks_read=read,
    )


def _advance_origins(
    label: str,
    before: Mapping[tuple[str, str], OriginState],
    by_origin: Mapping[tuple[str, str], list[WriterMark]],
    per_writer: dict[str, dict[str, WriterRound]],
    quarantined: list[tuple[WriterMark, Quarantine]],
) -> dict[tuple[str, str], OriginState]:
    """Gap-free progress per origin: released sequences become marks of their writer, bad ones quarantine."""
    stream, wm_key = split_label(label)
    after = dict(before)
    for (writer_id, origin_id), marks in sorted(by_origin.items()):
        chunks = [_chunk(m) for m in marks]
        step = advance(before.get((writer_id, origin_id), OriginState()), chunks)
        if step.state == OriginState():  # nothing committed or waiting: same as never seen
            after.pop((writer_id, origin_id), None)
        else:
            after[(writer_id, origin_id)] = step.state
        for chunk, reason in step.quarantined:
            quarantined.append((_chunk_mark(stream, wm_key, writer_id, origin_id, chunk), Quarantine(reason)))
        for released in step.released:
            mark = WriterMark(
                stream,
                writer_id,
                released.time_ms,
                released.position,
                released.kind,
                released.reported_at_ms,
                wm_key=wm_key,
            )
            per_writer[label][writer_id].accepted.append(mark)
    return after


def _chunk(mark: WriterMark) -> Chunk:
    assert mark.seq is not None and mark.chunk is not None and mark.time_ms is not None
    assert mark.reported_at_ms is not None and mark.kind is not None
    return Chunk(
        mark.seq, mark.chunk, bool(mark.last_chunk), mark.time_ms, offsets_of(mark), mark.reported_at_ms, mark.kind
    )


def _chunk_mark(stream: str, wm_key: str | None, writer_id: str, origin_id: str, chunk: Chunk) -> WriterMark:
    return WriterMark(
        stream,
        writer_id,
        chunk.time_ms,
        dict(chunk.position),
        chunk.kind,
        chunk.reported_at_ms,
        origin_id or None,
        chunk.seq,
        chunk.chunk,
        chunk.last_chunk,
        wm_key,
    )


def _count(reasons: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[str(reason)] = counts.get(str(reason), 0) + 1
    return counts
