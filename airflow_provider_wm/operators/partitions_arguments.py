"""The incremental-partitions operator's DAG arguments: the transform (SQL over the view ``source``, or an
importable function) and the units (a list of values, or a secondary dataset), checked at parse time."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_wm.hooks.watermark_store import validate_name

__all__ = ["transform_arguments", "units_argument"]


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")


def transform_arguments(transform: str | Callable[..., Any] | None) -> tuple[str | None, str | None]:
    """``(sql, import path)``: a SQL statement over the view ``source``, a ``module:function`` path, or a
    module-level function (taken by its import path, so the Spark job can import it)."""
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
    if units is None:
        return []
    if isinstance(units, Mapping):
        unknown = set(units) - {"path", "column", "format"}
        if unknown or not units.get("path") or not units.get("column"):
            raise ValueError(
                f"units={dict(units)!r} must be a list of unit values or {{'path': ..., 'column': ..., "
                "'format': 'parquet'}} naming a secondary dataset"
            )
        return {"format": "parquet", **units}
    if isinstance(units, str):
        raise ValueError(f"units={units!r} must be a list of unit values, not a string")
    values = [validate_name(u, "units[]") for u in units]
    if len(set(values)) != len(values):
        raise ValueError(f"units={list(units)!r} has duplicates")
    return values
