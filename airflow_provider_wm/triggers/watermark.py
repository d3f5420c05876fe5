"""WatermarkTrigger: waits in the triggerer until the watermark of one stream, or the coalesced watermark of
several, reaches a threshold.

The rule the sensor's ``poke`` and the trigger both apply to what they read is :func:`check_watermarks`
(one place); the coalescing itself is :func:`airflow_provider_wm.core.coalescing.coalesce`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_wm.contracts import InputWatermark, WatermarkReached
from airflow_provider_wm.core.coalescing import ALL_IDLE_POLICIES, AllIdlePolicy, coalesce
from airflow_provider_wm.core.controller import is_valid_stream_name
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.timeutil import format_ms, is_templated

__all__ = [
    "WatermarkCheck",
    "WatermarkTrigger",
    "check_policy",
    "check_watermarks",
    "describe_check",
    "input_label",
    "parse_input",
    "parse_inputs",
]

Input = tuple[str, str | None]
"""An input of the coalescing: a stream and the ``wm_key`` of its watermark (``None``: unkeyed)."""


def input_label(stream: str, wm_key: str | None) -> str:
    """``"orders"`` or ``"orders:eu"``: how an input is named in arguments, XComs and logs."""
    return stream if wm_key is None else f"{stream}:{wm_key}"


def parse_input(value: object, argument: str) -> Input:
    """``"orders"`` -> ``("orders", None)``, ``"orders:eu"`` -> ``("orders", "eu")``; both parts are names.

    >>> parse_input("orders:eu", "streams")
    ('orders', 'eu')
    """
    if not isinstance(value, str):
        raise ValueError(f"{argument} entry {value!r} must be a string: 'stream' or 'stream:key'")
    stream, colon, key = value.partition(":")
    if not is_valid_stream_name(stream) or (colon and not is_valid_stream_name(key)):
        raise ValueError(
            f"{argument} entry {value!r} is not 'stream' or 'stream:key': names use letters, digits, '.', "
            "'_' or '-', starting with a letter or digit (at most 200 characters)"
        )
    return stream, (key if colon else None)


def parse_inputs(values: object, argument: str, *, allow_templated: bool = False) -> list[Input]:
    """The inputs named by ``values`` (a non-empty sequence of ``"stream"`` or ``"stream:key"``), each once.

    With ``allow_templated`` (at parse time), entries that are Jinja templates are skipped: they are checked
    once rendered.
    """
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise ValueError(f"{argument}={values!r} must be a list of stream names ('stream' or 'stream:key')")
    entries = list(values)
    if not entries:
        raise ValueError(f"{argument}={values!r} names no stream: give at least one")
    inputs: list[Input] = []
    for entry in entries:
        if allow_templated and is_templated(entry):
            continue
        parsed = parse_input(entry, argument)
        if parsed in inputs:
            raise ValueError(f"{argument}={values!r} names {input_label(*parsed)!r} more than once")
        inputs.append(parsed)
    return inputs


def check_policy(when_all_idle: object, argument: str = "when_all_idle") -> AllIdlePolicy:
    if when_all_idle not in ALL_IDLE_POLICIES:
        raise ValueError(f"{argument}={when_all_idle!r} must be one of {', '.join(map(repr, ALL_IDLE_POLICIES))}")
    return when_all_idle  # type: ignore[return-value]


class WatermarkCheck(NamedTuple):
    """The rule applied to one read of every input (:func:`check_watermarks`).

    :param watermark_ms: the coalesced watermark (``None``: none, e.g. an input without a record holds it
        back, or all inputs are idle and the policy is ``"wait"``).
    :param threshold_ms: what it has to reach.
    :param all_idle: every input is idle.
    :param idle: the idle inputs (excluded from the minimum), in input order.
    :param waiting: the inputs without any record yet (they hold the output back), in input order.
    :param inputs: each input's :class:`~airflow_provider_wm.contracts.InputWatermark`, by label, in order.
    """

    watermark_ms: int | None
    threshold_ms: int
    all_idle: bool
    idle: list[str]
    waiting: list[str]
    inputs: dict[str, InputWatermark]

    @property
    def passed(self) -> bool:
        return self.watermark_ms is not None and self.watermark_ms >= self.threshold_ms

    def reached(self) -> WatermarkReached:
        """What the sensor returns (its XCom), one shape for one input or several."""
        return WatermarkReached(
            self.watermark_ms, self.threshold_ms, self.all_idle, list(self.idle), list(self.waiting), self.inputs
        )

    def payload(self) -> dict[str, Any]:
        """:meth:`reached` as JSON."""
        return self.reached().to_json()


def _last_advanced_ms(record: Mapping[str, Any]) -> int | None:
    value = record.get("computed_at_ms")
    if value is None:  # a record from before computed_at_ms: when it was published is the best we know
        value = record.get("published_at_ms")
    return None if value is None else int(value)


def check_watermarks(
    records: Mapping[str, Mapping[str, Any] | None],
    threshold_ms: int,
    *,
    reference_ms: int | None = None,
    idle_timeout_ms: int | None = None,
    when_all_idle: AllIdlePolicy = "wait",
) -> WatermarkCheck:
    """Apply the idle rule and the coalescing rule to the latest record of every input (by label).

    An input is idle when ``reference_ms - last_advanced_ms >= idle_timeout_ms``: its latest watermark was
    computed (``computed_at_ms``: when it last advanced) at least ``idle_timeout_ms`` before the reference
    time (default ``threshold_ms``, the run's logical interval end). An input without a record is never
    idle: it holds the output back. Without ``idle_timeout_ms`` nothing is idle. The coalesced watermark is
    :func:`~airflow_provider_wm.core.coalescing.coalesce` of the inputs' ``lower_ms`` with the idle ones
    excluded; when all are idle, ``when_all_idle`` decides: ``"wait"`` (nothing) or ``"highest"`` (the
    highest ``lower_ms``, as Jet does).

    >>> check = check_watermarks(
    ...     {"a": {"lower_ms": 30, "computed_at_ms": 95}, "b": {"lower_ms": 10, "computed_at_ms": 40}},
    ...     25, reference_ms=100, idle_timeout_ms=50)
    >>> check.watermark_ms, check.idle, check.passed
    (30, ['b'], True)
    """
    if not records:
        raise ValueError("records={} names no input: there is nothing to wait for")
    reference = threshold_ms if reference_ms is None else reference_ms
    inputs: dict[str, InputWatermark] = {}
    for label, record in records.items():
        if record is None:
            inputs[label] = InputWatermark(None, None, False)
            continue
        advanced = _last_advanced_ms(record)
        idle = idle_timeout_ms is not None and advanced is not None and reference - advanced >= idle_timeout_ms
        upper = record.get("upper_ms")
        inputs[label] = InputWatermark(
            int(record["lower_ms"]),
            advanced,
            idle,
            None if upper is None else int(upper),
            {str(segment): int(offset) for segment, offset in (record.get("stream_cut") or {}).items()},
        )
    result = coalesce(
        {label: state.lower_ms for label, state in inputs.items()},
        [label for label, state in inputs.items() if state.idle],
        None,
        check_policy(when_all_idle),
    )
    return WatermarkCheck(
        watermark_ms=result.value,
        threshold_ms=int(threshold_ms),
        all_idle=result.all_idle,
        idle=[label for label, state in inputs.items() if state.idle],
        waiting=list(result.waiting),
        inputs=inputs,
    )


def describe_check(payload: Mapping[str, Any], when_all_idle: str | None = None) -> str:
    """One line from a :meth:`WatermarkCheck.payload` (or an event carrying its fields): the coalesced
    watermark against the threshold, then each input's watermark, when it last advanced and whether idle."""
    parts = []
    for label, state in dict(payload.get("streams") or {}).items():
        if state.get("lower_ms") is None:
            parts.append(f"{label}: no watermark yet")
            continue
        idle = "idle, " if state.get("idle") else ""
        parts.append(
            f"{label}: {idle}{format_ms(state['lower_ms'])} (advanced {format_ms(state.get('last_advanced_ms'))})"
        )
    line = (
        f"coalesced watermark {format_ms(payload.get('watermark_ms'))}, "
        f"threshold {format_ms(payload.get('threshold_ms'))}; {'; '.join(parts)}"
    )
    if payload.get("all_idle"):
        line += " - all streams idle" + (f" (when_all_idle={when_all_idle!r})" if when_all_idle else "")
    return line


class WatermarkTrigger(BaseTrigger):
    """Poll the store's ``latest`` record of each input (one small read per input and poll) until the
    watermark reaches ``threshold_ms``, then fire ``{"status": "success", "stream", "watermark": <what the
    sensor returns: a WatermarkReached as JSON>}``.

    One input is ``stream=`` (the trigger's original form, which serialised triggers of older versions still
    load into); several are ``inputs=[[stream, wm_key or None], ...]``. Either way it waits for the
    watermark coalesced by :func:`check_watermarks` (idle inputs, ``idle_timeout_ms`` before
    ``reference_ms``, are excluded; ``when_all_idle`` decides when all are); for one input without idleness
    that is the stream's ``lower_ms``.

    All of its state travels in its serialised kwargs, so it survives a triggerer restart: the deadline
    is absolute (``timeout_at_ms``, wall-clock epoch ms), ``last_seen_lower_ms`` is the (coalesced)
    watermark it last read and ``last_seen_inputs`` what it last saw of each input. Past the deadline it
    fires ``{"status": "timeout", "stream", "threshold_ms", "last_seen_lower_ms", "when_all_idle"}`` with
    the fields of :meth:`WatermarkCheck.payload` (per-input watermarks and idleness, ``"waiting"``): the
    sensor turns that into a sensor timeout or, with ``soft_fail``, a skip. It does its own timing because
    ``dag.test()`` runs triggers inline without the scheduler's deferral timeout.
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

    def input_list(self) -> list[Input]:
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
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        inputs = self.input_list()
        labels = [input_label(stream, key) for stream, key in inputs]
        while True:
            records = await asyncio.gather(
                *(asyncio.to_thread(store.read_latest, stream, key) for stream, key in inputs)
            )
            check = check_watermarks(
                dict(zip(labels, records, strict=True)),
                self.threshold_ms,
                reference_ms=self.reference_ms,
                idle_timeout_ms=self.idle_timeout_ms,
                when_all_idle=self.when_all_idle,
            )
            if check.watermark_ms is not None:
                self.last_seen_lower_ms = check.watermark_ms
            payload = check.payload()
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
            if self.timeout_at_ms is not None and time.time() * 1000 >= self.timeout_at_ms:
                event: dict[str, Any] = {
                    "status": "timeout",
                    "stream": self.stream,
                    "threshold_ms": self.threshold_ms,
                    "last_seen_lower_ms": self.last_seen_lower_ms,
                }
                event.update(payload, when_all_idle=self.when_all_idle)
                yield TriggerEvent(event)
                return
            self.log.info(
                "Streams %s: %s; next poll in %ss",
                ", ".join(labels),
                describe_check(payload, self.when_all_idle),
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
