"""Cut-off state carried between runs: the asset state store (primary), an Airflow Variable (mirror) and XCom.

Three documents: a controller's cut-off (``wm_controller__<controller>``), an incremental-partitions
pipeline's state (``wm_partitions__<pipeline>``, see :class:`PipelineState`) and a windowed aggregate's
state pointer and cut-offs (``wm_windows__<pipeline>``, see :class:`WindowedState`). When the operator has an
``asset``, the document is kept in that asset's state store (AIP-103) under ``controller_cutoff/<controller>``,
``partition_state/<pipeline>`` or ``windowed_state/<pipeline>`` (see :class:`CommittedState`); the Variable holds
the same document, a copy a person can read on the UI's Variables page::

    {"controller": "orders", "version": 7, "processed_until_ms": ..., "processed_marks": 1234,
     "state_path": ".../state/<round>",
     "watermarks": {"orders": {"lower_ms": ..., "upper_ms": ..., "computed_at_ms": ...}},
     "run_id": "scheduled__...", "committed_at": "2026-01-01T01:00:00+00:00"}

Rules:
- It is written last, and only when the task succeeded; a failed or retried run finds it unchanged and
  starts from the same state.
- Neither store has compare-and-set, so the commit is a check-then-write: the version read at the start must
  still be the current one, otherwise another run committed in between and this one fails with
  :class:`CutoffConflict` (its retry starts from the newer cut-off). The operator also limits itself to
  one running task instance per DAG (``max_active_tis_per_dag=1``), so the check is a second line.
- ``processed_until_ms`` never goes backwards.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airflow.sdk import Asset

from airflow_provider_wm.committed_state import (
    AssetStateAccessor,
    CommittedState,
    CutoffConflict,
    StateDamaged,
    StateKind,
    read_state_variable,
)

__all__ = [
    "CONTROLLER_STATE",
    "PIPELINE_STATE",
    "WINDOWED_STATE",
    "AssetStateAccessor",
    "CommittedState",
    "ControllerCutoff",
    "CutoffConflict",
    "PipelineState",
    "StateDamaged",
    "StateKind",
    "WindowedState",
    "commit_cutoff",
    "commit_pipeline_state",
    "commit_windowed_state",
    "covered_run",
    "cutoff_variable_key",
    "pipeline_variable_key",
    "read_cutoff",
    "read_pipeline_state",
    "read_state_variable",
    "read_windowed_state",
    "windowed_variable_key",
]


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
    return read_state_variable(cutoff_variable_key(controller), ControllerCutoff.from_json)


def commit_cutoff(
    new: ControllerCutoff, expected: ControllerCutoff | None, asset_state: AssetStateAccessor | None = None
) -> None:
    """Publish ``new`` if the committed cut-off is still ``expected`` (by version); see the module docstring."""
    CommittedState(CONTROLLER_STATE, new.controller, asset_state).commit(new, expected)


def _controller_forward(what: str, current: ControllerCutoff, new: ControllerCutoff) -> None:
    if new.processed_until_ms < current.processed_until_ms:
        raise CutoffConflict(
            f"{what}: refusing to move processed_until_ms back from "
            f"{current.processed_until_ms} to {new.processed_until_ms}"
        )


@dataclass(frozen=True)
class PipelineState:
    """The committed state of an incremental-partitions pipeline, in the Variable
    ``wm_partitions__<pipeline>`` (and mirrored in XCom, the store and the asset state store)::

        {"pipeline": "orders_daily", "version": 3, "run_id": "...", "committed_at": "...",
         "spec": {"pieces": [["daily", "2026-01-01", "P0D"]], "timezone": "UTC", ...},
         "units": ["eu", "us"], "state": {"version": 1, "units": {"eu": [[start, end, "s", null]], ...}},
         "processed_until_ms": ...}

    ``state`` is :meth:`PartitionState.to_json`: runs of consecutive partitions with equal status, so ten
    years of hourly partitions stay a few hundred bytes. The same version rule as the controller's cut-off
    applies: it is written last, only on success, and only if nobody committed in between.
    ``processed_until_ms`` is the logical time of the run that committed it; it never goes backwards, and a
    run at or before it has nothing to do (None in documents written before it existed).
    """

    pipeline: str
    version: int
    run_id: str
    committed_at: str
    spec: dict[str, Any]
    units: list[str]
    state: dict[str, Any]
    processed_until_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineState:
        return cls(
            pipeline=str(data["pipeline"]),
            version=int(data["version"]),
            run_id=str(data["run_id"]),
            committed_at=str(data["committed_at"]),
            spec=dict(data["spec"]),
            units=[str(u) for u in data.get("units") or []],
            state=dict(data["state"]),
            processed_until_ms=None if data.get("processed_until_ms") is None else int(data["processed_until_ms"]),
        )


def pipeline_variable_key(pipeline: str) -> str:
    return f"wm_partitions__{pipeline}"


def read_pipeline_state(pipeline: str) -> PipelineState | None:
    return read_state_variable(pipeline_variable_key(pipeline), PipelineState.from_json)


def commit_pipeline_state(
    new: PipelineState, expected: PipelineState | None, asset_state: AssetStateAccessor | None = None
) -> None:
    """Publish ``new`` if the committed state is still ``expected`` (by version) and its cut-off does not go back."""
    CommittedState(PIPELINE_STATE, new.pipeline, asset_state).commit(new, expected)


def _pipeline_forward(what: str, current: PipelineState, new: PipelineState) -> None:
    before = current.processed_until_ms
    if before is not None and (new.processed_until_ms is None or new.processed_until_ms < before):
        raise CutoffConflict(
            f"{what}: refusing to move processed_until_ms back from {before} to {new.processed_until_ms}"
        )


@dataclass(frozen=True)
class WindowedState:
    """The committed state of a windowed aggregate, in the Variable ``wm_windows__<pipeline>``::

        {"pipeline": "orders_5m", "version": 4, "run_id": "...", "committed_at": "...",
         "state_path": ".../state/v4", "watermark_ms": ..., "max_event_time_ms": ...,
         "arrival_until_ms": ..., "spec": {...}}

    ``state_path`` points at the Spark job's snapshot of the open windows (a new folder per version);
    ``arrival_until_ms`` is the input cut-off: the next run reads events that arrived after it. A rollup also
    has ``upstream_version``, the upstream's last version whose panes it has read, and ``live_path``, its
    snapshot of the upstream's live panes. A pipeline without an arrival column, whose runs each read the folder
    of their own data interval, has ``read_intervals``: the intervals read so far as a few ``[start, end)`` ranges
    (:func:`~airflow_provider_wm.core.windowing.with_interval_read`), so an older interval whose run goes after a
    newer one is still read, and once only. The same version rule as the others applies, and neither the
    watermark nor an input cut-off goes backwards.
    """

    pipeline: str
    version: int
    run_id: str
    committed_at: str
    state_path: str | None
    watermark_ms: int | None
    max_event_time_ms: int | None
    arrival_until_ms: int | None
    spec: dict[str, Any]
    upstream_version: int | None = None
    live_path: str | None = None
    read_intervals: tuple[tuple[int, int], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        if self.read_intervals is not None:
            document["read_intervals"] = [list(interval) for interval in self.read_intervals]
        return document

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WindowedState:
        def optional_int(name: str) -> int | None:
            return None if data.get(name) is None else int(data[name])

        return cls(
            pipeline=str(data["pipeline"]),
            version=int(data["version"]),
            run_id=str(data["run_id"]),
            committed_at=str(data["committed_at"]),
            state_path=data.get("state_path"),
            watermark_ms=optional_int("watermark_ms"),
            max_event_time_ms=optional_int("max_event_time_ms"),
            arrival_until_ms=optional_int("arrival_until_ms"),
            spec=dict(data["spec"]),
            upstream_version=optional_int("upstream_version"),
            live_path=data.get("live_path"),
            read_intervals=(
                None
                if data.get("read_intervals") is None
                else tuple((int(start), int(end)) for start, end in data["read_intervals"])
            ),
        )


def windowed_variable_key(pipeline: str) -> str:
    return f"wm_windows__{pipeline}"


def read_windowed_state(pipeline: str) -> WindowedState | None:
    return read_state_variable(windowed_variable_key(pipeline), WindowedState.from_json)


def commit_windowed_state(
    new: WindowedState, expected: WindowedState | None, asset_state: AssetStateAccessor | None = None
) -> None:
    """Publish ``new`` if the committed state is still ``expected`` (by version) and nothing goes backwards."""
    CommittedState(WINDOWED_STATE, new.pipeline, asset_state).commit(new, expected)


def _windowed_forward(what: str, current: WindowedState, new: WindowedState) -> None:
    for name in ("watermark_ms", "arrival_until_ms", "upstream_version"):
        before, after = getattr(current, name), getattr(new, name)
        if before is not None and (after is None or after < before):
            raise CutoffConflict(f"{what}: refusing to move {name} back from {before} to {after}")


def covered_run(
    log: Any,
    context: Any,
    asset: Asset | None,
    pipeline: str,
    committed: PipelineState | WindowedState,
    covered_until: str,
    now: str,
) -> dict[str, Any]:
    """What a run at or before the committed cut-off does (catch-up, or a manual run of an older interval): it
    logs which run covered it, changes nothing, and returns ``covered_by`` for XCom. Airflow emits an asset event
    for every successful task, so that event says the version did not change.

    Example: version 7 was committed by ``scheduled__2026-01-05T03:00:00+00:00`` up to 04:00; the run of the
    interval ending at 02:00 returns ``{"pipeline": "orders", "version": 7, "covered_by": "scheduled__..."}``.
    """
    log.info(
        "Pipeline %s already ran up to %s (version %s, run %s); this run (logical time %s) has nothing to do",
        pipeline,
        covered_until,
        committed.version,
        committed.run_id,
        now,
    )
    summary = {"pipeline": pipeline, "version": committed.version, "covered_by": committed.run_id}
    if asset is not None:
        context["outlet_events"][asset].extra = summary
    return summary


CONTROLLER_STATE: StateKind[ControllerCutoff] = StateKind(
    "controller",
    "wm_controller__",
    "controller_cutoff",
    ControllerCutoff.from_json,
    _controller_forward,
    "Cut-off of watermark controller {name!r} (airflow-provider-wm)",
    2,
)
PIPELINE_STATE: StateKind[PipelineState] = StateKind(
    "pipeline",
    "wm_partitions__",
    "partition_state",
    PipelineState.from_json,
    _pipeline_forward,
    "Partition state of incremental pipeline {name!r} (airflow-provider-wm)",
    None,
)
WINDOWED_STATE: StateKind[WindowedState] = StateKind(
    "windowed pipeline",
    "wm_windows__",
    "windowed_state",
    WindowedState.from_json,
    _windowed_forward,
    "State of windowed aggregate {name!r} (airflow-provider-wm)",
    2,
)
