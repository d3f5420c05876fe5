"""The controller-watermark job's request and manifest (one Pravega controller round)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from airflow_provider_wm.contracts.codec import Contract
from airflow_provider_wm.contracts.jobs import JobManifest, JobRequest, UnreadableFile
from airflow_provider_wm.contracts.store import RoundWatermark

__all__ = ["ControllerManifest", "ControllerRequest", "ControllerTotals", "StreamEntry"]


@dataclass(frozen=True)
class ControllerRequest(JobRequest):
    """One round at ``now_ms``: the marks reported in ``(processed_until_ms, now_ms]``, the segments and the
    previous round's state (``state_in``, none on the first round); the next state goes to ``state_out``.
    ``processed_marks`` is how many marks the previous rounds saw reported up to ``processed_until_ms``
    (growth means late marks)."""

    job: ClassVar[str] = "controller_watermark"
    controller: str
    run_id: str
    marks_path: str
    segments_path: str
    state_out: str
    round_out: str
    now_ms: int
    writer_timeout_ms: int
    initial_delay_ms: int
    state_in: str | None = None
    processed_until_ms: int | None = None
    processed_marks: int = 0


@dataclass(frozen=True)
class StreamEntry(Contract):
    """The round's verdict on one watermark (``stream`` or ``stream:wm_key``)."""

    stream: str
    wm_key: str | None
    status: str
    writers_seen: int = 0
    active_writers: int = 0
    marks_accepted: int = 0
    shutdowns_accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    quarantined: dict[str, int] = field(default_factory=dict)
    waiting_for: list[str] = field(default_factory=list)
    waiting_count: int = 0
    watermark: RoundWatermark | None = None
    previous_watermark: RoundWatermark | None = None
    cut_complete: bool = True
    pending_sequences: int = 0


@dataclass(frozen=True)
class ControllerTotals(Contract):
    """The round's counts over all watermarks. Each of the ``marks_read`` marks of the round (reported in
    ``(processed_from_ms, processed_until_ms]``, or without a report time) lands in exactly one of
    ``marks_accepted`` (notes and commits), ``shutdowns_accepted``, ``rejected`` or ``quarantined`` (by
    reason), except sequenced marks taken in by gap-free progress: a released sequence counts once however
    many chunks it had, a chunk waiting for its gap in none (until a later round releases or quarantines it).
    Marks reported later are ``deferred_marks``. Example: a note, a shutdown of its writer and one of an
    unknown writer: ``marks_read`` 3 = ``marks_accepted`` 1 + ``shutdowns_accepted`` 1 + ``rejected``
    ``{"UNKNOWN_WRITER": 1}``."""

    marks_read: int = 0
    marks_accepted: int = 0
    shutdowns_accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    quarantined: dict[str, int] = field(default_factory=dict)
    deferred_marks: int = 0
    late_marks: int = 0
    invalid_segments: int = 0
    streams: int = 0
    watermarks_emitted: int = 0


@dataclass(frozen=True)
class ControllerManifest(JobManifest):
    """What the round did: per watermark label its :class:`StreamEntry`, the totals, and where the next
    state and the quarantine are."""

    controller: str
    processed_from_ms: int | None
    processed_until_ms: int
    processed_marks: int
    state_path: str
    quarantine_path: str | None
    totals: ControllerTotals
    streams: dict[str, StreamEntry]
    duration_s: float = 0.0
    unreadable_files: list[UnreadableFile] = field(default_factory=list)
    status: str = "succeeded"
    job: str = "controller_watermark"
