"""Checks of DAG arguments shared by the operators and sensors: they fail at parse time, naming the argument."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

__all__ = [
    "add_asset_outlet",
    "emit_partition_keys_argument",
    "one_task_at_a_time",
    "require_bool",
    "require_paths",
]


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


def one_task_at_a_time(max_active_tis_per_dag: Any) -> int:
    """A stateful operator's runs must not overlap: its task instances run one at a time, across all runs.

    The scheduler enforces the limit (runs of the DAG may still overlap around it); each commit also checks
    that nobody committed since the run read its state.

    >>> one_task_at_a_time(4)
    Traceback (most recent call last):
    ...
    ValueError: max_active_tis_per_dag=4: a pipeline's runs share one state, so its tasks run one at a time (1)
    """
    if max_active_tis_per_dag != 1:
        raise ValueError(
            f"max_active_tis_per_dag={max_active_tis_per_dag!r}: a pipeline's runs share one state, "
            "so its tasks run one at a time (1)"
        )
    return 1


def emit_partition_keys_argument(emit_partition_keys: Any, asset: Any) -> bool:
    """``emit_partition_keys`` is a bool and needs the ``asset`` whose events carry the keys.

    >>> emit_partition_keys_argument(True, None)
    Traceback (most recent call last):
    ...
    ValueError: emit_partition_keys=True needs asset=Asset(...): the keys are those of the asset's events
    """
    require_bool(emit_partition_keys=emit_partition_keys)
    if emit_partition_keys and asset is None:
        raise ValueError(
            f"emit_partition_keys={emit_partition_keys!r} needs asset=Asset(...): the keys are those of the "
            "asset's events"
        )
    return emit_partition_keys


def require_bool(**values: Any) -> None:
    """Every value must be ``True`` or ``False``: a string such as ``"no"`` is truthy and would mean the opposite.

    >>> require_bool(early_firing=True, late_firing="no")
    Traceback (most recent call last):
    ...
    ValueError: late_firing='no' must be True or False
    """
    for argument, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{argument}={value!r} must be True or False")
