"""ControllerWatermarkOperator: one controller round per task run, on Spark, committed only on success."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, Context

from airflow_provider_wm.arguments import add_asset_outlet, one_task_at_a_time, require_paths
from airflow_provider_wm.core.controller import StreamStatus
from airflow_provider_wm.hooks.spark_submit import WmSparkSubmitHook
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name
from airflow_provider_wm.links import WatermarksLink
from airflow_provider_wm.state import ControllerCutoff, commit_cutoff, read_cutoff
from airflow_provider_wm.timeutil import duration_ms, format_ms, is_templated, to_epoch_ms

__all__ = ["ControllerWatermarkOperator"]


class ControllerWatermarkOperator(BaseOperator):
    """Consolidate writers' marks into stream watermarks and stream cuts (a Pravega controller round).

    Each run submits ``spark_jobs/controller_watermark.py`` through ``SparkSubmitHook``. The job reads the
    marks reported since the previous round, the segments, and the controller state of the previous
    round; it writes the next state version, a quarantine of bad and rejected marks, and a manifest. The
    operator then publishes each new watermark to the store (monotone), pushes the results to XCom, and
    commits the cut-off to the Variable ``wm_controller__<controller>`` as its very last step. A failed
    run leaves the cut-off as it was; its retry computes the same round and overwrites its own outputs.
    A run whose logical time is not after the committed cut-off does nothing and returns the committed
    result, so re-running a finished run changes nothing.

    :param controller: name of this controller (its Variable, its folder in the store).
    :param marks_path: Parquet dataset of writer marks (``stream, writer_id, time_ms, position, kind,
        reported_at_ms``). Templated.
    :param segments_path: Parquet dataset of segments (``stream, segment_id, key_start, key_end``). Templated.
    :param store_path: base path or fsspec URL of the watermark store. Templated.
    :param writer_timeout: how long a writer that stopped advancing may hold a stream back
        (timedelta, seconds or ISO-8601 such as ``PT10M``).
    :param initial_delay: how long a new stream waits after its first mark before its first watermark.
    :param logical_time: the round's clock, default the run's ``data_interval_end``. Templated.
    :param spark_conn_id: Spark connection; ``None`` runs on the embedded ``local[*]`` master.
    :param spark_conf: extra Spark configuration for the job.
    :param asset: the Asset standing for this controller's watermarks: declared as an outlet; each successful
        round emits an asset event whose ``extra`` holds the cut-off and every stream's lower time, and
        writes the cut-off to the asset state store (``controller_cutoff``).
    """

    template_fields: Sequence[str] = ("marks_path", "segments_path", "store_path", "logical_time")
    operator_extra_links = (WatermarksLink(),)
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
        logical_time: str = "{{ data_interval_end }}",
        spark_conn_id: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        max_active_tis_per_dag: int = 1,
        asset: Asset | None = None,
        **kwargs: Any,
    ) -> None:
        add_asset_outlet(asset, kwargs)
        super().__init__(max_active_tis_per_dag=one_task_at_a_time(max_active_tis_per_dag), **kwargs)
        self.controller = validate_name(controller, "controller")
        self.asset = asset
        require_paths(marks_path=marks_path, segments_path=segments_path, store_path=store_path)
        self.marks_path = marks_path
        self.segments_path = segments_path
        self.store_path = store_path
        self.writer_timeout_ms = duration_ms(writer_timeout, "writer_timeout")
        self.initial_delay_ms = duration_ms(initial_delay, "initial_delay")
        if not is_templated(logical_time):
            to_epoch_ms(logical_time, "logical_time")
        self.logical_time = logical_time
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"controller": self.controller}

    def execute(self, context: Context) -> dict[str, Any]:
        now_ms = to_epoch_ms(self.logical_time, "logical_time")
        wall_ms = int(time.time() * 1000)
        if now_ms > wall_ms:
            raise ValueError(
                f"logical_time={self.logical_time!r} is later than the current time: marks reported between "
                "now and then would be skipped by every later round"
            )
        run_id = str(context["run_id"])
        store = WatermarkStoreHook(self.store_path)
        cutoff = read_cutoff(self.controller)
        if cutoff is not None and now_ms <= cutoff.processed_until_ms:
            self.log.info(
                "Controller %s already processed marks up to %s; this run (logical time %s) has nothing to do",
                self.controller,
                format_ms(cutoff.processed_until_ms),
                format_ms(now_ms),
            )
            summary = self._summary_from_cutoff(cutoff)
            if self.asset is not None:
                context["outlet_events"][self.asset].extra = {
                    "controller": self.controller,
                    "version": cutoff.version,
                    "covered_by": cutoff.run_id,
                }
            return summary

        round_id = f"{now_ms}-{re.sub(r'[^A-Za-z0-9._-]', '_', run_id)}"
        round_out = store.controller_url(self.controller, "rounds", round_id)
        state_out = store.controller_url(self.controller, "state", round_id)
        manifest = self._submit(store, cutoff, now_ms, run_id, round_out, state_out)

        published: dict[str, bool] = {}
        for label, entry in manifest["streams"].items():  # label: "stream" or "stream:wm_key"
            if entry["watermark"]:
                record = {**entry["watermark"], "run_id": run_id, "controller": self.controller}
                published[label] = store.publish(record)
            status = self._stream_status(entry["stream"], entry, now_ms, run_id)
            store.write_stream_status(entry["stream"], status, entry["wm_key"])
        summary = {
            "controller": self.controller,
            "processed_until_ms": manifest["processed_until_ms"],
            "round": round_out,
            "totals": manifest["totals"],
            "streams": manifest["streams"],
            "published": published,  # label -> False when the store already had a watermark as high
        }
        self._log_summary(summary)
        if manifest["totals"].get("late_marks"):
            self.log.warning(
                "%s marks of controller %s landed after the round that covered their reported_at_ms and were "
                "not applied: the marks dataset must be appended to before reported_at_ms passes",
                manifest["totals"]["late_marks"],
                self.controller,
            )
        watermarks = dict(cutoff.watermarks) if cutoff else {}
        for stream, entry in manifest["streams"].items():
            watermark = entry["watermark"] or entry.get("previous_watermark")
            if watermark:
                watermarks[stream] = {k: watermark[k] for k in ("lower_ms", "upper_ms", "computed_at_ms")}
        new_cutoff = ControllerCutoff(
            controller=self.controller,
            version=(cutoff.version if cutoff else 0) + 1,
            processed_until_ms=int(manifest["processed_until_ms"]),
            state_path=str(manifest["state_path"]),
            run_id=run_id,
            committed_at=dt.datetime.now(dt.UTC).isoformat(),
            watermarks=watermarks,
            processed_marks=int(manifest["processed_marks"]),
        )
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=summary)
        ti.xcom_push(key="cutoff", value=new_cutoff.to_json())
        if self.asset is not None:
            context["asset_state_store"][self.asset].set("controller_cutoff", new_cutoff.to_json())
            context["outlet_events"][self.asset].extra = {
                "controller": self.controller,
                "version": new_cutoff.version,
                "processed_until": format_ms(new_cutoff.processed_until_ms),
                "lower_ms": {stream: wm["lower_ms"] for stream, wm in watermarks.items()},
            }
        commit_cutoff(new_cutoff, cutoff)  # last step: the run's effects become visible to the next run
        return summary

    def _submit(
        self,
        store: WatermarkStoreHook,
        cutoff: ControllerCutoff | None,
        now_ms: int,
        run_id: str,
        round_out: str,
        state_out: str,
    ) -> dict[str, Any]:
        args = [
            "--controller", self.controller,
            "--run-id", run_id,
            "--marks", self.marks_path,
            "--segments", self.segments_path,
            "--state-out", state_out,
            "--round-out", round_out,
            "--now-ms", str(now_ms),
            "--writer-timeout-ms", str(self.writer_timeout_ms),
            "--initial-delay-ms", str(self.initial_delay_ms),
        ]  # fmt: skip
        if cutoff is not None:
            args += [
                "--state-in", cutoff.state_path,
                "--processed-until-ms", str(cutoff.processed_until_ms),
                "--processed-marks", str(cutoff.processed_marks),
            ]  # fmt: skip
        hook = WmSparkSubmitHook(
            conn_id=self.spark_conn_id,
            conf=self.spark_conf,
            application_args=args,
            name=f"wm-controller-{self.controller}",
        )
        self.log.info("Submitting controller round for %s to %s", format_ms(now_ms), hook.master)
        return hook.submit_job(
            "controller_watermark",
            f"{round_out}/manifest.json",
            store.read_json_url,
            f"controller job for {self.controller!r}",
        )

    def _stream_status(self, stream: str, entry: dict[str, Any], now_ms: int, run_id: str) -> dict[str, Any]:
        """What the Watermarks page shows beside a stream's watermark: the round's verdict on it."""
        return {
            "stream": stream,
            "wm_key": entry.get("wm_key"),
            "controller": self.controller,
            "status": entry["status"],
            "idle": entry["status"] == StreamStatus.NO_ACTIVE_WRITERS,
            "active_writers": entry.get("active_writers", 0),
            "writers_seen": entry.get("writers_seen", 0),
            "waiting_for": list(entry.get("waiting_for") or [])[:20],
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
        lines = [
            f"{'stream':<20} {'status':<20} {'writers':>7} {'accepted':>8} {'lower':<25} {'upper':<25} cut",
        ]
        for stream, entry in summary["streams"].items():
            wm = entry["watermark"] or {}
            bad = {**entry.get("rejected", {}), **entry.get("quarantined", {})}
            lines.append(
                f"{stream:<20} {entry['status']:<20} {entry.get('writers_seen', 0):>7} "
                f"{entry.get('marks_accepted', 0):>8} {format_ms(wm.get('lower_ms')):<25} "
                f"{format_ms(wm.get('upper_ms')):<25} {wm.get('stream_cut', '-')}"
                + (f"  bad marks: {bad}" if bad else "")
            )
        self.log.info("Controller %s round:\n%s", self.controller, "\n".join(lines))
