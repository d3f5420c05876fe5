"""Render what the demo's runs did: per run and stream, the controller's round and the sensor's outcome."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.timeutil import format_ms


def run_outcome(run: Any) -> dict[str, Any]:
    """State of a finished DagRun and of each of its task instances."""
    return {
        "run_id": run.run_id,
        "interval_end": run.data_interval_end,
        "state": str(run.state),
        "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()},
    }


def progress_line(run: Any, seconds: float) -> str:
    """One line per finished DAG run, printed as it happens: its interval, DAG, outcome (the tasks that did not
    succeed, by name) and wall time.

    ``  01:00-02:00  example_stream_watermark       success  (3 tasks)                 4.1 s``
    """
    tasks = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    odd = [f"{task} {state}" for task, state in sorted(tasks.items()) if state != "success"]
    detail = f"({', '.join(odd)})" if odd else f"({len(tasks)} tasks)"
    start, end = run.data_interval_start, run.data_interval_end
    interval = f"{start:%m-%d %H:%M}-{end:%H:%M}" if end - start < timedelta(days=1) else f"{start:%Y-%m-%d}"
    return f"  {interval}  {run.dag_id:<32} {run.state!s:<8} {detail:<44} {seconds:5.1f} s"


def xcom_value(run: Any, task_id: str) -> Any:
    """A task's return value in a finished run (None when it pushed none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id, key="return_value")
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def _manifests(store: Path) -> list[dict[str, Any]]:
    rounds = store / "controllers" / "example_controller" / "rounds"
    paths = sorted(rounds.glob("*/manifest.json"), key=lambda p: int(p.parent.name.split("-", 1)[0]))
    return [json.loads(p.read_text()) for p in paths]


def render(store: Path, outcomes: list[dict[str, Any]]) -> str:
    lines = ["", "=" * 100, "What happened", "=" * 100]
    for manifest, outcome in zip(_manifests(store), outcomes, strict=False):
        lines.append(
            f"\nRound at {format_ms(manifest['processed_until_ms'])}  (run {outcome['run_id']}: {outcome['state']})"
        )
        totals = manifest["totals"]
        if totals["quarantined"] or totals["rejected"] or totals["deferred_marks"]:
            lines.append(
                f"  marks quarantined {totals['quarantined'] or '{}'}, rejected {totals['rejected'] or '{}'}, "
                f"deferred {totals['deferred_marks']} (reported after this round's time: a later round takes them)"
            )
        for stream, entry in manifest["streams"].items():
            wm = entry["watermark"]
            lines.append(
                f"  {stream:<9} {entry['status']:<20} writers seen {entry['writers_seen']}, "
                f"active {entry['active_writers']}, marks accepted {entry['marks_accepted']}"
                + (f", shutdowns accepted {entry['shutdowns_accepted']}" if entry.get("shutdowns_accepted") else "")
            )
            bad = {**entry["rejected"], **entry["quarantined"]}
            if bad:
                lines.append(f"            bad marks: {bad}")
            if entry.get("pending_sequences"):
                lines.append(
                    f"            {entry['pending_sequences']} sequences wait behind a gap (applied when it fills)"
                )
            if entry["waiting_for"]:
                lines.append(f"            waiting for writers {entry['waiting_for']} (not past the last watermark)")
            if wm:
                lines.append(
                    f"            watermark lower {format_ms(wm['lower_ms'])}  upper {format_ms(wm['upper_ms'])}"
                )
                lines.append(f"            stream cut {wm['stream_cut']}  complete={entry['cut_complete']}")
        sensor = outcome["tasks"].get("wait_for_orders")
        downstream = outcome["tasks"].get("use_watermark")
        lines.append(f"  sensor wait_for_orders: {sensor}; use_watermark: {downstream}")
        join = outcome.get("join")
        if join:
            lines.append(
                f"  joined streams: sensor {join['tasks'].get('orders_and_refunds_complete')}; "
                f"join {join['tasks'].get('join_orders_and_refunds')}"
            )
            progress = join.get("progress")
            if progress:
                per_stream = ", ".join(
                    f"{name} {format_ms(info['lower_ms'])}{' (idle)' if info['idle'] else ''}"
                    for name, info in progress["streams"].items()
                )
                lines.append(f"            coalesced {format_ms(progress['watermark_ms'])}: {per_stream}")
    hook = WatermarkStoreHook(str(store))
    lines.append("\nLatest watermarks in the store:")
    for stream in ("orders", "payments", "refunds"):
        latest = hook.read_latest(stream)
        history = hook.read_history(stream)
        if latest:
            lines.append(f"  {stream:<9} lower {format_ms(latest['lower_ms'])}  ({len(history)} watermarks in the log)")
    return "\n".join(lines)


