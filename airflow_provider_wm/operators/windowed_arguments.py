"""The windowed aggregate's DAG arguments: window helpers with durations (``tumbling("PT5M")``), aggregates as
``{"name": "sum(col)"}``, watermark policies and merged inputs, each checked at parse time and turned into core
values (:mod:`airflow_provider_wm.core.windowing`). An error names the argument and the value."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from airflow_provider_wm.arguments import events_format_argument, kept_apart, require_paths
from airflow_provider_wm.core.coalescing import check_policy
from airflow_provider_wm.core.names import column_name
from airflow_provider_wm.core.windowing import (
    ROW_COLUMN,
    Aggregate,
    BoundedOutOfOrderness,
    MergedWatermark,
    SqlAggregate,
    StoreWatermark,
    UpstreamPanes,
    WatermarkPolicy,
    input_column,
)
from airflow_provider_wm.core.windows import Global, Session, Sliding, Tumbling
from airflow_provider_wm.hooks.watermark_store import validate_name
from airflow_provider_wm.timeutil import duration_ms

__all__ = [
    "Duration",
    "check_rollup_arguments",
    "global_window",
    "keys_argument",
    "output_paths",
    "output_stream_argument",
    "parse_aggregates",
    "parse_inputs",
    "parse_merge",
    "parse_watermark",
    "read_per_run",
    "session",
    "sliding",
    "source_locations",
    "tumbling",
    "when_all_idle_argument",
]


Duration = dt.timedelta | float | str
E = TypeVar("E", bound=enum.Enum)


def tumbling(size: Duration, offset: Duration = 0) -> Tumbling:
    """``[k*size + offset, (k+1)*size + offset)``; durations as timedelta, seconds or ISO-8601 (``PT5M``).

    >>> tumbling("PT15M", "PT20M")
    Traceback (most recent call last):
    ...
    ValueError: tumbling(size='PT15M', offset='PT20M'): window offset_ms=1200000 must be milliseconds in [0, 900000)
    """
    size_ms = duration_ms(size, "window size", positive=True)
    offset_ms = duration_ms(offset, "window offset")
    with _as_given(f"tumbling(size={size!r}, offset={offset!r})"):
        return Tumbling(size_ms, offset_ms)


def sliding(size: Duration, slide: Duration, offset: Duration = 0) -> Sliding:
    """Windows of ``size`` every ``slide`` (``size`` a multiple of ``slide``).

    >>> sliding("PT10M", "PT3M")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: sliding(size='PT10M', slide='PT3M', offset=0): window size_ms=600000 must be a multiple of ...
    """
    size_ms = duration_ms(size, "window size", positive=True)
    slide_ms = duration_ms(slide, "window slide", positive=True)
    offset_ms = duration_ms(offset, "window offset")
    with _as_given(f"sliding(size={size!r}, slide={slide!r}, offset={offset!r})"):
        return Sliding(size_ms, slide_ms, offset_ms)


@contextlib.contextmanager
def _as_given(call: str) -> Iterator[None]:
    """A window's own check (in milliseconds) prefixed with the call as the DAG author wrote it."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{call}: {exc}") from None


def session(gap: Duration) -> Session:
    """Per key, events at most ``gap`` apart share a session ``[first, last + gap)``."""
    return Session(duration_ms(gap, "session gap", positive=True))


def global_window() -> Global:
    """One window over all time (never complete: use ``early_firing=True``)."""
    return Global()


_BUILTIN = re.compile(
    r"^\s*(count|sum|min|max|avg)\s*\(\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*\.\s*)?(\*|[A-Za-z_][A-Za-z0-9_]*)?\s*\)\s*$",
    re.IGNORECASE,
)


