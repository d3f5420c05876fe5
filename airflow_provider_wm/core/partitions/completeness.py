"""Whether a range of partitions is done for every unit: what a sensor and the next pipeline wait for."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from airflow_provider_wm.core.partitions.spec import DEFAULT_UNIT, PartitionSpec
from airflow_provider_wm.core.partitions.state import PartitionState, UnitStatus
from airflow_provider_wm.core.partitions.timebounds import Partition, format_day
from airflow_provider_wm.core.times import format_ms

FIRST_PENDING = 5
"""How many pending work units a message lists."""

__all__ = ["FIRST_PENDING", "Completeness", "check_completeness", "complete_until", "work_units_not_done"]


def work_units_not_done(
    spec: PartitionSpec,
    state: PartitionState,
    units: Sequence[str],
    start_ms: int,
    end_ms: int,
) -> list[tuple[int, int, str]]:
    """Work units overlapping ``[start_ms, end_ms)`` that have not succeeded with a high watermark at or past
    their partition's end: what a completeness sensor waits for (empty = complete).

    Partitions are the spec's whole partitions up to ``end_ms`` (a month is complete only when all of it is).
    """
    if start_ms >= end_ms:
        raise ValueError(f"start={format_day(start_ms)} must be before end={format_day(end_ms)}")
    pending: list[tuple[int, int, str]] = []
    for part in spec.partitions(end_ms, open_end_ms=end_ms):
        if part.end <= start_ms or part.start >= end_ms:
            continue
        for unit in list(units) or [DEFAULT_UNIT]:
            if not _done(state, unit, part):
                pending.append((part.start, part.end, unit))
    return pending


class Completeness(NamedTuple):
    """What one read of a pipeline's state document says about ``[start_ms, end_ms)``.

    ``work_units`` is how many work units (partition x unit) overlap the range and were checked; ``pending``
    lists those not done as ``(partition_start, partition_end, unit)``. Without a state document nothing is
    known: ``work_units`` is None and ``pending`` is empty, and the range is not complete.
    """

    work_units: int | None
    pending: list[tuple[int, int, str]]

    @property
    def complete(self) -> bool:
        return self.work_units is not None and not self.pending

    def first_pending(self, count: int = FIRST_PENDING) -> list[tuple[str, str, str]]:
        """The first ``count`` pending work units as ``(start, end, unit)`` in ISO time, for messages.

        >>> Completeness(2, [(0, 86_400_000, "eu"), (0, 86_400_000, "us")]).first_pending(1)
        [('1970-01-01T00:00:00.000Z', '1970-01-02T00:00:00.000Z', 'eu')]
        """
        return [(format_ms(start), format_ms(end), unit) for start, end, unit in self.pending[:count]]


def check_completeness(document: Mapping[str, Any] | None, start_ms: int, end_ms: int) -> Completeness:
    """What a completeness sensor decides from a pipeline's committed state document (``spec``, ``state``,
    ``units``): :func:`work_units_not_done` over ``[start_ms, end_ms)`` and how many work units it checked.

    >>> from airflow_provider_wm.core.partitions import DAY_MS
    >>> spec = PartitionSpec.build({"from": "1970-01-01", "to": "-"}, "daily")
    >>> document = {"spec": spec.to_json(), "state": None, "units": ["eu", "us"]}
    >>> result = check_completeness(document, 0, 2 * DAY_MS)
    >>> result.work_units, len(result.pending), result.complete
    (4, 4, False)
    """
    if document is None:
        return Completeness(None, [])
    spec = PartitionSpec.from_json(document["spec"])
    state = PartitionState.from_json(document.get("state"))
    units = [str(u) for u in document.get("units") or []]
    pending = work_units_not_done(spec, state, units, start_ms, end_ms)
    starts, ends = spec.bounds(end_ms, open_end_ms=end_ms)  # the partitions work_units_not_done checked
    partitions = bisect.bisect_left(starts, end_ms) - bisect.bisect_right(ends, start_ms)
    return Completeness(max(partitions, 0) * max(len(units), 1), pending)


def _done(state: PartitionState, unit: str, part: Partition) -> bool:
    """The work unit succeeded, with a high watermark at or past its partition's end."""
    history = state.history(unit, part.start, part.end)
    return (
        history is not None
        and history.status is UnitStatus.SUCCEEDED
        and history.high_watermark_ms is not None
        and history.high_watermark_ms >= part.end
    )


def complete_until(spec: PartitionSpec, state: PartitionState, units: Sequence[str], now_ms: int) -> int | None:
    """The output watermark of a pipeline: the end of the last partition (up to ``now_ms``) such that it and
    every earlier partition are done for every work unit; ``None`` while the first one is not.

    >>> from airflow_provider_wm.core.partitions import UnitResult, iso_ms
    >>> spec = PartitionSpec.build({"from": "2026-01-01", "to": "-"}, "daily")
    >>> done = [UnitResult(iso_ms(f"2026-01-0{d}"), iso_ms(f"2026-01-0{d + 1}"), "", UnitStatus.SUCCEEDED)
    ...         for d in (1, 2, 4)]
    >>> format_day(complete_until(spec, PartitionState.empty().apply(done), [], iso_ms("2026-01-05")))
    '2026-01-03'
    """
    until = None
    for part in spec.partitions(now_ms):
        if not all(_done(state, unit, part) for unit in list(units) or [DEFAULT_UNIT]):
            break
        until = part.end
    return until
