"""Times inside the project: the range the jobs accept, and the one form every message shows a time in
(:func:`format_ms`).

Every time a job reads from data (a mark's ``time_ms`` and ``reported_at_ms``, an event's time, a partition
row's time) must be a UTC instant in ``[MIN_TIME_MS, MAX_TIME_MS]``: from the epoch up to the last
millisecond of the year 9999, the last instant Python's ``datetime`` (and so every report, log line and
Airflow date) can show. A time outside it is not data but damage: ``10**15`` ms is the year 33658 and
``2**63 - 1`` overflows any window arithmetic. Such a row is quarantined with its job's invalid-time reason,
like a null time, instead of being published as a watermark that no later run can format or pass.

>>> is_valid_time_ms(0), is_valid_time_ms(1_767_225_600_000), is_valid_time_ms(MAX_TIME_MS)
(True, True, True)
>>> is_valid_time_ms(None), is_valid_time_ms(-1), is_valid_time_ms(10**15), is_valid_time_ms(2**63 - 1)
(False, False, False, False)
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Iterable

__all__ = ["MAX_TIME_MS", "MIN_TIME_MS", "disjoint_union", "epoch_ms", "format_ms", "is_valid_time_ms"]

MIN_TIME_MS = 0
"""1970-01-01T00:00:00.000Z."""
MAX_TIME_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z."""


def is_valid_time_ms(value: object) -> bool:
    """Whether ``value`` is an int time the jobs accept: ``MIN_TIME_MS <= value <= MAX_TIME_MS``.

    >>> is_valid_time_ms(True), is_valid_time_ms(1.5), is_valid_time_ms("0")
    (False, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool) and MIN_TIME_MS <= value <= MAX_TIME_MS


def epoch_ms(moment: dt.datetime) -> int:
    """An aware datetime as epoch milliseconds by integer arithmetic (``timestamp() * 1000`` goes through a float
    and can be 1 ms short).

    >>> epoch_ms(dt.datetime(1970, 1, 1, 0, 0, 16, 281_000, tzinfo=dt.UTC)), int(16.281 * 1000)
    (16281, 16280)
    """
    return calendar.timegm(moment.utctimetuple()) * 1000 + moment.microsecond // 1000


def format_ms(value: int | None) -> str:
    """Epoch milliseconds as an ISO-8601 UTC date-time to the millisecond (``-`` for none): the one form in
    which log lines and error messages show a time, never raw epoch milliseconds. Exact to the millisecond
    (integer arithmetic); a value no date-time can hold is shown as itself rather than failing the message.

    >>> format_ms(1767225601005), format_ms(0), format_ms(None)
    ('2026-01-01T00:00:01.005Z', '1970-01-01T00:00:00.000Z', '-')
    >>> format_ms(253_402_300_799_999), format_ms(10**18)
    ('9999-12-31T23:59:59.999Z', '1000000000000000000 ms (not a date-time)')
    """
    if value is None:
        return "-"
    try:
        moment = _EPOCH + dt.timedelta(milliseconds=int(value))
    except (OverflowError, ValueError, TypeError):
        return f"{value} ms (not a date-time)"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def disjoint_union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open ranges ``[start, end)`` as disjoint ranges, ascending; ranges that overlap or touch
    merge.

    >>> disjoint_union([(20, 30), (0, 10), (10, 15), (25, 40)])
    [(0, 15), (20, 40)]
    """
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
