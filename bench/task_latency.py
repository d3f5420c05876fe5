"""Benchmark: the fixed cost per task of the three stateful Spark operators, connect mode vs submit mode.

Runs small workloads through Airflow's real task runner (``dag.test()``, a throw-away SQLite AIRFLOW_HOME in
a temporary directory, ``airflow db migrate`` first), in the same process and the same run:

- ``ControllerWatermarkOperator`` over 1,000 writer marks (100 writers, 2 streams of 4 segments);
- ``WindowedAggregateOperator`` over 10,000 events (tumbling 5 min, keys ``region``, watermark
  ``{"max_delay": "PT1M"}``, arrival column ``ingested_at``);
- ``IncrementalPartitionsOperator`` for one day (one daily partition of 5,000 rows, no units,
  ``SELECT * FROM source``);
- the floor: a no-op ``PythonOperator``.

Every repetition runs two DAGs, one per mode, each with the floor and the three tasks chained (trigger rule
``all_done``): **submit**, a ``spark`` connection with host ``local[*]`` defined through
``AIRFLOW_CONN_WM_BENCH_SUBMIT`` (each task runs ``spark-submit``: a JVM of its own), and **connect**,
``spark_conn_id=None``: the task is a Spark Connect client, in this process, of the embedded Spark Connect
server, started warm before the first DAG on a free port (``WM_SPARK_CONNECT_URL``) and stopped at the end.
The order of the two DAGs alternates between repetitions. Each task gets a fresh controller or pipeline
name (and store and output folders) per repetition, so no run is covered by an earlier one; a task that
does not succeed, or whose summary XCom does not show the whole workload processed, fails the benchmark.

Timing: each task's time is its task instance's ``end_date - start_date`` as Airflow records it (the task
runner's start to its end: templating, ``execute``, XCom, state), not the wall time around ``dag.test()``
(that one, per DAG run, is in the JSON for reference); below the table, the part of it that is the job
alone, from its ``request.json`` written to its ``manifest.json`` written (file times). Each figure is the
median of ``--repeat`` runs. An untimed floor-only DAG runs first: the first task ``dag.test()`` runs in a
process starts the in-process execution API (seconds), which would otherwise land on the first floor. Then
``--warm-runs`` connect-mode DAG runs warm the new server, untimed: a deployed Connect server serves every
task all day and has run each job's plans before, while a new one compiles them on first use (its JVM's
JIT and Spark's generated code), which makes the first runs after a start two to three times slower. The
first run after the start is reported apart, beside the figures. The
load average (1 min) at the start and the end is printed and in the JSON: other work on the machine
inflates every figure, submit mode's JVM start-ups most.

Caveats: ``dag.test()`` runs every task in this process, so connect mode's client imports (pyspark's
Spark Connect client, grpc, pandas) are paid once, in the first connect task; a deployed task runs in a new
process and pays them every time. The JSON and the output give that start-up as measured in a fresh
interpreter (import, first session, one tiny query), beside the figures and not added to them. Submit mode
runs ``spark-submit`` with Spark's default JVM options (the tests' C1-only ``SPARK_CONF_DIR`` is not used).
This process itself never starts a classic JVM (checked at the end).

Prints a table (workload, submit s, connect s, connect/submit, floor s), the target (connect <= 3 s per task
and <= 0.2x submit) and writes the figures with the machine's details to ``--output``; the last line is
``ratio=<the worst connect/submit ratio>``.

    .venv/bin/python bench/task_latency.py                 # median of 3, about five minutes on 2 cores
    .venv/bin/python bench/task_latency.py --repeat 1      # one of each
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

LOGICAL_DATE = datetime(2026, 1, 2, tzinfo=UTC)  # data_interval_end of a manual run: every task's "now"
DAY = "2026-01-01"  # the incremental-partitions workload's one daily partition
HOUR_MS = 3_600_000
MINUTE_MS = 60_000
NOW_MS = int(LOGICAL_DATE.timestamp() * 1000)

MARKS, WRITERS, STREAMS, SEGMENTS = 1_000, 100, ("orders", "payments"), 4
EVENTS, REGIONS = 10_000, ("eu", "us", "ap")
PARTITION_ROWS = 5_000

SUBMIT_CONN_ID = "wm_bench_submit"
MODES = ("submit", "connect")
FLOOR = "floor"
WORKLOADS = {
    "controller_watermark": f"controller watermark, {MARKS:,} marks",
    "windowed_aggregate": f"windowed aggregate, {EVENTS:,} events",
    "incremental_partitions": f"incremental partitions, 1 day ({PARTITION_ROWS:,} rows)",
}
TARGET_CONNECT_S, TARGET_RATIO = 3.0, 0.2
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "task_latency.json"


# --- set-up (before anything imports airflow) -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare_environment(base: Path) -> None:
    """A throw-away AIRFLOW_HOME, an empty DAGs folder, the submit connection and the embedded server's URL.
    Airflow reads AIRFLOW_HOME when it is imported: this runs first."""
    home, dags = base / "airflow", base / "dags"
    home.mkdir()
    dags.mkdir()
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    os.environ["AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL"] = "0"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # task logs of dag.test() go to stdout
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[f"AIRFLOW_CONN_{SUBMIT_CONN_ID.upper()}"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    os.environ["WM_SPARK_CONNECT_URL"] = f"sc://127.0.0.1:{free_port()}"


def migrate() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, env=os.environ.copy()
    )
    if done.returncode != 0:
        raise SystemExit(f"airflow db migrate failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


# --- data (pyarrow only: no JVM in this process) ---------------------------------------------------------


def write_marks(data: Path) -> tuple[str, str]:
    """``MARKS`` notes of ``WRITERS`` writers over the hour before the logical date, and the segments: each
    stream has ``SEGMENTS`` segments of epoch 0 over [0, 1); writer ``w`` reports two adjacent segments at
    offsets that grow with each mark."""
    steps = MARKS // WRITERS
    start = NOW_MS - HOUR_MS
    rows: dict[str, list[Any]] = {c: [] for c in ("stream", "writer_id", "time_ms", "position", "kind")}
    rows["reported_at_ms"] = []
    for step in range(steps):
        for w in range(WRITERS):
            time_ms = start + step * (HOUR_MS // steps) + w
            first = w % SEGMENTS
            rows["stream"].append(STREAMS[w % len(STREAMS)])
            rows["writer_id"].append(f"writer-{w}")
            rows["time_ms"].append(time_ms)
            rows["position"].append([(first, step * 10), ((first + 1) % SEGMENTS, step * 10 + 5)])
            rows["kind"].append("note")
            rows["reported_at_ms"].append(time_ms + 500)
    from airflow_provider_wm.marks import MARKS_SCHEMA

    schema = pa.schema([MARKS_SCHEMA.field(name) for name in rows])  # the contract's types, its required columns
    marks = data / "marks"
    marks.mkdir(parents=True)
    pq.write_table(pa.Table.from_pydict(rows, schema=schema), marks / "part-0.parquet")
    segments = data / "segments"
    segments.mkdir()
    table = pa.table(
        {
            "stream": [s for s in STREAMS for _ in range(SEGMENTS)],
            "segment_id": pa.array([i for _ in STREAMS for i in range(SEGMENTS)], pa.int64()),
            "key_start": [i / SEGMENTS for _ in STREAMS for i in range(SEGMENTS)],
            "key_end": [(i + 1) / SEGMENTS for _ in STREAMS for i in range(SEGMENTS)],
        }
    )
    pq.write_table(table, segments / "part-0.parquet")
    return str(marks), str(segments)


def write_events(data: Path) -> str:
    """``EVENTS`` events arriving evenly over the hour before the logical date, each up to a minute late."""
    start = NOW_MS - HOUR_MS
    arrival = [start + i * HOUR_MS // EVENTS + 1 for i in range(EVENTS)]
    table = pa.table(
        {
            "region": [REGIONS[i % len(REGIONS)] for i in range(EVENTS)],
            "event_time": pa.array(
                [a - (i * 7919) % MINUTE_MS for i, a in enumerate(arrival)], pa.timestamp("ms", "UTC")
            ),
            "amount": pa.array([i % 1000 for i in range(EVENTS)], pa.int64()),
            "ingested_at": pa.array(arrival, pa.timestamp("ms", "UTC")),
        }
    )
    events = data / "events"
    events.mkdir(parents=True)
    pq.write_table(table, events / "part-0.parquet")
    return str(events)


def write_source(data: Path) -> str:
    """``PARTITION_ROWS`` orders of ``DAY`` in a source partitioned by ``event_date``."""
    day_ms = int(datetime.fromisoformat(DAY).replace(tzinfo=UTC).timestamp() * 1000)
    table = pa.table(
        {
            "order_id": [f"o-{i}" for i in range(PARTITION_ROWS)],
            "region": [REGIONS[i % len(REGIONS)] for i in range(PARTITION_ROWS)],
            "event_time": pa.array(
                [day_ms + i * (86_400_000 // PARTITION_ROWS) for i in range(PARTITION_ROWS)], pa.timestamp("ms", "UTC")
            ),
            "amount": [round(5 + (i % 500) * 0.99, 2) for i in range(PARTITION_ROWS)],
        }
    )
    folder = data / "orders" / f"event_date={DAY}"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet")
    return str(data / "orders")


# --- DAGs ------------------------------------------------------------------------------------------------


def noop() -> None:
    """The floor's callable: nothing."""


