"""WatermarkTrigger: waits in the triggerer until a stream's watermark reaches a threshold."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook

__all__ = ["WatermarkTrigger"]


class WatermarkTrigger(BaseTrigger):
    """Poll the store's ``latest`` record of ``stream`` (one small read per poll) until
    ``lower_ms >= threshold_ms``, then fire ``{"status": "success", "watermark": <record>}``.

    All of its state travels in its serialised kwargs, so it survives a triggerer restart: the deadline
    is absolute (``timeout_at_ms``, wall-clock epoch ms), and ``last_seen_lower_ms`` is what it last read.
    Past the deadline it fires ``{"status": "timeout", ...}``: the sensor turns that into a sensor timeout
    or, with ``soft_fail``, a skip. It does its own timing because ``dag.test()`` runs triggers inline
    without the scheduler's deferral timeout.
    """

    def __init__(
        self,
        *,
        store_path: str,
        stream: str,
        threshold_ms: int,
        poll_interval: float = 5.0,
        timeout_at_ms: int | None = None,
        storage_options: dict[str, Any] | None = None,
        last_seen_lower_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.stream = stream
        self.threshold_ms = int(threshold_ms)
        self.poll_interval = float(poll_interval)
        self.timeout_at_ms = timeout_at_ms
        self.storage_options = dict(storage_options or {})
        self.last_seen_lower_ms = last_seen_lower_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "store_path": self.store_path,
                "stream": self.stream,
                "threshold_ms": self.threshold_ms,
                "poll_interval": self.poll_interval,
                "timeout_at_ms": self.timeout_at_ms,
                "storage_options": self.storage_options,
                "last_seen_lower_ms": self.last_seen_lower_ms,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        while True:
            latest = await asyncio.to_thread(store.read_latest, self.stream)
            if latest is not None:
                self.last_seen_lower_ms = int(latest["lower_ms"])
                if self.last_seen_lower_ms >= self.threshold_ms:
                    yield TriggerEvent({"status": "success", "stream": self.stream, "watermark": latest})
                    return
            if self.timeout_at_ms is not None and time.time() * 1000 >= self.timeout_at_ms:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "stream": self.stream,
                        "threshold_ms": self.threshold_ms,
                        "last_seen_lower_ms": self.last_seen_lower_ms,
                    }
                )
                return
            self.log.info(
                "Stream %s watermark %s < threshold %s; next poll in %ss",
                self.stream,
                self.last_seen_lower_ms,
                self.threshold_ms,
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
