"""The values a run reads and returns: events, upstream pane rows, the windows' state and the fired panes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_wm.core.windowing.modes import Timing
from airflow_provider_wm.core.windows import Window

__all__ = ["AggregationState", "Event", "FiredPane", "Pane", "RunResult", "UpstreamPane", "WindowState"]


@dataclass(frozen=True)
class Event:
    time_ms: int | None
    key: tuple[Any, ...]
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpstreamPane:
    """A pane row of an upstream aggregate as a rollup reads it; ``run`` is the upstream's version
    (``wm_run``) that wrote it, ``window`` ``None`` when the row has no valid window."""

    key: tuple[Any, ...]
    window: Window | None
    values: Mapping[str, Any]
    index: int
    retraction: bool = False
    run: int = 0

    def rank(self) -> tuple[int, int, bool]:
        """The live pane of a window is the row of highest rank."""
        return (self.run, self.index, not self.retraction)


@dataclass(frozen=True)
class FiredPane:
    """A pane as fired: what a retraction repeats."""

    window: Window
    timing: Timing
    index: int
    values: tuple[Any, ...]


@dataclass(frozen=True)
class WindowState:
    key: tuple[Any, ...]
    window: Window
    partial: tuple[Any, ...]
    pending: int = 0
    """Events added since the window's last firing."""
    on_time_fired: bool = False
    last_pane: FiredPane | None = None
    owed: tuple[FiredPane, ...] = ()


@dataclass(frozen=True)
class AggregationState:
    watermark_ms: int | None = None
    max_event_time_ms: int | None = None
    windows: tuple[WindowState, ...] = ()
    live: tuple[UpstreamPane, ...] = ()
    """A rollup's live upstream panes, of its open windows."""


@dataclass(frozen=True)
class Pane:
    key: tuple[Any, ...]
    window: Window
    values: tuple[Any, ...]
    timing: Timing
    index: int
    retraction: bool
    watermark_ms: int | None


@dataclass(frozen=True)
class RunResult:
    panes: list[Pane]
    late: list[tuple[Event | UpstreamPane, str]]
    state: AggregationState
    watermark_ms: int | None

    def pane_counts(self) -> dict[str, int]:
        counts = {t.value: 0 for t in Timing} | {"RETRACTION": 0}
        for pane in self.panes:
            counts["RETRACTION" if pane.retraction else pane.timing.value] += 1
        return counts