def build_dag(dag_id: str, mode: str, inputs: dict[str, str], runs: Path) -> Any:
    """The floor and the three operators, chained, each running whatever happened before it (``all_done``);
    names and folders fresh per DAG (``dag_id`` is unique)."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG, chain

    from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
    from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
    from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling

    base = runs / dag_id
    common: dict[str, Any] = {
        "store_path": str(base / "store"),
        "spark_conn_id": SUBMIT_CONN_ID if mode == "submit" else None,
        "trigger_rule": "all_done",
    }
    name = dag_id.replace("bench_latency_", "")
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False) as dag:
        chain(
            PythonOperator(task_id=FLOOR, python_callable=noop, trigger_rule="all_done"),
            ControllerWatermarkOperator(
                task_id="controller_watermark",
                controller=f"c_{name}",
                marks_path=inputs["marks"],
                segments_path=inputs["segments"],
                writer_timeout="PT10M",
                initial_delay=0,
                **common,
            ),
            WindowedAggregateOperator(
                task_id="windowed_aggregate",
                pipeline=f"w_{name}",
                events=inputs["events"],
                event_time="event_time",
                arrival_column="ingested_at",
                keys=["region"],
                window=tumbling("PT5M"),
                aggregates={"orders": "count(*)", "revenue": "sum(amount)"},
                watermark={"max_delay": "PT1M"},
                output=str(base / "panes"),
                **common,
            ),
            IncrementalPartitionsOperator(
                task_id="incremental_partitions",
                pipeline=f"p_{name}",
                source=inputs["source"],
                source_partition_column="event_date",
                time_column="event_time",
                watermark={"from": DAY, "to": "P0D"},
                partition="daily",
                transform="SELECT * FROM source",
                target=str(base / "daily"),
                **common,
            ),
        )
    return dag


def register(dag: Any) -> None:
    """Write the DAG to the metadata DB as the DAG processor would (``dag.test()`` runs serialized DAGs of a
    configured bundle only; this one is in no file of it). The minimal logic of tests/airflow_helpers.py."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"], collect_dags=False)
    bag.dags[dag.dag_id] = dag
    sync_bag_to_db(bag, "dags-folder", None)