def render_partitions(store: Path, pipeline: str, outcomes: list[dict[str, Any]]) -> str:
    """Per run: each attempt's executed work units and why, failures, rows; the sensor; the final state."""
    lines = ["", "=" * 100, f"Incremental partitions pipeline {pipeline!r}: what each run planned and did", "=" * 100]
    runs = store / "pipelines" / pipeline / "runs"
    run_dirs = sorted(runs.iterdir(), key=lambda p: int(p.name.split("-", 1)[0])) if runs.exists() else []
    for run_dir, outcome in zip(run_dirs, outcomes, strict=False):
        lines.append(f"\nRun {outcome['run_id']}: {outcome['state']}")
        for attempt in sorted(run_dir.glob("attempt-*")):
            plan = json.loads((attempt / "request.json").read_text())
            manifest_path = attempt / "manifest.json"
            manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
            by_reason: dict[str, list[str]] = {}
            for unit in plan["work_units"]:
                day = format_ms(unit["partition_start"])[:10]
                by_reason.setdefault(unit["reason"], []).append(f"{day}/{unit['unit']}")
            units = len(plan["work_units"])
            lines.append(f"  {attempt.name}: {units} work unit{'' if units == 1 else 's'} executed")
            for reason, names in by_reason.items():
                lines.append(f"    {reason:<14} {', '.join(names)}")
            totals = manifest.get("totals", {})
            lines.append(
                f"    job {manifest.get('status')}: rows read {totals.get('rows_read')}, written "
                f"{totals.get('rows_written')}, quarantined {manifest.get('quarantine') or '{}'}"
            )
            for entry in manifest.get("work_units", []):
                if entry["status"] == "failed":
                    error = str(entry["error"]).split("\n")[0][:110]
                    lines.append(f"    FAILED {format_ms(entry['partition_start'])[:10]}/{entry['unit']}: {error}")
        tasks = outcome["tasks"]
        lines.append(
            f"  orders_daily: {tasks.get('orders_daily')}; sensor day_complete: {tasks.get('day_complete')}; "
            f"daily_revenue: {tasks.get('daily_revenue')}"
        )
    document = WatermarkStoreHook(str(store)).read_pipeline_state(pipeline)
    if document:
        lines.append(f"\nCommitted state (version {document['version']}), per unit as runs of partitions:")
        for unit, unit_runs in document["state"]["units"].items():
            spans = ", ".join(
                f"[{format_ms(a)[:10]}, {format_ms(b)[:10]}) {'succeeded' if s == 's' else 'failed'}"
                for a, b, s, _ in unit_runs
            )
            lines.append(f"  {unit}: {spans}")
        lines.append(f"  ({len(json.dumps(document['state']))} bytes of state)")
    return "\n".join(lines)


def _hm(value: int | None) -> str:
    """Epoch milliseconds as ``HH:MM`` (UTC; the demo spans one day)."""
    return "-" if value is None else format_ms(value)[11:16]


