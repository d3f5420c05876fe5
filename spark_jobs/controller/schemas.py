"""The controller job's data: the schemas of marks, segments and the state it keeps, and the names of their key
columns (the contract in docs/contracts.md)."""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from airflow_provider_wm.core.controller import (
    MarkKind,
    Quarantine,
)
from airflow_provider_wm.core.names import STREAM_NAME_PATTERN

__all__ = [
    "DEFERRED",
    "KEYS",
    "MARKS_SCHEMA",
    "OPTIONAL_COLUMNS",
    "ORIGINS_STATE_SCHEMA",
    "PENDING_STATE_SCHEMA",
    "POSITION",
    "PROGRESS_COLUMNS",
    "SEGMENTS_SCHEMA",
    "SHUTDOWN",
    "STREAMS_STATE_SCHEMA",
    "STREAM_KEYS",
    "STREAM_NAME_REGEX",
    "UNREPORTED",
    "VALUE",
    "VALUE_KINDS",
    "WAITING_SAMPLE",
    "WRITERS_STATE_SCHEMA",
]


POSITION = MapType(LongType(), LongType())

MARKS_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("writer_id", StringType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("kind", StringType()),
        StructField("reported_at_ms", LongType()),
        # optional (gap-free progress): absent columns read as nulls
        StructField("origin_id", StringType()),
        StructField("seq", LongType()),
        StructField("chunk", LongType()),
        StructField("last_chunk", BooleanType()),
        # optional (keyed watermarks): absent or null is the stream's unkeyed watermark
        StructField("wm_key", StringType()),
    ]
)

PROGRESS_COLUMNS = ("origin_id", "seq", "chunk", "last_chunk")

OPTIONAL_COLUMNS = (*PROGRESS_COLUMNS, "wm_key")

SEGMENTS_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("segment_id", LongType()),
        StructField("key_start", DoubleType()),
        StructField("key_end", DoubleType()),
    ]
)

WRITERS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("alive", BooleanType()),
        StructField("lagging_since_ms", LongType()),
    ]
)

STREAMS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("first_mark_at_ms", LongType()),
        StructField("wm_lower_ms", LongType()),
        StructField("wm_upper_ms", LongType()),
        StructField("wm_cut", POSITION),
        StructField("wm_computed_at_ms", LongType()),
    ]
)

ORIGINS_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("origin_id", StringType()),
        StructField("committed_seq", LongType()),
    ]
)

PENDING_STATE_SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("wm_key", StringType()),
        StructField("writer_id", StringType()),
        StructField("origin_id", StringType()),
        StructField("seq", LongType()),
        StructField("chunk", LongType()),
        StructField("last_chunk", BooleanType()),
        StructField("time_ms", LongType()),
        StructField("position", POSITION),
        StructField("reported_at_ms", LongType()),
        StructField("kind", StringType()),
    ]
)

VALUE, SHUTDOWN, DEFERRED = "VALUE", "SHUTDOWN", "DEFERRED"

VALUE_KINDS = (MarkKind.NOTE.value, MarkKind.COMMIT.value)

#: Inside the job ``wm_key`` is never null: ``""`` is the stream's unkeyed watermark, so that joins on it
#: match (null never equals null). A watermark is identified by ``STREAM_KEYS``, a writer of it by ``KEYS``.
STREAM_KEYS = ["stream", "wm_key"]

KEYS = [*STREAM_KEYS, "writer_id"]

#: Java regex of a whole valid stream name (``\z``: no trailing newline, as Python's fullmatch).
STREAM_NAME_REGEX = f"^(?:{STREAM_NAME_PATTERN})\\z"

WAITING_SAMPLE = 20

#: Reasons counted in the round's totals only: the row names no valid watermark (``core`` does the same).
UNREPORTED = (Quarantine.INVALID_STREAM.value, Quarantine.INVALID_WM_KEY.value)
