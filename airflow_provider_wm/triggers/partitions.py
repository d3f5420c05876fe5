"""PartitionWatermarkTrigger: waits in the triggerer until an incremental-partitions pipeline has completed
every work unit of a time range."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_wm.core.partitions import check_completeness
from airflow_provider_wm.hooks.watermark_store import UnknownPipelineError, WatermarkStoreHook, is_transient
from airflow_provider_wm.timeutil import format_ms
from airflow_provider_wm.triggers.polling import error_event, poll_delay, seconds_left, transient_warning

__all__ = ["PartitionWatermarkTrigger"]


class PartitionWatermarkTrigger(BaseTrigger):
    """Poll ``pipeline``'s committed state document (one small read per poll) until every work unit
    overlapping ``[start_ms, end_ms)`` has succeeded with a high watermark at or past its partition's end,
    then fire ``{"status": "success", "pipeline", "start_ms", "end_ms", "work_units": <checked>, "run_id",
    "committed_at"}``. A missing document means everything is pending.

    All of its state travels in its serialised kwargs, so it survives a triggerer restart: the deadline is
    absolute (``timeout_at_ms``, wall-clock epoch ms), and ``last_pending`` is how many work units were
    pending at the last poll (None: not polled yet, or no state document). Past the deadline it fires
    ``{"status": "timeout", "pipeline", "start_ms", "end_ms", "pending": <count, None without a document>,
    "first_pending": [[start_iso, end_iso, unit], ...] (at most 5)}``: the sensor turns that into a sensor
    timeout or, with ``soft_fail``, a skip.

    With ``unknown_pipeline_argument`` (the sensor's argument, e.g. ``"pipeline='orders_daily'"``), a pipeline
    without a state document that the store has never seen (no run of it wrote anything) ends the wait with
    ``{"status": "unknown_pipeline", "message": "<argument>: unknown pipeline ...: the store at <path> has
    <names>"}``; the store hook decides (:meth:`WatermarkStoreHook.read_pipeline_state` with
    ``fail_on_unknown``), the trigger only reports. ``None`` (the default, and what triggers serialised by
    older versions load with) waits for it. The check is made only until the trigger has read a document
    (``seen_document``): a pipeline it has read is never called unknown later, when the store is briefly empty.

    The document is read with :meth:`WatermarkStoreHook.read_partitions_state`: a transient failure (an
    :class:`OSError`, e.g. a network blip or a store whose base path is gone) is logged as a warning and read
    again at the next poll, and the timeout event names the last one (``last_error``); any other failure (a
    damaged document, a windowed pipeline's document) ends the wait with ``{"status": "error", "message",
    "no_retry"}``, which the sensor fails on. The last poll is at the deadline, so the trigger's timeout event
    comes before Airflow's deferral timeout.

    Times in its log lines and in ``first_pending`` are ISO-8601 UTC
    (:func:`airflow_provider_wm.timeutil.format_ms`).
    """

    def __init__(
        self,
        *,
        store_path: str,
        pipeline: str,
        start_ms: int,
        end_ms: int,
        poll_interval: float = 5.0,
        timeout_at_ms: int | None = None,
        storage_options: dict[str, Any] | None = None,
        last_pending: int | None = None,
        unknown_pipeline_argument: str | None = None,
        seen_document: bool = False,
        last_error: str | None = None,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.pipeline = pipeline
        self.start_ms = int(start_ms)
        self.end_ms = int(end_ms)
        self.poll_interval = float(poll_interval)
        self.timeout_at_ms = timeout_at_ms
        self.storage_options = dict(storage_options or {})
        self.last_pending = last_pending
        self.unknown_pipeline_argument = unknown_pipeline_argument
        self.seen_document = bool(seen_document)
        self.last_error = last_error

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "store_path": self.store_path,
                "pipeline": self.pipeline,
                "start_ms": self.start_ms,
                "end_ms": self.end_ms,
                "poll_interval": self.poll_interval,
                "timeout_at_ms": self.timeout_at_ms,
                "storage_options": self.storage_options,
                "last_pending": self.last_pending,
                "unknown_pipeline_argument": self.unknown_pipeline_argument,
                "seen_document": self.seen_document,
                "last_error": self.last_error,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        what = f"Pipeline {self.pipeline}"
        document: dict[str, Any] | None = None
        while True:
            try:
                document = await asyncio.to_thread(
                    store.read_partitions_state,
                    self.pipeline,
                    fail_on_unknown=self.unknown_pipeline_argument is not None and not self.seen_document,
                )
                self.last_error = None
                self.seen_document = self.seen_document or document is not None
            except UnknownPipelineError as unknown:
                message = f"{self.unknown_pipeline_argument}: {unknown}"
                yield TriggerEvent({"status": "unknown_pipeline", "message": message})
                return
            except Exception as error:
                if not is_transient(error):
                    yield error_event(what, self.store_path, error)
                    return
                self.last_error = transient_warning(self.log, what, self.store_path, error)
            result = check_completeness(document, self.start_ms, self.end_ms)
            self.last_pending = None if result.work_units is None else len(result.pending)
            if document is not None and result.complete:
                yield TriggerEvent(
                    {
                        "status": "success",
                        "pipeline": self.pipeline,
                        "start_ms": self.start_ms,
                        "end_ms": self.end_ms,
                        "work_units": result.work_units,
                        "run_id": document.get("run_id"),
                        "committed_at": document.get("committed_at"),
                    }
                )
                return
            left = seconds_left(self.timeout_at_ms)
            if left is not None and left <= 0:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "pipeline": self.pipeline,
                        "start_ms": self.start_ms,
                        "end_ms": self.end_ms,
                        "pending": self.last_pending,
                        "first_pending": [list(pending) for pending in result.first_pending()],
                        "last_error": self.last_error,
                    }
                )
                return
            delay = poll_delay(self.poll_interval, left)
            self.log.info(
                "Pipeline %s: %s work units pending in [%s, %s); next poll in %ss",
                self.pipeline,
                "all (no state document)" if self.last_pending is None else self.last_pending,
                format_ms(self.start_ms),
                format_ms(self.end_ms),
                round(delay, 3),
            )
            await asyncio.sleep(delay)