# --- checks: the whole workload ran, nothing was covered -------------------------------------------------


def check_controller(summary: dict[str, Any]) -> str | None:
    accepted = sum(entry.get("marks_accepted", 0) for entry in summary.get("streams", {}).values())
    if summary.get("round") is None or accepted != MARKS:
        return f"expected a round accepting {MARKS} marks, got round={summary.get('round')!r}, accepted={accepted}"
    return None


def check_windowed(summary: dict[str, Any]) -> str | None:
    if "covered_by" in summary or summary.get("version") != 1 or summary.get("events_read") != EVENTS:
        return f"expected version 1 reading {EVENTS} events, got {summary}"
    return None


def check_partitions(summary: dict[str, Any]) -> str | None:
    done = summary.get("executed") == 1 and not summary.get("failed")
    if "covered_by" in summary or not done or summary.get("rows_written") != PARTITION_ROWS:
        return f"expected 1 work unit writing {PARTITION_ROWS} rows, got {summary}"
    return None


CHECKS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "controller_watermark": check_controller,
    "windowed_aggregate": check_windowed,
    "incremental_partitions": check_partitions,
}


def job_seconds(store: Path) -> dict[str, float]:
    """Per job, the seconds from its ``request.json`` written to its ``manifest.json`` written (file times):
    the job alone (``spark-submit`` and its JVM up to the manifest, or the Spark Connect session), without
    the operator's reads, commits and publishing around it."""
    seconds: dict[str, float] = {}
    for manifest in store.rglob("manifest.json"):
        request = manifest.with_name("request.json")
        job = json.loads(manifest.read_text()).get("job")
        if job in WORKLOADS and request.exists():
            elapsed = manifest.stat().st_mtime - request.stat().st_mtime
            seconds[job] = seconds.get(job, 0.0) + elapsed
    return seconds


