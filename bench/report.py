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

CONTROLLER_SEQUENCED_TARGET = 4.0
"""The same with every mark sequenced (``--sequenced``): gap-free progress is work the floor does not do."""


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _controller(document: dict[str, Any]) -> str:
    labels = {"round_1": "first (no state)", "round_2": "steady state (with stored state)"}
    duckdb = [row["duckdb"] for row in document["rounds"].values() if "duckdb" in row]
    lines = [
        f"From `bench/results/{document['benchmark']}.json` (`--marks {document['marks']}"
        f"{' --sequenced' if document.get('sequenced') else ''}`, {document['writers']:,} writers, best of "
        f"{document['repeat']}, {document['mode']}):",
        "",
        "| round | marks | job | jobs / stages | floor | jobs / stages | ratio |"
        + (" DuckDB floor |" if duckdb else ""),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if duckdb else ""),
    ]
    missed = []
    target = CONTROLLER_SEQUENCED_TARGET if document.get("sequenced") else CONTROLLER_TARGET
    for key, row in document["rounds"].items():
        job, floor = row["job"], row["floor"]
        reference = f" {_seconds(row['duckdb']['seconds'])} |" if "duckdb" in row else (" |" if duckdb else "")
        lines.append(
            f"| {labels.get(key, key)} | {row['marks']:,} | {_seconds(job['seconds'])} | {job['jobs']} / "
            f"{job['stages']} | {_seconds(floor['seconds'])} | {floor['jobs']} / {floor['stages']} | "
            f"{row['ratio']:.2f} |{reference}"
        )
        if row["ratio"] > target:
            missed.append(labels.get(key, key))
    verdict = "met" if not missed else "missed by: " + ", ".join(missed)
    lines += ["", f"Target: ratio <= {target:g} in every round; {verdict}."]
    if duckdb:
        lines[-1] += (
            f" DuckDB floor (for reference, not a target): the floor's work in DuckDB {duckdb[0]['version']} over the "
            f"same Parquet, {duckdb[0]['threads']} threads."
        )
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


def _target(row: dict[str, Any]) -> str:
    if row["target"] is None:
        return "reference"
    return f"<= {row['target']:g}: {'met' if row['met'] else 'missed'}"


def _counted(measured: dict[str, Any]) -> str:
    """``jobs / stages``, or that they were not counted (``-1``: a Spark Connect client has no status tracker)."""
    return "not counted" if measured["jobs"] < 0 else f"{measured['jobs']} / {measured['stages']}"