def _ms(value: Any) -> int | None:
    """A datetime (pyarrow timestamp, pendulum) as epoch milliseconds."""
    return None if value is None else int(value.timestamp() * 1000)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """All rows of a Parquet dataset partitioned by ``wm_run=<version>`` (none when it does not exist)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist() if path.exists() else []


def render_windows(base: Path, pipeline: str, outcomes: list[dict[str, Any]]) -> str:
    """Per run of the windowed aggregate: the sensor, the watermark, the events and the panes by timing; then
    the pane rows of the windows that were revised (retractions), the too-late and invalid events, and the
    committed state.

    ``outcomes``: :func:`run_outcome` of each run plus ``sensor`` (the sensor's XCom) and ``summary`` (the
    aggregate's XCom); the panes are read from ``<base>/<pipeline>`` and ``<base>/<pipeline>_late``.
    """
    lines = [
        "",
        "=" * 100,
        f"Windowed aggregate {pipeline!r}: orders and revenue per region in 15-minute event-time windows",
        "(watermark: the 'orders' stream's; 30 minutes of allowed lateness; accumulating and retracting)",
        "=" * 100,
    ]
    interval_of_version: dict[int, str] = {}
    for outcome in outcomes:
        end = _hm(_ms(outcome["interval_end"]))
        tasks = outcome["tasks"]
        summary, sensor = outcome.get("summary"), outcome.get("sensor")
        lines.append(f"\nRun for the hour up to {end}  ({outcome['run_id']}: {outcome['state']})")
        if sensor:
            lines.append(
                f"  sensor wait_for_orders: {tasks.get('wait_for_orders')} "
                f"(orders watermark {_hm(sensor['watermark_ms'])})"
            )
        else:
            lines.append(
                f"  sensor wait_for_orders: {tasks.get('wait_for_orders')} (the orders watermark did not reach {end} "
                "within the timeout)"
            )
            lines.append(f"  {pipeline}: {tasks.get(pipeline)}; the next run reads the events that arrived meanwhile")
        if not summary:
            if sensor:
                lines.append(f"  {pipeline}: {tasks.get(pipeline)} (nothing committed; see the task's log above)")
            continue
        interval_of_version[summary["version"]] = end
        arrivals = ", ".join("-" if a == "-" else a[11:16] for a in summary["arrivals"])
        lines.append(
            f"  {pipeline}: {tasks.get(pipeline)}, version {summary['version']}, watermark "
            f"{_hm(summary['watermark_ms'])}, events that arrived in ({arrivals}]"
        )
        lines.append(
            f"    events read {summary['events_read']}: aggregated {summary['events_aggregated']}, "
            f"too late {summary['too_late']}, invalid event time {summary['invalid_event_time']}"
            + (f", invalid value {summary['invalid_value']}" if summary.get("invalid_value") else "")
        )
        timings = ("EARLY", "ON_TIME", "LATE", "RETRACTION")
        panes = ", ".join(f"{timing} {summary['panes'].get(timing, 0)}" for timing in timings)
        lines.append(f"    panes: {panes}; windows open {summary['windows_open']}, purged {summary['windows_purged']}")

    rows = _read_rows(base / pipeline)
    revised = sorted({(r["window_start"], r["region"]) for r in rows if r["retraction"]})
    if revised:
        lines.append("\nWindows that were revised: each pane row in firing order (a retraction repeats the pane it")
        lines.append("replaces, so summing the rows with retractions negated gives the window's latest value):")
        lines.append(
            f"  {'window':<19}{'region':<8}{'run':<7}{'pane':<9}{'index':>5}  {'row':<11}"
            f"{'orders':>6}{'revenue':>9}{'avg':>9}"
        )
        for start, region in revised:
            window_rows = [r for r in rows if r["window_start"] == start and r["region"] == region]
            window_rows.sort(key=lambda r: (r["wm_run"], r["pane_index"]))
            for r in window_rows:
                window = f"[{_hm(r['window_start'])}, {_hm(r['window_end'])})"
                avg = "-" if r["avg_amount"] is None else f"{r['avg_amount']:.2f}"
                lines.append(
                    f"  {window:<19}{region:<8}{interval_of_version.get(r['wm_run'], '?'):<7}{r['pane']:<9}"
                    f"{r['pane_index']:>5}  {'retraction' if r['retraction'] else 'pane':<11}"
                    f"{r['orders']:>6}{r['revenue']:>9}{avg:>9}"
                )
    if rows:
        signed_orders = sum(-r["orders"] if r["retraction"] else r["orders"] for r in rows)
        signed_revenue = sum(-r["revenue"] if r["retraction"] else r["revenue"] for r in rows)
        aggregated = sum(o["summary"]["events_aggregated"] for o in outcomes if o.get("summary"))
        lines.append(
            f"  all {len(rows)} pane rows, retractions negated: {signed_orders} orders, revenue {signed_revenue} "
            f"(events aggregated by the runs: {aggregated})"
        )

    late = _read_rows(Path(f"{base / pipeline}_late"))
    if late:
        lines.append(f"\nToo-late and invalid events (not aggregated; in {pipeline}_late/):")
        for r in sorted(late, key=lambda r: (r["wm_run"], r["order_id"])):
            event_time = _hm(_ms(r["event_time"]))
            lines.append(
                f"  run {interval_of_version.get(r['wm_run'], '?')}: {r['order_id']:<6} {r['region']}  event time "
                f"{event_time:<5}  arrived {_hm(_ms(r['ingested_at']))}  amount {r['amount']:>3}  {r['reason']}"
            )

    document = WatermarkStoreHook(str(base / "store")).read_pipeline_state(pipeline)
    if document:
        lines.append(
            f"\nCommitted state (Variable wm_windows__{pipeline}): version {document['version']}, watermark "
            f"{_hm(document['watermark_ms'])}, events read up to {_hm(document['arrival_until_ms'])}"
        )
    return "\n".join(lines)


def _latest_panes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each window's last pane that is not a retraction, by window and region."""
    last: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["wm_run"], r["pane_index"], not r["retraction"])):
        if not row["retraction"]:
            last[(row["window_start"], row["region"])] = row
    return [last[k] for k in sorted(last)]


