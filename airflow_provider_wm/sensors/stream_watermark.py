"""StreamWatermarkSensor: wait until a stream's watermark, or the coalesced watermark of several streams,
passes a threshold (the interval end)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_wm.arguments import location_argument, require_bool, storage_options_argument
from airflow_provider_wm.contracts import WatermarkReached, describe_reached
from airflow_provider_wm.core.coalescing import AllIdlePolicy, check_policy, check_watermarks
from airflow_provider_wm.core.names import Input, parse_inputs
from airflow_provider_wm.hooks.watermark_store import UnknownNameError, WatermarkStoreHook, is_transient, validate_name
from airflow_provider_wm.links import WatermarksLink
from airflow_provider_wm.sensors.base import DeferrableStoreSensor
from airflow_provider_wm.timeutil import duration_ms, format_ms, is_templated, to_epoch_ms
from airflow_provider_wm.triggers.watermark import WatermarkTrigger

__all__ = ["StreamWatermarkSensor"]


class StreamWatermarkSensor(DeferrableStoreSensor):
    """Wait until ``stream``'s watermark (its lower bound), or the watermark coalesced from ``streams``, is
    at or past ``threshold``.

    A watermark W means every event with time < W has arrived, so waiting for W >= the run's
    ``data_interval_end`` waits for the whole interval's data. Each poke reads one small record per stream.

    Several streams (Jet's watermark coalescing, :mod:`airflow_provider_wm.core.coalescing`): the
    coalesced watermark is the minimum over the streams that are not idle, so the sensor waits for the
    slowest one. A stream without any watermark yet holds it back. With ``idle_timeout``, a stream whose
    latest watermark was computed (the record's ``computed_at_ms``: when it last advanced) at least
    ``idle_timeout`` before the threshold time (the run's logical interval end) is idle: it is left out
    until it publishes a newer watermark, which brings it back in (and holds the output back again when it
    is behind). When every stream is idle, ``when_all_idle`` decides:

    - ``"wait"`` (default): keep waiting until a stream advances, and time out like any sensor. Safe: a
      pipeline whose inputs have all gone quiet does not start on stale data.
    - ``"highest"``: use the highest watermark observed on any stream (Jet's behaviour).

    Modes: ``poke`` and ``reschedule`` poll from the worker; ``deferrable=True`` (default from
    ``[operators] default_deferrable``) hands the waiting to :class:`WatermarkTrigger` in the triggerer
    and honours ``timeout`` and ``soft_fail`` there too. A read that fails for a transient reason (a network
    blip, an unmounted store) is "not yet" with a warning, in every mode; a damaged record fails the task naming
    its path (:class:`~airflow_provider_wm.sensors.base.DeferrableStoreSensor`).

    Result (XCom), the same for one stream or several: a :class:`~airflow_provider_wm.contracts.WatermarkReached`
    as JSON, ``{"watermark_ms", "threshold_ms", "all_idle", "idle": [inputs], "waiting": [inputs],
    "streams": {input: {"lower_ms", "last_advanced_ms", "idle", "upper_ms", "stream_cut"}}}``: the
    watermark that passed and why, per input (the poke log line shows the same).

    :param stream: the one stream to wait for. Templated. Exactly one of ``stream`` and ``streams``.
    :param streams: the streams to wait for, each ``"name"`` or ``"name:key"`` (``key``: the ``wm_key`` of
        a keyed watermark of the stream). Templated.
    :param store_path: absolute base path or fsspec URL of the watermark store. Templated.
    :param threshold: ISO-8601 time, datetime or epoch ms; default (``None``) the run's ``data_interval_end``
        (its ``run_after`` in a run without a data interval: asset-triggered, or manual without a logical
        date). Templated.
    :param idle_timeout: how long a stream's watermark may stay put before the stream is idle: a
        ``timedelta``, seconds or ISO-8601 (``PT30M``). Default: no stream is ever idle.
    :param when_all_idle: ``"wait"`` (default) or ``"highest"``, see above.
    :param fail_on_unknown_stream: what to do when an input has no watermark. The store tells a stream it
        knows (a controller round reported it, or a watermark of it was published) from one it has never seen;
        with ``True`` (default) a stream, or a ``wm_key`` of a stream, that the store has never seen fails the
        task at once with :class:`~airflow.sdk.exceptions.AirflowFailException` (no retries: waiting or
        retrying cannot fix a misspelt name), naming the argument and what the store has:
        ``stream='clikcs': unknown stream 'clikcs': the store at /data/store has clicks, refunds``. This
        happens at the first poke, in poke, reschedule and deferrable mode alike (the trigger ends with an
        ``unknown_stream`` event); ``soft_fail`` turns it into a skip. Only inputs without a record so far are
        checked: once the sensor (or its trigger) has read a stream's watermark, a record missing later is
        waited for. A store whose base path does not exist (unmounted, unreachable, or a wrong ``store_path``)
        is not "unknown": it is waited for like any transient failure of a read. A stream that is known but has no
        watermark yet is waited for as usual. ``False`` waits for unknown streams too, until the timeout: for
        a sensor that may run before the stream exists, i.e. before the first round of the controller that
        reports it or, for a derived stream, before the upstream pipeline's first watermark (a derived
        stream appears with its first watermark), typically a sensor waiting on another DAG in a new
        deployment. The default is ``True`` because on a running deployment every stream a sensor names
        already exists, so an unknown one is a mistake that would otherwise show only as a timeout hours later.
    :param storage_options: fsspec options of a remote store (a mapping).
    """

    template_fields: Sequence[str] = ("stream", "streams", "store_path", "threshold")
    operator_extra_links = (WatermarksLink(),)
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        stream: str | None = None,
        streams: Sequence[str] | None = None,
        store_path: str,
        threshold: str | int | dt.datetime | None = None,
        idle_timeout: dt.timedelta | float | str | None = None,
        when_all_idle: AllIdlePolicy = "wait",
        fail_on_unknown_stream: bool = True,
        storage_options: dict[str, Any] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (stream is None) == (streams is None):
            raise ValueError(
                f"pass exactly one of stream= (one stream) and streams= (several), "
                f"got stream={stream!r} and streams={streams!r}"
            )
        if stream is not None and not is_templated(stream):
            validate_name(stream, "stream")
        if streams is not None and not is_templated(streams):
            parse_inputs(streams, "streams", skip=[entry for entry in streams if is_templated(entry)])
            streams = list(streams)
        location_argument(store_path)
        if threshold is not None and not is_templated(threshold):
            to_epoch_ms(threshold, "threshold")
        self.idle_timeout_ms = None if idle_timeout is None else duration_ms(idle_timeout, "idle_timeout")
        if self.idle_timeout_ms == 0:
            raise ValueError(f"idle_timeout={idle_timeout!r} must be positive (zero would make every stream idle)")
        self.stream = stream
        self.streams = streams
        self.store_path = store_path
        self.threshold = threshold
        self.idle_timeout = idle_timeout
        self.when_all_idle: AllIdlePolicy = check_policy(when_all_idle)
        require_bool(fail_on_unknown_stream=fail_on_unknown_stream, deferrable=deferrable)
        self.fail_on_unknown_stream = fail_on_unknown_stream
        self.storage_options = storage_options_argument(storage_options)
        self.deferrable = deferrable
        self._seen_inputs: set[str] = set()

    def _threshold_ms(self, context: Context) -> int:
        if self.threshold is None:  # a run without a data interval waits for its run_after, as the operators do
            return to_epoch_ms(context.get("data_interval_end") or context["dag_run"].run_after, "threshold")
        return to_epoch_ms(self.threshold, "threshold")

    def _inputs(self) -> list[Input]:
        if self.stream is not None:
            return [(validate_name(self.stream, "stream"), None)]
        return parse_inputs(self.streams, "streams")

    def _argument(self) -> str:
        """The argument that names the streams, as the DAG gave it (rendered): ``stream='orders'``."""
        return f"stream={self.stream!r}" if self.stream is not None else f"streams={list(self.streams or [])!r}"

    def _check(self, inputs: list[Input], threshold_ms: int) -> WatermarkReached:
        store = WatermarkStoreHook(self.store_path, storage_options=self.storage_options)
        seen = self._seen_inputs  # read before: never called unknown again (a store briefly empty)
        try:
            records = store.read_latest_inputs(inputs, fail_on_unknown=self.fail_on_unknown_stream, seen=seen)
        except UnknownNameError as unknown:
            raise AirflowFailException(f"{self._argument()}: {unknown}") from unknown
        seen.update(label for label, record in records.items() if record is not None)
        check = check_watermarks(
            records,
            threshold_ms,
            reference_ms=threshold_ms,
            idle_timeout_ms=self.idle_timeout_ms,
            when_all_idle=self.when_all_idle,
        )
        return WatermarkReached.of(check, records)

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link): the (first) stream it waits for."""
        inputs = self._inputs()
        return {"stream": inputs[0][0]} if inputs else {}

    def poke(self, context: Context) -> PokeReturnValue:
        inputs = self._inputs()
        threshold_ms = self._threshold_ms(context)
        try:
            reached = self._check(inputs, threshold_ms)
        except Exception as error:
            if not is_transient(error):
                raise
            self.store_unavailable(error)
            return PokeReturnValue(is_done=False)
        payload = reached.to_json()
        self.log.info("Streams %s: %s", ", ".join(reached.streams), describe_reached(payload, self.when_all_idle))
        return PokeReturnValue(is_done=reached.passed, xcom_value=payload if reached.passed else None)

    def trigger(self, context: Context, timeout_at_ms: int) -> WatermarkTrigger:
        threshold_ms = self._threshold_ms(context)
        if self.stream is not None:
            where: dict[str, Any] = {"stream": validate_name(self.stream, "stream")}
        else:
            where = {"inputs": [[stream, key] for stream, key in self._inputs()]}
        return WatermarkTrigger(
            store_path=self.store_path,
            **where,
            threshold_ms=threshold_ms,
            poll_interval=self.poke_interval,
            timeout_at_ms=timeout_at_ms,
            storage_options=self.storage_options,
            idle_timeout_ms=self.idle_timeout_ms,
            reference_ms=threshold_ms,
            when_all_idle=self.when_all_idle,
            unknown_stream_argument=self._argument() if self.fail_on_unknown_stream else None,
            seen_inputs=sorted(self._seen_inputs),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("status") == "unknown_stream":
            self.failed(event["message"])
        if event.get("status") == "error":
            self.store_error(event)
        if event.get("status") == "success":
            result = WatermarkReached.from_json(event["watermark"]).to_json()
            self.log.info(
                "Streams %s: watermark reached the threshold: %s",
                ", ".join(result["streams"]),
                describe_reached(result, self.when_all_idle),
            )
            return result
        if "streams" in event:
            message = (
                f"Streams {', '.join(event['streams'])}: the watermark did not reach "
                f"{format_ms(event.get('threshold_ms'))} within the timeout of {self.timeout}s: "
                f"{describe_reached(event, event.get('when_all_idle'))}{self.last_error_note(event)}"
            )
        else:  # an event of a trigger serialised by an older version
            message = (
                f"Stream {event.get('stream')} watermark {format_ms(event.get('last_seen_lower_ms'))} did not "
                f"reach {format_ms(event.get('threshold_ms'))} within the timeout of {self.timeout}s"
            )
        self.timed_out(message)
