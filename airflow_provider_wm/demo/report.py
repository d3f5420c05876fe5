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
    hook = WatermarkStoreHook(str(store))
    lines.append("\nLatest watermarks in the store:")
    for stream in ("orders", "payments"):
        latest = hook.read_latest(stream)
        history = hook.read_history(stream)
        if latest:
            lines.append(f"  {stream:<9} lower {format_ms(latest['lower_ms'])}  ({len(history)} watermarks in the log)")
    return "\n".join(lines)
