"""Partition keys of Airflow asset events (AIP-76): which keys a run emits, and in which form.

A key is the start of the partition (or hour) it names, as a wall-clock time without zone in Airflow's
temporal partition mappers' default ``input_format`` ``%Y-%m-%dT%H:%M:%S``: ``StartOfDayMapper``,
``StartOfHourMapper``, ``StartOfMonthMapper`` (with ``timezone=`` the pipeline's zone) and
``RollupMapper(upstream_mapper=StartOfDayMapper(), window=DayWindow())`` read it as it is.

- Incremental partitions: one key per work unit a run wrote, :func:`partition_event_key`: the partition's
  start in the pipeline's time zone, and with units ``<unit>|<start>`` (the order of Airflow's composite
  ``region|timestamp`` keys, split by ``ProductMapper(IdentityMapper(), StartOfDayMapper())``).
- Windowed aggregates: one key per UTC hour in which a window that fired in the run starts,
  :func:`hour_keys`: a run that fires 240 one-minute windows of four hours emits four keys.

>>> from airflow_provider_wm.core.partitions import iso_ms
>>> partition_event_key(iso_ms("2026-01-05"), "eu")
'eu|2026-01-05T00:00:00'
>>> partition_event_key(iso_ms("2026-01-05", "Europe/Berlin"), "", "Europe/Berlin")
'2026-01-05T00:00:00'
>>> hour_keys([iso_ms("2026-01-05T13:45"), iso_ms("2026-01-05T13:00"), iso_ms("2026-01-05T15:10")])
['2026-01-05T13:00:00', '2026-01-05T15:00:00']

Pure Python: no airflow, no pyspark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from zoneinfo import ZoneInfo

from airflow_provider_wm.core.partitions.timebounds import HOUR_MS
from airflow_provider_wm.core.times import is_valid_time_ms

__all__ = ["KEY_FORMAT", "UNIT_SEPARATOR", "hour_keys", "partition_event_key"]

KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"
"""The time part of every key: the default ``input_format`` of Airflow's temporal partition mappers."""
UNIT_SEPARATOR = "|"
"""Between the unit and the time of a key (the default delimiter of Airflow's ``ProductMapper``)."""


def partition_event_key(partition_start_ms: int, unit: str, timezone: str = "UTC") -> str:
    """The key of a work unit: its partition's start as wall-clock time in ``timezone`` (the zone the
    partitions are stepped in), prefixed by ``<unit>|`` when the pipeline has units (``unit`` not empty).

    >>> partition_event_key(1767571200000, "")
    '2026-01-05T00:00:00'
    >>> partition_event_key(1767571200000, "us", "America/New_York")
    'us|2026-01-04T19:00:00'
    """
    if UNIT_SEPARATOR in unit:
        raise ValueError(f"unit {unit!r} contains {UNIT_SEPARATOR!r}, which separates a key's unit from its time")
    start = dt.datetime.fromtimestamp(partition_start_ms / 1000, ZoneInfo(timezone)).strftime(KEY_FORMAT)
    return f"{unit}{UNIT_SEPARATOR}{start}" if unit else start


def hour_keys(window_starts_ms: Iterable[int]) -> list[str]:
    """The sorted, distinct UTC hours (as keys) that hold the given window starts.

    >>> hour_keys([0, 59 * 60_000, HOUR_MS, -(2**63)])  # a global window starts at no hour
    ['1970-01-01T00:00:00', '1970-01-01T01:00:00']
    """
    hours = sorted({start - start % HOUR_MS for start in window_starts_ms if is_valid_time_ms(start)})
    return [dt.datetime.fromtimestamp(hour / 1000, dt.UTC).strftime(KEY_FORMAT) for hour in hours]
