"""One run of a windowed aggregate: the steps in order (:meth:`Job.run`), the manifest, and the entry points."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, Observation, Row, SparkSession
from pyspark.sql import functions as F

from airflow_provider_wm.contracts import WindowedManifest, WindowedRequest
from airflow_provider_wm.core.partitions import HOUR_MS
from airflow_provider_wm.core.windowing import (
    LateReason,
    StoreWatermark,
    Timing,
    next_watermark,
)
from spark_jobs.common import job_session, submit_main
from spark_jobs.windowed.base import (
    JOB_COLUMNS,
    RUN_COUNTERS,
    RUN_PARTITION,
    checkpoint_with_totals,
    run_totals,
)
from spark_jobs.windowed.firing import Firing, write_state
from spark_jobs.windowed.rollup import ROLLUP_LATE_REASONS


class Job(Firing):
    """One run over a request (see the package docstring); the methods follow its steps."""

    def run_rollup(self, started: float) -> WindowedManifest:
        """A rollup's run: its watermark is its upstream's stream (a ``StoreWatermark``, validated by the spec),
        known before any pane row is read, so the run's totals are observed while the live snapshot is written
        instead of counted first (:meth:`Rollup.write_live`). :meth:`Rollup.live_panes` (one shuffle: the
        partials per target window and the live panes of the windows still open) is materialised once and read
        by the three writes: the live snapshot, the panes and the state. The late rows are read again only when
        there are some."""
        request = self.request
        assert isinstance(self.spec.watermark, StoreWatermark), "validated by AggregationSpec"
        watermark = self.watermark(None)  # no pane row moves a store's watermark
        panes = self.read_panes()
        classified = None if panes is None else self.classify_panes(panes)
        horizon = None if watermark is None else watermark - self.spec.allowed_lateness_ms
        written = self.write_live(classified, self.read_live(), horizon)
        counts: dict[str | None, int] = {}
        max_times: list[int | None] = [self.previous_max_event]
        fresh: DataFrame | None = None
        live_path = None
        if written is not None:
            rolled, row = written
            live_path = request.live_out
            if classified is not None:
                counts = {r.value: int(row[r.value]) for r in ROLLUP_LATE_REASONS if row[r.value]}
                counts[None] = int(row["rows"]) - sum(counts.values())
                max_times.append(row["max_t"])
            if panes is not None and classified is not None and len(counts) > 1:
                self._write_late_panes(panes, classified)
            if classified is not None:
                fresh = self.with_fresh_flags(self.fresh_windows(rolled))
        seen = [v for v in max_times if v is not None]
        max_event_time = max(seen) if seen else None
        state = self.read_state()
        if fresh is None and state is None:
            manifest = self._manifest(started, counts, watermark, max_event_time, None, None, live_path)
            return replace(manifest, fired_hours_ms=[] if request.fired_hours else None)
        windows = self.combine(fresh, state) if fresh is not None else state
        assert windows is not None
        fired = self.write_windows(windows, watermark)
        manifest = self._manifest(started, counts, watermark, max_event_time, fired, request.state_out, live_path)
        return replace(manifest, fired_hours_ms=self._fired_hours() if request.fired_hours else None)

    def _write_late_panes(self, panes: DataFrame, classified: DataFrame) -> None:
        """The invalid and too-late pane rows (read again: only a run that has some writes them)."""
        late = classified.where(F.col("wm_reason").isNotNull()).select(
            *[F.col(c).alias(f"upstream_{c}") if c == "run_id" else c for c in panes.columns if c != RUN_PARTITION],
            # a long, also when the session infers partition columns as strings
            F.col(RUN_PARTITION).cast("long").alias(f"upstream_{RUN_PARTITION}"),
            F.col("wm_reason").alias("reason"),
            F.lit(self.run_id).alias("run_id"),
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
        fresh: DataFrame | None = None
        max_times: list[int | None] = [self.previous_max_event]
        state: DataFrame | None = None
        windows: DataFrame | None = None
        if events is not None:
            classified = self.classified(events)
            partials = self.new_partials(classified)
            state = self.read_state()
            if state is None:
                # one row per (keys, window), and rows without a window that count the rows not accepted
                checkpoint, observed = checkpoint_with_totals(partials, *run_totals())
                fresh = self.with_fresh_flags(checkpoint.where(F.col("window_start").isNotNull()))
            else:
                # merged with the stored windows before the checkpoint, the run's counters carried per window: the
                # totals and both writes read one checkpoint, and the partials' group-by and the merge's shuffle
                # run in one pass (the windows: one row per open window or window of the run)
                if not self.spec.output_window.merging:
                    # hash-partitioned as the partials come out of their group-by, (keys, window_start): the union
                    # keeps that partitioning, so the merge's group-by needs no shuffle of its own (the state's and
                    # the events' shuffles run side by side, and the merge runs with the checkpoint's write)
                    state = state.repartition(*self.keys, "window_start")
                merged = self.combine(self.with_fresh_flags(partials, RUN_COUNTERS), state, RUN_COUNTERS)
                checkpoint, observed = checkpoint_with_totals(merged, *run_totals())
                windows = checkpoint.where(F.col("window_start").isNotNull()).drop(*RUN_COUNTERS)
            counts = self.event_counts(observed)
            max_times.append(observed["max_t"])
            if any(n for reason, n in counts.items() if reason is not None):
                late = classified.where(F.col("wm_reason").isNotNull()).select(
                    *[c for c in events.columns if c not in JOB_COLUMNS],
                    F.col("wm_reason").alias("reason"),
                    F.lit(self.run_id).alias("run_id"),
                )
                self._write_run_partition(late, request.late_output)
        seen = [v for v in max_times if v is not None]
        max_event_time = max(seen) if seen else None
        watermark = self.watermark(max_event_time)
        if windows is None:
            if events is None:  # the events path has read it
                state = self.read_state()
            if fresh is None and state is None:
                manifest = self._manifest(started, counts, watermark, max_event_time, None, None)
                return replace(manifest, fired_hours_ms=[] if request.fired_hours else None)
            windows = self.combine(fresh, state) if fresh is not None else state
        assert windows is not None
        fired = self.write_windows(windows, watermark)
        manifest = self._manifest(started, counts, watermark, max_event_time, fired, request.state_out)
        return replace(manifest, fired_hours_ms=self._fired_hours() if request.fired_hours else None)

    def write_windows(self, windows: DataFrame, watermark: int | None) -> dict[str, Any]:
        """Decide ``windows`` (twice, for the panes and the state: a projection of one checkpoint or of the state
        alone), write the run's panes and the next state; the windows fired, by timing, and kept or purged."""
        request = self.request
        decided = self.decide(windows, watermark)
        self._write_run_partition(self.panes(decided, watermark), request.output)
        fired_counts = Observation("fired")
        fires = F.col("wm_fires")
        counted = decided.observe(
            fired_counts,
            *[F.count(F.when(fires & (F.col("wm_timing") == t.value), 1)).alias(t.value) for t in Timing],
            F.sum(F.when(fires, F.size("owed") + F.col("last_pane").isNotNull().cast("int"))).alias("retractions"),
            F.count(F.lit(1)).alias("windows"),
            F.count(F.when(F.col("wm_purged"), 1)).alias("purged"),
        )
        write_state(self.next_state(counted), request.state_out)
        return fired_counts.get

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
        fired: Any,
        state_path: str | None,
        live_path: str | None = None,
    ) -> WindowedManifest:
        request = self.request
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
            },
            "output": request.output,
            "late_output": request.late_output if late else None,
            "state_path": state_path,
            "live_path": live_path,
            "duration_s": round(time.time() - started, 3),
        }
        return WindowedManifest.from_json(manifest)

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
