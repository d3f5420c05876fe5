"""Why a source row cannot be extracted (:class:`QuarantineReason`): the rule the Spark job applies as columns."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from enum import StrEnum

from airflow_provider_wm.core.times import is_valid_time_ms

__all__ = ["QuarantineReason", "quarantine_reason"]


class QuarantineReason(StrEnum):
    """Why a source row is bad data: quarantined (kept with this reason, counted), never extracted."""

    NULL_TIME = "null_time"
    UNPARSEABLE_TIME = "unparseable_time"
    TIME_OUT_OF_RANGE = "time_out_of_range"
    NULL_UNIT = "null_unit"
    UNKNOWN_UNIT = "unknown_unit"


def quarantine_reason(
    raw_time: object,
    time_ms: int | None,
    *,
    ranges: Sequence[tuple[int, int]] = (),
    unit: str | None = None,
    units: Collection[str] | None = None,
) -> QuarantineReason | None:
    """Why a source row read by a run is quarantined; ``None``: it is good data.

    Rule, first match wins: ``null_time`` (no time), ``unparseable_time`` (a time that does not parse:
    ``time_ms`` is None), ``time_out_of_range`` (parses, but not ``core.times.is_valid_time_ms``: before
    1970 or after 9999). Then, when the pipeline has units (``units`` is every configured unit) and the time
    lies in one of the run's ``ranges`` (half-open), ``null_unit`` or ``unknown_unit``. A row of a known unit
    whose work unit is not in the plan (up to date) is not bad, nor is a row outside the run's ranges.

    >>> from airflow_provider_wm.core.partitions import iso_ms
    >>> day = (iso_ms("2026-01-05"), iso_ms("2026-01-06"))
    >>> [str(quarantine_reason(raw, ms)) for raw, ms in [(None, None), ("last tuesday", None), (10**15, 10**15)]]
    ['null_time', 'unparseable_time', 'time_out_of_range']
    >>> noon = iso_ms("2026-01-05T12:00")
    >>> [str(quarantine_reason(noon, noon, ranges=[day], unit=u, units=["eu", "us"])) for u in (None, "asia", "us")]
    ['null_unit', 'unknown_unit', 'None']
    >>> quarantine_reason(noon, noon, ranges=[], unit="asia", units=["eu"]) is None  # not this run's range
    True
    """
    if raw_time is None:
        return QuarantineReason.NULL_TIME
    if time_ms is None:
        return QuarantineReason.UNPARSEABLE_TIME
    if not is_valid_time_ms(time_ms):
        return QuarantineReason.TIME_OUT_OF_RANGE
    if units is None or not any(start <= time_ms < end for start, end in ranges):
        return None
    if unit is None:
        return QuarantineReason.NULL_UNIT
    if unit not in units:
        return QuarantineReason.UNKNOWN_UNIT
    return None
