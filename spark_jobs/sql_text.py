"""SQL text for the jobs' expressions: identifiers, literals, and the time rules every job shares.

A job builds its expressions as SQL text handed to ``selectExpr``, ``where`` and ``F.expr`` rather than as
``Column`` objects: in a classic session each ``Column`` function is a Py4J round trip (about 0.3 ms here; a run
of the windowed job built a few thousand of them, more time than its Spark jobs took), while a text is one call
whatever its size, parsed in the JVM. Over Spark Connect both are built locally and cost the same.

Every name that comes from a user (a key, a column, an input) goes through :func:`ident`; every string value
through :func:`string`; numbers are written as Python writes them (a literal above 2**31 is a ``BIGINT``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pyspark.sql.types import DateType, IntegralType, StringType, TimestampNTZType, TimestampType

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS

__all__ = ["any_of", "case", "ident", "invalid_time", "number", "parse_time", "string", "time_ms", "timestamp"]


def ident(name: str) -> str:
    """A quoted identifier: ``ident("a`b")`` is ``"`a``b`"``."""
    return "`" + name.replace("`", "``") + "`"


def string(value: str) -> str:
    """A string literal (Spark's parser unescapes backslashes): ``string("it's")`` is ``"'it\\\\'s'"``."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def number(value: int) -> str:
    """An integer literal, parenthesised when negative (``x - (-5)``, not ``x - -5``)."""
    return f"({value})" if value < 0 else str(value)


def timestamp(ms: int) -> str:
    """The UTC instant ``ms`` (epoch milliseconds) as a timestamp literal, which Parquet can push down:
    ``timestamp(0)`` is ``"TIMESTAMP'1970-01-01 00:00:00.000000+00:00'"``."""
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    return f"TIMESTAMP'{instant:%Y-%m-%d %H:%M:%S.%f}+00:00'"


def case(*branches: tuple[str, str], otherwise: str | None = None) -> str:
    """``CASE WHEN c1 THEN v1 ... [ELSE otherwise] END``; with no branch, ``otherwise`` (or ``NULL``)."""
    if not branches:
        return otherwise or "NULL"
    whens = " ".join(f"WHEN {condition} THEN {value}" for condition, value in branches)
    return f"CASE {whens}{'' if otherwise is None else f' ELSE {otherwise}'} END"


def any_of(conditions: Sequence[str]) -> str:
    """The conditions joined by ``OR`` (``false`` for none)."""
    return " OR ".join(f"({c})" for c in conditions) if conditions else "false"


def invalid_time(expression: str) -> str:
    """``not core.times.is_valid_time_ms``: a null time, or one outside ``[MIN_TIME_MS, MAX_TIME_MS]``."""
    return f"({expression} IS NULL OR {expression} < {MIN_TIME_MS} OR {expression} > {MAX_TIME_MS})"


def parse_time(expression: str, data_type: Any, argument: str, date_zone: str = "UTC") -> str:
    """A time (``expression`` of ``data_type``) as a timestamp, null when missing or unparseable: a timestamp as it
    is (a timestamp without a zone is UTC: the jobs pin the session's time zone), a date as the midnight that starts
    it in ``date_zone``, a number as epoch milliseconds, an ISO-8601 string parsed with ``try_to_timestamp``. Any
    other type fails naming ``argument``, e.g. ``arrival_column='ingested_at' of /data/orders``. Example: the date
    2026-01-02 in ``America/New_York`` is 2026-01-02T05:00:00Z."""
    if isinstance(data_type, DateType) and date_zone != "UTC":
        return f"to_utc_timestamp(CAST({expression} AS TIMESTAMP), {string(date_zone)})"
    if isinstance(data_type, (TimestampType, TimestampNTZType, DateType)):
        return f"CAST({expression} AS TIMESTAMP)"
    if isinstance(data_type, IntegralType):
        return f"timestamp_millis({expression})"
    if isinstance(data_type, StringType):
        return f"try_to_timestamp({expression})"
    raise ValueError(
        f"{argument} has type {data_type.simpleString()}; use a timestamp, date, epoch-millisecond "
        "number or ISO-8601 string"
    )


def time_ms(expression: str, data_type: Any, argument: str, date_zone: str = "UTC") -> str:
    """A time as UTC epoch milliseconds, null when missing or unparseable (:func:`parse_time`; a number is
    taken as it is)."""
    if isinstance(data_type, IntegralType):
        return f"CAST({expression} AS BIGINT)"
    return f"unix_millis({parse_time(expression, data_type, argument, date_zone)})"
