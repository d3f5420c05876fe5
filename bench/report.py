"""The figures tables of ``docs/benchmarks.md``, rendered from ``bench/results/*.json`` so that they cannot drift.

``python bench/report.py`` prints them; ``--write`` replaces each table in the page, between
``<!-- bench:<name>:start -->`` and ``<!-- bench:<name>:end -->``. ``tests/test_docs.py`` checks that the page
holds exactly what this renders. A benchmark without a results file renders a line saying how to make one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"

CONTROLLER_TARGET = 2.5
"""The controller job's target: at most this many times its native floor (``bench/controller_watermark.py``)."""


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _controller(document: dict[str, Any]) -> str:
    labels = {"round_1": "first (no state)", "round_2": "steady state (with stored state)"}
    lines = [
        f"From `bench/results/{document['benchmark']}.json` (`--marks {document['marks']}`"
        f"{' --sequenced' if document.get('sequenced') else ''}, {document['writers']:,} writers, best of "
        f"{document['repeat']}, {document['mode']}):",
        "",
        "| round | marks | job | jobs / stages | floor | jobs / stages | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    missed = []
    for key, row in document["rounds"].items():
        job, floor = row["job"], row["floor"]
        lines.append(
            f"| {labels.get(key, key)} | {row['marks']:,} | {_seconds(job['seconds'])} | {job['jobs']} / "
            f"{job['stages']} | {_seconds(floor['seconds'])} | {floor['jobs']} / {floor['stages']} | "
            f"{row['ratio']:.2f} |"
        )
        if row["ratio"] > CONTROLLER_TARGET:
            missed.append(labels.get(key, key))
    verdict = "met" if not missed else "missed by: " + ", ".join(missed)
    lines += ["", f"Target: ratio <= {CONTROLLER_TARGET:g} in every round; {verdict}."]
    return "\n".join(lines)


def _task_latency(document: dict[str, Any]) -> str:
    target, machine = document["target"], document["machine"]
    lines = [
        f"From `bench/results/task_latency.json` (`--repeat {document['repeat']}`; {document['timing']}):",
        "",
        "| task | submit mode | connect mode | connect / submit | job alone, submit | job alone, connect |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in document["workloads"].values():
        lines.append(
            f"| {row['workload']} | {_seconds(row['submit_s'])} | {_seconds(row['connect_s'])} | "
            f"{row['connect_over_submit']:.3f} | {_seconds(row['job_submit_s'])} | {_seconds(row['job_connect_s'])} |"
        )
    lines.append(f"| no-op `PythonOperator` (floor) | | | | {_seconds(document['floor_s'])} | |")
    startup = document["connect_client_startup_fresh_process_s"]
    lines += [
        "",
        f"Target: connect mode <= {target['connect_max_s']:g} s per task and <= "
        f"{target['max_connect_over_submit']:g}x submit mode; {'met' if target['met'] else 'missed'}. A fresh "
        f"process pays the Spark Connect client's start-up once: imports {_seconds(startup['import_s'])}, first "
        f"session and query {_seconds(startup['first_session_s'])}. Machine: {machine['cpu_count']} CPUs, "
        f"Python {machine['python']}, Airflow {machine['airflow']}, PySpark {machine['pyspark']}; measured "
        f"{document['measured_at'][:10]}.",
    ]
    return "\n".join(lines)


RENDERERS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    "task_latency": (_task_latency, "make bench-latency"),
    "controller_watermark": (_controller, "python bench/controller_watermark.py --marks 10000000"),
    "controller_watermark_sequenced": (
        _controller,
        "python bench/controller_watermark.py --marks 10000000 --sequenced --repeat 1",
    ),
}


def render(name: str, results: Path = RESULTS) -> str:
    """The Markdown for benchmark ``name`` from its results file, or how to make that file."""
    renderer, command = RENDERERS[name]
    path = results / f"{name}.json"
    if not path.exists():
        return f"No results file yet: `{command}` writes `bench/results/{name}.json`."
    return renderer(json.loads(path.read_text()))


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def write_page(path: Path = PAGE, results: Path = RESULTS) -> None:
    """Replace every rendered table of the page with :func:`render`'s."""
    text = path.read_text()
    for name in RENDERERS:
        start, end = markers(name)
        head, rest = text.split(start, 1)
        text = f"{head}{start}\n{render(name, results)}\n{end}{rest.split(end, 1)[1]}"
    path.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_page()
    else:
        for benchmark in RENDERERS:
            print(f"{benchmark}:\n{render(benchmark)}\n")
