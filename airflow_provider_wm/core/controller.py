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
``{0:200, 1:300, 2:300}``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from airflow_provider_wm.core.names import is_valid_stream_name, split_label, watermark_label
from airflow_provider_wm.core.progress import MAX_CHUNKS, Chunk, OriginState, advance
from airflow_provider_wm.core.segments import Segment, StreamCut, stream_cut
from airflow_provider_wm.core.times import is_valid_time_ms

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
    "in_round",
    "late_marks",
    "position_goes_back",
    "run_round",
]


class MarkKind(StrEnum):
    NOTE = "note"
    COMMIT = "commit"
    SHUTDOWN = "shutdown"


class Quarantine(StrEnum):
    """Why a mark could not be interpreted. Checked in this order; the first that applies is reported."""

    INVALID_STREAM = "INVALID_STREAM"
    INVALID_WM_KEY = "INVALID_WM_KEY"
    INVALID_WRITER = "INVALID_WRITER"
    UNKNOWN_KIND = "UNKNOWN_KIND"
    INVALID_REPORTED_AT = "INVALID_REPORTED_AT"
    INVALID_TIME_VALUE = "INVALID_TIME_VALUE"
    MISSING_POSITION = "MISSING_POSITION"
    NEGATIVE_OFFSET = "NEGATIVE_OFFSET"
    UNKNOWN_SEGMENT = "UNKNOWN_SEGMENT"
    INVALID_SEQUENCE = "INVALID_SEQUENCE"
    # decided against the origin's state (core.progress), after the row-local checks above
    SEQUENCE_ALREADY_COMMITTED = "SEQUENCE_ALREADY_COMMITTED"
    SEQUENCE_TOO_FAR_AHEAD = "SEQUENCE_TOO_FAR_AHEAD"
    DUPLICATE_CHUNK = "DUPLICATE_CHUNK"
    DUPLICATE_LAST_CHUNK = "DUPLICATE_LAST_CHUNK"
    CHUNK_AFTER_LAST = "CHUNK_AFTER_LAST"


class Rejection(StrEnum):
    """Why a well-formed mark was not applied."""

    INVALID_TIME = "INVALID_TIME"
    INVALID_POSITION = "INVALID_POSITION"
    UNKNOWN_WRITER = "UNKNOWN_WRITER"


class StreamStatus(StrEnum):
    EMITTED = "EMITTED"
    NO_ACTIVE_WRITERS = "NO_ACTIVE_WRITERS"
    INITIAL_DELAY = "INITIAL_DELAY"
    WAITING_FOR_WRITERS = "WAITING_FOR_WRITERS"
    TIME_NOT_ADVANCED = "TIME_NOT_ADVANCED"


@dataclass(frozen=True)
class WriterMark:
    """One row of the marks dataset. Fields may be ``None`` or out of range: sanity checks decide."""

    stream: str | None
    writer_id: str | None
    time_ms: int | None
    position: Mapping[int, int | None] | None
    kind: str | None
    reported_at_ms: int | None
    origin_id: str | None = None
    seq: int | None = None
    chunk: int | None = None
    last_chunk: bool | None = None
    wm_key: str | None = None

    @property
    def key(self) -> str | None:
        """The mark's watermark key; an empty ``wm_key`` means none (the stream's unkeyed watermark)."""
        return self.wm_key or None

    @property
    def label(self) -> str:
        """The watermark this mark counts for (:func:`watermark_label`); the mark must be sane."""
        assert self.stream is not None
        return watermark_label(self.stream, self.key)

    @property
    def is_value(self) -> bool:
        """Notes and commits carry a time and a position; shutdowns do not."""
        return self.kind in (MarkKind.NOTE, MarkKind.COMMIT)

    @property
    def is_sequenced(self) -> bool:
        """A note or commit with any of the progress fields set (shutdowns ignore them)."""
        return self.is_value and (
            self.origin_id is not None or self.seq is not None or self.chunk is not None or self.last_chunk is not None
        )


