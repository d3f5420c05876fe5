"""Timing helpers shared by the benchmarks (each bench script runs with ``bench/`` on ``sys.path``)."""

from __future__ import annotations

import functools
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
class Step:
    """One Spark job of a measured call: its id, wall time (submission to completion, from the status store),
    the stages of it that ran tasks, and Spark's name for it (``<action> at <call site>``: a Python file and
    line for actions such as ``collect``, ``NativeMethodAccessorImpl.java:0`` for a DataFrame write)."""

    job: int
    seconds: float
    stages: int
    name: str


@dataclass(frozen=True)
class Measured:
    """The fastest of some calls, and the Spark work one call did: jobs, and stages that ran tasks (a stage
    skipped because its shuffle output was reused is not counted); with ``steps``, that call's jobs."""

    seconds: float
    jobs: int
    stages: int
    steps: tuple[Step, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = asdict(self)
        if not self.steps:
            del document["steps"]
        return document

    def summary(self, top: int = 5) -> str:
        """The ``top`` longest jobs of the last call, one per line (empty without steps)."""
        ranked = sorted(self.steps, key=lambda s: s.seconds, reverse=True)[:top]
        return "\n".join(f"    job {s.job:>4} {s.seconds:>6.2f}s {s.stages:>2} stage(s)  {s.name}" for s in ranked)


def measure(spark: Any, repeat: int, fn: Callable[[], Any], steps: bool = False) -> Measured:
    """``fn`` called ``repeat`` times in a classic session: the best time, and the jobs and stages of the last
    call, counted through the status tracker by a job group of its own. ``spark.range(10).count()``, for
    example, is one job of two stages (the partial counts, then their sum). ``steps``: also each job of the
    last call (:class:`Step`), from the driver's status store."""
    context = spark.sparkContext
    best, group = float("inf"), ""
    for _ in range(repeat):
        group = f"bench-{uuid.uuid4().hex}"
        context.setJobGroup(group, group)
        with call_sites(spark) if steps else _nothing():
            started = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - started)
    context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stage_ids = {s for j in jobs if (info := tracker.getJobInfo(j)) is not None for s in info.stageIds}
    ran = {s for s in stage_ids if (stage := tracker.getStageInfo(s)) is not None and stage.numCompletedTasks > 0}
    return Measured(best, len(jobs), len(ran), job_steps(spark, jobs, ran) if steps else ())


def compare(
    spark: Any,
    repeat: int,
    job: Callable[[], Any],
    floor: Callable[[], Any],
    steps: bool = True,
    warmup: int = 0,
) -> tuple[Measured, Measured]:
    """``job`` and its ``floor`` called alternately, ``repeat`` times each (job first), so that other work on
    the machine weighs on both alike: each one's fastest call (:func:`measure` of one call: its time, jobs and
    stages, and with ``steps`` the job's Spark jobs). First both are called ``warmup`` times untimed: the JVM
    compiles the code paths a call takes while it runs them (the job takes many more than its floor, so a cold
    JVM weighs on it more), and a long-lived Spark Connect server runs warm."""
    for _ in range(warmup):
        job()
        floor()
    best_job: Measured | None = None
    best_floor: Measured | None = None
    for _ in range(repeat):
        measured = measure(spark, 1, job, steps)
        if best_job is None or measured.seconds < best_job.seconds:
            best_job = measured
        measured = measure(spark, 1, floor)
        if best_floor is None or measured.seconds < best_floor.seconds:
            best_floor = measured
    assert best_job is not None and best_floor is not None, "repeat must be at least 1"
    return best_job, best_floor


ACTIONS = {
    "pyspark.sql.classic.dataframe:DataFrame": ("collect", "count", "first", "take", "localCheckpoint", "checkpoint"),
    "pyspark.sql.readwriter:DataFrameWriter": ("parquet", "save", "json", "csv"),
    "pyspark.sql.readwriter:DataFrameReader": ("parquet", "load", "json", "csv"),
}
"""The DataFrame calls that start Spark jobs, which :func:`call_sites` names after the line that called them."""


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@contextmanager
def call_sites(spark: Any) -> Iterator[None]:
    """Within it, the Spark jobs a DataFrame call of :data:`ACTIONS` starts are named ``<call> at <file>:<line>``
    after the first frame outside PySpark that made it (a write is otherwise ``parquet at <unknown>:0``, and
    the jobs of adaptive query stages ``... at CompletableFuture.java``), through the call site local property
    that adaptive stages inherit. Only for naming: the calls themselves are unchanged."""
    import importlib

    from pyspark.traceback_utils import SCCallSiteSync

    java = spark.sparkContext._jsc
    patched: list[tuple[type, str, Any]] = []

    def named(method: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            outermost = SCCallSiteSync._spark_stack_depth == 0
            if outermost:
                frame = sys._getframe(1)
                while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("pyspark"):
                    frame = frame.f_back
                where = Path(frame.f_code.co_filename)
                java.setCallSite(f"{name} at {where.parent.name}/{where.name}:{frame.f_lineno}")
            SCCallSiteSync._spark_stack_depth += 1
            try:
                return method(*args, **kwargs)
            finally:
                SCCallSiteSync._spark_stack_depth -= 1
                if outermost:
                    java.setCallSite(None)

        return call

    try:
        for owner, names in ACTIONS.items():
            module, _, cls_name = owner.partition(":")
            cls = getattr(importlib.import_module(module), cls_name)
            for name in names:
                original = cls.__dict__[name]
                if not callable(original):  # a property: not wrapped
                    continue
                patched.append((cls, name, original))
                setattr(cls, name, named(original, name))
        yield
    finally:
        for cls, name, original in reversed(patched):
            setattr(cls, name, original)


def job_steps(spark: Any, jobs: list[int], ran: set[int]) -> tuple[Step, ...]:
    """Each of ``jobs`` as a :class:`Step`, in id order (its stages counted among ``ran``)."""
    tracker, store = spark.sparkContext.statusTracker(), spark.sparkContext._jsc.sc().statusStore()
    found = []
    for job in sorted(jobs):
        info, data = tracker.getJobInfo(job), store.job(job)
        submitted, completed = data.submissionTime(), data.completionTime()
        seconds = (
            (completed.get().getTime() - submitted.get().getTime()) / 1000
            if submitted.isDefined() and completed.isDefined()
            else float("nan")
        )
        stages = sum(s in ran for s in (info.stageIds if info is not None else []))
        found.append(Step(job, seconds, stages, str(data.name())))
    return tuple(found)


def write_results(name: str, document: dict[str, Any], output: Path | None = None) -> Path:
    """``document`` as ``bench/results/<name>.json`` (or ``output``), the file the docs render."""
    path = output or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, **document}, indent=2) + "\n")
    return path
