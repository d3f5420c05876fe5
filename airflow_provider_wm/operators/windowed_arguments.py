"""The windowed aggregate's DAG arguments: window helpers with durations (``tumbling("PT5M")``), aggregates as
``{"name": "sum(col)"}``, watermark policies and merged inputs, each checked at parse time and turned into core
values (:mod:`airflow_provider_wm.core.windowing`). An error names the argument and the value."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_wm.arguments import require_paths
from airflow_provider_wm.core.names import column_name
from airflow_provider_wm.core.windowing import (
    ROW_COLUMN,
    Aggregate,
    BoundedOutOfOrderness,
    MergedWatermark,
    SqlAggregate,
    StoreWatermark,
    WatermarkPolicy,
    input_column,
)
from airflow_provider_wm.core.windows import Global, Session, Sliding, Tumbling
from airflow_provider_wm.hooks.watermark_store import validate_name
from airflow_provider_wm.timeutil import duration_ms

__all__ = [
    "Duration",
    "global_window",
    "parse_aggregates",
    "parse_inputs",
    "parse_watermark",
    "session",
    "sliding",
    "tumbling",
]


Duration = dt.timedelta | float | str


def tumbling(size: Duration, offset: Duration = 0) -> Tumbling:
    """``[k*size + offset, (k+1)*size + offset)``; durations as timedelta, seconds or ISO-8601 (``PT5M``)."""
    return Tumbling(duration_ms(size, "window size"), duration_ms(offset, "window offset"))


def sliding(size: Duration, slide: Duration, offset: Duration = 0) -> Sliding:
    """Windows of ``size`` every ``slide`` (``size`` a multiple of ``slide``)."""
    return Sliding(duration_ms(size, "window size"), duration_ms(slide, "window slide"), duration_ms(offset, "offset"))


def session(gap: Duration) -> Session:
    """Per key, events at most ``gap`` apart share a session ``[first, last + gap)``."""
    return Session(duration_ms(gap, "session gap"))


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
            if source is not None:
                column = input_column(source, ROW_COLUMN if column in (None, "*") else column)
            parsed.append(Aggregate(name, function, None if column in (None, "*") else column))
        return tuple(parsed)
    if isinstance(aggregates, Sequence) and not isinstance(aggregates, str):
        return tuple(aggregates)
    raise ValueError(f"aggregates={aggregates!r} must be a mapping of output name -> aggregate")


def parse_watermark(watermark: Mapping[str, Any] | WatermarkPolicy) -> WatermarkPolicy:
    """``{"stream": "orders"}`` (optionally ``"wm_key"``): the store's watermark of a stream;
    ``{"max_delay": "PT1M"}``: the highest event time seen so far minus the delay."""
    if isinstance(watermark, StoreWatermark | BoundedOutOfOrderness | MergedWatermark):
        return watermark
    if isinstance(watermark, Mapping):
        if set(watermark) <= {"stream", "wm_key"} and watermark.get("stream"):
            return StoreWatermark(
                validate_name(watermark["stream"], "watermark.stream"),
                None if watermark.get("wm_key") is None else validate_name(watermark["wm_key"], "watermark.wm_key"),
            )
        if set(watermark) == {"max_delay"}:
            return BoundedOutOfOrderness(duration_ms(watermark["max_delay"], "watermark.max_delay"))
    raise ValueError(f"watermark={watermark!r} must be {{'stream': name}} or {{'max_delay': duration}}")


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
        policy = parse_watermark(spec["watermark"])
        if not isinstance(policy, StoreWatermark):
            raise ValueError(f"inputs[{name!r}].watermark={spec['watermark']!r} must be {{'stream': name}}")
        for argument in ("event_time", "arrival_column"):
            if spec.get(argument) is not None:
                column_name(spec[argument], f"inputs[{name!r}].{argument}")
        parsed.append(
            {
                "name": name,
                "events": spec["events"],
                "event_time": spec["event_time"],
                "arrival_column": spec.get("arrival_column"),
                "events_format": spec.get("events_format", "parquet"),
            }
        )
        watermarks.append((name, policy))
    return parsed, watermarks