@dataclass(frozen=True)
class WriterState:
    time_ms: int
    position: StreamCut
    alive: bool = True
    lagging_since_ms: int | None = None


@dataclass(frozen=True)
class Watermark:
    stream: str
    lower_ms: int
    upper_ms: int
    stream_cut: StreamCut
    computed_at_ms: int
    wm_key: str | None = None


@dataclass(frozen=True)
class StreamState:
    first_mark_at_ms: int | None = None
    watermark: Watermark | None = None
    writers: Mapping[str, WriterState] = field(default_factory=dict)
    #: per (writer_id, origin_id or ""): the committed sequence and the chunks waiting behind a gap
    origins: Mapping[tuple[str, str], OriginState] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerState:
    #: per watermark label (``stream`` or ``stream:wm_key``)
    streams: Mapping[str, StreamState] = field(default_factory=dict)
    processed_until_ms: int | None = None
    #: How many marks with a report time at or before ``processed_until_ms`` the rounds have seen.
    processed_marks: int = 0


@dataclass(frozen=True)
class ControllerConfig:
    """:param writer_timeout_ms: how long a non-participating writer may hold the watermark back.
    :param initial_delay_ms: how long a new stream waits after its first mark before its first watermark.
    """

    writer_timeout_ms: int = 10 * 60_000
    initial_delay_ms: int = 2 * 60_000

    def __post_init__(self) -> None:
        for name in ("writer_timeout_ms", "initial_delay_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int of milliseconds, got {value!r}")


@dataclass(frozen=True)
class StreamReport:
    stream: str
    status: StreamStatus
    writers_seen: int
    active_writers: int
    marks_accepted: int
    rejected: Mapping[str, int]
    quarantined: Mapping[str, int]
    waiting_for: tuple[str, ...] = ()
    watermark: Watermark | None = None
    cut_complete: bool = True
    pending_sequences: int = 0
    wm_key: str | None = None


@dataclass(frozen=True)
class RoundResult:
    state: ControllerState
    reports: Mapping[str, StreamReport]  # per watermark label
    quarantined: list[tuple[WriterMark, Quarantine]]
    rejected: list[tuple[WriterMark, Rejection]]
    deferred_marks: int
    late_marks: int = 0

    @property
    def watermarks(self) -> dict[str, Watermark]:
        return {s: r.watermark for s, r in self.reports.items() if r.watermark is not None}


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


def _quarantine_reason(mark: WriterMark, segments: Mapping[int, Segment]) -> Quarantine | None:
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


@dataclass
class _WriterRound:
    accepted: list[WriterMark] = field(default_factory=list)
    shutdowns: list[WriterMark] = field(default_factory=list)


def _apply_writer_marks(
    stored: WriterState | None, marks: _WriterRound, rejected: list[tuple[WriterMark, Rejection]]
) -> WriterState | None:
    """Rules 3-5 for one writer; returns its state after the marks (``None``: still unknown)."""
    accepted: list[WriterMark] = []
    for mark in marks.accepted:
        assert mark.time_ms is not None and mark.position is not None
        if stored is not None and mark.time_ms < stored.time_ms:
            rejected.append((mark, Rejection.INVALID_TIME))
        elif stored is not None and position_goes_back(stored.position, _offsets(mark)):
            rejected.append((mark, Rejection.INVALID_POSITION))
        else:
            accepted.append(mark)
    state = stored
    if accepted:
        top_time = max(m.time_ms for m in accepted if m.time_ms is not None)
        highest: dict[int, int] = {}
        for mark in accepted:
            for seg, offset in _offsets(mark).items():
                highest[seg] = max(offset, highest.get(seg, offset))
        top_segments = {seg for m in accepted if m.time_ms == top_time for seg in _offsets(m)}
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


def _offsets(mark: WriterMark) -> dict[int, int]:
    return {seg: off for seg, off in (mark.position or {}).items() if off is not None}