def run_once(
    mode: str, repetition: int, inputs: dict[str, str], runs: Path
) -> tuple[dict[str, float], dict[str, float], float]:
    """One DAG run in ``mode``: each task's seconds (task instance end - start), each job's seconds
    (:func:`job_seconds`) and the wall time of ``dag.test()``. Raises SystemExit naming the task when one did
    not succeed or did not do its work."""
    from airflow_provider_wm.demo.report import xcom_value

    dag_id = f"bench_latency_{mode}_{repetition if repetition >= 0 else 'warm'}_{uuid.uuid4().hex[:6]}"
    dag = build_dag(dag_id, mode, inputs, runs)
    register(dag)
    started = time.perf_counter()
    run = dag.test(logical_date=LOGICAL_DATE)
    wall = time.perf_counter() - started
    seconds, problems = {}, []
    for ti in run.get_task_instances():
        if str(ti.state) != "success":
            problems.append(f"{ti.task_id}: state {ti.state}")
            continue
        check = CHECKS.get(ti.task_id)
        problem = check(xcom_value(run, ti.task_id) or {}) if check else None
        if problem:
            problems.append(f"{ti.task_id}: {problem}")
        seconds[ti.task_id] = (ti.end_date - ti.start_date).total_seconds()
    if problems:
        raise SystemExit(f"{mode} run {repetition + 1} ({dag_id}) failed:\n  " + "\n  ".join(problems))
    return seconds, job_seconds(runs / dag_id / "store"), wall


def warm_up(runs: Path) -> None:
    """A floor-only DAG run, untimed: the first task ``dag.test()`` runs in a process starts the in-process
    execution API and imports the task runner (seconds), which would otherwise land on the first floor."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    with DAG(
        dag_id=f"bench_latency_warm_up_{uuid.uuid4().hex[:6]}",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
    ) as dag:
        PythonOperator(task_id=FLOOR, python_callable=noop)
    register(dag)
    run = dag.test(logical_date=LOGICAL_DATE)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    if states != {FLOOR: "success"}:
        raise SystemExit(f"the warm-up DAG run failed: {states}")


# --- reporting -------------------------------------------------------------------------------------------


def connect_client_startup(url: str) -> dict[str, float]:
    """What a task in a new process pays before its job in connect mode: the client's imports, then a first
    session, one tiny query and stop (measured in a fresh interpreter; not part of the per-task figures)."""
    code = (
        "import json, time\n"
        "t0 = time.perf_counter()\n"
        "from pyspark.sql import SparkSession\n"
        "import pyspark.sql.connect.session\n"
        "t1 = time.perf_counter()\n"
        f"s = SparkSession.builder.remote({url!r}).create()\n"
        "s.range(1).collect()\n"
        "s.stop()\n"
        "print(json.dumps({'import_s': t1 - t0, 'first_session_s': time.perf_counter() - t1}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return "unknown"
    return (done.stderr or done.stdout).strip().splitlines()[0] if (done.stderr or done.stdout) else "unknown"


def machine() -> dict[str, Any]:
    import airflow
    import pyspark

    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": java_version(),
        "airflow": airflow.__version__,
        "pyspark": pyspark.__version__,
    }


def assert_no_classic_jvm() -> None:
    """Connect mode's client runs here and must not have started a py4j gateway (a JVM child)."""
    module = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    if module is not None and getattr(module.SparkContext, "_gateway", None) is not None:
        raise SystemExit("a classic JVM (py4j gateway) was started in the benchmark's process")


