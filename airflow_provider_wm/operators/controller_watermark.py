"""ControllerWatermarkOperator: one controller round per task run, on Spark, committed only on success."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, Context

from airflow_provider_wm.arguments import require_paths
from airflow_provider_wm.contracts import ControllerManifest, ControllerRequest, StreamEntry, WatermarkRecord
from airflow_provider_wm.core.controller import StreamStatus
from airflow_provider_wm.documents import exists
from airflow_provider_wm.hooks.watermark_store import validate_name
from airflow_provider_wm.lineage import RunLineage
from airflow_provider_wm.operators.base import JobRound, Outcome, StatefulSparkOperator, template_fields_of
from airflow_provider_wm.state import CONTROLLER_STATE, ControllerCutoff
from airflow_provider_wm.timeutil import duration_ms, format_ms

__all__ = ["ControllerWatermarkOperator"]


class ControllerWatermarkOperator(StatefulSparkOperator[ControllerCutoff]):
    """Consolidate writers' marks into stream watermarks and stream cuts (a Pravega controller round).

    Each run runs the job ``spark_jobs/controller_watermark.py`` (as a Spark Connect client, or through
    ``spark-submit``: see ``spark_conn_id``). The job reads the marks reported since the previous round, the
    segments, and the controller state of the previous round; it writes the next state version, a quarantine
    of bad and rejected marks, and a manifest. The operator then publishes each new watermark to the store
    (monotone), pushes the results to XCom, and commits the cut-off as its very last step: to the asset state
    store (key ``controller_cutoff/<controller>``, with ``asset``) and the Variable ``wm_controller__<controller>``. A
    failed run leaves the cut-off as it was; its retry computes the same round and overwrites its own outputs.
    A run whose logical time is not after the committed cut-off does nothing and returns the committed result,
    so re-running a finished run changes nothing.

    :param controller: name of this controller (its Variable, its folder in the store).
    :param marks_path: Parquet dataset of writer marks (``stream, writer_id, time_ms, position, kind,
        reported_at_ms``). Templated.
    :param segments_path: Parquet dataset of segments (``stream, segment_id, key_start, key_end``). Templated.
    :param store_path: base path or fsspec URL of the watermark store. Templated.
    :param writer_timeout: how long a writer that stopped advancing may hold a stream back
        (timedelta, seconds or ISO-8601 such as ``PT10M``).
    :param initial_delay: how long a new stream waits after its first mark before its first watermark.
    :param logical_time: the round's clock, default the run's ``data_interval_end``. Templated.
    :param spark_conn_id: a ``spark_connect`` or ``spark`` connection; ``None``: the embedded Spark Connect
        server.
    :param spark_conf: extra Spark configuration for the job.
    :param asset: the Asset standing for this controller's watermarks: declared as an outlet; each successful
        round emits an asset event whose ``extra`` holds the cut-off and every stream's lower time, and the
        cut-off is committed to its asset state store (``controller_cutoff/<controller>``, the primary copy).
    """

    template_fields: Sequence[str] = template_fields_of("marks_path", "segments_path")
    state_xcom_key = "cutoff"
    state_kind = CONTROLLER_STATE
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        controller: str,
        marks_path: str,
        segments_path: str,
        store_path: str,
        writer_timeout: dt.timedelta | float | str = dt.timedelta(minutes=10),
        initial_delay: dt.timedelta | float | str = dt.timedelta(minutes=2),
        asset: Asset | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(store_path=store_path, asset=asset, **kwargs)
        self.controller = validate_name(controller, "controller")
        require_paths(marks_path=marks_path, segments_path=segments_path)
        self.marks_path = marks_path
        self.segments_path = segments_path
        self.writer_timeout_ms = duration_ms(writer_timeout, "writer_timeout")
        self.initial_delay_ms = duration_ms(initial_delay, "initial_delay")

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"controller": self.controller}

    def state_name(self) -> str:
        return self.controller

    def locations(self) -> dict[str, str]:
        return {**super().locations(), "marks_path": self.marks_path, "segments_path": self.segments_path}

    def lineage(self, document: ControllerCutoff, summary: dict[str, Any] | None) -> RunLineage:
        """Reads the marks and segments, writes the store's streams; late: marks that came after their round,
        quarantined: rejected and quarantined marks."""
        totals = (summary or {}).get("totals") or {}
        return RunLineage(
            kind="controller_watermark",
            name=self.controller,
            inputs=[self.marks_path, self.segments_path],
            outputs=[f"{self.store_path.rstrip('/')}/streams"],
            version=document.version,
            cutoff_ms=document.processed_until_ms,
            stream_watermarks_ms={label: int(wm["lower_ms"]) for label, wm in document.watermarks.items()},
            late=int(totals["late_marks"]) if summary else None,
            quarantined=sum(totals["rejected"].values()) + sum(totals["quarantined"].values()) if summary else None,
        )

    def snapshot_paths(self, committed: ControllerCutoff) -> dict[str, str | None]:
        return {"state_path": committed.state_path}

    def covered_until(self, committed: ControllerCutoff) -> int | None:
        return committed.processed_until_ms

    def state_folder(self) -> str:
        return "controllers"

    def covered(
        self, context: Context, committed: ControllerCutoff, until_ms: int | None, now_ms: int
    ) -> dict[str, Any]:
        self.log.info(
            "Controller %s already processed marks up to %s; this run (logical time %s) has nothing to do",
            self.controller,
            format_ms(until_ms),
            format_ms(now_ms),
        )
        self.covered_asset_event(
            context, {"controller": self.controller, "version": committed.version, "covered_by": committed.run_id}
        )
        return self._summary_from_cutoff(committed)

    def compute(self, run: JobRound[ControllerCutoff]) -> Outcome[ControllerCutoff]:
        cutoff, store = run.committed, run.store
        request = ControllerRequest(
            controller=self.controller,
            run_id=run.run_id,
            marks_path=self.marks_path,
            segments_path=self.segments_path,
            state_out=store.controller_url(self.controller, "state", run.run_folder),
            round_out=store.controller_url(self.controller, "rounds", run.run_folder),
            now_ms=run.now_ms,
            writer_timeout_ms=self.writer_timeout_ms,
            initial_delay_ms=self.initial_delay_ms,
            state_in=cutoff.state_path if cutoff else None,
            processed_until_ms=cutoff.processed_until_ms if cutoff else None,
            processed_marks=cutoff.processed_marks if cutoff else 0,
        )
        self.log.info("Controller round for %s", format_ms(run.now_ms))
        for argument, path in (("marks_path", self.marks_path), ("segments_path", self.segments_path)):
            if not exists(path):
                self.log.warning(
                    "%s=%r does not exist: this round reads no %s from it (nothing written yet, or a wrong path)",
                    argument,
                    path,
                    argument.removesuffix("_path"),
                )
        manifest = self.run_job(
            request, ControllerManifest, f"controller job for {self.controller!r}", f"wm-controller-{self.controller}"
        )
        published = self._publish_watermarks(run, manifest)
        summary = {
            "controller": self.controller,
            "processed_until_ms": manifest.processed_until_ms,
            "round": request.round_out,
            "totals": manifest.totals.to_json(),
            "streams": {label: entry.to_json() for label, entry in manifest.streams.items()},
            "published": published,  # label -> False when the store already had a watermark as high
        }
        self._log_summary(summary)
        if manifest.totals.invalid_segments:
            self.log.warning(
                "%s segment rows of %s were left out (a bad key range or id, an id with two ranges, or segments of "
                "one epoch whose ranges overlap: segment_id = epoch << 32 | number); marks on them are quarantined "
                "as UNKNOWN_SEGMENT",
                manifest.totals.invalid_segments,
                self.segments_path,
            )
        if manifest.totals.late_marks:
            self.log.warning(
                "%s marks of controller %s landed after the round that covered their reported_at_ms and were "
                "not applied: the marks dataset must be appended to before reported_at_ms passes",
                manifest.totals.late_marks,
                self.controller,
            )
        watermarks = dict(cutoff.watermarks) if cutoff else {}
        for label, entry in manifest.streams.items():
            watermark = entry.watermark or entry.previous_watermark
            if watermark:
                watermarks[label] = {
                    "lower_ms": watermark.lower_ms,
                    "upper_ms": watermark.upper_ms,
                    "computed_at_ms": watermark.computed_at_ms,
                }
        new_cutoff = ControllerCutoff(
            controller=self.controller,
            version=run.version,
            processed_until_ms=manifest.processed_until_ms,
            state_path=manifest.state_path,
            run_id=run.run_id,
            committed_at=dt.datetime.now(dt.UTC).isoformat(),
            watermarks=watermarks,
            processed_marks=manifest.processed_marks,
        )
        extra = {
            "controller": self.controller,
            "version": new_cutoff.version,
            "processed_until": format_ms(new_cutoff.processed_until_ms),
            "lower_ms": {stream: wm["lower_ms"] for stream, wm in watermarks.items()},
        }
        return Outcome(new_cutoff, summary, extra)

    def _publish_watermarks(self, run: JobRound[ControllerCutoff], manifest: ControllerManifest) -> dict[str, bool]:
        """Each new watermark to the store (monotone) and each watermark's verdict beside it."""
        published: dict[str, bool] = {}
        for label, entry in manifest.streams.items():  # label: "stream" or "stream:wm_key"
            if entry.watermark:
                record = WatermarkRecord.of(
                    entry.watermark, run_id=run.run_id, controller=self.controller, dag_id=self.dag_id
                )
                published[label] = run.store.publish(record.to_json())
            status = self._stream_status(entry, run.now_ms, run.run_id)
            run.store.write_stream_status(entry.stream, status, entry.wm_key)
        return published

    def _stream_status(self, entry: StreamEntry, now_ms: int, run_id: str) -> dict[str, Any]:
        """What the Watermarks page shows beside a stream's watermark: the round's verdict on it (and the DAG,
        whose readers alone see the stream there)."""
        return {
            "stream": entry.stream,
            "dag_id": self.dag_id,
            "wm_key": entry.wm_key,
            "controller": self.controller,
            "status": entry.status,
            "no_active_writers": entry.status == StreamStatus.NO_ACTIVE_WRITERS,
            "active_writers": entry.active_writers,
            "writers_seen": entry.writers_seen,
            "waiting_for": list(entry.waiting_for)[:20],
            "checked_at_ms": now_ms,
            "run_id": run_id,
        }

    def _summary_from_cutoff(self, cutoff: ControllerCutoff) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "processed_until_ms": cutoff.processed_until_ms,
            "round": None,
            "totals": {},
            "streams": {
                stream: {"status": "ALREADY_PROCESSED", "watermark": None, "previous_watermark": wm}
                for stream, wm in cutoff.watermarks.items()
            },
        }

    def _log_summary(self, summary: dict[str, Any]) -> None:
        """The round's counts (each mark read in one of them: ``ControllerTotals``), then a line per stream."""
        totals = summary["totals"]
        lines = [
            f"{totals.get('marks_read', 0)} marks read: {totals.get('marks_accepted', 0)} accepted, "
            f"{totals.get('shutdowns_accepted', 0)} shutdowns accepted, rejected {totals.get('rejected') or {}}, "
            f"quarantined {totals.get('quarantined') or {}}; {totals.get('deferred_marks', 0)} deferred to a later "
            "round",
            f"{'stream':<20} {'status':<20} {'writers':>7} {'accepted':>8} {'shutdowns':>9} {'lower':<25} "
            f"{'upper':<25} cut",
        ]
        for stream, entry in summary["streams"].items():
            wm = entry["watermark"] or {}
            bad = {**entry.get("rejected", {}), **entry.get("quarantined", {})}
            lines.append(
                f"{stream:<20} {entry['status']:<20} {entry.get('writers_seen', 0):>7} "
                f"{entry.get('marks_accepted', 0):>8} {entry.get('shutdowns_accepted', 0):>9} "
                f"{format_ms(wm.get('lower_ms')):<25} {format_ms(wm.get('upper_ms')):<25} {wm.get('stream_cut', '-')}"
                + (f"  bad marks: {bad}" if bad else "")
            )
        self.log.info("Controller %s round:\n%s", self.controller, "\n".join(lines))
