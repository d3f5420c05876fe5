"""The watermark store: where watermarks are published and where sensors read them.

Layout under a base path (a local directory or any fsspec URL, e.g. ``s3://bucket/wm``)::

    streams/<stream>/latest.json              the newest watermark: one small file, read in O(1)
    streams/<stream>/log/<computed>-<lower>.json   append-only history, one file per watermark
    streams/<stream>/keys/<key>/latest.json   the same for a keyed watermark (record ``wm_key``): each
    streams/<stream>/keys/<key>/log/...       key of a stream is a separate, independent watermark
    controllers/<controller>/state/<round>/   controller state versions written by the Spark job
    controllers/<controller>/rounds/<round>/  each round's manifest and quarantine
    pipelines/<pipeline>/state.json           an incremental-partitions pipeline's committed state
                                              (spec, units, per-unit high watermarks): what the
                                              completeness sensor and the UI read
    pipelines/<pipeline>/runs/<run>/          each run's request and manifest
    pipelines/<pipeline>/quarantine/          a partitions pipeline's bad rows, each once (wm_version=<v>)

A watermark record is ``{stream, wm_key, lower_ms, upper_ms, stream_cut, computed_at_ms, run_id, ...}``.
``wm_key`` is ``None`` (or absent) for the stream's one unkeyed watermark; a stream may also carry keyed
watermarks (Jet's keyed watermarks: one per watermarked field), each stored and ordered on its own.

Writes are monotone per stream and key: :meth:`WatermarkStoreHook.publish` never writes a watermark whose
``lower_ms`` is not higher than the latest one of the same stream and key; it logs and ignores it. On a
local file system the read-compare-write runs under an exclusive file lock (one per stream), so two
concurrent publishers cannot regress ``latest``. Object stores have no locks: there the operator's
one-run-at-a-time rule is what keeps writers from racing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec

from airflow_provider_wm.core.coalescing import last_advanced_ms, watermark_as_of
from airflow_provider_wm.core.names import Input, is_valid_stream_name, watermark_label
from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState
from airflow_provider_wm.core.reader import LoggedWatermark, TimeWindow, time_window
from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.hooks.store_errors import (
    DamagedRecordError,
    PipelineKindError,
    StoreUnreachableError,
    UnknownKeyError,
    UnknownNameError,
    UnknownPipelineError,
    UnknownStreamError,
    checked_watermark,
    is_transient,
)
from airflow_provider_wm.timeutil import format_ms

try:  # Airflow is present wherever the hook runs as a hook; the class also works without it.
    from airflow.sdk import BaseHook
except ImportError:  # pragma: no cover - exercised only outside Airflow
    BaseHook = object  # type: ignore[misc,assignment]

log = logging.getLogger(__name__)

_LOG_NAME = re.compile(r"(-?\d+)-(-?\d+)\.json")  # <computed_at_ms>-<lower_ms>.json, see publish()
_RUN_NAME = re.compile(r"v(\d+)")

__all__ = [
    "DamagedRecordError",
    "PipelineKindError",
    "StoreUnreachableError",
    "UnknownKeyError",
    "UnknownNameError",
    "UnknownPipelineError",
    "UnknownStreamError",
    "WatermarkStoreHook",
    "checked_watermark",
    "is_transient",
    "producer",
    "validate_name",
]


def producer(record: Mapping[str, Any]) -> str:
    """Who publishes a stream: ``controller <name>`` (a source stream) or ``pipeline <name>`` (a derived one).

    >>> producer({"controller": "orders"}), producer({"pipeline": "orders_5m"})
    ('controller orders', 'pipeline orders_5m')
    """
    if record.get("controller"):
        return f"controller {record['controller']}"
    if record.get("pipeline"):
        return f"pipeline {record['pipeline']}"
    return "an unnamed publisher"


def validate_name(value: object, argument: str) -> str:
    """Names (streams, controllers) become path components: reject anything that could escape the store."""
    if not is_valid_stream_name(value):
        raise ValueError(
            f"{argument}={value!r} is not a valid name: use letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (at most 200 characters)"
        )
    return str(value)


class WatermarkStoreHook(BaseHook):  # type: ignore[misc]
    """Read and publish watermarks under ``base_path``.

    :param base_path: local directory or fsspec URL of the store. When omitted, the ``wm_store``
        connection ``wm_store_conn_id`` gives it (its host, or ``extra.base_path``).
    :param storage_options: fsspec options (credentials, endpoint) for remote stores.
    :param wm_store_conn_id: connection of type ``wm_store`` holding the base path and options.
    """

    conn_name_attr = "wm_store_conn_id"
    default_conn_name = "wm_store_default"
    conn_type = "wm_store"
    hook_name = "Watermark store"

    def __init__(
        self,
        base_path: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        wm_store_conn_id: str | None = None,
    ) -> None:
        if BaseHook is not object:
            super().__init__()
        options = dict(storage_options or {})
        if not base_path:
            if not wm_store_conn_id:
                raise ValueError("WatermarkStoreHook needs base_path or wm_store_conn_id")
            conn = self.get_connection(wm_store_conn_id)
            extra = conn.extra_dejson
            base_path = extra.get("base_path") or conn.host
            options = {**extra.get("storage_options", {}), **options}
            if not base_path:
                raise ValueError(f"connection {wm_store_conn_id!r} has no host or extra.base_path")
        self.base_path = str(base_path).rstrip("/")
        self.storage_options = options
        self.fs, self.root = fsspec.core.url_to_fs(self.base_path, **options)
        self._local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    # ------------------------------------------------------------------------------------------- paths

    def url(self, *parts: str) -> str:
        """A URL under the store, usable by Spark (``file://`` paths stay plain local paths)."""
        return "/".join([self.base_path, *parts])

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def stream_path(self, stream: str, *parts: str) -> str:
        return self._path("streams", validate_name(stream, "stream"), *parts)

    def watermark_path(self, stream: str, wm_key: str | None, *parts: str) -> str:
        """Where the watermark of ``stream`` and ``wm_key`` lives: the stream's own directory for the
        unkeyed watermark (``wm_key=None``), ``streams/<stream>/keys/<wm_key>/`` for a keyed one."""
        if wm_key is None:
            return self.stream_path(stream, *parts)
        return self.stream_path(stream, "keys", validate_name(wm_key, "wm_key"), *parts)

    def controller_url(self, controller: str, *parts: str) -> str:
        return self.url("controllers", validate_name(controller, "controller"), *parts)

    def pipeline_url(self, pipeline: str, *parts: str) -> str:
        return self.url("pipelines", validate_name(pipeline, "pipeline"), *parts)

    # ------------------------------------------------------------------------------------------- reads

    def read_latest(self, stream: str, wm_key: str | None = None) -> dict[str, Any] | None:
        """The newest watermark of ``stream`` (of its key ``wm_key`` when given; one small read), or ``None``
        before the first one. A record that is not a watermark (:func:`checked_watermark`) raises
        :class:`DamagedRecordError` naming its path."""
        path = self.watermark_path(stream, wm_key, "latest.json")
        latest = self._read_json(path)
        return None if latest is None else checked_watermark(latest, path)

    def read_as_of(self, stream: str, at_ms: int, wm_key: str | None = None) -> dict[str, Any] | None:
        """The watermark record of ``stream`` (its key ``wm_key``) that stood at ``at_ms``
        (:func:`~airflow_provider_wm.core.coalescing.watermark_as_of`): ``latest`` when it was computed at or before
        ``at_ms`` (one small read, the usual case), else the log's entry (a listing and one read: a run catching
        up behind the producer). ``None`` when no watermark had been computed by then."""
        latest = self.read_latest(stream, wm_key)
        if latest is None:
            return None
        computed = last_advanced_ms(latest)
        if computed is None or computed <= at_ms:
            return latest
        entry = watermark_as_of(self.read_log_index(stream, wm_key), at_ms)
        if entry is None:
            return None
        computed, lower = entry
        logged = self._read_json(self.watermark_path(stream, wm_key, "log", f"{computed:015d}-{lower:015d}.json"))
        return logged if logged is not None else {"stream": stream, "lower_ms": lower, "computed_at_ms": computed}

    def read_history(self, stream: str, limit: int | None = None, wm_key: str | None = None) -> list[dict[str, Any]]:
        """The watermark log of ``stream`` (of its key ``wm_key`` when given), oldest first; the last
        ``limit`` entries when given."""
        log_dir = self.watermark_path(stream, wm_key, "log")
        if not self.fs.exists(log_dir):
            return []
        names = sorted(p for p in self.fs.ls(log_dir, detail=False) if str(p).endswith(".json"))
        if limit is not None:
            names = names[-limit:]
        return [record for name in names if (record := self._read_json(str(name))) is not None]

    def read_log_index(self, stream: str, wm_key: str | None = None) -> list[tuple[int, int]]:
        """``(computed_at_ms, lower_ms)`` of every entry of the watermark log, oldest first, from the log's
        file names alone (one directory listing, no file reads: fast for a log of 100,000 entries)."""
        log_dir = self.watermark_path(stream, wm_key, "log")
        try:  # fsspec's local ls stats every file: 10 times slower than listing the names
            names = (
                os.listdir(log_dir)
                if self._local
                else [str(p).rsplit("/", 1)[-1] for p in self.fs.ls(log_dir, detail=False)]
            )
        except FileNotFoundError:
            return []
        entries = [(int(m[1]), int(m[2])) for name in names if (m := _LOG_NAME.fullmatch(name))]
        entries.sort()
        return entries

    def read_latest_inputs(
        self, inputs: Sequence[Input], *, fail_on_unknown: bool = False, seen: Collection[str] = ()
    ) -> dict[str, dict[str, Any] | None]:
        """The newest record of each input (``(stream, wm_key)``) by its label (``orders``, ``orders:eu``),
        ``None`` for an input without a watermark: what a stream sensor's poke and its trigger read.

        With ``fail_on_unknown``, inputs without a record are told apart (:meth:`require_known_inputs`): one
        whose stream (or key) the store has never seen raises :class:`UnknownStreamError`
        (:class:`UnknownKeyError`); one the store knows, e.g. from a controller round that saw the stream but
        emitted no watermark yet, stays ``None``, to be waited for. The names are listed only when a record is
        missing, so once every input has a watermark a read is one small file per input. Inputs whose label is
        in ``seen`` (a reader has read a record of them before) are never called unknown: a record missing
        later (a store briefly unmounted or empty) is waited for. On a remote store several inputs are read
        concurrently.
        """
        inputs = list(inputs)
        if self._local or len(inputs) < 2:
            found = [self.read_latest(stream, key) for stream, key in inputs]
        else:
            with ThreadPoolExecutor(max_workers=min(len(inputs), 8)) as pool:
                found = list(pool.map(lambda pair: self.read_latest(*pair), inputs))
        if fail_on_unknown:
            self.require_known_inputs(
                pair
                for pair, record in zip(inputs, found, strict=True)
                if record is None and watermark_label(*pair) not in seen
            )
        return {watermark_label(stream, key): record for (stream, key), record in zip(inputs, found, strict=True)}

    def list_streams(self) -> list[str]:
        """The streams that have a watermark or a status in the store (the folders under ``streams/``), sorted.
        One directory listing, O(number of streams): no log or record is read."""
        return self._list_names(self._path("streams"))

    def require_known(self, streams: Iterable[str]) -> None:
        """Raise :class:`UnknownStreamError` for any of ``streams`` that the store has never seen (one listing of
        the store's streams). Readers call it only for streams without a watermark, so a poke stays O(1) once
        every stream has one."""
        wanted = sorted(set(streams))
        if not wanted:
            return
        known = self.list_streams()
        unknown = [stream for stream in wanted if stream not in known]
        if unknown and not known:
            self.require_reachable()
        if unknown:
            raise UnknownStreamError(unknown, known, self.base_path)

    def require_known_inputs(self, inputs: Iterable[Input]) -> None:
        """Raise for inputs ``(stream, wm_key)`` the store has never seen: :class:`UnknownStreamError` naming
        every unknown stream, else :class:`UnknownKeyError` naming the unknown keys of the first stream (by
        name) that has any. One listing of the streams, plus one of a stream's keys per stream with a keyed
        input."""
        pairs = list(inputs)
        self.require_known(stream for stream, _ in pairs)
        keys: dict[str, set[str]] = {}
        for stream, key in pairs:
            if key is not None:
                keys.setdefault(stream, set()).add(key)
        for stream in sorted(keys):
            known = self.list_keys(stream)
            unknown = sorted(keys[stream] - set(known))
            if unknown:
                raise UnknownKeyError(stream, unknown, known, self.base_path)

    def list_keys(self, stream: str) -> list[str]:
        """The ``wm_key`` values that have a keyed watermark or status under ``stream``, sorted."""
        return self._list_names(self.stream_path(stream, "keys"))

    def list_pipelines(self) -> list[str]:
        """The pipelines (windowed aggregates, incremental partitions) that have a folder in the store, sorted."""
        return self._list_names(self._path("pipelines"))

    def require_known_pipeline(self, pipeline: str) -> None:
        """Raise :class:`UnknownPipelineError` when no run of ``pipeline`` ever wrote to the store (one listing
        of the store's pipelines)."""
        known = self.list_pipelines()
        if validate_name(pipeline, "pipeline") not in known:
            if not known:
                self.require_reachable()
            raise UnknownPipelineError([pipeline], known, self.base_path)

    def require_reachable(self) -> None:
        """Raise :class:`StoreUnreachableError` (transient) when the store's base path does not exist: a store
        that is unmounted or briefly unreachable lists no names, and none of them is unknown for that."""
        if not self._local:
            self.fs.invalidate_cache(self.root)
        if not self.fs.exists(self.root):
            raise StoreUnreachableError(self.base_path)

    def _list_names(self, directory: str) -> list[str]:
        """The valid names in ``directory``, sorted; none when it does not exist. One listing, no entry opened
        or stat'ed. A stray file counts as a name: the Watermarks page flags it as damaged rather than hide it."""
        if not self._local:
            self.fs.invalidate_cache(directory)  # a cached listing must not hide a stream created since
        try:
            entries = self.fs.ls(directory, detail=False)
        except (FileNotFoundError, NotADirectoryError):  # a stray file where a folder belongs holds no names
            return []
        return sorted(n for p in entries if is_valid_stream_name(n := str(p).rstrip("/").rsplit("/", 1)[-1]))

    def read_stream_status(self, stream: str, wm_key: str | None = None) -> dict[str, Any] | None:
        """What the last controller round said about ``stream`` (its key ``wm_key`` when given: writers,
        idle, waiting for), or ``None``."""
        return self._read_json(self.watermark_path(stream, wm_key, "status.json"))

    def write_stream_status(self, stream: str, status: Mapping[str, Any], wm_key: str | None = None) -> None:
        """Replace the status document of ``stream`` (of its key ``wm_key``): a mirror for readers (the
        Watermarks page), written by each successful controller round whether or not the watermark advanced."""
        self._write_atomic(self.watermark_path(stream, wm_key, "status.json"), status)

    def read_pipeline_runs(self, pipeline: str, limit: int) -> list[dict[str, Any]]:
        """The manifests of a windowed pipeline's last ``limit`` runs (``runs/v<version>/``), oldest first.
        A damaged manifest raises :class:`DamagedRecordError`; read them one by one with
        :meth:`read_pipeline_run` to go past it."""
        manifests = [
            self.read_pipeline_run(pipeline, version) for version in self.list_pipeline_runs(pipeline)[-limit:]
        ]
        return [manifest for manifest in manifests if manifest is not None]

    def list_pipeline_runs(self, pipeline: str) -> list[int]:
        """The versions of a windowed pipeline's runs (``runs/v<version>/`` folders), ascending."""
        runs_dir = self._path("pipelines", validate_name(pipeline, "pipeline"), "runs")
        try:
            names = self.fs.ls(runs_dir, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            int(match[1]) for name in names if (match := _RUN_NAME.fullmatch(str(name).rstrip("/").rsplit("/", 1)[-1]))
        )

    def pipeline_run_path(self, pipeline: str, version: int) -> str:
        """Where the manifest of run ``version`` of ``pipeline`` lives."""
        return self._path("pipelines", validate_name(pipeline, "pipeline"), "runs", f"v{int(version)}", "manifest.json")

    def read_pipeline_run(self, pipeline: str, version: int) -> dict[str, Any] | None:
        """The manifest of run ``version`` of a windowed pipeline, or ``None`` when the run wrote none (yet)."""
        return self._read_json(self.pipeline_run_path(pipeline, version))

    def pipeline_state_path(self, pipeline: str) -> str:
        """Where the committed state document of ``pipeline`` lives."""
        return self._path("pipelines", validate_name(pipeline, "pipeline"), "state.json")

    def read_pipeline_state(self, pipeline: str, *, fail_on_unknown: bool = False) -> dict[str, Any] | None:
        """The committed state document of an incremental-partitions pipeline (one small read), ``None`` before
        its first commit. With ``fail_on_unknown``, a pipeline without a document that the store has never
        seen (:meth:`require_known_pipeline`) raises :class:`UnknownPipelineError` instead."""
        document = self._read_json(self.pipeline_state_path(pipeline))
        if document is None and fail_on_unknown:
            self.require_known_pipeline(pipeline)
        return document

    def read_partitions_state(self, pipeline: str, *, fail_on_unknown: bool = False) -> dict[str, Any] | None:
        """:meth:`read_pipeline_state` of an incremental-partitions pipeline, checked: a windowed pipeline's
        document raises :class:`PipelineKindError` (what a completeness sensor pointed at it should say), one
        whose ``spec``, ``state`` or ``units`` cannot be read raises :class:`DamagedRecordError` naming its
        path."""
        document = self.read_pipeline_state(pipeline, fail_on_unknown=fail_on_unknown)
        if document is None:
            return None
        if document.get("kind") == "windowed":
            raise PipelineKindError(
                f"pipeline {pipeline!r} is a windowed pipeline, not an incremental-partitions one: wait for it with "
                "StreamWatermarkSensor on its output stream"
            )
        path = self.pipeline_state_path(pipeline)
        if "spec" not in document:
            raise DamagedRecordError(path, "no spec: not the state of an incremental-partitions pipeline")
        try:
            PartitionSpec.from_json(document["spec"])
            PartitionState.from_json(document.get("state"))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise DamagedRecordError(path, f"spec or state cannot be read ({type(error).__name__}: {error})") from None
        units = document.get("units")
        if units is not None and not isinstance(units, list):
            raise DamagedRecordError(path, f"units={units!r} is not a list")
        return document

    def read_json_url(self, url: str) -> dict[str, Any] | None:
        """Read a JSON document at an absolute URL or path (e.g. a job's manifest)."""
        fs, path = fsspec.core.url_to_fs(url, **self.storage_options)
        if not fs.exists(path):
            return None
        with fs.open(path, "rb") as handle:
            return dict(json.loads(handle.read().decode("utf-8")))

    def _read_json(self, path: str) -> dict[str, Any] | None:
        """The JSON object at ``path``; None when there is none; a damaged file raises
        :class:`DamagedRecordError` naming ``path``."""
        try:
            with self.fs.open(path, "rb") as handle:
                text = handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise DamagedRecordError(path, "a folder where a JSON record belongs") from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DamagedRecordError(path, f"not a JSON document ({exc}): it begins {text[:60]!r}") from None
        if not isinstance(document, dict):
            raise DamagedRecordError(path, f"holds a JSON {type(document).__name__}, not a record")
        return document

    def read_time_window(
        self,
        stream: str,
        position: Mapping[int, int] | Mapping[str, int],
        segments: Mapping[int, Segment],
        limit: int | None = None,
    ) -> TimeWindow:
        """The time window of a reader at ``position`` in ``stream`` (Pravega ``getCurrentTimeWindow``).

        ``position`` is a stream cut (segment id -> offset, ``-1`` = end of segment; ids may be JSON strings),
        ``segments`` the stream's segments by id. The window is computed by
        :func:`airflow_provider_wm.core.reader.time_window` over the watermark log (the last ``limit``
        entries when given: a position behind all of them then has no lower bound). Log records without a
        stream cut say nothing about any position and are left out.
        """
        cut_of_position: dict[int, int] = {}
        for key, offset in position.items():
            try:
                cut_of_position[int(key)] = offset
            except (TypeError, ValueError):
                raise ValueError(f"position has segment id {key!r}, which is not an integer") from None
        watermarks: list[LoggedWatermark] = []
        for record in self.read_history(stream, limit):
            cut = record.get("stream_cut")
            if cut is None:
                continue
            lower, upper = record.get("lower_ms"), record.get("upper_ms")
            try:
                parsed = {int(key): offset for key, offset in dict(cut).items()}
                if not (isinstance(lower, int) and isinstance(upper, int)):
                    raise ValueError
            except (TypeError, ValueError):
                raise ValueError(
                    f"watermark log of stream {stream!r}: the record computed_at_ms={record.get('computed_at_ms')!r} "
                    f"is not a watermark (lower_ms={lower!r}, upper_ms={upper!r}, stream_cut={cut!r})"
                ) from None
            watermarks.append(LoggedWatermark(parsed, lower, upper))
        return time_window(cut_of_position, watermarks, segments)

    # ------------------------------------------------------------------------------------------ writes

    def publish(self, record: Mapping[str, Any]) -> bool:
        """Monotone write of a watermark: append it to the log and make it ``latest``.

        Returns False (and logs) when ``record.lower_ms`` is not above the latest lower bound of the same
        stream and key: a watermark never goes backwards. A record with a non-null ``wm_key`` (validated
        like a name) is a keyed watermark: it is ordered against that key's watermarks only and written
        under ``streams/<stream>/keys/<wm_key>/``; without one, the stream's own files are used. Publishing
        the same record twice is harmless (same log file name).
        """
        stream = validate_name(record.get("stream"), "record['stream']")
        wm_key = record.get("wm_key")
        if wm_key is not None:
            validate_name(wm_key, "record['wm_key']")
        lower = record.get("lower_ms")
        if not isinstance(lower, int):
            raise ValueError(f"record['lower_ms'] must be an int of epoch milliseconds, got {lower!r}")
        what = f"stream {stream}" if wm_key is None else f"stream {stream} key {wm_key}"
        payload = {**record, "published_at_ms": int(time.time() * 1000)}
        with self._stream_lock(stream):
            latest = self._effective_latest(stream, wm_key)
            if latest is not None and "lower_ms" in latest and len(latest) > 1 and producer(latest) != producer(record):
                raise ValueError(
                    f"{what} is published by {producer(latest)}, not by {producer(record)}: a stream has one "
                    "producer (name derived streams with output_stream=... so they do not collide)"
                )
            if latest is not None and lower <= int(latest["lower_ms"]):
                log.warning(
                    "Watermark of %s not written: lower_ms=%s (%s) is not above the latest %s",
                    what,
                    lower,
                    format_ms(lower),
                    format_ms(int(latest["lower_ms"])),
                )
                return False
            name = f"{int(record.get('computed_at_ms', 0)):015d}-{lower:015d}.json"
            self._write_atomic(self.watermark_path(stream, wm_key, "log", name), payload)
            self._write_atomic(self.watermark_path(stream, wm_key, "latest.json"), payload)
        log.info("Published watermark of %s: lower_ms=%s (%s)", what, lower, format_ms(lower))
        return True

    def latest_lower_ms(self, stream: str, wm_key: str | None = None) -> int | None:
        """The lower bound a new watermark of ``stream`` must pass: ``latest``'s, or the log's highest when
        ``latest.json`` is missing or damaged."""
        latest = self._effective_latest(stream, wm_key)
        return None if latest is None else int(latest["lower_ms"])

    def _effective_latest(self, stream: str, wm_key: str | None) -> dict[str, Any] | None:
        """``latest.json``, or when it is lost or damaged the log's highest record (a watermark never goes back
        because a file went missing); ``{"lower_ms": ...}`` alone when that record is damaged too (the log's
        file names carry the lower bound)."""
        try:
            latest = self.read_latest(stream, wm_key)
        except ValueError as exc:
            log.warning("%s; using the watermark log instead", exc)
            latest = None
        if latest is not None:
            return latest
        index = self.read_log_index(stream, wm_key)
        if not index:
            return None
        computed, lower = max(index, key=lambda entry: entry[1])
        try:
            logged = self._read_json(self.watermark_path(stream, wm_key, "log", f"{computed:015d}-{lower:015d}.json"))
        except ValueError:
            logged = None
        return {**(logged or {}), "lower_ms": lower}

    def write_pipeline_state(self, pipeline: str, document: Mapping[str, Any], *, restart: bool = False) -> bool:
        """Replace the pipeline's state document (atomically), unless it holds a later ``version``: returns False
        (and logs) then. The operator writes it right after its commit; it is a mirror for readers, not the source
        of truth, and a slow run that committed version 4 cannot overwrite the copy of version 5. A damaged copy
        is replaced, and so is any copy on ``restart`` (the first commit of a pipeline started over: its versions
        count from 1 again)."""
        path = self.pipeline_state_path(pipeline)
        with self._lock(path.rsplit("/", 1)[0]):
            try:
                stored = self._read_json(path)
            except DamagedRecordError:
                stored = None
            stored_version = None if stored is None else stored.get("version")
            version = document.get("version")
            later = isinstance(stored_version, int) and isinstance(version, int) and stored_version > version
            if later and not restart:
                log.warning(
                    "The store's state of pipeline %s holds version %s: version %s not written over it",
                    pipeline,
                    stored_version,
                    version,
                )
                return False
            self._write_atomic(path, document)
        return True

    def write_json_url(self, url: str, payload: Mapping[str, Any]) -> None:
        """Write a JSON document at an absolute URL or path (e.g. a plan for a Spark job)."""
        fs, path = fsspec.core.url_to_fs(url, **self.storage_options)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, json.dumps(payload, sort_keys=True).encode("utf-8"))

    def _write_atomic(self, path: str, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload, sort_keys=True).encode("utf-8")
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        if self._local:
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        else:  # an object-store PUT is atomic
            self.fs.pipe_file(path, data)

    def _stream_lock(self, stream: str) -> contextlib.AbstractContextManager[None]:
        return self._lock(self.stream_path(stream))

    @contextlib.contextmanager
    def _lock(self, directory: str) -> Iterator[None]:
        """An exclusive lock of ``directory`` among the processes of this machine (a local store; an object store
        offers none)."""
        if not self._local:
            yield
            return
        import fcntl

        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, ".lock"), "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
