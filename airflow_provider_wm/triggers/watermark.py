"""WatermarkTrigger: waits in the triggerer until the watermark of one stream, or the coalesced watermark of
several, reaches a threshold.

The rule the sensor's ``poke`` and the trigger both apply to what they read is
:func:`airflow_provider_wm.core.coalescing.check_watermarks`; this module only waits and reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_wm.contracts import WatermarkReached, describe_reached
from airflow_provider_wm.core import names
from airflow_provider_wm.core.coalescing import AllIdlePolicy, check_policy, check_watermarks
from airflow_provider_wm.core.names import watermark_label
from airflow_provider_wm.hooks.watermark_store import UnknownNameError, WatermarkStoreHook, is_transient
from airflow_provider_wm.triggers.polling import error_event, poll_delay, seconds_left, transient_warning

__all__ = ["WatermarkTrigger"]


class WatermarkTrigger(BaseTrigger):
    """Poll the store's ``latest`` record of each input (one small read per input and poll) until the
    watermark reaches ``threshold_ms``, then fire ``{"status": "success", "stream", "watermark": <what the
    sensor returns: a WatermarkReached as JSON>}``.

    One input is ``stream=`` (the trigger's original form, which serialised triggers of older versions still
    load into); several are ``inputs=[[stream, wm_key or None], ...]``. Either way it waits for the
    watermark coalesced by :func:`~airflow_provider_wm.core.coalescing.check_watermarks` (idle inputs,
    ``idle_timeout_ms`` before ``reference_ms``, are excluded; ``when_all_idle`` decides when all are); for
    one input without idleness that is the stream's ``lower_ms``.

    All of its state travels in its serialised kwargs, so it survives a triggerer restart: the deadline
    is absolute (``timeout_at_ms``, wall-clock epoch ms), ``last_seen_lower_ms`` is the (coalesced)
    watermark it last read and ``last_seen_inputs`` what it last saw of each input. Past the deadline it
    fires ``{"status": "timeout", "stream", "threshold_ms", "last_seen_lower_ms", "when_all_idle"}`` with
    the fields of :class:`~airflow_provider_wm.contracts.WatermarkReached` (per-input watermarks and
    idleness, ``"waiting"``): the sensor turns that into a sensor timeout or, with ``soft_fail``, a skip.
    It does its own timing because ``dag.test()`` runs triggers inline without the scheduler's deferral
    timeout.

    With ``unknown_stream_argument`` (the sensor's argument that names the streams, e.g. ``"stream='orders'"``)
    an input without a watermark whose stream or key the store has never seen ends the wait with
    ``{"status": "unknown_stream", "message": "<argument>: unknown stream ...: the store at <path> has
    <names>"}``; the store hook decides (:meth:`WatermarkStoreHook.read_latest_inputs` with
    ``fail_on_unknown``), the trigger only reports. ``None`` (the default, and what triggers serialised by
    older versions load with) waits for it. The check is made only for inputs of which it has not read a
    record yet (``seen_inputs``, labels): a stream the trigger has read is never called unknown later, when the
    store is briefly empty or unmounted.

    A read that fails for a transient reason (an :class:`OSError`: a network blip, a timeout, a store whose base
    path is gone; :func:`~airflow_provider_wm.hooks.watermark_store.is_transient`) is logged as a warning and
    read again at the next poll; the timeout event then names the last such failure (``last_error``). Any other
    failure (a damaged record) ends the wait with ``{"status": "error", "message", "no_retry"}``, which the
    sensor fails on. The last poll is at the deadline (the trigger never sleeps past it), so the trigger's
    timeout event comes before Airflow's deferral timeout.

    Every time in its log lines is ISO-8601 UTC (:func:`airflow_provider_wm.core.times.format_ms`); its events
    carry epoch milliseconds, which the sensor formats the same way.
    """

    def __init__(
        self,
        *,
        store_path: str,
        threshold_ms: int,
        stream: str | None = None,
        inputs: Sequence[Sequence[str | None]] | None = None,
        poll_interval: float = 5.0,
        timeout_at_ms: int | None = None,
        storage_options: dict[str, Any] | None = None,
        last_seen_lower_ms: int | None = None,
        idle_timeout_ms: int | None = None,
        reference_ms: int | None = None,
        when_all_idle: AllIdlePolicy = "wait",
        last_seen_inputs: dict[str, Any] | None = None,
        unknown_stream_argument: str | None = None,
        seen_inputs: Sequence[str] | None = None,
        last_error: str | None = None,
    ) -> None:
        super().__init__()
        if (stream is None) == (inputs is None):
            raise ValueError(f"pass exactly one of stream= and inputs=, got stream={stream!r}, inputs={inputs!r}")
        if inputs is not None:
            pairs = [list(pair) for pair in inputs]
            if not pairs or any(len(pair) != 2 for pair in pairs):
                raise ValueError(f"inputs={inputs!r} must be a non-empty list of [stream, wm_key or None]")
        self.store_path = store_path
        self.stream = stream
        self.inputs = None if inputs is None else pairs
        self.threshold_ms = int(threshold_ms)
        self.poll_interval = float(poll_interval)
        self.timeout_at_ms = timeout_at_ms
        self.storage_options = dict(storage_options or {})
        self.last_seen_lower_ms = last_seen_lower_ms
        self.idle_timeout_ms = None if idle_timeout_ms is None else int(idle_timeout_ms)
        self.reference_ms = self.threshold_ms if reference_ms is None else int(reference_ms)
        self.when_all_idle = check_policy(when_all_idle)
        self.last_seen_inputs = last_seen_inputs
        self.unknown_stream_argument = unknown_stream_argument
        self.seen_inputs = sorted(seen_inputs or [])
        self.last_error = last_error

    def input_list(self) -> list[names.Input]:
        if self.stream is not None:
            return [(self.stream, None)]
        return [(str(stream), None if key is None else str(key)) for stream, key in self.inputs or []]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "store_path": self.store_path,
                "stream": self.stream,
                "inputs": self.inputs,
                "threshold_ms": self.threshold_ms,
                "poll_interval": self.poll_interval,
                "timeout_at_ms": self.timeout_at_ms,
                "storage_options": self.storage_options,
                "last_seen_lower_ms": self.last_seen_lower_ms,
                "idle_timeout_ms": self.idle_timeout_ms,
                "reference_ms": self.reference_ms,
                "when_all_idle": self.when_all_idle,
                "last_seen_inputs": self.last_seen_inputs,
                "unknown_stream_argument": self.unknown_stream_argument,
                "seen_inputs": self.seen_inputs,
                "last_error": self.last_error,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        inputs = self.input_list()
        labels = [watermark_label(stream, key) for stream, key in inputs]
        # what the timeout event reports when no read has succeeded yet: every input without a watermark
        records: dict[str, dict[str, Any] | None] = {label: None for label in labels}
        while True:
            try:
                records = await asyncio.to_thread(
                    store.read_latest_inputs,
                    inputs,
                    fail_on_unknown=self.unknown_stream_argument is not None,
                    seen=self.seen_inputs,
                )
                self.last_error = None
            except UnknownNameError as unknown:
                message = f"{self.unknown_stream_argument}: {unknown}"
                yield TriggerEvent({"status": "unknown_stream", "message": message})
                return
            except Exception as error:
                if not is_transient(error):
                    yield error_event(f"Streams {', '.join(labels)}", self.store_path, error)
                    return
                self.last_error = transient_warning(self.log, f"Streams {', '.join(labels)}", self.store_path, error)
            else:
                self.seen_inputs = sorted(set(self.seen_inputs) | {k for k, r in records.items() if r is not None})
            check = check_watermarks(
                records,
                self.threshold_ms,
                reference_ms=self.reference_ms,
                idle_timeout_ms=self.idle_timeout_ms,
                when_all_idle=self.when_all_idle,
            )
            if check.watermark_ms is not None:
                self.last_seen_lower_ms = check.watermark_ms
            payload = WatermarkReached.of(check, records).to_json()
            self.last_seen_inputs = payload["streams"]
            if check.passed:
                yield TriggerEvent(
                    {
                        "status": "success",
                        "stream": self.stream,
                        "watermark": payload,
                    }
                )
                return
            left = seconds_left(self.timeout_at_ms)
            if left is not None and left <= 0:
                event: dict[str, Any] = {
                    "status": "timeout",
                    "stream": self.stream,
                    "threshold_ms": self.threshold_ms,
                    "last_seen_lower_ms": self.last_seen_lower_ms,
                }
                event.update(payload, when_all_idle=self.when_all_idle, last_error=self.last_error)
                yield TriggerEvent(event)
                return
            delay = poll_delay(self.poll_interval, left)
            self.log.info(
                "Streams %s: %s; next poll in %ss",
                ", ".join(labels),
                describe_reached(payload, self.when_all_idle),
                round(delay, 3),
            )
            await asyncio.sleep(delay)
