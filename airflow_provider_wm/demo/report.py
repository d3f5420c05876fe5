"""Render what the demo's runs did: per run and stream, the controller's round and the sensor's outcome."""

from __future__ import annotations

import json
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
                f"deferred {totals['deferred_marks']}"
            )
        for stream, entry in manifest["streams"].items():
            wm = entry["watermark"]
            lines.append(
                f"  {stream:<9} {entry['status']:<20} writers seen {entry['writers_seen']}, "
                f"active {entry['active_writers']}, marks accepted {entry['marks_accepted']}"
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
            plan = json.loads((attempt / "plan.json").read_text())
            manifest_path = attempt / "manifest.json"
            manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
            by_reason: dict[str, list[str]] = {}
            for unit in plan["work_units"]:
                day = format_ms(unit["partition_start"])[:10]
                by_reason.setdefault(unit["reason"], []).append(f"{day}/{unit['unit']}")
            lines.append(f"  {attempt.name}: {len(plan['work_units'])} work units executed")
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
