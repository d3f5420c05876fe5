"""Time at the Airflow edges: pendulum values and user input in, UTC epoch milliseconds out."""

from __future__ import annotations

import datetime as dt
import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pendulum

from airflow_provider_wm.core.times import epoch_ms, format_ms

__all__ = ["MAX_DURATION_MS", "duration_ms", "format_ms", "is_templated", "to_epoch_ms"]


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
        return epoch_ms(value)
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
        return epoch_ms(parsed)
    raise ValueError(f"{argument}={value!r} is not a time (ISO-8601 string, datetime or epoch ms)")


MAX_DURATION_MS = dt.timedelta.max // dt.timedelta(milliseconds=1)
"""The longest duration: ``timedelta.max`` (999999999 days), so every duration is also a ``timedelta``."""
_MAX_DAYS = dt.timedelta.max.days

_NO_FIXED_LENGTH = (
    "has a years or months component: months and years have no fixed length; give minutes as PT30M or days as P30D"
)


def _half_up_ms(seconds: float) -> int:
    """Seconds as whole milliseconds, half up like the other forms (its decimal text, not the binary float:
    ``0.0025`` is 3 ms, as ``timedelta(microseconds=2500)`` and ``PT0.0025S`` are)."""
    return int((Decimal(repr(seconds)) * 1000).to_integral_value(ROUND_HALF_UP))


def duration_ms(value: Any, argument: str, *, positive: bool = False) -> int:
    """A non-negative duration (``positive``: above zero): ``timedelta``, seconds (int/float) or ISO-8601
    (``PT10M``) -> whole milliseconds by integer arithmetic (a float of seconds is rounded to the nearest ms).
    Months and years (``P1M``) have no fixed length and are refused, as is a duration shorter than 1 ms.

    >>> duration_ms(16.281, "grace_period"), duration_ms("PT1.001S", "d"), duration_ms(dt.timedelta(minutes=5), "d")
    (16281, 1001, 300000)
    >>> duration_ms("P30M", "window size")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: window size='P30M' has a years or months component: months and years have no fixed length; ...
    """
    if isinstance(value, dt.timedelta):
        if getattr(value, "years", 0) or getattr(value, "months", 0):  # a pendulum Duration
            raise ValueError(f"{argument}={value!r} {_NO_FIXED_LENGTH}")
        if value < dt.timedelta(0):
            raise ValueError(f"{argument}=-{-value} (a timedelta) must not be negative")
        microseconds = _microseconds(value)
        nonzero, ms = microseconds > 0, (microseconds + 500) // 1000
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{argument}={value!r} is not a finite number of seconds")
        if value < 0:
            raise ValueError(f"{argument}={value!r} must not be negative")
        if value > MAX_DURATION_MS // 1000:
            raise ValueError(f"{argument}={value!r} is too large: at most {_MAX_DAYS} days")
        nonzero, ms = value > 0, (value * 1000 if isinstance(value, int) else _half_up_ms(value))
    elif isinstance(value, str):
        microseconds = _iso_microseconds(value, argument)
        nonzero, ms = microseconds > 0, (microseconds + 500) // 1000
    else:
        raise ValueError(f"{argument}={value!r} is not a duration (timedelta, seconds or ISO-8601)")
    if nonzero and not ms:
        raise ValueError(f"{argument}={value!r} is shorter than a millisecond, the unit of every duration")
    if positive and not ms:
        raise ValueError(f"{argument}={value!r} must be positive")
    return min(ms, MAX_DURATION_MS)


def _iso_microseconds(value: str, argument: str) -> int:
    """An ISO-8601 duration in exact microseconds; a negative one (``-PT20M``, ``PT-5M``) is named as such."""
    text = value.strip()
    negative = text.startswith("-") or (text[:1] in ("P", "p") and "-" in text)
    try:
        parsed = pendulum.parse(text.replace("-", "") if negative else text)
    except OverflowError as exc:
        raise ValueError(f"{argument}={value!r} is too large: at most {_MAX_DAYS} days") from exc
    except Exception as exc:
        raise ValueError(f"{argument}={value!r} is not an ISO-8601 duration such as PT10M") from exc
    if not isinstance(parsed, pendulum.Duration):
        raise ValueError(f"{argument}={value!r} is not an ISO-8601 duration such as PT10M")
    if parsed.years or parsed.months:
        raise ValueError(f"{argument}={value!r} {_NO_FIXED_LENGTH}")
    microseconds = _microseconds(parsed)
    if negative and microseconds:
        raise ValueError(f"{argument}={value!r} must not be negative")
    return microseconds


def _microseconds(value: dt.timedelta) -> int:
    """Exact whole microseconds (``value // timedelta(microseconds=1)`` fails for a pendulum ``Duration``)."""
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
