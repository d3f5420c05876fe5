"""Build the job's Parquet inputs from core objects and read its outputs back into core objects, with pyarrow on
local files (the contract's schemas, converted from the job's): no Spark job is spent on a test's own I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from airflow_provider_wm.core.controller import (
    ControllerState,
    StreamState,
    Watermark,
    WriterMark,
    WriterState,
)
from airflow_provider_wm.core.names import watermark_label
from airflow_provider_wm.core.progress import Chunk, OriginState
from airflow_provider_wm.core.segments import Segment
from spark_jobs.controller import (
    MARKS_SCHEMA,
    SEGMENTS_SCHEMA,
)

# Three segments of epoch 0 over [0, 1/3), [1/3, 2/3), [2/3, 1): the worked example.
THIRDS = [Segment(0, 0.0, 1 / 3), Segment(1, 1 / 3, 2 / 3), Segment(2, 2 / 3, 1.0)]
E1 = 1 << 32
# The same, with segment 1 [1/3, 2/3) split into two segments of epoch 1 (a scale event).
SPLIT = [*THIRDS, Segment(E1 | 3, 1 / 3, 0.5), Segment(E1 | 4, 0.5, 2 / 3)]


def mark(
    writer: str,
    time_ms: int | None,
    position: Mapping[int, int | None] | None,
    *,
    stream: str | None = "s",
    kind: str | None = "note",
    reported_at_ms: int | None = 1_000,
    wm_key: str | None = None,
) -> WriterMark:
    return WriterMark(stream, writer, time_ms, position, kind, reported_at_ms, wm_key=wm_key)


def _write_rows(rows: Iterable[tuple[Any, ...]], schema: Any, path: Path) -> str:
    """``rows`` (tuples in ``schema``'s field order; maps as dicts) as one Parquet file in the folder ``path``."""
    names = schema.fieldNames()
    records = [
        {
            name: list(value.items()) if isinstance(value, Mapping) else value
            for name, value in zip(names, row, strict=True)
        }
        for row in rows
    ]
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=to_arrow_schema(schema)), path / "part-0.parquet")
    return str(path)


def write_marks(marks: Iterable[WriterMark], path: Path) -> str:
    rows = [
        (
            m.stream,
            m.writer_id,
            m.time_ms,
            None if m.position is None else dict(m.position),
            m.kind,
            m.reported_at_ms,
            m.origin_id,
            m.seq,
            m.chunk,
            m.last_chunk,
            m.wm_key,
        )
        for m in marks
    ]
    return _write_rows(rows, MARKS_SCHEMA, path)


def write_segments(segments: Mapping[str, Iterable[Segment]], path: Path) -> str:
    rows = [(stream, s.segment_id, s.key_start, s.key_end) for stream, segs in segments.items() for s in segs]
    return _write_rows(rows, SEGMENTS_SCHEMA, path)


def _state_rows(path: str, part: str) -> list[dict[str, Any]]:
    """A part of a controller state (maps as dicts); a round that has no gap-free progress writes none."""
    if not Path(path, part).exists():
        return []
    table = pq.read_table(Path(path, part))
    return [
        {name: dict(value) if isinstance(value, list) and name in _MAPS else value for name, value in row.items()}
        for row in table.to_pylist()
    ]


_MAPS = {"position", "wm_cut"}


