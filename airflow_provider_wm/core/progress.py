"""Gap-free progress (NebulaStream): origins, sequence numbers and chunks.

A writer's marks may carry ``origin_id, seq, chunk, last_chunk``: the writer's data of one origin is cut
into sequences numbered 1, 2, 3, ... without gaps, each sent in chunks 1..L, the chunk numbered L being
flagged ``last_chunk``. Marks can arrive out of order (files landing late, retried uploads), so a mark
takes effect only when everything before it has arrived:

- a sequence is *complete* when chunks 1..L have all arrived; its time is the largest time of its chunks,
  its position the highest offset per segment over its chunks;
- an origin *releases* the complete sequences that continue its gap-free prefix (committed + 1, + 2, ...);
  a complete sequence behind a gap waits (in the controller state) and is released as soon as the gap
  fills, possibly in a later round. Released sequences become ordinary marks of their writer, so the
  writer's time is the largest time of its released sequences: it never decreases, and the same
  sequences in any arrival order give the same final time;
- bad rows are quarantined, never applied (``Quarantine`` reasons of :mod:`.controller`): a sequence at or
  below the committed one (``SEQUENCE_ALREADY_COMMITTED``), more than :data:`MAX_PENDING_SEQUENCES` ahead
  of it (``SEQUENCE_TOO_FAR_AHEAD``), a chunk that arrived before (``DUPLICATE_CHUNK``), a second
  ``last_chunk`` (``DUPLICATE_LAST_CHUNK``), a chunk numbered past the last one (``CHUNK_AFTER_LAST``).
  "Before" and "second" follow arrival order: pending chunks first, then by report time, chunk number
  and time.

The waiting chunks are bounded: at most :data:`MAX_PENDING_SEQUENCES` sequences per origin past its
committed one, each of at most :data:`MAX_CHUNKS` chunks; anything further is quarantined (kept, counted,
and re-sendable), so the state can never grow without bound.

Worked example (each sequence one chunk, times increasing): arrivals 1 2 4 6 3 7 5 give the origin's
committed sequence after each: 1, 2, 2, 2, 4, 4, 7.

>>> state, times = OriginState(), []
>>> for seq in (1, 2, 4, 6, 3, 7, 5):
...     step = advance(state, [Chunk(seq, 1, True, 10 * seq, {0: seq}, seq, "note")])
...     state = step.state
...     times.append(max((s.time_ms for s in step.released), default=None))
>>> times
[10, 20, None, None, 40, None, 70]
>>> state.committed_seq, state.pending
(7, ())
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "MAX_CHUNKS",
    "MAX_PENDING_SEQUENCES",
    "Advance",
    "Chunk",
    "OriginState",
    "ReleasedSequence",
    "advance",
    "arrival_order",
]

MAX_PENDING_SEQUENCES = 10_000
"""How far past its committed sequence an origin's pending sequences may be."""
MAX_CHUNKS = 10_000
"""The highest chunk number of a sequence."""


class Chunk(NamedTuple):
    """One sequenced mark: sequence ``seq`` (from 1), chunk ``chunk`` (from 1), and its time and position."""

    seq: int
    chunk: int
    last_chunk: bool
    time_ms: int
    position: Mapping[int, int]
    reported_at_ms: int
    kind: str


class ReleasedSequence(NamedTuple):
    """A complete sequence in the gap-free prefix: becomes one mark of its writer."""

    seq: int
    time_ms: int
    position: dict[int, int]
    reported_at_ms: int
    kind: str


@dataclass(frozen=True)
class OriginState:
    """The highest released sequence (0: none yet) and the chunks waiting behind a gap, by (seq, chunk)."""

    committed_seq: int = 0
    pending: tuple[Chunk, ...] = ()


@dataclass(frozen=True)
class Advance:
    state: OriginState
    released: list[ReleasedSequence] = field(default_factory=list)
    quarantined: list[tuple[Chunk, str]] = field(default_factory=list)


