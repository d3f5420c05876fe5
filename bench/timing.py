"""Timing helpers shared by the benchmarks (each bench script runs with ``bench/`` on ``sys.path``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    """The fastest of ``repeat`` calls of ``fn``, in seconds (the least disturbed by other work)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


@dataclass(frozen=True)
class Measured:
    """The fastest of some calls, and the Spark work one call did: jobs, and stages that ran tasks (a stage
    skipped because its shuffle output was reused is not counted)."""

    seconds: float
    jobs: int
    stages: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def measure(spark: Any, repeat: int, fn: Callable[[], Any]) -> Measured:
    """``fn`` called ``repeat`` times in a classic session: the best time, and the jobs and stages of the last
    call, counted through the status tracker by a job group of its own. ``spark.range(10).count()``, for
    example, is one job of two stages (the partial counts, then their sum)."""
    context = spark.sparkContext
    best, group = float("inf"), ""
    for _ in range(repeat):
        group = f"bench-{uuid.uuid4().hex}"
        context.setJobGroup(group, group)
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stage_ids = {s for j in jobs if (info := tracker.getJobInfo(j)) is not None for s in info.stageIds}
    ran = [s for s in stage_ids if (stage := tracker.getStageInfo(s)) is not None and stage.numCompletedTasks > 0]
    return Measured(best, len(jobs), len(ran))


def write_results(name: str, document: dict[str, Any], output: Path | None = None) -> Path:
    """``document`` as ``bench/results/<name>.json`` (or ``output``), the file the docs render."""
    path = output or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, **document}, indent=2) + "\n")
    return path