def read_state(path: str, processed_until_ms: int | None, processed_marks: int = 0) -> ControllerState:
    writers: dict[str, dict[str, WriterState]] = {}
    for r in _state_rows(path, "writers"):
        writers.setdefault(_label(r), {})[r["writer_id"]] = WriterState(
            time_ms=r["time_ms"],
            position=dict(r["position"] or {}),
            alive=r["alive"],
            lagging_since_ms=r["lagging_since_ms"],
        )
    streams: dict[str, StreamState] = {}
    for r in _state_rows(path, "streams"):
        wm = None
        if r["wm_lower_ms"] is not None:
            wm = Watermark(
                r["stream"],
                r["wm_lower_ms"],
                r["wm_upper_ms"],
                dict(r["wm_cut"] or {}),
                r["wm_computed_at_ms"],
                r["wm_key"] or None,
            )
        streams[_label(r)] = StreamState(r["first_mark_at_ms"], wm, writers.get(_label(r), {}))
    committed: dict[str, dict[tuple[str, str], int]] = {}
    for r in _state_rows(path, "origins"):
        committed.setdefault(_label(r), {})[(r["writer_id"], r["origin_id"])] = r["committed_seq"]
    pending: dict[str, dict[tuple[str, str], list[Chunk]]] = {}
    for r in _state_rows(path, "pending"):
        chunk = Chunk(
            r["seq"],
            r["chunk"],
            r["last_chunk"],
            r["time_ms"],
            dict(r["position"] or {}),
            r["reported_at_ms"],
            r["kind"],
        )
        pending.setdefault(_label(r), {}).setdefault((r["writer_id"], r["origin_id"]), []).append(chunk)
    for stream in set(committed) | set(pending):
        keys = set(committed.get(stream, {})) | set(pending.get(stream, {}))
        origins = {
            key: OriginState(
                committed.get(stream, {}).get(key, 0),
                tuple(sorted(pending.get(stream, {}).get(key, []), key=lambda c: (c.seq, c.chunk))),
            )
            for key in keys
        }
        streams[stream] = replace(streams.get(stream, StreamState()), origins=origins)
    return ControllerState(streams=streams, processed_until_ms=processed_until_ms, processed_marks=processed_marks)


def _label(row: Any) -> str:
    """A state row's watermark label (``core.names.watermark_label``); ``""`` is no key."""
    return watermark_label(row["stream"], row["wm_key"] or None)


def watermark_from_manifest(entry: Mapping[str, Any] | None) -> Watermark | None:
    if not entry:
        return None
    return Watermark(
        entry["stream"],
        entry["lower_ms"],
        entry["upper_ms"],
        {int(k): v for k, v in entry["stream_cut"].items()},
        entry["computed_at_ms"],
        entry["wm_key"],
    )


def run_spark_round(
    spark: Any,
    workdir: Path,
    marks: Iterable[WriterMark],
    segments: Mapping[str, Iterable[Segment]],
    *,
    now_ms: int,
    state_in: str | None = None,
    processed_until_ms: int | None = None,
    processed_marks: int = 0,
    writer_timeout_ms: int = 600_000,
    initial_delay_ms: int = 0,
    round_name: str = "r",
) -> tuple[dict[str, Any], str]:
    """Run the job's round in-process on the shared session; returns (manifest, state path)."""
    from airflow_provider_wm.contracts import ControllerRequest
    from spark_jobs.controller import run

    workdir.mkdir(parents=True, exist_ok=True)
    request = ControllerRequest(
        controller="test",
        run_id=round_name,
        marks_path=write_marks(marks, workdir / f"{round_name}-marks"),
        segments_path=write_segments(segments, workdir / f"{round_name}-segments"),
        state_in=state_in,
        state_out=str(workdir / f"{round_name}-state"),
        round_out=str(workdir / f"{round_name}-out"),
        now_ms=now_ms,
        processed_until_ms=processed_until_ms,
        processed_marks=processed_marks,
        writer_timeout_ms=writer_timeout_ms,
        initial_delay_ms=initial_delay_ms,
    )
    return run(spark, request).to_json(), request.state_out


# The worked example: two rounds of three writers over THIRDS.
ROUND_1 = [
    mark("w1", 100, {0: 100, 1: 200}),
    mark("w2", 101, {1: 100, 2: 200}),
    mark("w3", 102, {2: 100, 0: 200}),
]
ROUND_2 = [
    mark("w1", 200, {1: 300}, reported_at_ms=3_000),
    mark("w2", 201, {1: 100, 2: 300}, reported_at_ms=3_000),
    mark("w3", 202, {2: 300}, reported_at_ms=3_000),
]