def parse_aggregates(
    aggregates: Mapping[str, str | SqlAggregate] | Sequence[Aggregate | SqlAggregate], inputs: Sequence[str] = ()
) -> tuple:
    """``{"orders": "count(*)", "revenue": "sum(amount)", "users": SqlAggregate(...)}`` -> core aggregates.
    With merged ``inputs``, a column names its input: ``count(orders.*)``, ``sum(orders.amount)``.

    >>> parse_aggregates({"n": "count(*)", "total": "sum(amount)"})
    (Aggregate(name='n', function='count', column=None), Aggregate(name='total', function='sum', column='amount'))
    >>> parse_aggregates({"n": "count(orders.*)", "late": "max(deliveries.delay_s)"}, ["orders", "deliveries"])
    ... # doctest: +NORMALIZE_WHITESPACE
    (Aggregate(name='n', function='count', column='orders__wm_row'),
     Aggregate(name='late', function='max', column='deliveries__delay_s'))
    """
    if isinstance(aggregates, Mapping):
        parsed: list[Aggregate | SqlAggregate] = []
        for name, spec in aggregates.items():
            if isinstance(spec, SqlAggregate):
                parsed.append(spec if spec.name == name else SqlAggregate(name, spec.partial, spec.merge, spec.final))
                continue
            match = _BUILTIN.match(spec) if isinstance(spec, str) else None
            if not match:
                raise ValueError(
                    f"aggregates[{name!r}]={spec!r} must be count(*), count(col), sum(col), min(col), max(col), "
                    "avg(col), or a SqlAggregate(partial=..., merge=..., final=...) for any other mergeable aggregate"
                )
            function, source, column = match.group(1).lower(), match.group(2), match.group(3)
            if source is not None and source not in inputs:
                raise ValueError(
                    f"aggregates[{name!r}]={spec!r} refers to input {source!r}, which is not among inputs="
                    f"{list(inputs)}"
                )
            if source is None and inputs and column not in (None, "*"):
                raise ValueError(f"aggregates[{name!r}]={spec!r} must say which input: <input>.{column}")
            if function != "count" and column in (None, "*"):
                raise ValueError(f"aggregates[{name!r}]={spec!r} must name a column: {function}(col)")
            if source is not None:
                column = input_column(source, ROW_COLUMN if column in (None, "*") else column)
            parsed.append(Aggregate(name, function, None if column in (None, "*") else column))
        return tuple(parsed)
    if isinstance(aggregates, Sequence) and not isinstance(aggregates, str):
        return tuple(aggregates)
    raise ValueError(f"aggregates={aggregates!r} must be a mapping of output name -> aggregate")


def parse_watermark(watermark: Mapping[str, Any] | WatermarkPolicy, argument: str = "watermark") -> WatermarkPolicy:
    """``{"stream": "orders"}`` (optionally ``"wm_key"``): the store's watermark of a stream;
    ``{"max_delay": "PT1M"}``: the highest event time seen so far minus the delay.

    >>> parse_watermark("orders", "inputs['orders'].watermark")
    Traceback (most recent call last):
    ...
    ValueError: inputs['orders'].watermark='orders' must be {'stream': name} or {'max_delay': duration}
    """
    if isinstance(watermark, StoreWatermark | BoundedOutOfOrderness | MergedWatermark):
        return watermark
    if isinstance(watermark, Mapping):
        if set(watermark) <= {"stream", "wm_key"} and watermark.get("stream"):
            wm_key = watermark.get("wm_key")
            return StoreWatermark(
                validate_name(watermark["stream"], f"{argument}.stream"),
                None if wm_key is None else validate_name(wm_key, f"{argument}.wm_key"),
            )
        if set(watermark) == {"max_delay"}:
            return BoundedOutOfOrderness(duration_ms(watermark["max_delay"], f"{argument}.max_delay"))
    raise ValueError(f"{argument}={watermark!r} must be {{'stream': name}} or {{'max_delay': duration}}")


