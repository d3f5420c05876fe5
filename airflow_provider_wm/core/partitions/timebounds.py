"""Time in DIL's terms: ISO times and durations, the watermark bounds of a pipeline's range (:class:`TimeBound`), and
the calendar partitions of a granularity in a time zone."""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_wm.core.times import epoch_ms

__all__ = [
    "ACCEPTED_BOUNDS",
    "DAY_MS",
    "HOUR_MS",
    "Granularity",
    "Partition",
    "TimeBound",
    "format_day",
    "iso_ms",
    "local_dates",
    "never_before",
    "partition_boundaries",
    "zone_info",
]


HOUR_MS = 3_600_000

DAY_MS = 24 * HOUR_MS

ACCEPTED_BOUNDS = (
    "an ISO date or date-time (2020-01-01, 2020-01-01T10:00:00; zone-less values are in the configured "
    "timezone), PnD (n days before now, floored to the day), PnDTmH (m in 0..23, floored to the hour) "
    "or '-' (now, floored to the minute)"
)

_DURATION = re.compile(r"^P(\d+)D(?:T(\d+)H)?$")


def iso_ms(text: str, timezone: str = "UTC") -> int:
    """An ISO date or date-time (zone-less: in ``timezone``) as epoch ms.

    >>> iso_ms("2020-01-01")
    1577836800000
    """
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone_info(timezone, "timezone"))
    return epoch_ms(parsed)


def format_day(ms: int | None) -> str:
    """Epoch ms as a UTC date-time, shortened to the date at midnight (``-`` for none)."""
    if ms is None:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.strftime("%Y-%m-%d") if moment.time() == dt.time() else moment.strftime("%Y-%m-%dT%H:%M")