def arrival_order(chunk: Chunk) -> tuple[int, int, int]:
    """How chunks of one round are ordered for "before" and "second" (pending chunks come first)."""
    return (chunk.reported_at_ms, chunk.chunk, chunk.time_ms)


def advance(state: OriginState, chunks: Iterable[Chunk]) -> Advance:
    """Add one round's chunks of an origin to its state and release what became gap-free.

    >>> step = advance(OriginState(), [Chunk(1, 2, True, 42, {}, 1, "note")])
    >>> step.released, len(step.state.pending)
    ([], 1)
    >>> advance(step.state, [Chunk(1, 1, False, 2, {}, 2, "note")]).released[0].time_ms
    42
    """
    quarantined: list[tuple[Chunk, str]] = []
    arrived: list[Chunk] = list(state.pending)
    for chunk in sorted(chunks, key=arrival_order):
        if chunk.seq <= state.committed_seq:
            quarantined.append((chunk, "SEQUENCE_ALREADY_COMMITTED"))
        elif chunk.seq > state.committed_seq + MAX_PENDING_SEQUENCES:
            quarantined.append((chunk, "SEQUENCE_TOO_FAR_AHEAD"))
        else:
            arrived.append(chunk)
    by_seq: dict[int, list[Chunk]] = defaultdict(list)
    for chunk in arrived:  # arrival order: pending first, then this round's sorted chunks
        by_seq[chunk.seq].append(chunk)
    kept: dict[int, list[Chunk]] = {}
    for seq, rows in by_seq.items():
        seen: set[int] = set()
        unique: list[Chunk] = []
        for chunk in rows:
            if chunk.chunk in seen:
                quarantined.append((chunk, "DUPLICATE_CHUNK"))
            else:
                seen.add(chunk.chunk)
                unique.append(chunk)
        lasts = [c for c in unique if c.last_chunk]
        for extra in lasts[1:]:
            quarantined.append((extra, "DUPLICATE_LAST_CHUNK"))
        last = lasts[0].chunk if lasts else None
        survivors = []
        for chunk in unique:
            if chunk.last_chunk and chunk is not lasts[0]:
                continue
            if last is not None and not chunk.last_chunk and chunk.chunk > last:
                quarantined.append((chunk, "CHUNK_AFTER_LAST"))
                continue
            survivors.append(chunk)
        kept[seq] = survivors
    complete = sorted(seq for seq, rows in kept.items() if _is_complete(rows))
    released_seqs = [seq for k, seq in enumerate(complete, start=1) if seq - k == state.committed_seq]
    released = [_release(seq, kept[seq]) for seq in released_seqs]
    committed = state.committed_seq + len(released_seqs)
    released_set = set(released_seqs)
    kept_ids = {id(c) for rows in kept.values() for c in rows}
    # waiting chunks never conflict with each other, so their order does not matter: kept canonical
    pending = tuple(sorted((c for c in arrived if c.seq not in released_set and id(c) in kept_ids), key=_by_number))
    return Advance(OriginState(committed, pending), released, quarantined)


def _by_number(chunk: Chunk) -> tuple[int, int]:
    return chunk.seq, chunk.chunk


def _is_complete(rows: Sequence[Chunk]) -> bool:
    lasts = [c.chunk for c in rows if c.last_chunk]
    return bool(lasts) and len(rows) == lasts[0]


def _release(seq: int, rows: Sequence[Chunk]) -> ReleasedSequence:
    position: dict[int, int] = {}
    for chunk in rows:
        for segment, offset in chunk.position.items():
            position[segment] = max(offset, position.get(segment, offset))
    return ReleasedSequence(
        seq=seq,
        time_ms=max(c.time_ms for c in rows),
        position=position,
        reported_at_ms=max(c.reported_at_ms for c in rows),
        kind="commit" if any(c.kind == "commit" for c in rows) else "note",
    )
