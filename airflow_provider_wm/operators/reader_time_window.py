"""ReaderTimeWindowOperator and ``reader_time_window``: the time window of a stream position, for DAG authors.

A job that reads a stream records where it stopped as a stream cut (segment id -> offset). Given that cut,
the stream's watermark log and its segments, :func:`airflow_provider_wm.core.reader.time_window` says which
event times the job has certainly covered (``lower``) and which it certainly has not passed (``upper``);
the operator pushes that window to XCom so a downstream task can, for example, close the hours before
``lower``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context, XComArg

from airflow_provider_wm.arguments import require_paths
from airflow_provider_wm.core.reader import TimeWindow
from airflow_provider_wm.core.segments import Segment, segment_map
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name
from airflow_provider_wm.links import WatermarksLink
from airflow_provider_wm.mapped import ChecksMappedArguments
from airflow_provider_wm.timeutil import format_ms, is_templated

__all__ = ["ReaderTimeWindowOperator", "parse_position", "read_segments", "reader_time_window"]

_INT = re.compile(r"^-?\d+$")
SEGMENT_COLUMNS = ("stream", "segment_id", "key_start", "key_end")

SegmentsArgument = str | Mapping[int, Segment] | Iterable[Segment | Mapping[str, Any]]


def parse_position(value: Any, argument: str = "position") -> dict[int, int]:
    """A position as a dict or its JSON text (keys: segment ids, as ints or strings; values: offsets, ``-1``
    = end of segment) -> ``{segment_id: offset}``. Errors name ``argument``.

    >>> parse_position('{"0": 5, "4294967298": -1}')
    {0: 5, 4294967298: -1}
    """
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f'{argument}={value!r} is not JSON of a stream cut such as {{"0": 120}}') from None
    if not isinstance(data, Mapping) or not data:
        raise ValueError(f"{argument}={value!r} must be a non-empty stream cut: segment id -> offset")
    position: dict[int, int] = {}
    for key, offset in data.items():
        if isinstance(key, bool) or not (isinstance(key, int) or (isinstance(key, str) and _INT.match(key.strip()))):
            raise ValueError(f"{argument}={value!r}: segment id {key!r} is not an integer")
        if isinstance(offset, str) and _INT.match(offset.strip()):
            offset = int(offset)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
            raise ValueError(f"{argument}={value!r}: offset {offset!r} of segment {key} must be an int >= -1")
        position[int(key)] = offset
    return position


def read_segments(path: str, stream: str, storage_options: Mapping[str, Any] | None = None) -> dict[int, Segment]:
    """The segments of ``stream`` from a Parquet dataset with columns ``stream, segment_id, key_start,
    key_end`` (a local path or any fsspec URL). A bad row or an id defined twice differently is an error."""
    import fsspec
    import pyarrow.dataset as ds

    fs, root = fsspec.core.url_to_fs(path, **dict(storage_options or {}))
    if not fs.exists(root):
        raise ValueError(f"segments_path={path!r} does not exist")
    dataset = ds.dataset(root, format="parquet", filesystem=fs)
    missing = [c for c in SEGMENT_COLUMNS if c not in dataset.schema.names]
    if missing:
        raise ValueError(f"segments_path={path!r} has no column(s) {missing}; expected {list(SEGMENT_COLUMNS)}")
    rows = dataset.to_table(columns=list(SEGMENT_COLUMNS), filter=ds.field("stream") == stream).to_pylist()
    if not rows:
        raise ValueError(f"segments_path={path!r} has no segments of stream {stream!r}")
    try:
        return segment_map(Segment(r["segment_id"], r["key_start"], r["key_end"]) for r in rows)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"segments_path={path!r}, stream {stream!r}: {exc}") from exc


def _segments(segments: SegmentsArgument, stream: str, storage_options: Mapping[str, Any] | None) -> dict[int, Segment]:
    if isinstance(segments, str):
        return read_segments(segments, stream, storage_options)
    if isinstance(segments, Mapping):
        if not all(isinstance(s, Segment) for s in segments.values()):
            raise ValueError("segments: a mapping must map segment ids to Segment objects")
        return segment_map(segments.values())
    items = []
    for item in segments:
        if isinstance(item, Segment):
            items.append(item)
        elif isinstance(item, Mapping):
            try:
                items.append(Segment(int(item["segment_id"]), float(item["key_start"]), float(item["key_end"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"segments: {dict(item)!r} is not a segment: {exc}") from None
        else:
            raise ValueError(
                f"segments: {item!r} is neither a Segment nor a mapping with segment_id, key_start, key_end"
            )
    return segment_map(items)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def reader_time_window(
    store_path: str,
    stream: str,
    position: Mapping[Any, Any] | str,
    segments: SegmentsArgument,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The time window of ``position`` in ``stream``, as a JSON-friendly dict (usable inside ``@task``).

    :param store_path: base path or fsspec URL of the watermark store.
    :param stream: the stream whose watermark log is read.
    :param position: the reader's stream cut, a dict or its JSON text (segment id -> offset, ``-1`` = end).
    :param segments: the stream's segments: a Parquet dataset path (``stream, segment_id, key_start,
        key_end``), a ``{segment_id: Segment}`` mapping, or an iterable of ``Segment`` or of dicts with
        ``segment_id, key_start, key_end``.
    :param storage_options: fsspec options for the store and the segments dataset.
    :return: ``{"stream", "lower_ms", "upper_ms", "lower", "upper", "position"}``; ``lower``/``upper`` are
        ISO-8601 UTC strings, any of the four ``None`` when that bound cannot be established; ``position``
        has string keys, as in the store.

    Example::

        @task
        def window(cut):
            return reader_time_window("/data/wm-store", "orders", cut, "/data/segments")
    """
    stream = validate_name(stream, "stream")
    parsed = parse_position(position)
    store = WatermarkStoreHook(store_path, storage_options=storage_options)
    window: TimeWindow = store.read_time_window(stream, parsed, _segments(segments, stream, storage_options))
    return {
        "stream": stream,
        "lower_ms": window.lower_ms,
        "upper_ms": window.upper_ms,
        "lower": _iso(window.lower_ms),
        "upper": _iso(window.upper_ms),
        "position": {str(segment_id): offset for segment_id, offset in sorted(parsed.items())},
    }


