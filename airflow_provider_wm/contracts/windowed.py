"""The windowed-aggregate job's request and manifest (one firing opportunity of an Apex windowed operator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_wm.contracts.codec import Contract
from airflow_provider_wm.contracts.jobs import DRIVER_OUTPUT_ROWS, JobManifest, JobRequest, UnreadableFile

__all__ = ["PaneCounts", "WindowedInput", "WindowedManifest", "WindowedRequest", "WindowedTotals"]


@dataclass(frozen=True)
class WindowedInput(Contract):
    """One input of a merge: its events, their time column and arrival column."""

    name: str
    events: str
    event_time: str
    arrival_column: str | None = None
    events_format: str = "parquet"


@dataclass(frozen=True)
class WindowedRequest(JobRequest):
    """Version ``version`` of a windowed aggregate: read the events that arrived in
    ``(arrival_from_ms, arrival_until_ms]`` (for a rollup: the upstream's pane versions in that range), merge
    them with the open windows of ``state_in``, fire, and write the panes, the late rows and ``state_out``.
    ``spec`` is :meth:`AggregationSpec.to_json`; ``source_watermark_ms`` the store's watermark the operator
    read (or the merged inputs' coalesced one). ``fired_hours``: report the hours of the windows that fired.
    ``driver_output_rows``: the most windows whose panes and state the job writes from its driver
    (:data:`~airflow_provider_wm.contracts.jobs.DRIVER_OUTPUT_ROWS`; 0: always with Spark). ``allow_missing_events``:
    an events path that does not exist is a run with no events (else the run fails, naming it)."""

    job: ClassVar[str] = "windowed_aggregate"
    pipeline: str
    run_id: str
    version: int
    spec: dict[str, Any]
    output: str
    late_output: str
    state_out: str
    round_out: str
    arrival_until_ms: int
    events: str | None = None
    inputs: list[WindowedInput] | None = None
    events_format: str = "parquet"
    event_time: str | None = None
    arrival_column: str | None = None
    arrival_from_ms: int | None = None
    previous_watermark_ms: int | None = None
    previous_max_event_time_ms: int | None = None
    source_watermark_ms: int | None = None
    state_in: str | None = None
    live_in: str | None = None
    live_out: str | None = None
    fired_hours: bool = False
    driver_output_rows: int = DRIVER_OUTPUT_ROWS
    allow_missing_events: bool = False


@dataclass(frozen=True)
class PaneCounts(Contract):
    EARLY: int = 0
    ON_TIME: int = 0
    LATE: int = 0
    RETRACTION: int = 0


@dataclass(frozen=True)
class WindowedTotals(Contract):
    events_read: int = 0
    events_aggregated: int = 0
    too_late: int = 0
    invalid_event_time: int = 0
    invalid_value: int = 0
    """Events with a valid time and NaN or +/-infinity in a column an aggregate reads, quarantined
    (``INVALID_VALUE``) instead of making their windows NaN or infinite; part of ``events_read``."""
    invalid_window: int = 0
    invalid_arrival: int = 0
    """Rows in the source whose arrival is null, unparseable or not a valid time: no run's arrival range holds
    them, so every run quarantines them (``INVALID_ARRIVAL``) and counts them again until they are fixed;
    not part of ``events_read``."""
    panes: PaneCounts = field(default_factory=PaneCounts)
    windows_open: int = 0
    windows_purged: int = 0
    sums_out_of_range: int = 0
    """Panes fired (retractions aside) with a sum of integers past a 64-bit integer, written as null (the state
    keeps the exact sum: ``core.windowing.Aggregate.finish``)."""

    def table(self) -> str:
        """The run's figures, one per line, for the task log::

        events read                  120
        aggregated                   118
        ...
        """
        rows = [
            ("events read", self.events_read),
            ("aggregated", self.events_aggregated),
            ("too late (dropped)", self.too_late),
            ("invalid event time", self.invalid_event_time),
            ("invalid value", self.invalid_value),
            ("invalid arrival", self.invalid_arrival),
            *((f"panes {timing}", count) for timing, count in self.panes.to_json().items()),
            ("windows open", self.windows_open),
            ("windows purged", self.windows_purged),
            ("sums out of range", self.sums_out_of_range),
        ]
        return "\n".join(f"{name:<22}{count:>12}" for name, count in rows)


@dataclass(frozen=True)
class WindowedManifest(JobManifest):
    """The run's watermark, what it read and fired, and where the new state (and a rollup's live panes) are;
    ``late_output`` is set when the run wrote too-late or invalid rows; ``fired_hours_ms`` (when the request
    asked for it) the distinct UTC hours (epoch ms, ascending) in which the windows of the run's panes start,
    a global window's excepted; ``writer`` what wrote the panes and the state: ``arrow`` (the job's driver, for a
    run of at most ``driver_output_rows`` windows) or ``spark`` (``None``: the run wrote neither)."""

    pipeline: str
    run_id: str
    version: int
    watermark_ms: int | None
    previous_watermark_ms: int | None
    max_event_time_ms: int | None
    arrival_from_ms: int | None
    arrival_until_ms: int | None
    totals: WindowedTotals
    output: str
    late_output: str | None = None
    state_path: str | None = None
    live_path: str | None = None
    duration_s: float = 0.0
    fired_hours_ms: list[int] | None = None
    writer: str | None = None
    unreadable_files: list[UnreadableFile] = field(default_factory=list)
    status: str = "succeeded"
    job: str = "windowed_aggregate"