def median_or_none(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; the median is reported")
    parser.add_argument(
        "--warm-runs", type=int, default=3, help="untimed connect-mode runs first, to warm the new server"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the JSON file written")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    load_at_start = round(os.getloadavg()[0], 2)
    base = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    try:
        prepare_environment(base)
        started = time.perf_counter()
        migrate()
        data = base / "data"
        marks, segments = write_marks(data)
        inputs = {"marks": marks, "segments": segments, "events": write_events(data), "source": write_source(data)}
        print(f"airflow db migrate and data in {time.perf_counter() - started:.1f}s under {base}", flush=True)

        from airflow_provider_wm.spark_connect_server import embedded_server

        started = time.perf_counter()
        with embedded_server() as url:
            print(f"Spark Connect server (local[*], warm) at {url} in {time.perf_counter() - started:.1f}s", flush=True)
            warm_up(base / "runs")  # untimed: the in-process task runner's first use (execution API, imports)
            warm_runs = [run_once("connect", -1, inputs, base / "runs")[0] for _ in range(args.warm_runs)]
            for number, warm in enumerate(warm_runs, 1):
                line = ", ".join(f"{t} {warm[t]:.2f}s" for t in WORKLOADS)
                print(f"  warm-up {number}/{args.warm_runs} connect (untimed) {line}", flush=True)
            samples: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
            job_samples: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
            walls: dict[str, list[float]] = {m: [] for m in MODES}
            for repetition in range(args.repeat):
                for mode in MODES if repetition % 2 == 0 else reversed(MODES):
                    seconds, jobs, wall = run_once(mode, repetition, inputs, base / "runs")
                    walls[mode].append(wall)
                    for task_id, value in seconds.items():
                        samples[mode].setdefault(task_id, []).append(value)
                    for job, value in jobs.items():
                        job_samples[mode].setdefault(job, []).append(value)
                    line = ", ".join(f"{t} {seconds[t]:.2f}s" for t in (FLOOR, *WORKLOADS))
                    print(f"  run {repetition + 1}/{args.repeat} {mode:<7} {line} (dag.test {wall:.1f}s)", flush=True)
            startup = connect_client_startup(url)
        assert_no_classic_jvm()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    median = {m: {t: statistics.median(v) for t, v in samples[m].items()} for m in MODES}
    floor_samples = samples["submit"][FLOOR] + samples["connect"][FLOOR]
    floor = statistics.median(floor_samples)
    results: dict[str, Any] = {}
    load_at_end = round(os.getloadavg()[0], 2)
    print(
        f"\nper task, median of {args.repeat} (task instance end - start); load average (1 min) {load_at_start} at "
        f"start, {load_at_end} at end, {os.cpu_count()} CPUs"
    )
    print(f"{'workload':<44} {'submit s':>9} {'connect s':>10} {'connect/submit':>15} {'floor s':>8}")
    for task_id, label in WORKLOADS.items():
        submit, connect = median["submit"][task_id], median["connect"][task_id]
        ratio = connect / submit
        results[task_id] = {
            "workload": label,
            "submit_s": submit,
            "connect_s": connect,
            "connect_over_submit": ratio,
            "submit_samples_s": samples["submit"][task_id],
            "connect_samples_s": samples["connect"][task_id],
            "job_submit_s": median_or_none(job_samples["submit"].get(task_id)),
            "job_connect_s": median_or_none(job_samples["connect"].get(task_id)),
            "job_submit_samples_s": job_samples["submit"].get(task_id, []),
            "job_connect_samples_s": job_samples["connect"].get(task_id, []),
        }
        print(f"{label:<44} {submit:>9.2f} {connect:>10.2f} {ratio:>15.3f} {floor:>8.3f}")
    worst = max(r["connect_over_submit"] for r in results.values())
    missed = [
        f"{r['workload']}: {r['connect_s']:.2f} s, {r['connect_over_submit']:.3f}x"
        for r in results.values()
        if r["connect_s"] > TARGET_CONNECT_S or r["connect_over_submit"] > TARGET_RATIO
    ]
    verdict = "met" if not missed else "missed (" + "; ".join(missed) + ")"
    print(f"target: connect <= {TARGET_CONNECT_S:g} s per task and <= {TARGET_RATIO:g}x submit: {verdict}")
    print("of which the job alone (request.json written -> manifest.json written), median:")
    for r in results.values():
        print(f"  {r['workload']:<42} {seconds_text(r['job_submit_s']):>9} {seconds_text(r['job_connect_s']):>10}")
    print(
        f"connect client start-up in a fresh process (paid once here, by every deployed task): imports "
        f"{startup['import_s']:.2f} s, first session and query {startup['first_session_s']:.2f} s"
    )

    document = {
        "benchmark": "task_latency",
        "timing": "task instance end_date - start_date, dag.test() in one process; median of the repetitions",
        "repeat": args.repeat,
        "logical_date": LOGICAL_DATE.isoformat(),
        "workloads": results,
        "floor_s": floor,
        "floor_samples_s": {m: samples[m][FLOOR] for m in MODES},
        "dag_test_wall_s": walls,
        "connect_client_startup_fresh_process_s": startup,
        "connect_warm_up_runs_s": warm_runs,
        "target": {"connect_max_s": TARGET_CONNECT_S, "max_connect_over_submit": TARGET_RATIO, "met": not missed},
        "worst_connect_over_submit": worst,
        "machine": {**machine(), "load_average_1m": {"start": load_at_start, "end": load_at_end}},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.output}")
    print(f"ratio={worst:.3f}")


if __name__ == "__main__":
    main()