class ReaderTimeWindowOperator(ChecksMappedArguments, BaseOperator):
    """Push the time window of a reader's position in a stream (Pravega ``getCurrentTimeWindow``) to XCom.

    ``lower`` is the lower time of the last watermark whose stream cut the position has passed, ``upper``
    the upper time of the first later watermark the position is entirely behind; either is ``None`` when it
    cannot be established safely (see :mod:`airflow_provider_wm.core.reader`). The return value (XCom
    ``return_value``) is ``{"stream", "lower_ms", "upper_ms", "lower", "upper", "position"}``.

    Example: the cut an upstream job pushed to XCom::

        ReaderTimeWindowOperator(
            task_id="window", stream="orders", store_path="/data/wm-store", segments_path="/data/segments",
            position="{{ ti.xcom_pull(task_ids='consume')['cut'] | tojson }}",
        )

    :param stream: the stream whose watermark log is read.
    :param store_path: base path or fsspec URL of the watermark store. Templated.
    :param position: the reader's stream cut: a dict (segment id -> offset, ``-1`` = end of segment) or its
        JSON text, or an ``XComArg``. Templated.
    :param segments_path: Parquet dataset of segments (``stream, segment_id, key_start, key_end``). Templated.
    :param storage_options: fsspec options for the store and the segments dataset.
    """

    template_fields: Sequence[str] = ("store_path", "position", "segments_path")
    operator_extra_links = (WatermarksLink(),)
    ui_color = "#eef8e8"

    def __init__(
        self,
        *,
        stream: str,
        store_path: str,
        position: Mapping[Any, Any] | str | XComArg,
        segments_path: str,
        storage_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = validate_name(stream, "stream")
        require_paths(store_path=store_path, segments_path=segments_path)
        if not isinstance(position, XComArg) and not is_templated(position):
            if not isinstance(position, (str, Mapping)):
                raise ValueError(f"position={position!r} must be a stream cut (dict or JSON text) or a template")
            if not _has_template(position):
                parse_position(position)
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ValueError(f"storage_options={storage_options!r} must be a mapping of fsspec options")
        self.store_path = store_path
        self.position: Any = position  # an XComArg or a template until rendered
        self.segments_path = segments_path
        self.storage_options = dict(storage_options or {})

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"stream": self.stream}

    def execute(self, context: Context) -> dict[str, Any]:
        require_paths(store_path=self.store_path, segments_path=self.segments_path)  # as rendered
        result = reader_time_window(
            self.store_path, self.stream, self.position, self.segments_path, self.storage_options
        )
        self.log.info(
            "Stream %s at position %s: time window [%s, %s]",
            self.stream,
            result["position"],
            format_ms(result["lower_ms"]),
            format_ms(result["upper_ms"]),
        )
        return result


def _has_template(value: Any) -> bool:
    """A dict whose keys or values are Jinja templates (rendered before ``execute``)."""
    return isinstance(value, Mapping) and any(is_templated(k) or is_templated(v) for k, v in value.items())
