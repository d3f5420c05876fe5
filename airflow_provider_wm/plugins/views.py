"""The data behind the Watermarks page, read from the watermark store: small documents only, no Airflow.

Every name that comes from a request (a stream, a pipeline) goes through the store's name check before it
becomes a path, so no request can read outside the store.

A damaged record (a truncated ``latest.json``, garbage in a state document, a manifest that is not an object)
never takes the page down: the listing still answers for every healthy stream and pipeline, and the row of the
damaged one carries ``error``: ``damaged record <path>: <reason>`` (``None`` on a healthy row). A stream whose
``latest.json`` is damaged shows the highest lower bound of its watermark log (``lower_from: "log"``), the bound
the store's publish path keeps to, so the flag never looks like a reset.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow_provider_wm.core.monitoring import downsample_lag, format_duration, partition_strip
from airflow_provider_wm.core.names import split_label, watermark_label
from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState
from airflow_provider_wm.core.times import format_ms
from airflow_provider_wm.hooks.watermark_store import DamagedRecordError, WatermarkStoreHook, validate_name

__all__ = [
    "WINDOWED_RUNS_SHOWN",
    "explain_with_sensors",
    "flag_lagging",
    "overview",
    "sensor_cause",
    "stream_history",
]

WINDOWED_RUNS_SHOWN = 30

T = TypeVar("T")

# What reading or interpreting one malformed document can raise; a bug elsewhere still surfaces as a 500.
_MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError)


STORE_READERS = 16
"""Streams read at once for the overview: each costs three small reads, which on an object store wait on latency."""


def overview(store: WatermarkStoreHook, now_ms: int) -> dict[str, Any]:
    """Every stream's latest watermark and status (a keyed watermark as a row of its own, named
    ``stream:wm_key``), every pipeline's state, as the page's tables need them; a damaged record flags its
    own row (``error``) and leaves every other row as it is."""

    def stream_rows(stream: str) -> list[dict[str, Any]]:
        return [
            row
            for wm_key in [None, *_keys(store, stream)]
            if (row := _stream_row(store, stream, wm_key, now_ms)) is not None
        ]

    with ThreadPoolExecutor(max_workers=STORE_READERS) as pool:  # a few small reads per stream: latency-bound
        streams = [row for rows in pool.map(stream_rows, store.list_streams()) for row in rows]
    partitioned: list[dict[str, Any]] = []
    windowed: list[dict[str, Any]] = []
    damaged: list[dict[str, Any]] = []
    for pipeline in store.list_pipelines():
        path = store.pipeline_state_path(pipeline)
        try:
            document = store.read_pipeline_state(pipeline)
        except _MALFORMED as error:
            damaged.append({"pipeline": pipeline, "error": _damage(path, error)})
            continue
        if document is None:
            continue
        dag_id = document.get("dag_id") if isinstance(document.get("dag_id"), str) else None
        if document.get("kind") == "windowed" or "watermark_ms" in document:
            row = _guarded(path, _windowed_shell(pipeline), _windowed_row, store, pipeline, document)
            windowed.append({**row, "dag_id": dag_id})
        elif "units" in document and "spec" in document:
            row = _guarded(path, _partitions_shell(pipeline), _partitions_row, pipeline, document)
            partitioned.append({**row, "dag_id": dag_id})
    flag_lagging(streams, {row["pipeline"]: row for row in [*partitioned, *windowed]})
    return {
        "store": store.base_path,
        "now_ms": now_ms,
        "streams": streams,
        "partition_pipelines": partitioned,
        "windowed_pipelines": windowed,
        "damaged_pipelines": damaged,
    }


def stream_history(store: WatermarkStoreHook, stream: str, max_points: int) -> dict[str, Any]:
    """The watermark and lag over time of ``stream`` (``stream:wm_key`` for a keyed one), at most
    ``max_points`` points (see ``downsample_lag``), and the DAG that published it (``dag_id``, from its latest
    record). The points come from the log's file names alone, so a damaged record does not hide them; a log
    that cannot be listed raises :class:`DamagedRecordError`."""
    name, wm_key = split_label(stream)
    name = validate_name(name, "stream")
    try:
        entries = store.read_log_index(name, wm_key)
    except OSError as error:  # e.g. a file where the log folder belongs
        raise DamagedRecordError(store.watermark_path(name, wm_key, "log"), _reason(error)) from None
    points = downsample_lag(entries, max_points)
    try:
        latest = store.read_latest(name, wm_key)
    except _MALFORMED:  # the overview flags the damaged record; the log's points still show
        latest = None
    dag_id = latest.get("dag_id") if isinstance(latest, dict) else None
    return {
        "stream": stream,
        "dag_id": dag_id if isinstance(dag_id, str) else None,
        "entries": len(entries),
        "points": [{"t": p.computed_at_ms, "lower_ms": p.lower_ms, "lag_ms": p.lag_ms} for p in points],
    }


def flag_lagging(streams: list[dict[str, Any]], pipelines: dict[str, dict[str, Any]]) -> None:
    """Add to each stream row how far it is behind its pipeline's expected progress and, for a derived stream,
    behind its upstream (with the reason the store knows); O(1) per row, from what the rows already hold.

    Expected progress (``expected_ms``) is the logical time of the latest round that computed the stream: its
    controller's committed cut-off (``status.json``'s ``checked_at_ms``, the round's ``processed_until_ms``) or,
    for a pipeline's output, the round time its watermark was computed at (``computed_at_ms``). So on replayed
    January data a stream whose watermark is 5 minutes behind its January round reads "behind expected by 5m",
    whatever the wall-clock lag. A derived stream (``upstream`` set; a merged one lists several, its bound is
    their smallest) whose lower time is below its upstream's gets ``behind_upstream_ms`` and ``behind_reason``
    (not a window aggregate whose input watermark has reached the upstream's: its output waits for windows to end),
    e.g. ``3h behind clicks: pipeline sessions last ran at 2026-01-05T09:00:00Z; clicks has been computed up to
    2026-01-05T12:00:00Z since``.
    """
    rows = {row["stream"]: row for row in streams}
    for row in streams:
        expected = max((t for t in (row.get("checked_at_ms"), row.get("computed_at_ms")) if isinstance(t, int)),
                       default=None)  # fmt: skip
        row["expected_ms"] = expected
        behind = None if expected is None or row["lower_ms"] is None else max(expected - row["lower_ms"], 0)
        row["behind_expected_ms"] = behind
        row["behind_expected"] = "-" if behind is None else format_duration(behind)
        row["behind_upstream_ms"] = row["behind_upstream"] = row["behind_reason"] = None
    for row in streams:
        names = [name.strip() for name in str(row.get("upstream") or "").split(",") if name.strip()]
        upstreams = [rows[name] for name in names if name in rows and rows[name]["lower_ms"] is not None]
        if not upstreams or row["lower_ms"] is None:
            continue
        bound = min(up["lower_ms"] for up in upstreams)
        pipeline = pipelines.get(str(row.get("pipeline")))
        consumed = (pipeline or {}).get("watermark_ms")  # a windowed pipeline's input watermark
        if row["lower_ms"] >= bound or (isinstance(consumed, int) and consumed >= bound):
            continue  # level, or a window aggregate that has read all its upstream and waits for windows to end
        row["behind_upstream_ms"] = bound - row["lower_ms"]
        lowest = min(upstreams, key=lambda up: up["lower_ms"])
        row["behind_upstream"] = lowest["stream"]
        row["behind_reason"] = (
            f"{format_duration(bound - row['lower_ms'])} behind {lowest['stream']}: {_lag_cause(row, lowest, pipeline)}"
        )


def explain_with_sensors(streams: list[dict[str, Any]], sensors: dict[str, dict[str, Any]]) -> None:
    """Give a derived stream flagged behind its upstream the reason its DAG's sensor gives, when the latest run
    of the sensor (``sensors[dag_id]``, see :func:`sensor_cause`) did not succeed; a sensor that succeeded
    leaves the store's reason (the pipeline's last outcome)."""
    for row in streams:
        sensor = sensors.get(str(row.get("dag_id")))
        cause = None if sensor is None or row["behind_upstream_ms"] is None else sensor_cause(sensor)
        if cause is not None:
            row["behind_reason"] = (
                f"{format_duration(row['behind_upstream_ms'])} behind {row['behind_upstream']}: {cause}"
            )


def sensor_cause(sensor: dict[str, Any]) -> str | None:
    """Why a pipeline has not advanced, from its sensor's latest task instance; None when the sensor succeeded.

    ``sensor`` holds ``dag_id``, ``task_id``, ``state`` (Airflow's task instance state), ``start_ms``,
    ``end_ms`` and ``interval_end_ms`` (its run's data interval end), e.g. a deferred sensor gives
    ``sensor wait_for_clicks of DAG sessions has been waiting since 2026-01-05T12:00:05.000Z (deferred), in
    the run of the interval ending 2026-01-05T12:00:00.000Z``.
    """
    state = str(sensor.get("state"))
    if state == "success":
        return None

    def at(key: str) -> str:
        return "?" if sensor.get(key) is None else format_ms(int(sensor[key]))

    what = {
        "deferred": f"has been waiting since {at('start_ms')} (deferred)",
        "up_for_reschedule": f"has been waiting since {at('start_ms')} (poking, rescheduled)",
        "running": f"has been running since {at('start_ms')}",
        "failed": f"failed at {at('end_ms')}",
        "skipped": f"was skipped at {at('end_ms')} (its timeout with soft_fail, or an upstream task skipped)",
        "upstream_failed": "did not run: a task before it failed",
        "up_for_retry": f"failed at {at('end_ms')} and waits for its retry",
    }.get(state, f"is {state}")
    interval = sensor.get("interval_end_ms")
    run = "" if interval is None else f", in the run of the interval ending {format_ms(int(interval))}"
    return f"sensor {sensor['task_id']} of DAG {sensor['dag_id']} {what}{run}"


def _lag_cause(row: dict[str, Any], upstream: dict[str, Any], pipeline: dict[str, Any] | None) -> str:
    """Why a derived stream trails its upstream, from its pipeline's last outcome in the store."""
    name = row.get("pipeline") or "its pipeline"
    if pipeline is not None and pipeline.get("error"):
        return f"the state of pipeline {name} is damaged ({pipeline['error']})"
    failed = (pipeline or {}).get("failed") or []
    if failed:
        return f"the last run of pipeline {name} failed {len(failed)} partition(s): {', '.join(map(str, failed[:3]))}"
    ran, up_ran = row.get("expected_ms"), upstream.get("expected_ms")
    if ran is not None and up_ran is not None and ran < up_ran:
        return (
            f"pipeline {name} last ran at {format_ms(ran)}; {upstream['stream']} has been computed up to "
            f"{format_ms(up_ran)} since"
        )
    at = "" if ran is None else f" at {format_ms(ran)}"
    return f"pipeline {name} ran{at} and its watermark stayed at {format_ms(row['lower_ms'])}"


def _reason(error: BaseException) -> str:
    return str(error) if isinstance(error, ValueError | OSError) and str(error) else f"{type(error).__name__}: {error}"


def _damage(path: str, error: BaseException) -> str:
    """The ``error`` of a row: the store's own message for a damaged record, else one naming ``path``."""
    if isinstance(error, DamagedRecordError):
        return str(error)
    return str(DamagedRecordError(path, _reason(error)))


def _guarded(path: str, shell: dict[str, Any], build: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``build(*args)`` with ``error: None``, or ``shell`` flagged with the damage when the document behind
    ``path`` cannot be read as one."""
    try:
        return {**build(*args), "error": None}
    except _MALFORMED as error:
        return {**shell, "error": _damage(path, error)}


def _keys(store: WatermarkStoreHook, stream: str) -> list[str]:
    try:
        return store.list_keys(stream)
    except _MALFORMED:  # an unlistable keys folder: the stream's own row still shows
        return []


def _epoch_ms(record: dict[str, Any], field: str, path: str, required: bool = False) -> int | None:
    """``record[field]`` when it is epoch milliseconds (``None`` when absent and not ``required``)."""
    value = record.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise DamagedRecordError(path, f"{field}={value!r} is not epoch milliseconds")
    return value


def _read(path: str, errors: list[str], read: Callable[..., T], *args: Any) -> T | None:
    """``read(*args)``, or ``None`` with the damage (naming ``path``) appended to ``errors``."""
    try:
        return read(*args)
    except _MALFORMED as error:
        errors.append(_damage(path, error))
        return None


def _stream_row(store: WatermarkStoreHook, stream: str, wm_key: str | None, now_ms: int) -> dict[str, Any] | None:
    errors: list[str] = []
    latest_path = store.watermark_path(stream, wm_key, "latest.json")
    status_path = store.watermark_path(stream, wm_key, "status.json")
    latest = _read(latest_path, errors, store.read_latest, stream, wm_key)
    latest_damaged = bool(errors)
    status = _read(status_path, errors, store.read_stream_status, stream, wm_key) or {}
    if latest is None and not status and not errors:
        return None
    lower = None if latest is None else int(latest["lower_ms"])
    lower_from = None if lower is None else "latest"
    if latest_damaged:
        index = _read(store.watermark_path(stream, wm_key, "log"), errors, store.read_log_index, stream, wm_key) or []
        if index:
            lower, lower_from = max(entry[1] for entry in index), "log"
    record = latest or {}
    return {
        "stream": watermark_label(stream, wm_key),
        "wm_key": wm_key,
        "lower_ms": lower,
        "lower_from": lower_from,
        "upper_ms": record.get("upper_ms"),
        "lag_ms": None if lower is None else now_ms - lower,
        "lag": "-" if lower is None else format_duration(now_ms - lower),
        "computed_at_ms": record.get("computed_at_ms"),
        "last_advanced_ms": record.get("published_at_ms"),
        "stream_cut": record.get("stream_cut"),
        "pipeline": record.get("pipeline"),
        "upstream": record.get("upstream"),
        "dag_id": record.get("dag_id") or status.get("dag_id"),  # the status's, before a first watermark
        "controller": status.get("controller") or record.get("controller"),
        "status": status.get("status"),
        "writers": status.get("active_writers"),
        # "idle" in status files written before the word got one meaning (the sensor's)
        "no_active_writers": status.get("no_active_writers", status.get("idle")),
        "checked_at_ms": status.get("checked_at_ms"),
        "error": "; ".join(errors) or None,
    }


def _partitions_shell(pipeline: str) -> dict[str, Any]:
    """The row of an incremental pipeline whose state cannot be drawn: nothing but its name."""
    return {
        "pipeline": pipeline,
        "version": None,
        "run_id": None,
        "committed_at": None,
        "processed_until_ms": None,
        "units": [],
        "strip": {},
        "last_plan": [],
        "failed": [],
    }


def _windowed_shell(pipeline: str) -> dict[str, Any]:
    """The row of a windowed pipeline whose state cannot be read: nothing but its name."""
    return {
        "pipeline": pipeline,
        "version": None,
        "run_id": None,
        "committed_at": None,
        "watermark_ms": None,
        "runs": [],
    }


def _partitions_row(pipeline: str, document: dict[str, Any]) -> dict[str, Any]:
    summary = document.get("last_summary") or {}
    now_ms = document.get("processed_until_ms")
    units = [str(unit) for unit in document.get("units") or []]
    strip: dict[str, list[list[Any]]] = {}
    if now_ms is not None:
        runs = partition_strip(
            PartitionSpec.from_json(document["spec"]),
            PartitionState.from_json(document["state"]),
            units,
            int(now_ms),
            [(int(start), str(unit), str(reason)) for start, unit, reason in summary.get("plan_units") or []],
        )
        strip = {
            unit: [[run.start_ms, run.end_ms, run.status.value, run.partitions] for run in unit_runs]
            for unit, unit_runs in runs.items()
        }
    return {
        "pipeline": pipeline,
        "version": document.get("version"),
        "run_id": document.get("run_id"),
        "committed_at": document.get("committed_at"),
        "processed_until_ms": now_ms,
        "units": units,
        "strip": strip,
        "last_plan": document.get("last_plan") or [],
        "failed": summary.get("failed") or [],
    }


def _windowed_row(store: WatermarkStoreHook, pipeline: str, document: dict[str, Any]) -> dict[str, Any]:
    state_path = store.pipeline_state_path(pipeline)
    committed = int(document.get("version") or 0)
    watermark_ms = _epoch_ms(document, "watermark_ms", state_path)
    runs: list[dict[str, Any]] = []
    for version in store.list_pipeline_runs(pipeline)[-WINDOWED_RUNS_SHOWN:]:
        if version > committed:
            continue  # its job ran, its commit did not (yet): the retry rewrites this version
        path = store.pipeline_run_path(pipeline, version)
        errors: list[str] = []
        run = _read(path, errors, _run_row, store, pipeline, version, path)
        if errors:
            runs.append(
                {
                    "version": version,
                    "run_id": None,
                    "watermark_ms": None,
                    "panes": {},
                    "too_late": None,
                    "invalid": None,
                    "events_read": None,
                    "error": errors[0],
                }
            )
        elif run is not None:
            runs.append(run)
    return {
        "pipeline": pipeline,
        "version": committed,
        "run_id": document.get("run_id"),
        "committed_at": document.get("committed_at"),
        "watermark_ms": watermark_ms,
        "runs": runs,
    }


def _run_row(store: WatermarkStoreHook, pipeline: str, version: int, path: str) -> dict[str, Any] | None:
    """One run of a windowed pipeline as the page's table shows it, from its manifest."""
    manifest = store.read_pipeline_run(pipeline, version)
    if manifest is None:
        return None
    totals = manifest.get("totals") or {}
    panes = totals.get("panes") or {}
    if not isinstance(totals, dict) or not isinstance(panes, dict):
        raise DamagedRecordError(path, f"totals={totals!r} is not an object of counts")
    return {
        "version": manifest.get("version", version),
        "run_id": manifest.get("run_id"),
        "watermark_ms": _epoch_ms(manifest, "watermark_ms", path),
        "panes": panes,
        "too_late": totals.get("too_late", 0),
        "invalid": sum(totals.get(f"invalid_{what}", 0) for what in ("event_time", "value", "window")),
        "events_read": totals.get("events_read", 0),
        "error": None,
    }