def run_round(
    state: ControllerState,
    marks: Iterable[WriterMark],
    segments: Mapping[str, Mapping[int, Segment]],
    now_ms: int,
    config: ControllerConfig,
) -> RoundResult:
    """One controller round at logical time ``now_ms``; pure: ``state`` is not modified.

    Running the round that produced ``state`` again (same ``now_ms``) returns ``state`` unchanged.
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
    per_writer: dict[str, dict[str, _WriterRound]] = defaultdict(lambda: defaultdict(_WriterRound))
    sequenced: dict[str, dict[tuple[str, str], list[WriterMark]]] = defaultdict(lambda: defaultdict(list))
    deferred = 0
    for mark in marks:
        if not in_round(mark.reported_at_ms, state.processed_until_ms, now_ms):
            deferred += mark.reported_at_ms is not None and mark.reported_at_ms > now_ms
            continue
        reason = _quarantine_reason(mark, segments.get(mark.stream or "", {}))
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
    quarantined_labels = {label for m, r in quarantined if (label := _quarantine_label(m, r))}
    labels = set(state.streams) | set(per_writer) | set(sequenced) | quarantined_labels
    for label in sorted(labels):
        stream, wm_key = split_label(label)
        previous = state.streams.get(label, StreamState())
        stream_rejected: list[tuple[WriterMark, Rejection]] = []
        writers: dict[str, WriterState] = dict(previous.writers)
        first_mark = previous.first_mark_at_ms
        for writer_id, writer_marks in per_writer.get(label, {}).items():
            before = len(stream_rejected)
            updated = _apply_writer_marks(writers.get(writer_id), writer_marks, stream_rejected)
            if updated is not None:
                writers[writer_id] = updated
            rejected_now = {id(m) for m, _ in stream_rejected[before:]}
            times = [m.reported_at_ms for m in writer_marks.accepted if id(m) not in rejected_now]
            if times:
                earliest = min(t for t in times if t is not None)
                first_mark = earliest if first_mark is None else min(first_mark, earliest)
        rejected.extend(stream_rejected)
        new_state, report = _emit(
            stream, wm_key, previous, writers, first_mark, segments.get(stream, {}), now_ms, config
        )
        origins = origins_after.get(label, previous.origins)
        new_state = replace(new_state, origins=origins)
        accepted_count = sum(len(w.accepted) for w in per_writer.get(label, {}).values()) - sum(
            1 for m, _ in stream_rejected if m.is_value
        )
        seen = set(per_writer.get(label, {})) | {writer for writer, _ in sequenced.get(label, {})}
        reports[label] = replace(
            report,
            writers_seen=len(seen),
            pending_sequences=sum(len({c.seq for c in o.pending}) for o in origins.values()),
            marks_accepted=accepted_count,
            rejected=_count(r for _, r in stream_rejected),
            quarantined=_count(r for m, r in quarantined if _quarantine_label(m, r) == label),
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
    )


def _quarantine_label(mark: WriterMark, reason: Quarantine) -> str | None:
    """The watermark whose report counts a quarantined mark; ``None`` when its stream or key is not valid
    (those are counted in the round's totals only)."""
    if reason in (Quarantine.INVALID_STREAM, Quarantine.INVALID_WM_KEY):
        return None
    return mark.label


def _advance_origins(
    label: str,
    before: Mapping[tuple[str, str], OriginState],
    by_origin: Mapping[tuple[str, str], list[WriterMark]],
    per_writer: dict[str, dict[str, _WriterRound]],
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
        mark.seq, mark.chunk, bool(mark.last_chunk), mark.time_ms, _offsets(mark), mark.reported_at_ms, mark.kind
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


def _emit(
    stream: str,
    wm_key: str | None,
    previous: StreamState,
    writers: Mapping[str, WriterState],
    first_mark_at_ms: int | None,
    segments: Mapping[int, Segment],
    now_ms: int,
    config: ControllerConfig,
) -> tuple[StreamState, StreamReport]:
    """Rules 6-7: participation, writer timeout, and the watermark if one is due."""
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
