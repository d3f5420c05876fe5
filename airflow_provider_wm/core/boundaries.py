"""Boundaries a watermark passes: the rule behind scheduling on watermark advance.

A *boundary* is an instant on a fixed grid aligned to the UTC epoch: ``k * every_ms`` for every integer ``k``
(each full hour for ``every_ms = 3_600_000``, each UTC midnight for a day). A watermark ``W`` *passes* the
boundary ``b`` when ``W >= b``: every event before ``b`` has arrived, so the interval ``[b - every_ms, b)``
is complete. It is the same comparison as a sensor's (:attr:`~airflow_provider_wm.core.coalescing.WatermarkCheck.passed`
with ``threshold_ms = b``), applied to every boundary in turn.

A watcher keeps a *cursor*, the last boundary it fired. :func:`boundaries_passed` lists the boundaries after
the cursor that the watermark has passed, oldest first, one per interval: a watermark that jumps three hours
passes three boundaries, and a consumer scheduled on them sees three, each once. A watermark that stays
between two boundaries, or goes back (it never does in the store, see the module of
:mod:`~airflow_provider_wm.core.coalescing`), passes none.

>>> HOUR = 3_600_000
>>> boundaries_passed(cursor_ms=0, watermark_ms=3 * HOUR + 5, every_ms=HOUR)
[3600000, 7200000, 10800000]
>>> boundaries_passed(cursor_ms=3 * HOUR, watermark_ms=3 * HOUR + 5, every_ms=HOUR)
[]
>>> last_boundary(3 * HOUR + 5, HOUR), is_boundary(2 * HOUR, HOUR), is_boundary(2 * HOUR + 1, HOUR)
(10800000, True, False)
"""

from __future__ import annotations

from airflow_provider_wm.core.windows import Tumbling

__all__ = ["boundaries_passed", "is_boundary", "last_boundary"]


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


def boundaries_passed(*, cursor_ms: int, watermark_ms: int | None, every_ms: int) -> list[int]:
    """The boundaries in ``(cursor_ms, watermark_ms]``, oldest first: those the watermark has passed since the
    boundary ``cursor_ms`` fired. ``watermark_ms=None`` (no watermark yet) passes none. ``cursor_ms`` must be a
    boundary.

    >>> boundaries_passed(cursor_ms=86_400_000, watermark_ms=3 * 86_400_000, every_ms=86_400_000)
    [172800000, 259200000]
    >>> boundaries_passed(cursor_ms=0, watermark_ms=None, every_ms=60_000)
    []
    >>> boundaries_passed(cursor_ms=30_000, watermark_ms=120_000, every_ms=60_000)
    Traceback (most recent call last):
    ...
    ValueError: cursor_ms=30000 is not a boundary of every_ms=60000 (the last one before it is 0)
    """
    if not is_boundary(cursor_ms, every_ms):
        raise ValueError(
            f"cursor_ms={cursor_ms!r} is not a boundary of every_ms={every_ms!r} "
            f"(the last one before it is {last_boundary(cursor_ms, every_ms)})"
        )
    if watermark_ms is None or watermark_ms < cursor_ms + every_ms:
        return []
    return list(range(cursor_ms + every_ms, last_boundary(watermark_ms, every_ms) + 1, every_ms))
