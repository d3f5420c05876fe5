"""The controller's values: mark kinds, quarantine and rejection reasons, stream statuses, a writer's mark and
state, a watermark, a stream's and the controller's state, its configuration and a round's reports. The rules
that use them are in :mod:`~airflow_provider_wm.core.controller.marks`, ``.acceptance``, ``.emission`` and
``.round``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from airflow_provider_wm.core.names import watermark_label
from airflow_provider_wm.core.progress import OriginState
from airflow_provider_wm.core.segments import StreamCut

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
    shutdowns_accepted: int = 0  # shutdown marks of known writers (rule 5); the unknown ones are rejected


@dataclass(frozen=True)
class RoundResult:
    """What a round did. Each of its ``marks_read`` marks lands in exactly one count: a watermark's
    ``marks_accepted`` (notes and commits) or ``shutdowns_accepted``, ``rejected`` or ``quarantined``. A
    sequenced mark that gap-free progress takes in is the exception: a released sequence counts once however
    many chunks it had (some may be of earlier rounds), and a chunk that waits for its gap counts in none
    (``StreamReport.pending_sequences``) until a later round releases or quarantines it. Example: a note, a
    shutdown of its writer and one of a writer never seen are 3 marks read, 1 accepted, 1 shutdown accepted,
    1 rejected ``UNKNOWN_WRITER``."""

    state: ControllerState
    reports: Mapping[str, StreamReport]  # per watermark label
    quarantined: list[tuple[WriterMark, Quarantine]]
    rejected: list[tuple[WriterMark, Rejection]]
    deferred_marks: int
    late_marks: int = 0
    marks_read: int = 0  # the round's marks (rule 1), whatever became of them

    @property
    def watermarks(self) -> dict[str, Watermark]:
        return {s: r.watermark for s, r in self.reports.items() if r.watermark is not None}
