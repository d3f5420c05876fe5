"""Cut-off state carried between runs: the controller's cut-off in an Airflow Variable (and XCom).

The Variable ``wm_controller__<controller>`` holds a small JSON document a person can read on the UI's
Variables page::

    {"controller": "orders", "version": 7, "processed_until_ms": ..., "processed_marks": 1234,
     "state_path": ".../state/<round>",
     "watermarks": {"orders": {"lower_ms": ..., "upper_ms": ..., "computed_at_ms": ...}},
     "run_id": "scheduled__...", "committed_at": "2026-01-01T01:00:00+00:00"}

Rules:
- It is written last, and only when the task succeeded; a failed or retried run finds it unchanged and
  starts from the same state.
- Variables are last-writer-wins, so the commit is a check-then-write: the version read at the start must
  still be the current one, otherwise another run committed in between and this one fails with
  :class:`CutoffConflict` (its retry starts from the newer cut-off). The operator also limits itself to
  one running task instance per DAG (``max_active_tis_per_dag=1``), so the check is a second line.
- ``processed_until_ms`` never goes backwards.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.sdk import Variable

__all__ = ["ControllerCutoff", "CutoffConflict", "commit_cutoff", "cutoff_variable_key", "read_cutoff"]


class CutoffConflict(RuntimeError):
    """Another run committed a newer cut-off while this one was running."""


@dataclass(frozen=True)
class ControllerCutoff:
    controller: str
    version: int
    processed_until_ms: int
    state_path: str
    run_id: str
    committed_at: str
    watermarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    processed_marks: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControllerCutoff:
        return cls(
            controller=str(data["controller"]),
            version=int(data["version"]),
            processed_until_ms=int(data["processed_until_ms"]),
            state_path=str(data["state_path"]),
            run_id=str(data["run_id"]),
            committed_at=str(data["committed_at"]),
            watermarks=dict(data.get("watermarks") or {}),
            processed_marks=int(data.get("processed_marks", 0)),
        )


def cutoff_variable_key(controller: str) -> str:
    return f"wm_controller__{controller}"


def read_cutoff(controller: str) -> ControllerCutoff | None:
    raw = Variable.get(cutoff_variable_key(controller), default=None)
    if raw in (None, ""):
        return None
    data = raw if isinstance(raw, dict) else json.loads(raw)
    return ControllerCutoff.from_json(data)


def commit_cutoff(new: ControllerCutoff, expected: ControllerCutoff | None) -> None:
    """Publish ``new`` if the Variable still holds ``expected`` (by version); see the module docstring."""
    current = read_cutoff(new.controller)
    current_version = current.version if current else 0
    expected_version = expected.version if expected else 0
    if current_version != expected_version:
        raise CutoffConflict(
            f"controller {new.controller!r}: the cut-off moved from version {expected_version} to "
            f"{current_version} while this run was computing; not overwriting it. A retry starts from "
            "the new cut-off."
        )
    if current is not None and new.processed_until_ms < current.processed_until_ms:
        raise CutoffConflict(
            f"controller {new.controller!r}: refusing to move processed_until_ms back from "
            f"{current.processed_until_ms} to {new.processed_until_ms}"
        )
    Variable.set(
        cutoff_variable_key(new.controller),
        json.dumps(new.to_json(), indent=2, sort_keys=True),
        description=f"Cut-off of watermark controller {new.controller!r} (airflow-provider-wm)",
    )