def render_chain(base: Path, outcomes: list[dict[str, Any]]) -> str:
    """Per hour: the chain's two stages (what each read and fired) and the merge; then the hourly rollup's
    latest numbers and the merge's latest panes.

    ``outcomes``: :func:`run_outcome` of each chain run plus ``summaries`` (the two aggregates' XComs) and
    ``merge`` (the merge run's outcome and ``summary``)."""
    lines = [
        "",
        "=" * 100,
        "Chain: orders -> 'orders_5m' (5-minute windows) -> 'orders_1h' (hourly rollup of the 5-minute panes),",
        "each stage waiting on the previous one's output watermark; merge: orders and deliveries per 10 minutes",
        "=" * 100,
    ]
    for outcome in outcomes:
        end = _hm(_ms(outcome["interval_end"]))
        lines.append(f"\nRun for the hour up to {end}  (chain {outcome['state']}, merge {outcome['merge']['state']})")
        for task, summary in [*outcome["summaries"].items(), ("orders_deliveries_10m", outcome["merge"]["summary"])]:
            if not summary or "events_read" not in summary:
                state = (outcome["merge"] if task == "orders_deliveries_10m" else outcome)["tasks"].get(task)
                lines.append(f"  {task}: {state} (its sensor's stream did not reach {end} within the timeout)")
                continue
            read = "pane rows" if "upstream_versions" in summary else "events"
            source = ""
            if read == "pane rows":
                after, until = summary["upstream_versions"]
                source = f" of upstream versions ({after or 0}, {until}]"
            panes = ", ".join(f"{t} {summary['panes'].get(t, 0)}" for t in ("EARLY", "ON_TIME", "LATE", "RETRACTION"))
            lines.append(
                f"  {task}: version {summary['version']}, watermark {_hm(summary['watermark_ms'])}, "
                f"{summary['events_read']} {read}{source}; panes: {panes}"
            )
    tables = (
        ("orders_1h", "Hourly numbers (the latest pane of each window of 'orders_1h')", "busiest_5m"),
        ("orders_deliveries_10m", "Orders and deliveries per 10 minutes (latest panes)", "deliveries"),
    )
    for pipeline, title, last_column in tables:
        rows = _latest_panes(_read_rows(base / pipeline))
        if not rows:
            continue
        lines.append(f"\n{title}:")
        lines.append(f"  {'window':<19}{'region':<8}{'pane':<9}{'orders':>7}{'revenue':>9}{last_column:>12}")
        for r in rows:
            window = f"[{_hm(r['window_start'])}, {_hm(r['window_end'])})"
            revenue = "-" if r["revenue"] is None else r["revenue"]
            lines.append(
                f"  {window:<19}{r['region']:<8}{r['pane']:<9}{r['orders']:>7}{revenue:>9}{r[last_column]:>12}"
            )
    return "\n".join(lines)
