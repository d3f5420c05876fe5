"""One run of a windowed aggregate: the steps in order (:meth:`Job.run`), the manifest, and the entry points."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from airflow_provider_wm.contracts import WindowedManifest, WindowedRequest
from airflow_provider_wm.core.partitions import HOUR_MS
from airflow_provider_wm.core.windowing import (
    LateReason,
    StoreWatermark,
    Timing,
    next_watermark,
)
from spark_jobs.common import job_session, observe, observed_below, submit_main, write_schema_document
from spark_jobs.driver_outputs import driver_can_write, fetch_tables, replace_folder, spark_schema
from spark_jobs.sql_text import ident, string
from spark_jobs.windowed.base import (
    EXACT_SUMS,
    JOB_COLUMNS,
    OUT_OF_RANGE,
    RUN_COUNTERS,
    RUN_PARTITION,
    checkpoint_with_totals,
    run_totals,
)
from spark_jobs.windowed.events import late_columns
from spark_jobs.windowed.firing import Firing, write_state
from spark_jobs.windowed.rollup import ROLLUP_LATE_REASONS, LiveSnapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    """What a run wrote of its windows: ``fired`` counts the panes by timing (``EARLY``, ``ON_TIME``, ``LATE``),
    the ``retractions``, the ``windows`` decided and those ``purged``; ``fired_hours`` the hours of the panes'
    windows (when the request asked); ``writer`` what wrote the files (``arrow``: the driver, ``spark``)."""

    fired: dict[str, int]
    fired_hours: list[int] | None
    writer: str


class Job(Firing):
    """One run over a request (see the package docstring); the methods follow its steps."""

    def run_rollup(self, started: float) -> WindowedManifest:
        """A rollup's run: its watermark is its upstream's stream (a ``StoreWatermark``, validated by the spec),
        known before any pane row is read. :meth:`Rollup.live_panes` (the partials per target window and the live
        panes of the windows still open) is materialised once with the run's totals
        (:meth:`Rollup.roll`); the panes, the state and the live snapshot are projections of it (the live snapshot
        of the pane rows, in a run that combined them), written together (:meth:`write_windows`). The late rows are
        read again only when there are some."""
        request = self.request
        assert isinstance(self.spec.watermark, StoreWatermark), "validated by AggregationSpec"
        watermark = self.watermark(None)  # no pane row moves a store's watermark
        panes = self.read_panes()
        classified = None if panes is None else self.classify_panes(panes)
        horizon = None if watermark is None else watermark - self.spec.allowed_lateness_ms
        rolled = self.roll(classified, self.read_live(), horizon)
        counts: dict[str | None, int] = {}
        max_times: list[int | None] = [self.previous_max_event]
        fresh: DataFrame | None = None
        live: LiveSnapshot | None = None
        size, fresh_count = 0, 0
        if rolled is not None:
            checkpoint, row, live = rolled
            size = int(row["projected"])
            if classified is not None:
                counts = {r.value: int(row[r.value]) for r in ROLLUP_LATE_REASONS if row[r.value]}
                counts[None] = int(row["rows"]) - sum(counts.values())
                max_times.append(row["max_t"])
                fresh, fresh_count = self.with_fresh_flags(self.fresh_windows(checkpoint)), int(row["fresh"])
            if panes is not None and classified is not None and len(counts) > 1:
                self._write_late_panes(panes, classified)
        seen = [v for v in max_times if v is not None]
        max_event_time = max(seen) if seen else None
        state = self.read_state()
        windows = self.combine(fresh, state) if fresh is not None else state
        stored = 0 if state is None else self.stored_windows()
        size_known = None if stored is None else size + stored
        # without stored windows, the windows decided are the fresh ones; with some, they are counted as they are
        windows_count = fresh_count if state is None else None
        written = self.write_windows(windows, watermark, size_known, windows_count, live=live)
        live_path = None if live is None else request.live_out
        state_path = None if windows is None else request.state_out
        manifest = self._manifest(started, counts, watermark, max_event_time, written, state_path, live_path)
        empty: list[int] | None = [] if request.fired_hours else None
        return replace(manifest, fired_hours_ms=empty if written is None else written.fired_hours)

    def _write_late_panes(self, panes: DataFrame, classified: DataFrame) -> None:
        """The invalid and too-late pane rows (read again: only a run that has some writes them)."""
        late = classified.where("wm_reason IS NOT NULL").selectExpr(
            *[
                f"{ident(c)} AS upstream_{c}" if c == "run_id" else ident(c)
                for c in panes.columns
                if c != RUN_PARTITION
            ],
            # a long, also when the session infers partition columns as strings
            f"CAST({RUN_PARTITION} AS BIGINT) AS upstream_{RUN_PARTITION}",
            "wm_reason AS reason",
            f"{string(self.run_id)} AS run_id",
        )
        self._write_run_partition(late, self.request.late_output)

    def watermark(self, max_event_time: int | None) -> int | None:
        """Rule 3; the store's value is passed in the request (``source_watermark_ms``)."""
        return next_watermark(self.spec.watermark, self.previous_watermark, max_event_time, self.source_watermark)

    def run(self) -> WindowedManifest:
        started = time.time()
        request = self.request
        if self.spec.upstream is not None:
            return self.run_rollup(started)
        events = self.read_merged_events() if request.inputs else self.read_events()
        counts: dict[str | None, int] = {}
        max_times: list[int | None] = [self.previous_max_event]
        windows: DataFrame | None = None
        windows_count: int | None = None
        if events is not None:
            classified = self.classified(events)
            state = self.read_state()
            partials = self.new_partials(classified, by_reason=state is None)
            if state is None:
                # one row per (keys, window), and rows without a window that count the rows not accepted
                checkpoint, observed = checkpoint_with_totals(partials, *run_totals())
                windows = self.with_fresh_flags(checkpoint.where("window_start IS NOT NULL"))
            else:
                # merged with the stored windows before the checkpoint, the run's counters carried per window: the
                # totals and the outputs read one checkpoint, and the partials' group-by and the merge's shuffle
                # run in one pass (the windows: one row per open window or window of the run)
                if not self.spec.output_window.merging:
                    # hash-partitioned as the partials come out of their group-by, (keys, window_start): the union
                    # keeps that partitioning, so the merge's group-by needs no shuffle of its own (the state's and
                    # the events' shuffles run side by side, and the merge runs in the checkpoint's stage)
                    state = state.repartition(*self.keys, "window_start")
                merged = self.combine(self.with_fresh_flags(partials, RUN_COUNTERS), state, RUN_COUNTERS)
                checkpoint, observed = checkpoint_with_totals(merged, *run_totals())
                windows = checkpoint.where("window_start IS NOT NULL")  # the outputs select the state's columns
            counts = self.event_counts(observed)
            max_times.append(observed["max_t"])
            windows_count = int(observed["windows"])
            if any(n for reason, n in counts.items() if reason is not None):
                late = classified.where("wm_reason IS NOT NULL").selectExpr(
                    *late_columns([c for c in events.columns if c not in JOB_COLUMNS]),
                    "wm_reason AS reason",
                    f"{string(self.run_id)} AS run_id",
                )
                self._write_run_partition(late, request.late_output)
        else:
            windows, windows_count = self.read_state(), self.stored_windows()
        seen = [v for v in max_times if v is not None]
        max_event_time = max(seen) if seen else None
        watermark = self.watermark(max_event_time)
        if windows is None:
            manifest = self._manifest(started, counts, watermark, max_event_time, None, None)
            return replace(manifest, fired_hours_ms=[] if request.fired_hours else None)
        written = self.write_windows(windows, watermark, windows_count, windows_count)
        assert written is not None, "there are windows"
        manifest = self._manifest(started, counts, watermark, max_event_time, written, request.state_out)
        return replace(manifest, fired_hours_ms=written.fired_hours)

    def write_windows(
        self,
        windows: DataFrame | None,
        watermark: int | None,
        size: int | None,
        windows_count: int | None = None,
        live: LiveSnapshot | None = None,
    ) -> Written | None:
        """Decide ``windows`` (``windows_count`` of them, when known) and write the run's panes and the next
        state, both projections of the decided windows (of one checkpoint, or of the state alone), and a rollup's
        ``live`` snapshot (a frame and its columns): from the driver when the rows the outputs are projected from
        are known to be at most ``driver_output_rows`` (``size``) and fsspec can write every folder
        (:mod:`spark_jobs.driver_outputs`), else with Spark (also when the driver's write fails). ``None``: no
        windows (only the live snapshot, if any, was written)."""
        request = self.request
        decided = None if windows is None else self.decide(windows, watermark)
        partition = f"{request.output.rstrip('/')}/{RUN_PARTITION}={self.version}"
        folders = [
            *([] if decided is None else [partition, request.state_out]),
            *([] if live is None else [self._live_out]),
        ]
        limit = request.driver_output_rows  # 0: always Spark
        if size is not None and limit > 0 and size <= limit and driver_can_write(*folders):
            try:
                return self._write_from_driver(decided, watermark, partition, windows_count, live)
            except OSError as exc:
                log.warning("writing the outputs from the driver failed (%s); writing them with Spark", exc)
        return self._write_with_spark(decided, watermark, live)

    @property
    def _live_out(self) -> str:
        if self.request.live_out is None:
            raise ValueError("a rollup's request needs live_out")
        return self.request.live_out

    def _write_from_driver(
        self,
        decided: DataFrame | None,
        watermark: int | None,
        partition: str,
        windows_count: int | None,
        live: LiveSnapshot | None,
    ) -> Written | None:
        """The outputs fetched in one Spark action and written by pyarrow; the counts taken from the fetched rows
        (the windows not kept in the state were purged; when their number is not known, it is fetched too)."""
        request = self.request
        projections: list[tuple[DataFrame, Sequence[str]]] = [] if live is None else [(live.frame, live.columns)]
        if decided is not None:
            projections += [
                (self.panes(decided, watermark, flagged=True), [*self.pane_columns(), OUT_OF_RANGE]),
                (self.next_state(decided), self.state_columns()),
            ]
            if windows_count is None:
                projections.append((decided.agg(F.expr("count(1) AS windows")), ["windows"]))
        tables = fetch_tables(projections)  # at most driver_output_rows windows (checked by write_windows)
        if live is not None:
            snapshot = tables.pop(0)
            replace_folder(snapshot, self._live_out)
            write_schema_document(self._live_out, spark_schema(snapshot), snapshot.num_rows)
        if decided is None:
            return None
        flagged, state = tables[0], tables[1]
        if windows_count is None:
            windows_count = int(tables[2].column("windows")[0].as_py())
        out_of_range = int(pc.sum(flagged.column(OUT_OF_RANGE)).as_py() or 0)
        panes = flagged.drop_columns([OUT_OF_RANGE])
        replace_folder(panes, partition)
        self._document_output(spark_schema(panes))
        replace_folder(state, request.state_out)
        write_schema_document(request.state_out, spark_schema(state), state.num_rows, self._state_extra())
        retraction = panes.column("retraction")
        timing = panes.filter(pc.invert(retraction)).column("pane")
        fired = {t.value: int(pc.sum(pc.equal(timing, t.value)).as_py() or 0) for t in Timing}
        fired["retractions"] = int(pc.sum(retraction).as_py() or 0)
        fired["windows"], fired["purged"] = windows_count, windows_count - state.num_rows
        fired["out_of_range"] = out_of_range
        hours = None
        if request.fired_hours:  # a global window starts at no hour
            starts = panes.column("window_start")
            starts = pc.filter(starts, pc.greater_equal(starts, 0))
            hours = sorted({start - start % HOUR_MS for start in starts.to_pylist()})
        return Written(fired, hours, "arrow")

    def _write_with_spark(
        self, decided: DataFrame | None, watermark: int | None, live: LiveSnapshot | None
    ) -> Written | None:
        """The outputs written by Spark, the windows fired counted as the state is written."""
        request = self.request
        if live is not None:
            live.frame.write.mode("overwrite").parquet(self._live_out)
            write_schema_document(self._live_out, live.frame.schema, live.rows)
        if decided is None:
            return None
        panes = self.panes(decided, watermark)
        self._write_run_partition(panes, request.output)
        self._document_output(panes.schema)
        counts = [
            F.expr(count)
            for count in (
                *[
                    f"count(CASE WHEN wm_fires AND wm_timing = {string(t.value)} THEN 1 END) AS {t.value}"
                    for t in Timing
                ],
                "sum(CASE WHEN wm_fires THEN size(owed) + CAST(last_pane IS NOT NULL AS INT) END) AS retractions",
                "count(1) AS windows",
                "count(CASE WHEN wm_purged THEN 1 END) AS purged",
                self._out_of_range_count(),
            )
        ]
        counted, fired_observed = observe(decided, "fired", *counts)
        state = self.next_state(counted)
        write_state(state, request.state_out)
        fired_counts = observed_below(state, fired_observed)
        if fired_counts is None:  # not reported with the write: counted in a Spark job of their own
            row = decided.agg(*counts).first()  # small: one row of counts
            assert row is not None  # an aggregation without grouping has one row
            fired_counts = row.asDict()
        fired = {name: int(value or 0) for name, value in fired_counts.items()}
        write_schema_document(request.state_out, state.schema, fired["windows"] - fired["purged"], self._state_extra())
        return Written(fired, self._fired_hours() if request.fired_hours else None, "spark")

    def _out_of_range_count(self) -> str:
        """The windows that fire a sum past a long (:meth:`~spark_jobs.windowed.base.JobBase.out_of_range`)."""
        return f"count(CASE WHEN wm_fires AND ({self.out_of_range()}) THEN 1 END) AS out_of_range"

    def _state_extra(self) -> dict[str, Any]:
        """What the state's schema document records beside its schema (:data:`EXACT_SUMS`)."""
        return {EXACT_SUMS: sorted(self.exact_sums())}

    def _fired_hours(self) -> list[int]:
        """The distinct UTC hours (epoch ms) in which the windows of this run's panes start, read back from the
        run's partition (one column; one row per hour). A global window starts at no hour."""
        panes = self.spark.read.parquet(f"{self.request.output.rstrip('/')}/{RUN_PARTITION}={self.version}")
        start = F.col("window_start")
        hours = panes.where(start >= 0).select((start - F.pmod(start, F.lit(HOUR_MS))).alias("hour")).distinct()
        return sorted(int(row["hour"]) for row in hours.collect())  # small: one row per hour fired

    @staticmethod
    def event_counts(observed: Row) -> dict[str | None, int]:
        """The run's rows by reason (``None``: accepted) from its totals (:func:`run_totals`)."""
        too_late, invalid = int(observed["too_late"] or 0), int(observed["invalid"] or 0)
        invalid_value, invalid_arrival = int(observed["invalid_value"] or 0), int(observed["invalid_arrival"] or 0)
        return {
            None: int(observed["events"] or 0) - too_late - invalid - invalid_value - invalid_arrival,
            LateReason.TOO_LATE.value: too_late,
            LateReason.INVALID_EVENT_TIME.value: invalid,
            LateReason.INVALID_VALUE.value: invalid_value,
            LateReason.INVALID_ARRIVAL.value: invalid_arrival,
        }

    def _manifest(
        self,
        started: float,
        counts: dict[str | None, int],
        watermark: int | None,
        max_event_time: int | None,
        written: Written | None,
        state_path: str | None,
        live_path: str | None = None,
    ) -> WindowedManifest:
        request = self.request
        fired = None if written is None else written.fired
        pane_counts = {t.value: int(fired[t.value]) if fired else 0 for t in Timing}
        pane_counts["RETRACTION"] = int(fired["retractions"] or 0) if fired and self.spec.retracting else 0
        late = any(n for reason, n in counts.items() if reason is not None)
        invalid_arrival = counts.get(LateReason.INVALID_ARRIVAL.value, 0)
        manifest = {
            "status": "succeeded",
            "job": "windowed_aggregate",
            "pipeline": request.pipeline,
            "run_id": self.run_id,
            "version": self.version,
            "watermark_ms": watermark,
            "previous_watermark_ms": self.previous_watermark,
            "max_event_time_ms": max_event_time,
            "arrival_from_ms": request.arrival_from_ms,
            "arrival_until_ms": request.arrival_until_ms,
            "totals": {
                "events_read": sum(counts.values()) - invalid_arrival,  # rule 0: not the run's events
                "events_aggregated": counts.get(None, 0),
                "too_late": counts.get(LateReason.TOO_LATE.value, 0),
                "invalid_event_time": counts.get(LateReason.INVALID_EVENT_TIME.value, 0),
                "invalid_value": counts.get(LateReason.INVALID_VALUE.value, 0),
                "invalid_window": counts.get(LateReason.INVALID_WINDOW.value, 0),
                "invalid_arrival": invalid_arrival,
                "panes": pane_counts,
                "windows_open": int(fired["windows"]) - int(fired["purged"]) if fired else 0,
                "windows_purged": int(fired["purged"]) if fired else 0,
                "sums_out_of_range": int(fired.get("out_of_range") or 0) if fired else 0,
            },
            "output": request.output,
            "late_output": request.late_output if late else None,
            "state_path": state_path,
            "live_path": live_path,
            "writer": None if written is None else written.writer,
            "duration_s": round(time.time() - started, 3),
        }
        return WindowedManifest.from_json(manifest)

    def _document_output(self, schema: StructType) -> None:
        """Beside the pane output: its schema and the run partition's type as Spark infers it from the folder names
        by default (an int while the versions fit one), so a rollup reads the panes without a Spark job to infer it
        (:func:`~spark_jobs.common.read_dataset_and_schema`), whatever the session's partition type inference."""
        partition = IntegerType() if self.version < 2**31 else LongType()
        write_schema_document(self.request.output, StructType([*schema.fields, StructField(RUN_PARTITION, partition)]))

    def _write_run_partition(self, frame: DataFrame, path: str) -> None:
        """Replace this run's partition ``<path>/wm_run=<version>`` only (a retry or re-run overwrites its own
        rows). Written to the partition's path: Spark's dynamic partition overwrite would sort the rows by the
        partition column and stage them first, for a partition known in advance."""
        frame.write.mode("overwrite").parquet(f"{path.rstrip('/')}/{RUN_PARTITION}={self.version}")


def run_request(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """:func:`run` on a request document, returning the manifest document (tests and benchmarks)."""
    return run(spark, WindowedRequest.from_json(request)).to_json()


def run(spark: SparkSession, request: WindowedRequest) -> WindowedManifest:
    """The job: compute, write its outputs, and return the manifest (the caller writes it)."""
    with job_session(spark):
        return Job(spark, request).run()


def main(argv: Sequence[str] | None = None) -> int:
    """``windowed_aggregate.py <request.json URL>`` (spark-submit); the manifest goes to ``round_out``."""
    return submit_main(WindowedRequest, run, argv)
