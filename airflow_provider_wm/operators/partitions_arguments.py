"""The incremental-partitions operator's DAG arguments: the transform (SQL over the view ``source``, or an
importable function) and the units (a list of values, or a secondary dataset), checked at parse time."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_wm.arguments import kept_apart, require_paths
from airflow_provider_wm.core.names import column_name
from airflow_provider_wm.core.partitions import iso_ms
from airflow_provider_wm.hooks.watermark_store import validate_name
from airflow_provider_wm.timeutil import to_epoch_ms

__all__ = [
    "UNITS_FORMATS",
    "backfill_argument",
    "source_and_target",
    "transform_arguments",
    "units_argument",
]


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")


UNITS_FORMATS = ("parquet", "orc", "csv", "json", "feather", "ipc", "arrow")
"""What a secondary dataset of units is read as (``pyarrow.dataset``, in the task)."""


def source_and_target(source: object, target: object) -> None:
    """Both are paths, and different datasets: writing the target must not rewrite the source
    (:func:`~airflow_provider_wm.arguments.kept_apart`).

    >>> source_and_target("/data/orders", "/data/orders/daily")
    Traceback (most recent call last):
    ...
    ValueError: target='/data/orders/daily' lies inside source='/data/orders': give each its own
    """
    require_paths(source=source, target=target)
    kept_apart({"target": str(target)}, {"source": str(source)})  # both are strings now


def backfill_argument(backfill: object, timezone: str = "UTC") -> tuple[int, int] | None:
    """``(start, end)`` in epoch ms, start before end, or None (no backfill). A zone-less date or date-time is in
    ``timezone``, the pipeline's, as the watermark's ``from`` and ``to`` are.

    >>> backfill_argument(("2026-01-01", "2026-01-02"))
    (1767225600000, 1767312000000)
    >>> backfill_argument(("2026-01-01", "2026-01-02T00:00:00Z"), "America/New_York")
    (1767243600000, 1767312000000)
    """
    if backfill is None:
        return None
    if not isinstance(backfill, (tuple, list)) or len(backfill) != 2:
        raise ValueError(f"backfill={backfill!r} must be a (start, end) pair")
    start, end = (_backfill_bound_ms(value, timezone) for value in backfill)
    if start >= end:
        raise ValueError(f"backfill={backfill!r}: start must be before end")
    return start, end


def _backfill_bound_ms(value: object, timezone: str) -> int:
    if isinstance(value, str):
        try:
            zone_less = dt.datetime.fromisoformat(value.strip()).tzinfo is None
        except ValueError:
            zone_less = False
        if zone_less:
            return iso_ms(value.strip(), timezone)
    return to_epoch_ms(value, "backfill")


def transform_arguments(transform: str | Callable[..., Any] | None) -> tuple[str | None, str | None]:
    """``(sql, import path)``: a SQL statement over the view ``source``, a ``module:function`` path, or a
    module-level function of an importable module (taken by its import path, so the Spark job can import it).

    A function defined in the DAG file itself runs in connect mode (the job runs in the task's process, which
    has imported the DAG file); ``spark-submit`` cannot import it (:func:`spark_jobs.partitions.layout.load_transform`
    says so).

    >>> transform_arguments("airflow_provider_wm.demo.transforms:daily_orders")
    (None, 'airflow_provider_wm.demo.transforms:daily_orders')
    """
    if transform is None:
        return None, None
    if callable(transform):
        module, name = getattr(transform, "__module__", None), getattr(transform, "__qualname__", "")
        if not module or "<" in name or "." in name:
            raise ValueError(f"transform={transform!r} must be a module-level function the Spark job can import")
        return None, f"{module}:{name}"
    if isinstance(transform, str) and transform.strip():
        text = transform.strip()
        if _IMPORT_PATH.match(text) and ":" in text:
            return None, text
        if re.match(r"(?is)^\s*(select|with|from)\b", text):
            return text, None
    raise ValueError(
        f"transform={transform!r} is neither a SQL statement over the view `source` (SELECT ... FROM source) "
        "nor an import path 'package.module:function'"
    )


def units_argument(units: Sequence[str] | Mapping[str, Any] | None) -> list[str] | dict[str, Any]:
    """The units: a list of unit values (each a name), or a secondary dataset ``{"path", "column", "format"}``
    whose column's distinct values are the units (``format`` of :data:`UNITS_FORMATS` in any case, default
    Parquet).

    >>> units_argument({"path": "/lake/regions", "column": "id"})
    {'format': 'parquet', 'path': '/lake/regions', 'column': 'id'}
    >>> units_argument({"path": "/lake/regions", "column": "id", "format": "xlsx"})
    Traceback (most recent call last):
    ...
    ValueError: units['format']='xlsx' must be one of parquet, orc, csv, json, feather, ipc, arrow
    """
    if units is None:
        return []
    if isinstance(units, Mapping):
        unknown = set(units) - {"path", "column", "format"}
        if unknown or "path" not in units or "column" not in units:
            raise ValueError(
                f"units={dict(units)!r} must be a list of unit values or {{'path': ..., 'column': ..., "
                "'format': 'parquet'} naming a secondary dataset"
            )
        require_paths(**{"units['path']": units["path"]})
        column_name(units["column"], "units['column']")
        dataset = {"format": "parquet", **units}
        if not isinstance(dataset["format"], str) or dataset["format"].lower() not in UNITS_FORMATS:
            raise ValueError(f"units['format']={dataset['format']!r} must be one of {', '.join(UNITS_FORMATS)}")
        return {**dataset, "format": dataset["format"].lower()}
    if isinstance(units, str):
        raise ValueError(f"units={units!r} must be a list of unit values, not a string")
    values = [validate_name(u, "units[]") for u in units]
    if len(set(values)) != len(values):
        raise ValueError(f"units={list(units)!r} has duplicates")
    return values
