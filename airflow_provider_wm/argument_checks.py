"""More parse-time checks of DAG arguments shared by the operators and sensors (the store's path, fsspec and
Spark options, the asset, a sensor's waits). Each error names the argument and the value.

They sit beside :mod:`airflow_provider_wm.arguments` and belong with it: they are kept apart only while several
branches change that module at once.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

from airflow_provider_wm.timeutil import is_templated

__all__ = [
    "asset_argument",
    "spark_conf_argument",
    "storage_options_argument",
    "store_path_argument",
    "wait_seconds_argument",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(.*)$", re.DOTALL)


def store_path_argument(value: Any, argument: str = "store_path") -> str:
    """The watermark store: an absolute local path or a URL ``scheme://...``; a template is checked when rendered.

    A relative path would resolve against each process's working directory (the scheduler's, a worker's, the
    Spark driver's), so the runs would not share one store. A ``scheme:`` without ``//`` (but ``file:/path``) is
    a typo of a URL: fsspec would take ``s3:/bucket`` as a local folder named ``s3:``. Of a chained URL
    (``simplecache::s3://bucket/wm``) the last link is checked.

    >>> store_path_argument("s3://lake/wm"), store_path_argument("/data/wm")
    ('s3://lake/wm', '/data/wm')
    >>> store_path_argument("data/wm")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: store_path='data/wm' must be an absolute path or a URL such as s3://bucket/wm: a relative path ...
    >>> store_path_argument("s3:/lake/wm")
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
    ValueError: timeout=-5 must be a non-negative number of seconds or a timedelta
    """
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{argument}={value!r} must be a non-negative number of seconds or a timedelta")