def zone_info(name: str, argument: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(f"{argument}={name!r} is not an IANA time zone such as 'UTC' or 'Europe/Berlin'") from exc


def local_dates(start_ms: int, end_ms: int, zone: dt.tzinfo) -> tuple[dt.date, dt.date]:
    """The first and last calendar date in ``zone`` of the instants in ``[start_ms, end_ms)`` (``end_ms >
    start_ms``): the partitions of a source partitioned by the local date of its rows' time that hold them.

    >>> local_dates(iso_ms("2020-01-02"), iso_ms("2020-01-03"), ZoneInfo("America/New_York"))
    (datetime.date(2020, 1, 1), datetime.date(2020, 1, 2))
    """
    first = dt.datetime.fromtimestamp(start_ms / 1000, zone).date()
    return first, dt.datetime.fromtimestamp((end_ms - 1) / 1000, zone).date()


def _local(ms: int, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, zone)


def _epoch_ms(wall: dt.datetime, zone: ZoneInfo) -> int:
    """A wall-clock time in ``zone`` as epoch ms (the earlier instant when a DST change repeats it)."""
    return epoch_ms(wall.replace(tzinfo=zone, fold=0))


@dataclass(frozen=True)
class TimeBound:
    """One end of a time watermark, as written by the DAG author; resolved against the run's "now".

    >>> TimeBound.parse("P1DT2H", "to").resolve(iso_ms("2020-01-10T05:30:00"), "UTC") == iso_ms("2020-01-09T03:00")
    True
    >>> TimeBound.parse("yesterday", "from")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: from='yesterday' is not a time watermark bound; accepted forms: an ISO date ...
    """

    text: str
    days: int | None = None
    hours: int | None = None

    @classmethod
    def parse(cls, value: Any, argument: str) -> TimeBound:
        error = f"{argument}={value!r} is not a time watermark bound; accepted forms: {ACCEPTED_BOUNDS}"
        if isinstance(value, (dt.datetime, dt.date)):
            value = value.isoformat()
        if not isinstance(value, str) or not value.strip():
            raise ValueError(error)
        text = value.strip()
        if text == "-":
            return cls(text)
        match = _DURATION.match(text)
        if match:
            days, hours = int(match.group(1)), match.group(2)
            if hours is not None and int(hours) > 23:
                raise ValueError(error)
            return cls(text, days=days, hours=None if hours is None else int(hours))
        try:
            dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(error) from None
        return cls(text)

    @property
    def is_static(self) -> bool:
        return self.text != "-" and self.days is None

    def resolve(self, now_ms: int, timezone: str) -> int:
        zone = zone_info(timezone, "timezone")
        if self.is_static:
            return iso_ms(self.text, timezone)
        now = _local(now_ms, zone).replace(tzinfo=None)
        if self.text == "-":
            return _epoch_ms(now.replace(second=0, microsecond=0), zone)
        assert self.days is not None
        back = now - dt.timedelta(days=self.days, hours=self.hours or 0)
        if self.hours is None:
            return _epoch_ms(back.replace(hour=0, minute=0, second=0, microsecond=0), zone)
        return _epoch_ms(back.replace(minute=0, second=0, microsecond=0), zone)


def never_before(from_: TimeBound, to: TimeBound) -> bool:
    """Whether a range of two relative bounds (``PnD``, ``PnDTmH``, ``-``) is empty at every run: ``from``
    resolves at or after ``to`` whatever the run's "now". (Static bounds are compared directly; a static and a
    relative bound are ordered at some runs and not at others, so they are never refused.)

    Rule: each relative bound is ``floor(now - offset)`` to the minute (``-``), hour (``PnDTmH``) or day
    (``PnD``), with an offset of whole hours. So ``to - from`` repeats every day, and within one hour only the
    minute floor moves, one way: the first and the last minute of every hour of one day are every case.

    >>> never_before(TimeBound.parse("P1D", "from"), TimeBound.parse("P5D", "to"))  # 1 day ago, 5 days ago
    True
    >>> never_before(TimeBound.parse("P5D", "from"), TimeBound.parse("P1D", "to"))
    False
    >>> never_before(TimeBound.parse("P0D", "from"), TimeBound.parse("P0DT1H", "to"))  # empty 00:00-01:59 only
    False
    """
    if from_.is_static or to.is_static:
        return False
    day = iso_ms("2001-01-02")  # the time zone only shifts the wall clock: UTC stands for every zone
    samples = (day + hour * HOUR_MS + minute * 60_000 for hour in range(24) for minute in (0, 59))
    return all(from_.resolve(now, "UTC") >= to.resolve(now, "UTC") for now in samples)


class Granularity(StrEnum):
    NONE = "none"
    HOURLY = "hourly"
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"
    YEARLY = "yearly"

    @classmethod
    def parse(cls, value: Any, argument: str) -> Granularity:
        try:
            return cls(str(value).lower()) if isinstance(value, str) else cls(value)
        except ValueError:
            names = ", ".join(g.value for g in cls)
            raise ValueError(f"{argument}={value!r} is not a partitioning; use one of {names}") from None


class Partition(NamedTuple):
    start: int
    end: int


def _add_months(wall: dt.datetime, months: int) -> dt.datetime:
    total = wall.month - 1 + months
    year, month = wall.year + total // 12, total % 12 + 1
    day = min(wall.day, calendar.monthrange(year, month)[1])
    return wall.replace(year=year, month=month, day=day)


def partition_boundaries(granularity: Granularity, start_ms: int, until_ms: int, zone: ZoneInfo) -> list[int]:
    """Partition starts from ``start_ms`` plus the first boundary at or after ``until_ms``."""
    if granularity is Granularity.NONE:
        return [start_ms, max(until_ms, start_ms)]
    if granularity is Granularity.HOURLY:  # hours are absolute: a DST day has 23 or 25 of them
        count = max(0, -(-(until_ms - start_ms) // HOUR_MS))
        return list(range(start_ms, start_ms + (count + 1) * HOUR_MS, HOUR_MS))
    wall = _local(start_ms, zone).replace(tzinfo=None)
    result = [start_ms]
    k = 0
    while result[-1] < until_ms:
        k += 1
        if granularity is Granularity.DAILY:
            nxt = wall + dt.timedelta(days=k)
        elif granularity is Granularity.WEEKLY:
            nxt = wall + dt.timedelta(days=7 * k)
        elif granularity is Granularity.MONTHLY:
            nxt = _add_months(wall, k)
        else:
            nxt = _add_months(wall, 12 * k)
        result.append(_epoch_ms(nxt, zone))
    return result