def parse_merge(
    inputs: Mapping[str, Mapping[str, Any]] | None,
    idle_timeout: Duration | None,
    when_all_idle: str | None,
    **not_also: Any,
) -> tuple[list[dict[str, Any]], MergedWatermark | None]:
    """A merge's inputs (:func:`parse_inputs`) and watermark; ``idle_timeout`` and ``when_all_idle`` (``"wait"``
    or ``"highest"``, any case) only with ``inputs``, and none of the single-input arguments ``not_also``.

    >>> parse_merge(None, None, "highest")
    Traceback (most recent call last):
    ...
    ValueError: when_all_idle='highest' applies to merged inputs= only
    """
    if inputs is None:
        for argument, value in (("idle_timeout", idle_timeout), ("when_all_idle", when_all_idle)):
            if value is not None:
                raise ValueError(f"{argument}={value!r} applies to merged inputs= only")
        return [], None
    given = [f"{argument}={value!r}" for argument, value in not_also.items() if value is not None]
    if given:
        raise ValueError(
            "inputs= gives each input its events, event_time, watermark, arrival_column and events_format: not also "
            + ", ".join(given)
        )
    parsed, watermarks = parse_inputs(inputs)
    timeout = None if idle_timeout is None else duration_ms(idle_timeout, "idle_timeout")
    if timeout == 0:
        raise ValueError(f"idle_timeout={idle_timeout!r} must be positive (zero would make every input idle)")
    idle = "wait" if when_all_idle is None else when_all_idle_argument(when_all_idle)
    return parsed, MergedWatermark(tuple(watermarks), timeout, idle)


_INPUT_FIELDS = {"events", "event_time", "watermark", "arrival_column", "events_format"}


