"""Checks of DAG arguments shared by the operators and sensors: they fail at parse time, naming the argument."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

__all__ = ["add_asset_outlet", "require_paths"]


def require_paths(**paths: Any) -> None:
    """Every value must be a non-empty path or URL.

    >>> require_paths(store_path="/data/wm", source=" ")
    Traceback (most recent call last):
    ...
    ValueError: source=' ' must be a non-empty path or URL
    """
    for argument, value in paths.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{argument}={value!r} must be a non-empty path or URL")


def add_asset_outlet(asset: Any, kwargs: MutableMapping[str, Any]) -> None:
    """Declare ``asset`` (if any) as an outlet of the task, beside the outlets the DAG author gave."""
    if asset is not None:
        kwargs["outlets"] = [*kwargs.get("outlets", []), asset]
