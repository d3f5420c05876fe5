"""The data behind the Watermarks page, read from the watermark store: small documents only, no Airflow.

Every name that comes from a request (a stream, a pipeline) goes through the store's name check before it
becomes a path, so no request can read outside the store.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_wm.core.controller import split_label, watermark_label
from airflow_provider_wm.core.monitoring import downsample_lag, format_duration, partition_strip
from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name

__all__ = ["WINDOWED_RUNS_SHOWN", "overview", "stream_history"]

WINDOWED_RUNS_SHOWN = 30


def overview(store: WatermarkStoreHook, now_ms: int) -> dict[str, Any]:
    """Every stream's latest watermark and status (a keyed watermark as a row of its own, named
    ``stream:wm_key``), every pipeline's state, as the page's tables need them."""
    streams = [
        _stream_row(store, stream, wm_key, now_ms)
        for stream in store.list_streams()
        for wm_key in [None, *store.list_keys(stream)]
    ]
    partitioned, windowed = [], []
    for pipeline in store.list_pipelines():
        document = store.read_pipeline_state(pipeline)
        if document is None:
            continue
        if document.get("kind") == "windowed" or "watermark_ms" in document:
            windowed.append(_windowed_row(store, pipeline, document))
        elif "units" in document and "spec" in document:
            partitioned.append(_partitions_row(pipeline, document))
    return {
        "store": store.base_path,
        "now_ms": now_ms,
        "streams": [row for row in streams if row is not None],
        "partition_pipelines": partitioned,
        "windowed_pipelines": windowed,
    }


def stream_history(store: WatermarkStoreHook, stream: str, max_points: int) -> dict[str, Any]:
    """The watermark and lag over time of ``stream`` (``stream:wm_key`` for a keyed one), at most
    ``max_points`` points (see ``downsample_lag``)."""
    name, wm_key = split_label(stream)
    entries = store.read_log_index(validate_name(name, "stream"), wm_key)
    points = downsample_lag(entries, max_points)
    return {
        "stream": stream,
        "entries": len(entries),
        "points": [{"t": p.computed_at_ms, "lower_ms": p.lower_ms, "lag_ms": p.lag_ms} for p in points],
    }


def _stream_row(store: WatermarkStoreHook, stream: str, wm_key: str | None, now_ms: int) -> dict[str, Any] | None:
    latest = store.read_latest(stream, wm_key)
    status = store.read_stream_status(stream, wm_key) or {}
    if latest is None and not status:
        return None
    lower = None if latest is None else int(latest["lower_ms"])
    return {
        "stream": watermark_label(stream, wm_key),
        "wm_key": wm_key,
        "lower_ms": lower,
        "upper_ms": None if latest is None else latest.get("upper_ms"),
        "lag_ms": None if lower is None else now_ms - lower,
        "lag": "-" if lower is None else format_duration(now_ms - lower),
        "last_advanced_ms": None if latest is None else latest.get("published_at_ms"),
        "stream_cut": None if latest is None else latest.get("stream_cut"),
        "pipeline": None if latest is None else latest.get("pipeline"),
        "upstream": None if latest is None else latest.get("upstream"),
        "controller": status.get("controller") or (latest or {}).get("controller"),
        "status": status.get("status"),
        "writers": status.get("active_writers"),
        "idle": status.get("idle"),
        "checked_at_ms": status.get("checked_at_ms"),
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
    committed = int(document.get("version") or 0)
    runs = []
    for manifest in store.read_pipeline_runs(pipeline, WINDOWED_RUNS_SHOWN):
        if int(manifest.get("version") or 0) > committed:
            continue  # its job ran, its commit did not (yet): the retry rewrites this version
        totals = manifest.get("totals") or {}
        runs.append(
            {
                "version": manifest.get("version"),
                "run_id": manifest.get("run_id"),
                "watermark_ms": manifest.get("watermark_ms"),
                "panes": totals.get("panes") or {},
                "too_late": totals.get("too_late", 0),
                "invalid": totals.get("invalid_event_time", 0),
                "events_read": totals.get("events_read", 0),
            }
        )
    return {
        "pipeline": pipeline,
        "version": committed,
        "run_id": document.get("run_id"),
        "committed_at": document.get("committed_at"),
        "watermark_ms": document.get("watermark_ms"),
        "runs": runs,
    }
