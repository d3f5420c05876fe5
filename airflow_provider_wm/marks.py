"""Writing a stream's marks and segments in the contract the controller reads (pure Python and pyarrow).

A producer reports its progress with a :class:`MarksWriter`; it never builds the Parquet schema itself:

- ``note(writer_id, time, position)`` and ``commit(...)`` record a writer's time and position (segment id
  -> offset); ``shutdown(writer_id)`` says a writer stopped. Times are epoch milliseconds, aware datetimes
  or pendulum times. Sequenced marks (gap-free progress) add ``seq`` (``chunk``, ``last_chunk``,
  ``origin_id``); keyed ones ``wm_key``.
- ``reported_at_ms`` is when the mark joined the marks dataset, and a round takes only the marks with
  ``processed_until < reported_at_ms <= now``. By default it is stamped from ``clock`` when the mark is
  flushed, just before the file is written (a round that runs in between counts the marks as late). A
  backfill passes ``reported_at=`` itself: stamped with today's clock, a past round would not see it.
- Marks are buffered and ``flush()`` appends them as one Parquet file. The file is written under a
  hidden name (a leading ``.``, which Spark skips) and then renamed, so a reader sees the whole file or
  none of it. Every file has all of ``MARKS_SCHEMA``'s columns, so files with and without the optional
  columns never get mixed.
- ``write_segments()`` declares the stream's segments. A stream needs them even if it has a single segment,
  and a mark naming an undeclared segment is quarantined ``UNKNOWN_SEGMENT``. Write them before the
  marks that use them.

Files land in ``<base>/marks/`` and ``<base>/segments/`` (the operator's ``marks_path`` and
``segments_path``; ``base`` is a path or any fsspec URL).

>>> import fsspec, pyarrow.parquet as pq
>>> writer = MarksWriter("memory://marks-doc/lake", "orders", clock=lambda: 1_767_225_660_000)
>>> writer.write_segments()  # doctest: +ELLIPSIS
'memory://marks-doc/lake/segments/segments-orders-....parquet'
>>> writer.note("w1", 1_767_225_600_000, {0: 120})
>>> writer.shutdown("w2")
>>> path = writer.flush()
>>> with fsspec.open(path) as handle:
...     rows = pq.read_table(handle).to_pylist()
>>> [(r["writer_id"], r["kind"], r["time_ms"], r["position"], r["reported_at_ms"]) for r in rows]
[('w1', 'note', 1767225600000, [(0, 120)], 1767225660000), ('w2', 'shutdown', None, None, 1767225660000)]
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import time as _time
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_wm.core.controller import MarkKind
from airflow_provider_wm.core.names import is_valid_stream_name
from airflow_provider_wm.core.progress import MAX_CHUNKS
from airflow_provider_wm.core.segments import Segment, overlapping_in_epoch, segment_map
from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS, is_valid_time_ms

__all__ = ["MARKS_SCHEMA", "SEGMENTS_SCHEMA", "MarksWriter"]

POSITION = pa.map_(pa.int64(), pa.int64())

MARKS_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("writer_id", pa.string()),
        ("time_ms", pa.int64()),
        ("position", POSITION),
        ("kind", pa.string()),
        ("reported_at_ms", pa.int64()),
        ("origin_id", pa.string()),
        ("seq", pa.int64()),
        ("chunk", pa.int64()),
        ("last_chunk", pa.bool_()),
        ("wm_key", pa.string()),
    ]
)
"""The marks columns, in the controller job's order (``spark_jobs.controller.schemas.MARKS_SCHEMA``)."""

SEGMENTS_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("segment_id", pa.int64()),
        ("key_start", pa.float64()),
        ("key_end", pa.float64()),
    ]
)
"""The segments columns (``spark_jobs.controller.schemas.SEGMENTS_SCHEMA``)."""

