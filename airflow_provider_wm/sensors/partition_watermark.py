"""PartitionWatermarkSensor: wait until an incremental-partitions pipeline has completed a time range."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_wm.arguments import location_argument, require_bool, storage_options_argument
from airflow_provider_wm.core.partitions import FIRST_PENDING, check_completeness
from airflow_provider_wm.hooks.watermark_store import (
    PipelineKindError,
    UnknownPipelineError,
    WatermarkStoreHook,
    is_transient,
    validate_name,
)
from airflow_provider_wm.links import WatermarksLink
from airflow_provider_wm.sensors.base import DeferrableStoreSensor
from airflow_provider_wm.timeutil import format_ms, is_templated, to_epoch_ms
from airflow_provider_wm.triggers.partitions import PartitionWatermarkTrigger

__all__ = ["PartitionWatermarkSensor"]


class PartitionWatermarkSensor(DeferrableStoreSensor):
    """Wait until every work unit of the upstream ``pipeline`` overlapping ``[start, end)`` has succeeded
    with a high watermark at or past its partition's end ("all 31 days of the month arrived").

    A work unit is one partition of the pipeline's time range times one of its units; the pipeline commits
    their high watermarks to its state document in the store, and each poke reads that one small document.
    Partitions are whole: a monthly partition counts only when all of the month is in. Before the pipeline's
    first commit there is no document and nothing is complete. A pipeline that no run ever wrote to the store
    is unknown: see ``fail_on_unknown_pipeline``. Log lines and messages show times in ISO-8601 UTC.

    Modes: ``poke`` and ``reschedule`` poll from the worker; ``deferrable=True`` (default from
    ``[operators] default_deferrable``) hands the waiting to :class:`PartitionWatermarkTrigger` in the
    triggerer and honours ``timeout`` and ``soft_fail`` there too. A read that fails for a transient reason (a
    network blip, an unmounted store) is "not yet" with a warning, in every mode; a damaged document fails the
    task naming its path (:class:`~airflow_provider_wm.sensors.base.DeferrableStoreSensor`). The sensor
    returns (XCom) ``{"pipeline", "start_ms", "end_ms", "work_units": <how many were checked>, "run_id",
    "committed_at"}`` of the state document it saw complete.

    :param pipeline: the upstream pipeline to wait for. Templated.
    :param store_path: absolute base path or fsspec URL of the watermark store. Templated.
    :param start: start of the range (ISO-8601 time, datetime or epoch ms); default (``None``) the run's
        ``data_interval_start``. Templated.
    :param end: end of the range, exclusive; default (``None``) the run's ``data_interval_end``. Templated. A
        run without a data interval (asset-triggered, or manual without a logical date) has no default: the
        sensor fails saying to pass ``start`` and ``end``.
    :param fail_on_unknown_pipeline: what to do when the pipeline has no state document. The store tells a
        pipeline it knows (a run of it wrote its request, before its Spark job started) from one it has never
        seen; with ``True`` (default) a pipeline the store has never seen fails the task at once with
        :class:`~airflow.sdk.exceptions.AirflowFailException` (no retries: waiting or retrying cannot fix a
        misspelt name), naming what the store has: ``pipeline='ordrs_daily': unknown pipeline
        'ordrs_daily': the store at /data/store has orders_5m, orders_daily``. This happens at the first poke,
        in poke, reschedule and deferrable mode alike (the trigger ends with an ``unknown_pipeline`` event);
        ``soft_fail`` turns it into a skip. A known pipeline before its first commit is waited for as usual, and so
        is a document missing after the sensor has read one, or a store whose base path does not exist
        (unmounted, unreachable, or a wrong ``store_path``): like any transient failure of a read. A windowed
        pipeline (its document is of another kind) fails the same way, saying to use
        :class:`~airflow_provider_wm.sensors.stream_watermark.StreamWatermarkSensor` on its output stream.
        ``False`` waits for an unknown pipeline too, until the timeout: for a sensor that may run before the
        pipeline's first run starts, typically one waiting on another DAG in a new deployment. A sensor
        downstream of its pipeline's operator in the same DAG (the usual layout) never sees that race.
    :param storage_options: fsspec options of a remote store (a mapping).
    """

    template_fields: Sequence[str] = ("pipeline", "store_path", "start", "end")
    operator_extra_links = (WatermarksLink(),)
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        pipeline: str,
        store_path: str,
        start: str | int | dt.datetime | None = None,
        end: str | int | dt.datetime | None = None,
        fail_on_unknown_pipeline: bool = True,
        storage_options: dict[str, Any] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_templated(pipeline):
            validate_name(pipeline, "pipeline")
        location_argument(store_path)
        start_ms = None if start is None or is_templated(start) else to_epoch_ms(start, "start")
        end_ms = None if end is None or is_templated(end) else to_epoch_ms(end, "end")
        if start_ms is not None and end_ms is not None:
            _check_range(start, end, start_ms, end_ms)
        require_bool(fail_on_unknown_pipeline=fail_on_unknown_pipeline, deferrable=deferrable)
        self.fail_on_unknown_pipeline = fail_on_unknown_pipeline
        self.pipeline = pipeline
        self.store_path = store_path
        self.start = start
        self.end = end
        self.storage_options = storage_options_argument(storage_options)
        self.deferrable = deferrable
        self._seen_document = False

    def _range_ms(self, context: Context) -> tuple[int, int]:
        start = self.start
        if start is None:
            start = self.interval_bound(context, "data_interval_start", "start= and end=")
        end = self.end
        if end is None:
            end = self.interval_bound(context, "data_interval_end", "start= and end=")
        start_ms, end_ms = to_epoch_ms(start, "start"), to_epoch_ms(end, "end")
        _check_range(start, end, start_ms, end_ms)
        return start_ms, end_ms

    def poke(self, context: Context) -> PokeReturnValue:
        pipeline = validate_name(self.pipeline, "pipeline")
        start_ms, end_ms = self._range_ms(context)
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        try:
            document = store.read_partitions_state(
                pipeline, fail_on_unknown=self.fail_on_unknown_pipeline and not self._seen_document
            )
        except (UnknownPipelineError, PipelineKindError) as wrong:
            raise AirflowFailException(f"{self._argument()}: {wrong}") from wrong
        except Exception as error:
            if not is_transient(error):
                raise
            self.store_unavailable(error)
            return PokeReturnValue(is_done=False)
        self._seen_document = self._seen_document or document is not None
        result = check_completeness(document, start_ms, end_ms)
        window = f"[{format_ms(start_ms)}, {format_ms(end_ms)})"
        if document is None or result.work_units is None:
            self.log.info("Pipeline %s: no committed state document yet; all of %s pending", pipeline, window)
            return PokeReturnValue(is_done=False)
        if result.pending:
            first = ", ".join(f"[{s}, {e}) {u or '-'}" for s, e, u in result.first_pending())
            more = " ..." if len(result.pending) > FIRST_PENDING else ""
            self.log.info(
                "Pipeline %s: %d of %d work units in %s pending (run %s): %s%s",
                pipeline,
                len(result.pending),
                result.work_units,
                window,
                document.get("run_id"),
                first,
                more,
            )
            return PokeReturnValue(is_done=False)
        self.log.info(
            "Pipeline %s: all %d work units in %s done (run %s, committed at %s)",
            pipeline,
            result.work_units,
            window,
            document.get("run_id"),
            document.get("committed_at"),
        )
        self._warn_if_nothing_checked(result.work_units, pipeline, start_ms, end_ms)
        return PokeReturnValue(
            is_done=True,
            xcom_value={
                "pipeline": pipeline,
                "start_ms": start_ms,
                "end_ms": end_ms,
                "work_units": result.work_units,
                "run_id": document.get("run_id"),
                "committed_at": document.get("committed_at"),
            },
        )

    def _argument(self) -> str:
        """The argument that names the pipeline, as the DAG gave it (rendered): ``pipeline='orders_daily'``."""
        return f"pipeline={self.pipeline!r}"

    def _warn_if_nothing_checked(self, work_units: int, pipeline: str, start_ms: int, end_ms: int) -> None:
        if work_units == 0:
            self.log.warning(
                "Pipeline %s has no partition overlapping [%s, %s): nothing to wait for; check the range",
                pipeline,
                format_ms(start_ms),
                format_ms(end_ms),
            )

    def trigger(self, context: Context, timeout_at_ms: int) -> PartitionWatermarkTrigger:
        start_ms, end_ms = self._range_ms(context)
        return PartitionWatermarkTrigger(
            store_path=self.store_path,
            pipeline=validate_name(self.pipeline, "pipeline"),
            start_ms=start_ms,
            end_ms=end_ms,
            poll_interval=self.poke_interval,
            timeout_at_ms=timeout_at_ms,
            storage_options=self.storage_options,
            unknown_pipeline_argument=self._argument() if self.fail_on_unknown_pipeline else None,
            seen_document=self._seen_document,
        )

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"pipeline": self.pipeline}

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "unknown_pipeline":
            self.failed(event["message"])
        if event.get("status") == "error":
            self.store_error(event)
        if event.get("status") == "success":
            result = {key: value for key, value in event.items() if key != "status"}
            self.log.info(
                "Pipeline %s: all %s work units done (run %s, committed at %s)",
                result["pipeline"],
                result["work_units"],
                result.get("run_id"),
                result.get("committed_at"),
            )
            self._warn_if_nothing_checked(
                int(result["work_units"]), str(result["pipeline"]), int(result["start_ms"]), int(result["end_ms"])
            )
            return result
        pending = event.get("pending")
        if pending is None:
            what = "has no committed state document"
        else:
            shown = list(event.get("first_pending") or [])
            first = ", ".join(f"[{start}, {end}) {unit or '-'}" for start, end, unit in shown)
            what = f"has {pending} work units pending (first: {first}{' ...' if pending > len(shown) else ''})"
        message = (
            f"Pipeline {event.get('pipeline')} {what} in [{format_ms(event.get('start_ms'))}, "
            f"{format_ms(event.get('end_ms'))}) after the timeout of {self.timeout}s{self.last_error_note(event)}"
        )
        self.timed_out(message)


def _check_range(start: Any, end: Any, start_ms: int, end_ms: int) -> None:
    if start_ms >= end_ms:
        raise ValueError(
            f"start={start!r} must be before end={end!r} (the range [{format_ms(start_ms)}, {format_ms(end_ms)}) "
            "is empty)"
        )
