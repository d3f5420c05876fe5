"""PartitionWatermarkTrigger: waits in the triggerer until an incremental-partitions pipeline has completed
every work unit of a time range."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_wm.core.partitions import check_completeness
from airflow_provider_wm.hooks.watermark_store import UnknownPipelineError, WatermarkStoreHook
from airflow_provider_wm.timeutil import format_ms

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
    older versions load with) waits for it.

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
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        while True:
            try:
                document = await asyncio.to_thread(
                    store.read_pipeline_state, self.pipeline, fail_on_unknown=self.unknown_pipeline_argument is not None
                )
            except UnknownPipelineError as unknown:
                message = f"{self.unknown_pipeline_argument}: {unknown}"
                yield TriggerEvent({"status": "unknown_pipeline", "message": message})
                return
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
            if self.timeout_at_ms is not None and time.time() * 1000 >= self.timeout_at_ms:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "pipeline": self.pipeline,
                        "start_ms": self.start_ms,
                        "end_ms": self.end_ms,
                        "pending": self.last_pending,
                        "first_pending": [list(pending) for pending in result.first_pending()],
                    }
                )
                return
            self.log.info(
                "Pipeline %s: %s work units pending in [%s, %s); next poll in %ss",
                self.pipeline,
                "all (no state document)" if self.last_pending is None else self.last_pending,
                format_ms(self.start_ms),
                format_ms(self.end_ms),
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
