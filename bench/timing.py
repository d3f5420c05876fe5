"""Timing helpers shared by the benchmarks (each bench script runs with ``bench/`` on ``sys.path``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    """The fastest of ``repeat`` calls of ``fn``, in seconds (the least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best
