"""Time at the Airflow edges: pendulum values and user input in, UTC epoch milliseconds out."""

from __future__ import annotations

import calendar
import datetime as dt
import math
from typing import Any

import pendulum

from airflow_provider_wm.core.times import format_ms

__all__ = ["duration_ms", "format_ms", "is_templated", "to_epoch_ms"]


def is_templated(value: Any) -> bool:
    """A Jinja template that Airflow renders before ``execute`` (so it cannot be checked at parse time)."""
    return isinstance(value, str) and "{{" in value


def to_epoch_ms(value: Any, argument: str) -> int:
    """``2026-01-01T01:00:00Z``, a datetime, or an int of epoch milliseconds -> epoch milliseconds.

    >>> to_epoch_ms("2026-01-01T00:00:01+00:00", "threshold"), to_epoch_ms("1970-01-01T00:00:16.281Z", "t")
    (1767225601000, 16281)
    """
    if isinstance(value, bool):
        raise ValueError(f"{argument}={value!r} is not a time")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError(f"{argument}={value!r} has no time zone; pass an aware datetime")
        return _exact_ms(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            parsed = pendulum.parse(text)
        except Exception as exc:
            raise ValueError(f"{argument}={value!r} is not an ISO-8601 date-time or epoch milliseconds") from exc
        if not isinstance(parsed, dt.datetime):
            raise ValueError(f"{argument}={value!r} is not a date-time")
        return _exact_ms(parsed)
    raise ValueError(f"{argument}={value!r} is not a time (ISO-8601 string, datetime or epoch ms)")


def _exact_ms(value: dt.datetime) -> int:
    """Whole epoch milliseconds by integer arithmetic (``timestamp() * 1000`` through a float can be 1 ms short:
    16.281 s gives 16280)."""
    return calendar.timegm(value.utctimetuple()) * 1000 + value.microsecond // 1000


def duration_ms(value: Any, argument: str) -> int:
    """A non-negative duration: ``timedelta``, seconds (int/float) or ISO-8601 (``PT10M``) -> ms."""
    if isinstance(value, dt.timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{argument}={value!r} is not a finite number of seconds")
        ms = int(value * 1000)
    elif isinstance(value, str):
        try:
            parsed = pendulum.parse(value.strip())
        except Exception as exc:
            raise ValueError(f"{argument}={value!r} is not an ISO-8601 duration such as PT10M") from exc
        if not isinstance(parsed, dt.timedelta):
            raise ValueError(f"{argument}={value!r} is not an ISO-8601 duration such as PT10M")
        ms = int(parsed.total_seconds() * 1000)
    else:
        raise ValueError(f"{argument}={value!r} is not a duration (timedelta, seconds or ISO-8601)")
    if ms < 0:
        raise ValueError(f"{argument}={value!r} must not be negative")
    return ms