INT64_MAX = 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLISECOND = dt.timedelta(milliseconds=1)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _epoch_ms(value: Any, argument: str) -> int:
    """Epoch milliseconds from an int or an aware ``datetime`` (pendulum's included), exactly; the error
    names ``argument`` and the value.

    >>> _epoch_ms(dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC), "time"), _epoch_ms(1_767_229_200_000, "time")
    (1767229200000, 1767229200000)
    >>> _epoch_ms(dt.datetime(2026, 1, 1), "time")
    Traceback (most recent call last):
    ...
    ValueError: time=datetime.datetime(2026, 1, 1, 0, 0) has no time zone; pass an aware datetime
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dt.datetime):
        if value.utcoffset() is None:
            raise ValueError(f"{argument}={value!r} has no time zone; pass an aware datetime")
        # datetime's own subtraction: exact (no float), and a plain timedelta for pendulum times too
        return dt.datetime.__sub__(value, _EPOCH) // _MILLISECOND
    raise ValueError(f"{argument}={value!r} is not a time: pass epoch milliseconds (int) or an aware datetime")


class MarksWriter:
    """Buffer one stream's marks and append them to the marks dataset as Parquet files, atomically.

    :param base: folder or fsspec URL holding ``marks/`` and ``segments/`` (None if both paths are given).
    :param stream: the stream the marks are about.
    :param marks_path: where the marks go instead of ``<base>/marks`` (the operator's ``marks_path``).
    :param segments_path: where the segments go instead of ``<base>/segments``.
    :param max_rows: buffered marks that trigger a flush.
    :param clock: the time now (epoch ms or aware datetime) that ``flush`` stamps as ``reported_at_ms``
        (default: the wall clock).
    :param validate: ``False`` writes what the controller would quarantine (bad names, negative offsets,
        times out of range), for demos and tests. Types are always checked.
    :param storage_options: passed to fsspec.
    """

    def __init__(
        self,
        base: str | os.PathLike[str] | None,
        stream: str,
        *,
        marks_path: str | None = None,
        segments_path: str | None = None,
        max_rows: int = 100_000,
        clock: Callable[[], int | dt.datetime] | None = None,
        validate: bool = True,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(stream, str) or (validate and not is_valid_stream_name(stream)):
            raise ValueError(
                f"stream={stream!r} is not a stream name: letters, digits, '.', '_' or '-', starting with a "
                "letter or digit (at most 200 characters)"
            )
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows={max_rows!r} must be a positive int")
        root = _folder(base, "base") if marks_path is None or segments_path is None else ""
        self.stream = stream
        self.marks_path = _folder(marks_path, "marks_path") if marks_path is not None else f"{root}/marks"
        self.segments_path = (
            _folder(segments_path, "segments_path") if segments_path is not None else f"{root}/segments"
        )
        self.max_rows = max_rows
        self.validate = validate
        self._clock = clock or (lambda: _time.time_ns() // 1_000_000)
        self._options = dict(storage_options or {})
        self._rows: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"MarksWriter(stream={self.stream!r}, marks_path={self.marks_path!r}, pending={self.pending})"

    @property
    def pending(self) -> int:
        """Marks buffered and not yet flushed."""
        return len(self._rows)

    def note(
        self,
        writer_id: str,
        time: Any,
        position: Mapping[int, int],
        *,
        reported_at: Any = None,
        wm_key: str | None = None,
        seq: int | None = None,
        chunk: int | None = None,
        last_chunk: bool | None = None,
        origin_id: str | None = None,
    ) -> None:
        """Writer ``writer_id`` has written everything up to ``time``, up to ``position`` (segment -> offset).

        ``seq`` makes a sequenced mark (gap-free progress, numbers from 1): one chunk by default, else give
        ``chunk`` (from 1) and ``last_chunk``. ``wm_key`` reports for a keyed watermark of the stream.
        """
        self._value(MarkKind.NOTE, writer_id, time, position, reported_at, wm_key, seq, chunk, last_chunk, origin_id)

    def commit(
        self,
        writer_id: str,
        time: Any,
        position: Mapping[int, int],
        *,
        reported_at: Any = None,
        wm_key: str | None = None,
        seq: int | None = None,
        chunk: int | None = None,
        last_chunk: bool | None = None,
        origin_id: str | None = None,
    ) -> None:
        """A transaction of ``writer_id`` committed at ``time`` and ``position``; arguments as :meth:`note`."""
        self._value(MarkKind.COMMIT, writer_id, time, position, reported_at, wm_key, seq, chunk, last_chunk, origin_id)

    def shutdown(self, writer_id: str, *, time: Any = None, reported_at: Any = None, wm_key: str | None = None) -> None:
        """Writer ``writer_id`` stopped: it no longer holds the watermark back. ``time`` is optional (kept
        for readers; the controller ignores it)."""
        self._append(
            kind=MarkKind.SHUTDOWN,
            writer_id=self._writer(writer_id),
            time_ms=None if time is None else self._time(time, "time"),
            position=None,
            reported_at_ms=None if reported_at is None else self._time(reported_at, "reported_at"),
            wm_key=self._key(wm_key),
        )

    def flush(self, name: str | None = None) -> str | None:
        """Append the buffered marks as one Parquet file; its URL, or None when nothing was buffered.

        Marks without a report time get ``clock()`` now. If writing fails, no file appears and the marks
        stay buffered for the next flush. ``name`` names the file (``<name>.parquet``) instead of a unique
        name: a batch flushed again under its name replaces its file instead of adding its marks twice.
        """
        stem = None if name is None else _file_name(name, "name")
        if not self._rows:
            return None
        now = None
        rows = []
        for row in self._rows:
            if row["reported_at_ms"] is None:
                now = self._time(self._clock(), "clock()") if now is None else now
                row = {**row, "reported_at_ms": now}
            rows.append(row)
        table = pa.Table.from_pylist(rows, MARKS_SCHEMA)
        if stem is None:
            stamp = max(r["reported_at_ms"] for r in rows)
            stem = f"marks-{_safe(self.stream)}-{stamp}-{uuid.uuid4().hex[:12]}"
        url = self._write(table, self.marks_path, stem)
        self._rows.clear()
        return url

    def write_segments(
        self, segments: Iterable[Segment | tuple[int, float, float]] | None = None, *, name: str | None = None
    ) -> str:
        """Declare the stream's segments, ``(segment_id, key_start, key_end)`` with ``0 <= key_start <
        key_end <= 1`` and the epoch in the id's high 32 bits; now, in one file (no buffering). The default
        is a stream of one segment: ``0`` over ``[0, 1)``. ``name`` as in :meth:`flush`. Returns the file's
        URL."""
        stem = None if name is None else _file_name(name, "name")
        given = [(0, 0.0, 1.0)] if segments is None else list(segments)
        if not given:
            raise ValueError("segments=[] declares no segment; give at least one (or None for one segment)")
        parsed = [self._segment(value, index) for index, value in enumerate(given)]
        if self.validate:
            try:
                declared = segment_map(Segment(*s) for s in parsed)
            except ValueError as exc:
                raise ValueError(f"segments={given!r}: {exc}") from None
            overlapping = overlapping_in_epoch(declared.values())
            if overlapping:
                raise ValueError(
                    f"segments={given!r}: segments {sorted(overlapping)} overlap within one epoch; the segments of an "
                    "epoch split the key space, and a scaling starts a new epoch (segment_id = epoch << 32 | number)"
                )
        columns = ("segment_id", "key_start", "key_end")
        rows = [{"stream": self.stream, **dict(zip(columns, s, strict=True))} for s in parsed]
        table = pa.Table.from_pylist(rows, SEGMENTS_SCHEMA)
        return self._write(table, self.segments_path, stem or f"segments-{_safe(self.stream)}-{uuid.uuid4().hex[:12]}")

    def close(self) -> None:
        """Flush what is buffered."""
        self.flush()

    def __enter__(self) -> MarksWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:  # after an error the buffer is kept: the caller decides whether to flush it
            self.close()

    # -- rows

    def _value(
        self,
        kind: MarkKind,
        writer_id: Any,
        time: Any,
        position: Any,
        reported_at: Any,
        wm_key: Any,
        seq: Any,
        chunk: Any,
        last_chunk: Any,
        origin_id: Any,
    ) -> None:
        self._append(
            kind=kind,
            writer_id=self._writer(writer_id),
            time_ms=self._time(time, "time"),
            position=self._position(position),
            reported_at_ms=None if reported_at is None else self._time(reported_at, "reported_at"),
            wm_key=self._key(wm_key),
            **self._sequence(seq, chunk, last_chunk, origin_id),
        )

    def _append(self, **fields: Any) -> None:
        row = dict.fromkeys(MARKS_SCHEMA.names)
        row.update(fields, stream=self.stream, kind=str(fields["kind"]))
        self._rows.append(row)
        if len(self._rows) >= self.max_rows:
            self.flush()

    def _writer(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"writer_id={value!r} must be a non-empty string")
        return value

    def _time(self, value: Any, argument: str) -> int:
        ms = _epoch_ms(value, argument)
        if self.validate and not is_valid_time_ms(ms):
            raise ValueError(
                f"{argument}={value!r} is outside the times the controller accepts: epoch milliseconds from "
                f"{MIN_TIME_MS} (1970) to {MAX_TIME_MS} (9999-12-31T23:59:59.999Z)"
            )
        if not -INT64_MAX - 1 <= ms <= INT64_MAX:
            raise ValueError(f"{argument}={value!r} does not fit a 64-bit integer")
        return ms

    def _position(self, value: Any) -> list[tuple[int, int]]:
        if not isinstance(value, Mapping):
            raise ValueError(f"position={value!r} must be a mapping of segment id -> offset, e.g. {{0: 120}}")
        entries = []
        for segment, offset in value.items():
            for part, number in (("segment id", segment), ("offset", offset)):
                if isinstance(number, bool) or not isinstance(number, int):
                    raise ValueError(f"position={value!r}: {part} {number!r} is not an int")
                if not -INT64_MAX - 1 <= number <= INT64_MAX:
                    raise ValueError(f"position={value!r}: {part} {number!r} does not fit a 64-bit integer")
            if self.validate and (segment < 0 or offset < 0):
                raise ValueError(f"position={value!r}: segment {segment} at offset {offset}; both must be >= 0")
            entries.append((segment, offset))
        return entries

    def _key(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str) or (self.validate and not is_valid_stream_name(value)):
            raise ValueError(
                f"wm_key={value!r} is not a key name: letters, digits, '.', '_' or '-', starting with a letter "
                "or digit (at most 200 characters); None for the stream's unkeyed watermark"
            )
        return value

    def _sequence(self, seq: Any, chunk: Any, last_chunk: Any, origin_id: Any) -> dict[str, Any]:
        if seq is None:
            for name, value in (("chunk", chunk), ("last_chunk", last_chunk), ("origin_id", origin_id)):
                if value is not None:
                    raise ValueError(f"{name}={value!r} is given without seq; a sequenced mark needs seq (from 1)")
            return {}
        if chunk is None and last_chunk is None:
            chunk, last_chunk = 1, True
        for name, value, low, high in (("seq", seq, 1, INT64_MAX), ("chunk", chunk, 1, MAX_CHUNKS)):
            if isinstance(value, bool) or not isinstance(value, int) or not -INT64_MAX - 1 <= value <= INT64_MAX:
                raise ValueError(f"{name}={value!r} must be an int")
            if self.validate and not low <= value <= high:
                raise ValueError(f"{name}={value!r} must be from {low} to {high}")
        if not isinstance(last_chunk, bool):
            raise ValueError(f"last_chunk={last_chunk!r} must be True or False (whether chunk {chunk} is the last)")
        if origin_id is not None and (not isinstance(origin_id, str) or not origin_id):
            raise ValueError(f"origin_id={origin_id!r} must be a non-empty string or None")
        return {"seq": seq, "chunk": chunk, "last_chunk": last_chunk, "origin_id": origin_id}

    def _segment(self, value: Any, index: int) -> tuple[int, float, float]:
        if isinstance(value, Segment):
            return value.segment_id, value.key_start, value.key_end
        try:
            segment_id, key_start, key_end = value
        except (TypeError, ValueError):
            raise ValueError(
                f"segments[{index}]={value!r} must be a Segment or (segment_id, key_start, key_end)"
            ) from None
        if isinstance(segment_id, bool) or not isinstance(segment_id, int) or not 0 <= segment_id <= INT64_MAX:
            raise ValueError(f"segments[{index}]={value!r}: segment_id {segment_id!r} must be an int >= 0")
        for bound in (key_start, key_end):
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
                raise ValueError(f"segments[{index}]={value!r}: key bound {bound!r} must be a finite number")
        if self.validate:
            try:
                Segment(segment_id, float(key_start), float(key_end))
            except ValueError as exc:
                raise ValueError(f"segments[{index}]={value!r}: {exc}") from None
        return segment_id, float(key_start), float(key_end)

    # -- files

    def _write(self, table: pa.Table, folder: str, stem: str) -> str:
        """Write ``table`` under a hidden name in ``folder`` and rename it to ``<stem>.parquet``: a reader
        lists the whole file or nothing. The temporary file is removed when writing fails."""
        fs, path = fsspec.core.url_to_fs(folder, **self._options)
        fs.makedirs(path, exist_ok=True)
        name = f"{stem}.parquet"
        final, temporary = f"{path}/{name}", f"{path}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            with fs.open(temporary, "wb") as handle:
                pq.write_table(table, handle)
            fs.mv(temporary, final)
        except BaseException:
            if fs.exists(temporary):
                fs.rm(temporary)
            raise
        return f"{folder}/{name}"


def _folder(value: Any, argument: str) -> str:
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{argument}={value!r} must be a non-empty path or URL")
    return text.rstrip("/")


def _file_name(value: Any, argument: str) -> str:
    """A file name a reader lists: no folder, not hidden (``.`` or ``_`` first), no ``.parquet`` given."""
    if not isinstance(value, str) or not _FILE_NAME.fullmatch(value) or value.endswith(".parquet"):
        raise ValueError(
            f"{argument}={value!r} is not a file name: letters, digits, '.', '_' or '-', starting with a letter or "
            "digit, without '.parquet' (it is added)"
        )
    return value


def _safe(name: str) -> str:
    """A stream name as a file-name part: anything outside the name alphabet (``/`` of a bad name) as ``_``."""
    return _UNSAFE.sub("_", name)
