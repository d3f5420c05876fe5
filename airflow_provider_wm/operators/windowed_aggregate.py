"""WindowedAggregateOperator: event-time windows with a watermark, lateness, triggers and accumulation modes,
one firing opportunity per DAG run (Apex), computed by a Spark job and committed only on success."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_wm.arguments import count_argument, emit_partition_keys_argument, kept_apart, require_bool
from airflow_provider_wm.contracts import (
    DRIVER_OUTPUT_ROWS,
    WatermarkReached,
    WatermarkRecord,
    WindowedManifest,
    WindowedRequest,
    describe_reached,
)
from airflow_provider_wm.core.asset_partitions import hour_keys
from airflow_provider_wm.core.coalescing import check_watermarks
from airflow_provider_wm.core.names import column_name
from airflow_provider_wm.core.times import MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    Accumulation,
    Aggregate,
    AggregationSpec,
    LateData,
    MergedWatermark,
    SqlAggregate,
    StoreWatermark,
    UpstreamPanes,
    WatermarkPolicy,
    aggregated_columns,
    enum_member,
    interval_read,
    rollup_watermark,
    upstream_streams,
    with_interval_read,
)
from airflow_provider_wm.core.windows import WindowFn
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name
from airflow_provider_wm.lineage import RunLineage
from airflow_provider_wm.operators.base import (
    JobRound,
    Outcome,
    StatefulSparkOperator,
    run_interval,
    template_fields_of,
)
from airflow_provider_wm.operators.windowed_arguments import (
    Duration,
    check_rollup_arguments,
    events_format_argument,
    global_window,
    keys_argument,
    output_paths,
    output_stream_argument,
    parse_aggregates,
    parse_merge,
    parse_watermark,
    read_per_run,
    session,
    sliding,
    source_locations,
    tumbling,
)
from airflow_provider_wm.state import WINDOWED_STATE, WindowedState, covered_run, read_windowed_state
from airflow_provider_wm.timeutil import duration_ms, format_ms

__all__ = [
    "UpstreamPanes",
    "WindowedAggregateOperator",
    "global_window",
    "session",
    "sliding",
    "tumbling",
]


class WindowedAggregateOperator(StatefulSparkOperator[WindowedState]):
    """Aggregate events per event-time window, incrementally across DAG runs.

    Each run reads the events that arrived since the previous successful run (``arrival_column`` between
    the committed input cut-off and the run's logical time; or, without an arrival column, whatever
    ``events`` holds, a path templated per run), takes the watermark (the store's stream watermark or
    bounded out-of-orderness), and submits ``spark_jobs/windowed_aggregate.py``, which writes the panes
    (``window_start, window_end, <keys>, <aggregates>, pane, pane_index, retraction, watermark_ms, run_id``
    under ``wm_run=<version>``), the too-late and invalid events (``late_output``), and a new snapshot of
    the open windows. The rules are :mod:`airflow_provider_wm.core.windowing`'s.

    A rollup (window propagation, Apex) reads the panes of an upstream aggregate instead of events: pass
    ``upstream`` (the upstream operator in the same DAG, or ``UpstreamPanes(pipeline, window, accumulation)``)
    and ``window=None`` to keep the upstream's windows, or a coarser ``tumbling(...)`` that is a whole number of
    them (checked when the DAG is parsed). Each run reads the pane rows of the upstream versions committed
    since its previous run; a retraction undoes the pane it repeats and a newer pane of an upstream window
    replaces the older one, so a rollup of an upstream with early and late panes stays exact. Its watermark
    is the upstream's output stream, never ahead of what the upstream has committed (example: the
    operator's docs page, "Rollups: aggregating an aggregate's panes").

    A merge of several event streams (Apex's MergeWindowedOperator) gives ``inputs`` instead of ``events``:
    each input's events go to the same windows, aggregates name their input (``count(orders.*)``,
    ``sum(orders.amount)``), so each pane holds both inputs' aggregates side by side and ``keys`` join them
    within the window. The watermark is the minimum of the inputs' stream watermarks over those that are not
    idle (``idle_timeout``; ``when_all_idle``, as :class:`StreamWatermarkSensor`); see the docs page, "Merging
    streams".

    Only after the job succeeded the operator commits: XCom (the manifest summary), an asset event (when
    ``asset`` is given) and, last, the state (state pointer, watermark, input cut-off) to the asset state store
    (``windowed_state/<pipeline>``, with ``asset``) and the Variable ``wm_windows__<pipeline>``, checked against the
    version read at the start. A failed run
    commits nothing: its retry starts from the same state and replaces its own output partition.

    Example: revenue per region in 5-minute windows, one minute of lateness, watermark from the store::

        WindowedAggregateOperator(
            task_id="revenue_5m", pipeline="revenue_5m",
            events="/data/orders", event_time="event_time", arrival_column="ingested_at", keys=["region"],
            window=tumbling("PT5M"), aggregates={"orders": "count(*)", "revenue": "sum(amount)"},
            watermark={"stream": "orders"}, allowed_lateness="PT1M",
            output="/data/revenue_5m", store_path="/data/wm-store",
        )

    :param pipeline: the aggregate's name (its Variable, its folder in the store).
    :param events: the events dataset (``events_format``: ``"parquet"``, default, ``"orc"`` or ``"json"``); for a
        rollup, the upstream's panes (default: the upstream operator's ``output``). Templated.
    :param event_time: the event-time column (timestamp, date, epoch ms or ISO-8601 string); not for rollups.
    :param window: ``tumbling(...)``, ``sliding(...)``, ``session(...)`` or ``global_window()``; for a rollup
        ``None`` (the upstream's windows) or a tumbling multiple of the upstream's.
    :param upstream: a rollup's upstream aggregate: its operator, or ``UpstreamPanes(...)`` in another DAG.
    :param inputs: a merge's inputs: name -> ``{"events", "event_time", "watermark"[, "arrival_column",
        "events_format"]}`` (each input's ``events`` path is templated; the rest is checked at parse time).
    :param idle_timeout: a merge: how long an input's watermark may stay put before the input is idle.
    :param when_all_idle: a merge: ``"wait"`` (default) or ``"highest"`` when every input is idle.
    :param aggregates: output name -> ``count(*)``, ``sum(col)``, ... or a :class:`SqlAggregate`.
    :param keys: grouping columns (required by session windows).
    :param watermark: ``{"stream": name[, "wm_key": key]}`` or ``{"max_delay": duration}``; a rollup's
        defaults to the upstream's output stream.
    :param allowed_lateness: how long after the watermark passed a window late data still updates it.
    :param late_data: when an event is too late, for the horizon ``H = previous watermark - allowed_lateness``:
        ``"event_time"`` (default, Apex) when its time is below ``H`` (reason ``TOO_LATE``); ``"window_end"``
        (Spark Structured Streaming, Flink, Beam) only when its window has closed, ``end <= H`` (reason
        ``WINDOW_CLOSED``); for session windows, when the event's own window ``[t, t + gap)`` has closed, as in
        Spark: such an event is dropped even if it would merge into a session that is still open, and an event
        whose own window is open counts and may extend a stored open session.
    :param accumulation: ACCUMULATING (default), DISCARDING or ACCUMULATING_AND_RETRACTING.
    :param early_firing: fire EARLY panes for incomplete windows that received data in the run.
    :param late_firing: fire a LATE pane every run a complete window receives data (default); when off,
        one LATE pane when the window is purged.
    :param early_firing_count: fire an EARLY pane once an incomplete window has received this many events
        since its last firing, in this run or over several (instead of ``early_firing``'s every run).
    :param late_firing_count: fire a LATE pane once a complete window has received this many late events since
        its last firing (and when it is purged with any), instead of every run that brings late data.
    :param fire_only_updated_panes: skip a pane equal to the window's last one (not with DISCARDING).
    :param arrival_column: the column (or partition column) that says when an event arrived. A row whose
        arrival is null, unparseable or not a valid time falls in no run's range: every run quarantines it
        (``INVALID_ARRIVAL`` in ``late_output``), counts it (``invalid_arrival``) and logs a warning, until it
        is fixed at the source; it is never aggregated, and never dropped silently.
    :param output: the panes dataset. Templated. ``late_output`` defaults to ``<output>_late``.
    :param store_path: the watermark store (watermarks, requests, manifests). Templated.
    :param logical_time: the run's input cut-off, default ``data_interval_end``. Templated.
    :param asset: the Asset this aggregate produces (outlet, asset event, asset state).
    :param output_stream: the derived stream (default: the pipeline's name) to which each successful run
        publishes the watermark of what it emitted: the last window end at or before the watermark
        (:meth:`WindowFn.output_watermark`). Downstream DAGs wait on it with ``StreamWatermarkSensor``.
    :param emit_partition_keys: the asset's events carry partition keys (Airflow's partitioned assets): one per
        UTC hour in which a window that fired in the run (any pane) starts, ``%Y-%m-%dT%H:%M:%S``
        (:func:`~airflow_provider_wm.core.asset_partitions.hour_keys`). Off by default: Airflow does not start
        DAGs with a plain asset schedule on keyed events.
    :param driver_output_rows: up to this many windows (default 500,000), the job writes the run's panes and
        state (and a rollup's live panes) from its driver, with pyarrow through fsspec, in one Spark action instead
        of one Spark write each; more windows, or a folder fsspec cannot write, are written by Spark. ``0``: always
        by Spark (for storage only Spark's Hadoop file systems reach). The manifest's ``writer`` says which wrote
        them.
    :param allow_missing_events: an ``events`` path that does not exist is a run with no events, with a warning.
        Off by default: the run fails naming the path, as a mistyped path would otherwise advance the cut-off past
        the events that arrived there. For a per-run folder that the producer writes only when it has events; an
        existing empty folder is a run with no events either way. (A merge's inputs must each have written data.)
    """

    template_fields: Sequence[str] = template_fields_of("events", "inputs", "output_path", "late_output")
    state_kind = WINDOWED_STATE
    ui_color = "#fdf1e1"
    output_path: str

    def __init__(
        self,
        *,
        pipeline: str,
        window: WindowFn | None,
        aggregates: Mapping[str, str | SqlAggregate] | Sequence[Aggregate | SqlAggregate],
        output: str,
        store_path: str,
        events: str | None = None,
        event_time: str | None = None,
        watermark: Mapping[str, Any] | WatermarkPolicy | None = None,
        upstream: UpstreamPanes | WindowedAggregateOperator | None = None,
        inputs: Mapping[str, Mapping[str, Any]] | None = None,
        idle_timeout: Duration | None = None,
        when_all_idle: str | None = None,
        keys: Sequence[str] = (),
        allowed_lateness: Duration = 0,
        accumulation: str | Accumulation = Accumulation.ACCUMULATING,
        early_firing: bool = False,
        late_firing: bool = True,
        early_firing_count: int | None = None,
        late_firing_count: int | None = None,
        fire_only_updated_panes: bool = False,
        late_data: str | LateData = LateData.EVENT_TIME,
        arrival_column: str | None = None,
        events_format: str = "parquet",
        late_output: str | None = None,
        output_stream: str | None = None,
        emit_partition_keys: bool = False,
        driver_output_rows: int = DRIVER_OUTPUT_ROWS,
        allow_missing_events: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(store_path=store_path, **kwargs)
        self.emit_partition_keys = emit_partition_keys_argument(emit_partition_keys, self.asset)
        self.driver_output_rows = count_argument(driver_output_rows, "driver_output_rows")
        require_bool(
            early_firing=early_firing,
            late_firing=late_firing,
            fire_only_updated_panes=fire_only_updated_panes,
            allow_missing_events=allow_missing_events,
        )
        self.allow_missing_events = allow_missing_events
        self.pipeline = validate_name(pipeline, "pipeline")
        self.output_stream = validate_name(pipeline if output_stream is None else output_stream, "output_stream")
        upstream_panes = self._upstream_panes(upstream)
        if isinstance(upstream, WindowedAggregateOperator):
            events = upstream.output_path if events is None else events
            watermark = {"stream": upstream.output_stream} if watermark is None else watermark
        elif upstream_panes is not None and watermark is None:
            watermark = {"stream": upstream_panes.pipeline}
        events_format = events_format_argument(events_format)
        self.inputs, merged = parse_merge(
            inputs, idle_timeout, when_all_idle, events=events, event_time=event_time, watermark=watermark,
            upstream=upstream, arrival_column=arrival_column,
            events_format=None if events_format == "parquet" else events_format,
        )  # fmt: skip
        if merged is not None:
            watermark = merged
        elif upstream_panes is None and event_time is None:
            raise ValueError("event_time=None: name the event-time column (or give upstream= to roll up panes)")
        elif upstream_panes is not None:
            check_rollup_arguments(upstream_panes, self.pipeline, event_time, arrival_column, events_format)
        if watermark is None:
            raise ValueError("watermark=None: give {'stream': name} or {'max_delay': duration}")
        self.late_output = output_paths(output, late_output, store_path, source_locations(self.inputs, events))
        self.spec = AggregationSpec(
            window=window,
            aggregates=parse_aggregates(aggregates, [i["name"] for i in self.inputs]),
            keys=keys_argument(keys),
            watermark=parse_watermark(watermark),
            allowed_lateness_ms=duration_ms(allowed_lateness, "allowed_lateness"),
            accumulation=enum_member(accumulation, Accumulation, "accumulation"),
            early_firing=early_firing,
            late_firing=late_firing,
            early_firing_count=early_firing_count,
            late_firing_count=late_firing_count,
            fire_only_updated_panes=fire_only_updated_panes,
            upstream=upstream_panes,
            late_data=enum_member(late_data, LateData, "late_data"),
        )
        output_stream_argument(self.output_stream, self.spec.watermark)
        for argument, column in (("event_time", event_time), ("arrival_column", arrival_column)):
            if column is not None:
                column_name(column, argument)
        if upstream_panes is None and not self.inputs:
            read_per_run(events, arrival_column)  # type: ignore[arg-type]
        self.events, self.event_time, self.events_format = events, event_time, events_format
        self.arrival_column = arrival_column
        self.output_path = output  # BaseOperator.output is the XComArg

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"pipeline": self.pipeline}

    def panes(self) -> UpstreamPanes:
        """What a rollup of this aggregate reads."""
        return UpstreamPanes(self.pipeline, self.spec.output_window, self.spec.accumulation)

    @staticmethod
    def _upstream_panes(upstream: Any) -> UpstreamPanes | None:
        if upstream is None or isinstance(upstream, UpstreamPanes):
            return upstream
        if isinstance(upstream, WindowedAggregateOperator):
            return upstream.panes()
        raise ValueError(f"upstream={upstream!r} must be a WindowedAggregateOperator or UpstreamPanes(...)")

    def state_name(self) -> str:
        return self.pipeline

    def locations(self) -> dict[str, str]:
        sources = source_locations(self.inputs, self.events)
        return {**super().locations(), **sources, "output": self.output_path, "late_output": self.late_output}

    def check_rendered(self) -> None:
        sources = source_locations(self.inputs, self.events)
        kept_apart({"output": self.output_path, "late_output": self.late_output}, sources)

    def read_committed(self, context: Context) -> WindowedState | None:
        committed = super().read_committed(context)
        self._check_spec_unchanged(committed)
        return committed

    def lineage(self, document: WindowedState, summary: dict[str, Any] | None) -> RunLineage:
        """Events in, panes and late rows out; late: too-late events, quarantined: invalid time, value, window or
        arrival."""
        watermark = document.watermark_ms
        output_ms = None if watermark is None else self.spec.output_window.output_watermark(watermark)
        invalid = ("invalid_event_time", "invalid_value", "invalid_window", "invalid_arrival")
        return RunLineage(
            kind="windowed_aggregate",
            name=self.pipeline,
            inputs=[i["events"] for i in self.inputs] or [self.events],
            outputs=[self.output_path, self.late_output],
            version=document.version,
            cutoff_ms=document.arrival_until_ms,
            watermark_ms=watermark,
            stream_watermarks_ms={} if output_ms is None else {self.output_stream: output_ms},
            late=int(summary["too_late"]) if summary else None,
            quarantined=sum(int(summary[name]) for name in invalid) if summary else None,
        )

    def snapshot_paths(self, committed: WindowedState) -> dict[str, str | None]:
        return {"state_path": committed.state_path, "live_path": committed.live_path}

    def covered_until(self, committed: WindowedState) -> int | None:
        return committed.arrival_until_ms

    @property
    def reads_per_run(self) -> bool:
        """Whether an input has no arrival column: each run reads the folder of its own data interval (``events``
        templated per run), which a later run does not read."""
        if self.spec.upstream is not None:
            return False
        if self.inputs:
            return any(spec.get("arrival_column") is None for spec in self.inputs)
        return self.arrival_column is None

    def is_covered(self, context: Context, committed: WindowedState, now_ms: int) -> bool:
        """With arrival columns only, the base's rule (a later run read what arrived up to it). Reading per run, a
        run is done only when its own interval was read (:func:`~airflow_provider_wm.core.windowing.interval_read`):
        the run of 02:00 that goes after the run of 03:00 still reads the folder of 02:00 (a state committed before
        ``read_intervals`` existed keeps the base's rule)."""
        if not self.reads_per_run or committed.read_intervals is None:
            return super().is_covered(context, committed, now_ms)
        return interval_read(committed.read_intervals, run_interval(context, now_ms))

    def covered(self, context: Context, committed: WindowedState, until_ms: int | None, now_ms: int) -> dict[str, Any]:
        covered = covered_run(
            self.log, context, self.asset, self.pipeline, committed, format_ms(until_ms), format_ms(now_ms)
        )
        return {**covered, "watermark": format_ms(committed.watermark_ms), "watermark_ms": committed.watermark_ms}

    def compute(self, run: JobRound[WindowedState]) -> Outcome[WindowedState]:
        committed, store, version = run.committed, run.store, run.version
        source_watermark = self._source_watermark(store, run.now_ms)
        arrival_from = committed.arrival_until_ms if committed else None
        # an older interval read after a newer one (reading per run) reads no arrivals: the newer run read them
        arrival_until = run.now_ms if arrival_from is None else max(run.now_ms, arrival_from)
        rollup: dict[str, Any] = {}
        if self.spec.upstream is not None:
            rollup, source_watermark = self._rollup_inputs(store, committed, version, source_watermark)
        fields: dict[str, Any] = {
            "pipeline": self.pipeline,
            "run_id": run.run_id,
            "version": version,
            "spec": self.spec.to_json(),
            "events": self.events,
            "inputs": self.inputs or None,
            "events_format": self.events_format,
            "event_time": self.event_time,
            "arrival_column": self.arrival_column,
            "arrival_from_ms": arrival_from,
            "arrival_until_ms": arrival_until,
            "previous_watermark_ms": committed.watermark_ms if committed else None,
            "previous_max_event_time_ms": committed.max_event_time_ms if committed else None,
            "source_watermark_ms": source_watermark,
            "state_in": committed.state_path if committed else None,
            "state_out": store.pipeline_url(self.pipeline, "state", f"v{version}"),
            "output": self.output_path,
            "late_output": self.late_output,
            "round_out": store.pipeline_url(self.pipeline, "runs", f"v{version}"),
            "fired_hours": self.emit_partition_keys,
            "driver_output_rows": self.driver_output_rows,
            "allow_missing_events": self.allow_missing_events,
            **rollup,
        }
        request = WindowedRequest.from_json(fields)  # a rendered template of the wrong type fails here
        self.log.info(
            "Run v%s of %s: arrivals (%s, %s], watermark before %s, store watermark %s",
            version,
            self.pipeline,
            format_ms(arrival_from),
            format_ms(arrival_until),
            format_ms(committed.watermark_ms if committed else None),
            format_ms(source_watermark),
        )
        manifest = self.run_job(
            request, WindowedManifest, f"windowed aggregate {self.pipeline!r}", f"wm-windows-{self.pipeline}"
        )
        self._log_manifest(manifest)
        document = WindowedState(
            pipeline=self.pipeline,
            version=version,
            run_id=run.run_id,
            committed_at=dt.datetime.now(dt.UTC).isoformat(),
            state_path=manifest.state_path or (committed.state_path if committed else None),
            watermark_ms=manifest.watermark_ms,
            max_event_time_ms=manifest.max_event_time_ms,
            arrival_until_ms=arrival_until,
            spec=self.spec.to_json(),
            upstream_version=rollup.get("arrival_until_ms"),
            live_path=manifest.live_path or (committed.live_path if committed else None),
            read_intervals=self._read_intervals(run) if self.reads_per_run else None,
        )
        totals = manifest.totals.to_json()
        summary: dict[str, Any] = {
            "pipeline": self.pipeline,
            "version": version,
            "watermark": format_ms(manifest.watermark_ms),
            "watermark_ms": manifest.watermark_ms,
            "arrivals": [format_ms(arrival_from), format_ms(arrival_until)],
            **totals,
            "output": self.output_path,
            "late_output": manifest.late_output,
        }
        if rollup:
            summary["upstream_versions"] = [rollup["arrival_from_ms"], rollup["arrival_until_ms"]]
        extra = {
            "pipeline": self.pipeline,
            "version": version,
            "watermark": summary["watermark"],
            "watermark_ms": summary["watermark_ms"],
            "panes": totals["panes"],
            "too_late": totals["too_late"],
        }
        keys = hour_keys(manifest.fired_hours_ms or []) if self.emit_partition_keys else []
        if keys:
            self.log.info("The asset event carries %s partition keys (hours of fired windows): %s", len(keys), keys)
        return Outcome(document, summary, extra, keys)

    @staticmethod
    def _read_intervals(run: JobRound[WindowedState]) -> tuple[tuple[int, int], ...]:
        """The committed intervals read and this run's (a state from before ``read_intervals``: everything up to
        its cut-off, the rule it was committed under)."""
        committed = run.committed
        read: Sequence[tuple[int, int]] = ()
        if committed is not None and committed.read_intervals is not None:
            read = committed.read_intervals
        elif committed is not None and committed.arrival_until_ms is not None:
            read = [(MIN_TIME_MS, committed.arrival_until_ms)]
        return tuple(with_interval_read(read, run_interval(run.context, run.now_ms)))

    def publish_outputs(self, run: JobRound[WindowedState], outcome: Outcome[WindowedState]) -> None:
        assert outcome.document is not None
        self._publish_output_watermark(run.store, outcome.document)

    def mirror_document(self, document: WindowedState, summary: dict[str, Any] | None) -> dict[str, Any]:
        return {**document.to_json(), "kind": "windowed", "dag_id": self.dag_id, "last_summary": summary}

    def _publish_output_watermark(self, store: WatermarkStoreHook, document: WindowedState) -> None:
        """The derived stream's watermark: every window ending at or before it has fired ON_TIME (monotone)."""
        if document.watermark_ms is None or document.arrival_until_ms is None:
            return
        output_ms = self.spec.output_window.output_watermark(document.watermark_ms)
        if output_ms is None:
            return
        record = WatermarkRecord.derived(
            self.output_stream, output_ms, computed_at_ms=document.arrival_until_ms, run_id=document.run_id,
            pipeline=self.pipeline, dag_id=self.dag_id, upstream=upstream_streams(self.spec.watermark),
        )  # fmt: skip
        store.publish(record.to_json())

    def _check_spec_unchanged(self, committed: WindowedState | None) -> None:
        """:meth:`AggregationSpec.changes_since` the committed version must be empty."""
        changes = {} if committed is None else self.spec.changes_since(committed.spec)
        if committed is not None and changes:
            before, after = zip(*changes.values(), strict=True)
            raise ValueError(
                f"pipeline {self.pipeline!r}: {', '.join(changes)} changed since version {committed.version} "
                f"({list(before)} -> {list(after)}); the open windows cannot be carried over. Use a new pipeline "
                f"name, or delete its state (the Variable wm_windows__{self.pipeline} and its asset state store key "
                f"windowed_state/{self.pipeline}) to start over."
            )

    def _rollup_inputs(
        self, store: WatermarkStoreHook, committed: WindowedState | None, version: int, source_watermark: int | None
    ) -> tuple[dict[str, Any], int | None]:
        """A rollup's request fields (the upstream versions to read, its live panes) and its watermark: the
        store's, but never past the output watermark of what the upstream has committed (the upstream publishes
        its output stream before its Variable)."""
        upstream = self.spec.upstream
        assert upstream is not None
        source = read_windowed_state(upstream.pipeline)
        mismatch = None if source is None else upstream.differs_from(source.spec)
        if mismatch is not None:
            declared, actual = mismatch
            raise ValueError(
                f"upstream={upstream.pipeline!r} is declared with {declared} but its committed spec has {actual}"
            )
        consumed = committed.upstream_version if committed else None
        until = source.version if source else (consumed or 0)
        committed_ms = source.watermark_ms if source is not None else None
        watermark = rollup_watermark(source_watermark, upstream.window, committed_ms)
        self.log.info(
            "Rolling up %s: upstream versions (%s, %s], watermark %s (store %s, upstream committed %s)",
            upstream.pipeline, consumed, until, format_ms(watermark), format_ms(source_watermark),
            format_ms(committed_ms),
        )  # fmt: skip
        fields = {
            "event_time": "window_start",
            "arrival_column": None,
            "arrival_from_ms": consumed,
            "arrival_until_ms": until,
            "live_in": committed.live_path if committed else None,
            "live_out": store.pipeline_url(self.pipeline, "live", f"v{version}"),
        }
        return fields, watermark

    def _source_watermark(self, store: WatermarkStoreHook, now_ms: int) -> int | None:
        """The store's watermark as it stood at the run's logical time (:meth:`WatermarkStoreHook.read_as_of`): the
        run reads the events that arrived until then, and a later watermark (a catch-up behind the controller)
        would make the next run's on-time events too late; a retry reads the same one."""
        policy = self.spec.watermark
        if isinstance(policy, MergedWatermark):
            records = {name: store.read_as_of(w.stream, now_ms, w.wm_key) for name, w in policy.inputs}
            check = check_watermarks(
                records,
                now_ms,
                idle_timeout_ms=policy.idle_timeout_ms,
                when_all_idle=policy.when_all_idle,  # type: ignore[arg-type]
            )
            self.log.info(
                "Merged inputs %s: %s",
                ", ".join(records),
                describe_reached(WatermarkReached.of(check, records).to_json()),
            )
            return check.watermark_ms
        if not isinstance(policy, StoreWatermark):
            return None
        standing = store.read_as_of(policy.stream, now_ms, policy.wm_key)
        if standing is None:
            self.log.warning(
                "No watermark of stream %r computed by %s in the store: no window can complete",
                policy.stream,
                format_ms(now_ms),
            )
            return None
        return int(standing["lower_ms"])

    def _log_manifest(self, manifest: WindowedManifest) -> None:
        self.log.info(
            "Run v%s of %s: watermark %s (was %s)\n%s",
            manifest.version,
            self.pipeline,
            format_ms(manifest.watermark_ms),
            format_ms(manifest.previous_watermark_ms),
            manifest.totals.table(),
        )
        if manifest.late_output:
            self.log.warning(
                "Too-late and invalid events of this run: %s (wm_run=%s)", manifest.late_output, manifest.version
            )
        if manifest.totals.invalid_value:
            self.log.warning(
                "%s events hold NaN or infinity in a column the aggregates read (%s): quarantined as INVALID_VALUE "
                "in %s (wm_run=%s), not aggregated",
                manifest.totals.invalid_value,
                ", ".join(repr(c) for c in aggregated_columns(self.spec.aggregates)),
                manifest.late_output,
                manifest.version,
            )
        if manifest.totals.sums_out_of_range:
            self.log.warning(
                "%s panes of run v%s have a sum of integers past a 64-bit integer: written as null (the state keeps "
                "the exact sum; a later pane of the window is exact once back in range)",
                manifest.totals.sums_out_of_range,
                manifest.version,
            )
        if manifest.totals.invalid_arrival:
            self.log.warning(
                "%s rows of the events have a null, unparseable or out-of-range %s (arrival_column): no run can "
                "read them as events, so every run quarantines them as INVALID_ARRIVAL in %s (wm_run=%s) until "
                "they are fixed at the source",
                manifest.totals.invalid_arrival,
                self._arrival_columns(),
                manifest.late_output,
                manifest.version,
            )

    def _arrival_columns(self) -> str:
        """The arrival column, or each merged input's (``orders.ingested_at``), for messages."""
        if not self.inputs:
            return repr(self.arrival_column)
        named = [f"{i['name']}.{i['arrival_column']}" for i in self.inputs if i.get("arrival_column")]
        return ", ".join(repr(n) for n in named)
