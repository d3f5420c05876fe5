"""When the example DAGs run: bounded to the demo's data, so a scheduler never starts a run past it."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

__all__ = ["CATCHUP_ENV", "demo_schedule"]

CATCHUP_ENV = "WM_EXAMPLE_CATCHUP_INTERVALS"


def demo_schedule(start: datetime, step: timedelta, *, last: datetime, end: datetime) -> dict[str, Any]:
    """The DAG arguments ``start_date``, ``end_date``, ``catchup`` and ``max_active_runs`` of an example whose
    data starts at ``start`` and whose last demo interval ends at ``last``.

    By default the runs are the demo's own (``dag.test()`` or REST-triggered): no catch-up, nothing past ``end``.
    With ``WM_EXAMPLE_CATCHUP_INTERVALS=n`` a scheduler catches up on the ``n`` intervals of ``step`` that end
    at ``last``, up to ``n`` at once (the replay of ``make airflow`` and the concurrency test).

    >>> from datetime import UTC
    >>> start, hour = datetime(2026, 1, 5, tzinfo=UTC), timedelta(hours=1)
    >>> hours = demo_schedule(start, hour, last=start + 3 * hour, end=start + 4 * hour)
    >>> f"{hours['start_date']:%H:%M}-{hours['end_date']:%H:%M}", hours["catchup"], hours["max_active_runs"]
    ('00:00-04:00', False, 1)
    """
    catchup = int(os.environ.get(CATCHUP_ENV, "0"))
    if catchup > 0:
        return {
            "start_date": last - (catchup - 1) * step,
            "end_date": last,
            "catchup": True,
            "max_active_runs": catchup,
        }
    return {"start_date": start, "end_date": end, "catchup": False, "max_active_runs": 1}
