"""Checks of DAG arguments shared by the operators and sensors: they fail at parse time, naming the argument."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, MutableMapping
from typing import Any

from airflow.sdk import Asset

from airflow_provider_wm.timeutil import is_templated

__all__ = [
    "EVENTS_FORMATS",
    "add_asset_outlet",
    "asset_argument",
    "emit_partition_keys_argument",
    "events_format_argument",
    "kept_apart",
    "location_argument",
    "one_task_at_a_time",
    "require_bool",
    "require_paths",
    "spark_conf_argument",
    "storage_options_argument",
    "wait_seconds_argument",
]


def require_paths(**paths: Any) -> None:
    """Every value must be a location: an absolute path or a URL (:func:`location_argument`).

    >>> require_paths(store_path="/data/wm", source=" ")
    Traceback (most recent call last):
    ...
    ValueError: source=' ' must be a non-empty path or URL
    >>> require_paths(output="out/panes")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: output='out/panes' must be an absolute path or a URL such as s3://bucket/wm: a relative path ...
    """
    for argument, value in paths.items():
        location_argument(value, argument)


def add_asset_outlet(asset: Any, kwargs: MutableMapping[str, Any]) -> None:
    """Declare ``asset`` (if any) as an outlet of the task, beside the outlets the DAG author gave (once: a mapped
    task's ``partial`` declared it already when its instances are built)."""
    outlets = list(kwargs.get("outlets") or [])
    if asset is not None and asset not in outlets:
        kwargs["outlets"] = [*outlets, asset]


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


#: what the Spark job reads ``events`` as: ``spark.read.format(f).load(path)``, with no reader options, so only
#: formats that carry (or infer) column names: not CSV (no header option) nor text. ``avro`` and ``delta`` need
#: their package where the job runs (``spark-avro``, ``delta-spark``)
EVENTS_FORMATS = ("parquet", "orc", "json", "avro", "delta")


def count_argument(value: Any, argument: str) -> int:
    """A count: an ``int`` ``>= 0`` (not a bool, whose ``True`` would be 1).

    >>> count_argument(0, "driver_output_rows")
    0
    >>> count_argument("1000", "driver_output_rows")
    Traceback (most recent call last):
    ...
    ValueError: driver_output_rows='1000' must be a whole number >= 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{argument}={value!r} must be a whole number >= 0")
    return value


def events_format_argument(value: object, argument: str = "events_format") -> str:
    """The events' format in lower case, one of :data:`EVENTS_FORMATS`.

    >>> events_format_argument("Parquet")
    'parquet'
    >>> events_format_argument("csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: events_format='csv' must be one of 'parquet', 'orc', 'json', 'avro', 'delta' (the Spark job reads ...
    """
    if not isinstance(value, str) or value.lower() not in EVENTS_FORMATS:
        formats = ", ".join(map(repr, EVENTS_FORMATS))
        raise ValueError(f"{argument}={value!r} must be one of {formats} (the Spark job reads them without options)")
    return value.lower()


def kept_apart(writes: Mapping[str, str], reads: Mapping[str, str]) -> None:
    """A path an operator writes must not be, hold, or lie inside another path it writes or reads (compared as
    :func:`_comparable`): the writes would overwrite each other, or the next run would read its own output.

    >>> kept_apart({"output": "/data/panes", "late_output": "/data/panes_late"}, {"events": "/data/orders"})
    >>> kept_apart({"output": "s3a://lake/panes", "late_output": "s3://lake/panes/late"}, {})
    Traceback (most recent call last):
    ...
    ValueError: late_output='s3://lake/panes/late' lies inside output='s3a://lake/panes': give each its own
    """
    named = [*writes.items(), *reads.items()]
    for index, (argument, path) in enumerate(named[: len(writes)]):
        for other, other_path in named[index + 1 :]:
            if _comparable(path) == _comparable(other_path):
                raise ValueError(f"{argument}={path!r} is the same path as {other}={other_path!r}: give each its own")
            for (inner, inner_path), (outer, outer_path) in (
                ((argument, path), (other, other_path)),
                ((other, other_path), (argument, path)),
            ):
                if _comparable(inner_path).startswith(f"{_comparable(outer_path)}/"):
                    raise ValueError(f"{inner}={inner_path!r} lies inside {outer}={outer_path!r}: give each its own")


def _comparable(path: str) -> str:
    """A path as :func:`kept_apart` compares it: without a trailing slash, ``file://`` and ``file:`` as a local
    path, and Hadoop's ``s3a://``/``s3n://`` as ``s3://`` (one bucket under three names)."""
    text = path.rstrip("/")
    for alias in ("s3a://", "s3n://"):
        if text.startswith(alias):
            return "s3://" + text[len(alias) :]
    if text.startswith("file://"):
        return text[len("file://") :]
    if text.startswith("file:"):
        return text[len("file:") :]
    return text


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(.*)$", re.DOTALL)


def location_argument(value: Any, argument: str = "store_path") -> str:
    """A dataset or the watermark store: an absolute local path or a URL ``scheme://...``; a template is checked
    when rendered.

    A relative path would resolve against each process's working directory (the scheduler's, a worker's, the
    Spark driver's or Spark Connect server's), so the runs would not share one store, and a job's outputs would
    land in two places (what the task writes and what Spark writes). A ``scheme:`` without ``//`` (but
    ``file:/path``) is a typo of a URL: fsspec would take ``s3:/bucket`` as a local folder named ``s3:``. Of a
    chained URL (``simplecache::s3://bucket/wm``) the last link is checked.

    >>> location_argument("s3://lake/wm"), location_argument("/data/wm")
    ('s3://lake/wm', '/data/wm')
    >>> location_argument("data/wm")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: store_path='data/wm' must be an absolute path or a URL such as s3://bucket/wm: a relative path ...
    >>> location_argument("s3:/lake/wm")
    Traceback (most recent call last):
    ...
    ValueError: store_path='s3:/lake/wm' is not a URL: write s3://...
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{argument}={value!r} must be a non-empty path or URL")
    if is_templated(value):
        return value
    target = value.rpartition("::")[2]  # the place itself: what comes before are caching layers
    match = _SCHEME.match(target)
    if match is not None:
        absolute_file = match.group(1).lower() == "file" and match.group(2).startswith("/")  # file:/data/wm
        if not match.group(2).startswith("//") and not absolute_file:
            raise ValueError(f"{argument}={value!r} is not a URL: write {match.group(1)}://...")
    elif not target.startswith("/"):
        raise ValueError(
            f"{argument}={value!r} must be an absolute path or a URL such as s3://bucket/wm: a relative path "
            "resolves against each process's working directory"
        )
    return value


def storage_options_argument(value: Any, argument: str = "storage_options") -> dict[str, Any]:
    """fsspec options: a mapping with string keys, or None (none).

    >>> storage_options_argument(None), storage_options_argument({"anon": True})
    ({}, {'anon': True})
    >>> storage_options_argument("anon=true")
    Traceback (most recent call last):
    ...
    ValueError: storage_options='anon=true' must be a mapping of fsspec options such as {'anon': True}
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"{argument}={value!r} must be a mapping of fsspec options such as {{'anon': True}}")
    return dict(value)


def spark_conf_argument(value: Any) -> dict[str, Any]:
    """Spark options: a mapping of option names to strings, numbers or booleans (each passed as its text).

    >>> spark_conf_argument({"spark.sql.shuffle.partitions": 8})
    {'spark.sql.shuffle.partitions': 8}
    >>> spark_conf_argument("spark.executor.memory=2g")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: spark_conf='spark.executor.memory=2g' must be a mapping of Spark options to strings or numbers, ...
    """
    if value is None:
        return {}
    example = "such as {'spark.executor.memory': '2g'}"
    if not isinstance(value, Mapping):
        raise ValueError(f"spark_conf={value!r} must be a mapping of Spark options to strings or numbers, {example}")
    for key, option in value.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"spark_conf: option name {key!r} must be a non-empty string, {example}")
        if not isinstance(option, (str, int, float)) or (isinstance(option, float) and not math.isfinite(option)):
            raise ValueError(f"spark_conf[{key!r}]={option!r} must be a string or a number, {example}")
    return dict(value)


def asset_argument(value: Any) -> Asset | None:
    """The asset an operator produces: an ``airflow.sdk.Asset`` (its events and asset state store need one), or None.

    >>> asset_argument("orders")
    Traceback (most recent call last):
    ...
    ValueError: asset='orders' must be an airflow.sdk.Asset, such as Asset("orders", uri="s3://lake/orders"), or None
    """
    if value is not None and not isinstance(value, Asset):
        raise ValueError(
            f'asset={value!r} must be an airflow.sdk.Asset, such as Asset("orders", uri="s3://lake/orders"), or None'
        )
    return value


def wait_seconds_argument(value: Any, argument: str) -> None:
    """A sensor's ``timeout`` or ``poke_interval``: a non-negative, finite number of seconds or a timedelta.

    >>> wait_seconds_argument(-5, "timeout")
    Traceback (most recent call last):
    ...
    ValueError: timeout=-5 must be a finite, non-negative number of seconds or a timedelta
    """
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{argument}={value!r} must be a finite, non-negative number of seconds or a timedelta")
