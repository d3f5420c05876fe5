"""StreamWatermarkSensor: wait until a stream's watermark passes a threshold (the interval end)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context, PokeReturnValue, conf

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name
from airflow_provider_wm.sensors.base import DeferrableStoreSensor
from airflow_provider_wm.timeutil import format_ms, is_templated, to_epoch_ms
from airflow_provider_wm.triggers.watermark import WatermarkTrigger

__all__ = ["StreamWatermarkSensor"]


class StreamWatermarkSensor(DeferrableStoreSensor):
    """Wait until ``stream``'s watermark (its lower bound) is at or past ``threshold``.

    A watermark W means every event with time < W has arrived, so waiting for W >= the run's
    ``data_interval_end`` waits for the whole interval's data. Each poke reads one small record.

    Modes: ``poke`` and ``reschedule`` poll from the worker; ``deferrable=True`` (default from
    ``[operators] default_deferrable``) hands the waiting to :class:`WatermarkTrigger` in the triggerer
    and honours ``timeout`` and ``soft_fail`` there too. The sensor returns the watermark record it saw
    (XCom).

    :param stream: the stream to wait for. Templated.
    :param store_path: base path or fsspec URL of the watermark store. Templated.
    :param threshold: ISO-8601 time, datetime or epoch ms; default the run's ``data_interval_end``.
        Templated.
    :param storage_options: fsspec options of a remote store.
    """

    template_fields: Sequence[str] = ("stream", "store_path", "threshold")
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        stream: str,
        store_path: str,
        threshold: str | int | dt.datetime = "{{ data_interval_end }}",
        storage_options: dict[str, Any] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_templated(stream):
            validate_name(stream, "stream")
        if not isinstance(store_path, str) or not store_path.strip():
            raise ValueError(f"store_path={store_path!r} must be a non-empty path or URL")
        if not is_templated(threshold):
            to_epoch_ms(threshold, "threshold")
        self.stream = stream
        self.store_path = store_path
        self.threshold = threshold
        self.storage_options = dict(storage_options or {})
        self.deferrable = deferrable

    def _threshold_ms(self) -> int:
        return to_epoch_ms(self.threshold, "threshold")

    def poke(self, context: Context) -> PokeReturnValue:
        stream = validate_name(self.stream, "stream")
        threshold_ms = self._threshold_ms()
        latest = WatermarkStoreHook(self.store_path, storage_options=self.storage_options).read_latest(stream)
        lower = None if latest is None else int(latest["lower_ms"])
        self.log.info("Stream %s: watermark %s, threshold %s", stream, format_ms(lower), format_ms(threshold_ms))
        passed = lower is not None and lower >= threshold_ms
        return PokeReturnValue(is_done=passed, xcom_value=latest if passed else None)

    def trigger(self, context: Context, timeout_at_ms: int) -> WatermarkTrigger:
        return WatermarkTrigger(
            store_path=self.store_path,
            stream=validate_name(self.stream, "stream"),
            threshold_ms=self._threshold_ms(),
            poll_interval=self.poke_interval,
            timeout_at_ms=timeout_at_ms,
            storage_options=self.storage_options,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "success":
            self.log.info("Stream %s watermark reached the threshold: %s", event["stream"], event["watermark"])
            return event["watermark"]
        message = (
            f"Stream {event.get('stream')} watermark {format_ms(event.get('last_seen_lower_ms'))} did not "
            f"reach {format_ms(event.get('threshold_ms'))} within the timeout of {self.timeout}s"
        )
        self.timed_out(message)
