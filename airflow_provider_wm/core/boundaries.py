"""Boundaries a watermark passes: the rule behind scheduling on watermark advance.

A *boundary* is an instant on a fixed grid aligned to the UTC epoch: ``k * every_ms`` for every integer ``k``
(each full hour for ``every_ms = 3_600_000``, each UTC midnight for a day). A watermark ``W`` *passes* the
boundary ``b`` when ``W >= b``: every event before ``b`` has arrived, so the interval ``[b - every_ms, b)``
is complete. It is the same comparison as a sensor's (:attr:`~airflow_provider_wm.core.coalescing.WatermarkCheck.passed`
with ``threshold_ms = b``), applied to every boundary in turn.

A watcher keeps a *cursor*, the last boundary it fired. :func:`passed_in_turn` lists the boundaries after
the cursor that the watermark has passed, oldest first, one per interval: a watermark that jumps three hours
passes three boundaries, and a consumer scheduled on them sees three, each once (:func:`boundary_events`,
which can merge a long backlog into one event). A watermark that stays between two boundaries, or goes back
(it never does in the store, see the module of :mod:`~airflow_provider_wm.core.coalescing`), passes none.

>>> HOUR = 3_600_000
>>> passed_in_turn(lambda boundary: 3 * HOUR + 5, cursor_ms=0, every_ms=HOUR)
[(3600000, 10800005), (7200000, 10800005), (10800000, 10800005)]
>>> passed_in_turn(lambda boundary: 3 * HOUR + 5, cursor_ms=3 * HOUR, every_ms=HOUR)
[]
>>> last_boundary(3 * HOUR + 5, HOUR), is_boundary(2 * HOUR, HOUR), is_boundary(2 * HOUR + 1, HOUR)
(10800000, True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_wm.core.windows import Tumbling

__all__ = ["BoundaryEvent", "boundary_events", "is_boundary", "last_boundary", "passed_in_turn"]


def _grid(every_ms: int) -> Tumbling:
    """The grid of boundaries is the edges of tumbling windows of ``every_ms`` (validated there)."""
    try:
        return Tumbling(every_ms)
    except ValueError:
        raise ValueError(f"every_ms={every_ms!r} must be a positive number of milliseconds") from None


def last_boundary(t_ms: int, every_ms: int) -> int:
    """The last boundary at or before ``t_ms``: ``t - t mod every``.

    >>> last_boundary(5_400_000, 3_600_000), last_boundary(3_600_000, 3_600_000), last_boundary(-1, 3_600_000)
    (3600000, 3600000, -3600000)
    """
    return _grid(every_ms).assign(t_ms)[0].start


def is_boundary(t_ms: int, every_ms: int) -> bool:
    """Whether ``t_ms`` lies on the grid of ``every_ms``."""
    return last_boundary(t_ms, every_ms) == t_ms


def passed_in_turn(
    watermark_at: Callable[[int], int | None], *, cursor_ms: int, every_ms: int
) -> list[tuple[int, int]]:
    """The boundaries after ``cursor_ms`` passed in turn, oldest first, each as ``(boundary, watermark)`` with
    the watermark judged *at that boundary*: ``watermark_at(b)`` is what a sensor with threshold ``b`` sees (its
    idle inputs depend on ``b``). The list stops at the first boundary not passed, so none is ever skipped.

    >>> HOUR = 3_600_000
    >>> passed_in_turn(lambda b: 2 * HOUR + 5, cursor_ms=0, every_ms=HOUR)
    [(3600000, 7200005), (7200000, 7200005)]

    An input idle from 3h on lifts the watermark only for the boundaries from 3h, and a boundary the
    watermark misses (4h here) stops the list even if a later one would pass:

    >>> at = {HOUR: HOUR, 2 * HOUR: HOUR, 3 * HOUR: 3 * HOUR, 4 * HOUR: 3 * HOUR, 5 * HOUR: 9 * HOUR}
    >>> passed_in_turn(at.get, cursor_ms=0, every_ms=HOUR)
    [(3600000, 3600000)]
    >>> passed_in_turn(at.get, cursor_ms=2 * HOUR, every_ms=HOUR)
    [(10800000, 10800000)]
    """
    passed = []
    boundary = cursor_ms + every_ms
    while (watermark := watermark_at(boundary)) is not None and watermark >= boundary:
        passed.append((boundary, watermark))
        boundary += every_ms
    return passed


@dataclass(frozen=True)
class BoundaryEvent:
    """One event of a watcher: the interval ``[interval_start_ms, boundary_ms)`` is complete.
    ``intervals`` grid intervals make it up: 1, unless a backlog was merged into it."""

    interval_start_ms: int
    boundary_ms: int
    watermark_ms: int
    intervals: int


def boundary_events(
    passed: list[tuple[int, int]], *, cursor_ms: int, every_ms: int, max_backlog: int | None = None
) -> list[BoundaryEvent]:
    """One event per passed boundary, or, when more than ``max_backlog`` are passed at once, the oldest of them
    merged into the first event, which then covers from the cursor to its boundary: at most ``max_backlog``
    events, and no interval is skipped.

    >>> HOUR = 3_600_000
    >>> passed = [(b, 5 * HOUR) for b in range(HOUR, 6 * HOUR, HOUR)]
    >>> [(e.interval_start_ms // HOUR, e.boundary_ms // HOUR, e.intervals)
    ...  for e in boundary_events(passed, cursor_ms=0, every_ms=HOUR, max_backlog=2)]
    [(0, 4, 4), (4, 5, 1)]
    >>> len(boundary_events(passed, cursor_ms=0, every_ms=HOUR))
    5
    """
    if max_backlog is not None and len(passed) > max_backlog:
        boundary, watermark = passed[len(passed) - max_backlog]
        merged = BoundaryEvent(cursor_ms, boundary, watermark, (boundary - cursor_ms) // every_ms)
        return [
            merged,
            *boundary_events(passed[len(passed) - max_backlog + 1 :], cursor_ms=boundary, every_ms=every_ms),
        ]
    events, start = [], cursor_ms
    for boundary, watermark in passed:
        events.append(BoundaryEvent(start, boundary, watermark, 1))
        start = boundary
    return events