def parse_inputs(
    inputs: Mapping[str, Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[tuple[str, StoreWatermark]]]:
    """``{"orders": {"events": ..., "event_time": ..., "watermark": {"stream": "orders"}[, "arrival_column",
    "events_format"]}, ...}`` -> the job's input list and each input's stream watermark."""
    if not isinstance(inputs, Mapping) or len(inputs) < 2:
        raise ValueError(f"inputs={inputs!r} must map at least two input names to their events")
    parsed, watermarks = [], []
    for name, spec in inputs.items():
        if not isinstance(spec, Mapping) or not {"events", "event_time", "watermark"} <= set(spec):
            raise ValueError(f"inputs[{name!r}]={spec!r} must give events, event_time and watermark")
        unknown = sorted(set(spec) - _INPUT_FIELDS)
        if unknown:
            raise ValueError(f"inputs[{name!r}]: unknown fields {unknown}; use {sorted(_INPUT_FIELDS)}")
        require_paths(**{f"inputs[{name!r}].events": spec["events"]})
        policy = parse_watermark(spec["watermark"], f"inputs[{name!r}].watermark")
        if not isinstance(policy, StoreWatermark):
            raise ValueError(f"inputs[{name!r}].watermark={spec['watermark']!r} must be {{'stream': name}}")
        for argument in ("event_time", "arrival_column"):
            if spec.get(argument) is not None:
                column_name(spec[argument], f"inputs[{name!r}].{argument}")
        events_format = events_format_argument(spec.get("events_format", "parquet"), f"inputs[{name!r}].events_format")
        read_per_run(spec["events"], spec.get("arrival_column"), f"inputs[{name!r}].")
        parsed.append(
            {
                "name": name,
                "events": spec["events"],
                "event_time": spec["event_time"],
                "arrival_column": spec.get("arrival_column"),
                "events_format": events_format,
            }
        )
        watermarks.append((name, policy))
    return parsed, watermarks


def keys_argument(keys: object) -> tuple[str, ...]:
    """The grouping columns as a tuple: a list or tuple of names, not one name.

    >>> keys_argument(["region"]), keys_argument(())
    (('region',), ())
    >>> keys_argument("region")
    Traceback (most recent call last):
    ...
    ValueError: keys='region' must be a list of column names
    """
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise ValueError(f"keys={keys!r} must be a list of column names")
    return tuple(keys)


def when_all_idle_argument(value: object) -> str:
    """``"wait"`` or ``"highest"``, in any case.

    >>> when_all_idle_argument("HIGHEST")
    'highest'
    """
    return check_policy(value.lower() if isinstance(value, str) else value, "when_all_idle")


def read_per_run(events: str, arrival_column: str | None, prefix: str = "") -> None:
    """Each run must read only its own new events: by ``arrival_column``, or from an ``events`` path templated
    per run. Without either every run rereads the whole path and counts the same events again.

    >>> read_per_run("/data/orders/ingest_date={{ ds }}", None)
    >>> read_per_run("/data/orders", None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: events='/data/orders' with arrival_column=None: without an arrival column every run reads ...
    """
    if arrival_column is None and "{{" not in events:
        raise ValueError(
            f"{prefix}events={events!r} with {prefix}arrival_column=None: without an arrival column every run reads "
            "the whole path again and counts its events again, so the events path must be templated per run "
            "(e.g. '.../ingest_date={{ ds }}'), or name the arrival_column"
        )


def source_locations(inputs: Sequence[Mapping[str, Any]], events: str | None) -> dict[str, Any]:
    """What an aggregate reads, by argument name: each merged input's events, else ``events``.

    >>> source_locations([{"name": "a", "events": "/data/a"}], None)
    {"inputs['a'].events": '/data/a'}
    """
    return {f"inputs[{i['name']!r}].events": i["events"] for i in inputs} or {"events": events}


def output_paths(output: str, late_output: str | None, store_path: str, sources: Mapping[str, Any]) -> str:
    """``late_output`` (default ``<output>_late``) once every path is given and the outputs are
    :func:`kept_apart` from each other and from the ``sources``.

    >>> output_paths("/data/panes/", None, "/data/wm", {"events": "/data/orders/{{ ds }}"})
    '/data/panes_late'
    >>> output_paths("/data/panes", "", "/data/wm", {"events": "/data/orders/{{ ds }}"})
    Traceback (most recent call last):
    ...
    ValueError: late_output='' must be a non-empty path or URL
    """
    require_paths(output=output, store_path=store_path, **sources)
    late_output = f"{output.rstrip('/')}_late" if late_output is None else late_output
    require_paths(late_output=late_output)
    kept_apart({"output": output, "late_output": late_output}, sources)
    return late_output


def output_stream_argument(output_stream: str, watermark: WatermarkPolicy) -> str:
    """The stream the aggregate publishes must not be one its watermark follows: the store refuses a second
    producer of a stream, so every run would compute its panes and then fail to publish.

    >>> output_stream_argument("orders", StoreWatermark("orders"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: output_stream='orders' is the stream its watermark follows: ...
    """
    policies = [policy for _, policy in watermark.inputs] if isinstance(watermark, MergedWatermark) else [watermark]
    if any(isinstance(policy, StoreWatermark) and policy.stream == output_stream for policy in policies):
        raise ValueError(
            f"output_stream={output_stream!r} is the stream its watermark follows: the aggregate publishes the "
            "watermark of its own output under another name (output_stream= defaults to the pipeline's name)"
        )
    return output_stream


def check_rollup_arguments(
    upstream: UpstreamPanes, pipeline: str, event_time: str | None, arrival_column: str | None, events_format: str
) -> None:
    """A rollup reads another aggregate's Parquet panes, by the versions that aggregate committed: an event-time
    or arrival column, or another format, would be ignored, and its own panes would be read as its input.

    >>> five_minutes = UpstreamPanes("orders_5m", Tumbling(300_000))
    >>> check_rollup_arguments(five_minutes, "orders_1h", "t", None, "parquet")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: event_time='t' with upstream=: a rollup reads the upstream's panes ...: leave it out
    """
    if upstream.pipeline == pipeline:
        raise ValueError(
            f"upstream=UpstreamPanes({upstream.pipeline!r}, ...) is pipeline={pipeline!r} itself: a rollup reads "
            "another aggregate's panes"
        )
    for argument, value in (("event_time", event_time), ("arrival_column", arrival_column)):
        if value is not None:
            raise ValueError(
                f"{argument}={value!r} with upstream=: a rollup reads the upstream's panes (by the versions it "
                "committed), not by an event-time or arrival column: leave it out"
            )
    if events_format != "parquet":
        raise ValueError(f"events_format={events_format!r} with upstream=: a rollup reads the upstream's Parquet panes")