def _runs(document: dict[str, Any], options: str, notes: list[str], repeat: str | None = None) -> str:
    """The table of a benchmark whose runs each compare the job with a native floor (``runs``: label, job and
    floor seconds / jobs / stages, ratio, target or None, met), its headline ratio and ``notes`` after it;
    ``repeat`` says how each figure was taken (default: the best of the document's ``repeat``)."""
    warm = f" after {document['warmup']} untimed calls of each" if document.get("warmup") else ""
    taken = repeat or f"best of {document['repeat']}{warm}"
    lines = [
        f"From `bench/results/{document['benchmark']}.json` ({options}, {taken}, {document['mode']}):",
        "",
        "| run | job | jobs / stages | floor | jobs / stages | ratio | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    missed = []
    for row in document["runs"].values():
        job, floor = row["job"], row["floor"]
        lines.append(
            f"| {row['label']} | {_seconds(job['seconds'])} | {_counted(job)} | "
            f"{_seconds(floor['seconds'])} | {_counted(floor)} | {row['ratio']:.2f} | "
            f"{_target(row)} |"
        )
        if row["met"] is False:
            missed.append(row["label"])
    headline = document["runs"][document["headline"]]
    verdict = "every target met" if not missed else "missed by: " + "; ".join(missed)
    lines += ["", f"Headline: `ratio={headline['ratio']:.2f}` ({headline['label']}); {verdict}."]
    for note in notes:
        lines += ["", note]
    return "\n".join(lines)


def _windowed(document: dict[str, Any]) -> str:
    shares = ", ".join(
        f"{row['label'].split(',')[0]} {row['of_first_run']:.0%}"
        for row in document["runs"].values()
        if "of_first_run" in row
    )
    options = f"`--events {document['events']}`, {document['keys']:,} keys"
    notes = [f"An incremental run takes, of its first run's time: {shares}."]
    return _runs(document, options, notes, _short_repeat(document, "first runs", "incremental runs"))


def _rollup(document: dict[str, Any]) -> str:
    rollup = document["runs"]["rollup"]
    options = f"`--events {document['events']}`, {document['keys']:,} keys"
    note = (
        f"The rollup reads {rollup['rows_read']:,} pane rows, not the events; its run takes "
        f"{document['rollup_of_aggregate']:.0%} of the 5-minute aggregate's."
    )
    return _runs(document, options, [note], _short_repeat(document, "the 5-minute aggregate", "the rollups"))


def _short_repeat(document: dict[str, Any], long_runs: str, short_runs: str) -> str | None:
    """How the figures were taken when the short runs had a repeat of their own (``repeat_short``)."""
    if "repeat_short" not in document:
        return None
    warm = f" after {document['warmup']} untimed calls of each" if document.get("warmup") else ""
    return f"{long_runs} best of {document['repeat']}, {short_runs} best of {document['repeat_short']}{warm}"


def _partitions(document: dict[str, Any]) -> str:
    planning, targets = document["planning"], document["planning"]["targets"]
    options = (
        f"`--rows {document['rows_option']}`: {document['rows']:,} source rows over {document['days']} days, "
        f"units {', '.join(document['units'])}"
    )
    reads = ", ".join(
        f"{row['label'].split(' (')[0]} {row['source_partitions']} source partition(s), {row['rows_read']:,} rows"
        for row in document["runs"].values()
        if not row["label"].endswith("(reference)")  # another transformation of a run listed
    )
    notes = [
        f"Source partitions the plans name (the floors read these): {reads}. The day-2 run takes "
        f"{document['day2_of_first']:.1%} of the first run's time.",
        f"Planning ({planning['work_units']:,} hourly work units, median of {document['planning_repeat']}): "
        f"{planning['plan_full_state_ms']:.1f} ms over the full state ({planning['executes']:,} units execute; "
        f"target < {targets['plan_ms']:g} ms), {planning['plan_empty_state_ms']:.1f} ms over the empty state; "
        f"the state as compact JSON {planning['state_compact_bytes']:,} bytes (target < "
        f"{targets['state_bytes'] // 1024} KB), as the Variable's value {planning['variable_bytes']:,} bytes; "
        f"{'met' if planning['met'] else 'missed'}.",
    ]
    repeat = None
    if "day2_repeat" in document:
        repeat = (
            f"first run best of {document['repeat']}, day-2 run best of {document['day2_repeat']} after "
            f"{document['day2_warmup']} untimed call(s) of each"
        )
    return _runs(document, options, notes, repeat)


RENDERERS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    "task_latency": (_task_latency, "make bench-latency"),
    "controller_watermark": (_controller, "python bench/controller_watermark.py --marks 10000000"),
    "controller_watermark_sequenced": (
        _controller,
        "python bench/controller_watermark.py --marks 10000000 --sequenced --repeat 1",
    ),
    "windowed_aggregate": (_windowed, "python bench/windowed_aggregate.py"),
    "windowed_aggregate_connect": (_windowed, "python bench/windowed_aggregate.py --connect"),
    "rollup": (_rollup, "python bench/rollup.py"),
    "rollup_connect": (_rollup, "python bench/rollup.py --connect"),
    "incremental_partitions": (_partitions, "python bench/incremental_partitions.py"),
    "incremental_partitions_connect": (_partitions, "python bench/incremental_partitions.py --connect"),
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
