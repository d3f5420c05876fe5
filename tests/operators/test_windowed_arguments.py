"""The windowed aggregate's arguments are checked when the DAG is parsed: a value the job would misread, ignore
or turn against its own data fails then, naming the argument and the value."""

from __future__ import annotations

import doctest
import re

import pytest

from airflow_provider_wm.core.windowing import Accumulation, LateData, UpstreamPanes
from airflow_provider_wm.core.windows import Tumbling
from airflow_provider_wm.operators import windowed_arguments
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling

EVENTS = {
    "task_id": "w",
    "pipeline": "orders_5m",
    "events": "/data/orders",
    "event_time": "event_time",
    "arrival_column": "ingested_at",
    "window": tumbling("PT5M"),
    "aggregates": {"n": "count(*)"},
    "watermark": {"stream": "orders"},
    "output": "/data/orders_5m",
    "store_path": "/data/wm",
}
INPUTS = {
    name: {"events": f"/data/{name}", "event_time": "t", "arrival_column": "a", "watermark": {"stream": name}}
    for name in ("orders", "refunds")
}
MERGE = {k: v for k, v in EVENTS.items() if k not in ("events", "event_time", "arrival_column", "watermark")}
MERGE.update(inputs=INPUTS, aggregates={"n": "count(orders.*)", "r": "count(refunds.*)"})
ROLLUP = {
    "task_id": "h",
    "pipeline": "orders_1h",
    "upstream": UpstreamPanes("orders_5m", Tumbling(300_000)),
    "events": "/data/orders_5m",
    "window": tumbling("PT1H"),
    "aggregates": {"n": "sum(n)"},
    "output": "/data/orders_1h",
    "store_path": "/data/wm",
}


def with_input(name: str, **fields) -> dict:
    """The merge's ``inputs`` with some fields of one input replaced (a field set to None is left out)."""
    changed = {k: v for k, v in {**INPUTS[name], **fields}.items() if v is not None}
    return {**INPUTS, name: changed}


def test_docstring_examples_hold():
    assert doctest.testmod(windowed_arguments).failed == 0


@pytest.mark.parametrize(
    ("arguments", "argument", "value"),
    [
        (EVENTS, "events", "orders"),
        (EVENTS, "output", "out/orders_5m"),
        (EVENTS, "late_output", "./late"),
        (ROLLUP, "events", "orders_5m"),
    ],
)
def test_a_relative_path_is_refused_naming_the_argument(arguments, argument, value):
    """Spark (or its Connect server) and the task would each resolve it against their own working directory."""
    with pytest.raises(ValueError, match=rf"^{argument}={re.escape(repr(value))} must be an absolute path or a URL"):
        WindowedAggregateOperator(**{**arguments, argument: value})


def test_a_relative_path_of_a_merged_input_is_refused_naming_the_input():
    with pytest.raises(ValueError, match=r"^inputs\['refunds'\]\.events='refunds' must be an absolute path"):
        WindowedAggregateOperator(**{**MERGE, "inputs": with_input("refunds", events="refunds")})


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allow_missing_events_that_is_not_a_bool_is_refused(value):
    with pytest.raises(ValueError, match=f"^allow_missing_events={value!r} must be True or False$"):
        WindowedAggregateOperator(**EVENTS, allow_missing_events=value)


@pytest.mark.parametrize("argument", ["early_firing", "late_firing", "fire_only_updated_panes"])
@pytest.mark.parametrize("value", ["no", "False", 0, None])
def test_a_firing_switch_that_is_not_a_bool_is_refused(argument, value):
    """``"no"`` is truthy: it would have switched the firing on."""
    with pytest.raises(ValueError, match=f"^{argument}={value!r} must be True or False$"):
        WindowedAggregateOperator(**{**EVENTS, argument: value})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"events_format": "bogus"}, "events_format='bogus' must be one of 'parquet', 'orc', 'json', 'avro', 'delta'"),
        ({"events_format": "csv"}, "events_format='csv' must be one of"),
        ({"events_format": None}, "events_format=None must be one of"),
        ({"inputs": with_input("refunds", events_format="text")}, r"inputs\['refunds'\].events_format='text' must be"),
        ({"late_output": ""}, "late_output='' must be a non-empty path"),
        ({"late_output": 5}, "late_output=5 must be a non-empty path"),
        ({"keys": None}, "keys=None must be a list of column names"),
        ({"accumulation": None}, r"accumulation=None must be one of \['DISCARDING', 'ACCUMULATING', "),
        ({"accumulation": 3}, "accumulation=3 must be one of"),
        ({"late_data": None}, r"late_data=None must be one of \['event_time', 'window_end'\]"),
        ({"when_all_idle": "highest"}, "when_all_idle='highest' applies to merged inputs= only"),
        ({"when_all_idle": "bogus"}, "when_all_idle='bogus' applies to merged inputs= only"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(kwargs, message):
    base = MERGE if "inputs" in kwargs else EVENTS
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**base, **kwargs})


def test_an_input_watermark_error_names_the_input():
    with pytest.raises(ValueError, match=r"^inputs\['orders'\].watermark='orders' must be \{'stream': name\}"):
        WindowedAggregateOperator(**{**MERGE, "inputs": with_input("orders", watermark="orders")})
    with pytest.raises(ValueError, match=r"inputs\['orders'\].watermark.stream='a/b' is not a valid name"):
        WindowedAggregateOperator(**{**MERGE, "inputs": with_input("orders", watermark={"stream": "a/b"})})


def test_events_formats_the_job_reads_are_accepted_in_any_case():
    assert WindowedAggregateOperator(**{**EVENTS, "events_format": "ORC"}).events_format == "orc"
    merged = WindowedAggregateOperator(**{**MERGE, "inputs": with_input("refunds", events_format="JSON")})
    assert [i["events_format"] for i in merged.inputs] == ["parquet", "json"]


def test_enum_arguments_are_accepted_in_any_case():
    op = WindowedAggregateOperator(**{**EVENTS, "late_data": "WINDOW_END", "accumulation": "discarding"})
    assert op.spec.late_data is LateData.WINDOW_END and op.spec.accumulation is Accumulation.DISCARDING
    op = WindowedAggregateOperator(**{**EVENTS, "late_data": LateData.EVENT_TIME, "accumulation": "Accumulating"})
    assert op.spec.late_data is LateData.EVENT_TIME and op.spec.accumulation is Accumulation.ACCUMULATING
    merged = WindowedAggregateOperator(**{**MERGE, "when_all_idle": "HIGHEST"})
    assert merged.spec.watermark.when_all_idle == "highest"
    assert WindowedAggregateOperator(**MERGE).spec.watermark.when_all_idle == "wait"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"late_output": "/data/orders_5m/"}, "output='/data/orders_5m' is the same path as late_output="),
        ({"late_output": "/data/orders_5m/late"}, "late_output='/data/orders_5m/late' lies inside output="),
        ({"late_output": "/data"}, "output='/data/orders_5m' lies inside late_output='/data'"),
        ({"output": "/data/orders"}, "output='/data/orders' is the same path as events='/data/orders'"),
        ({"output": "/data/orders/panes"}, "output='/data/orders/panes' lies inside events='/data/orders'"),
        ({"events": "/data/orders_5m/in"}, "events='/data/orders_5m/in' lies inside output='/data/orders_5m'"),
        ({"late_output": "/data/orders"}, "late_output='/data/orders' is the same path as events="),
    ],
)
def test_outputs_that_overlap_each_other_or_the_events_are_refused(kwargs, message):
    """The late rows would overwrite the panes' ``wm_run=<version>``, or a run would read its own output."""
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**EVENTS, **kwargs})


def test_an_output_over_a_merged_inputs_events_is_refused():
    with pytest.raises(ValueError, match=r"output='/data/refunds' is the same path as inputs\['refunds'\].events="):
        WindowedAggregateOperator(**{**MERGE, "output": "/data/refunds"})


def test_outputs_beside_the_events_are_kept():
    op = WindowedAggregateOperator(**{**EVENTS, "output": "/data/orders_5m", "late_output": "/data/orders_5m_bad"})
    assert (op.output_path, op.late_output) == ("/data/orders_5m", "/data/orders_5m_bad")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "orders"}, "output_stream='orders' is the stream its watermark follows"),
        ({"output_stream": "orders"}, "output_stream='orders' is the stream its watermark follows"),
        ({"watermark": {"stream": "orders_5m"}}, "output_stream='orders_5m' is the stream its watermark follows"),
    ],
)
def test_an_output_stream_that_is_the_input_stream_is_refused(kwargs, message):
    """The store refuses a second producer of a stream: every run would compute its panes, then fail."""
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**EVENTS, **kwargs})


def test_an_output_stream_that_is_a_merged_inputs_stream_is_refused():
    with pytest.raises(ValueError, match="output_stream='refunds' is the stream its watermark follows"):
        WindowedAggregateOperator(**{**MERGE, "output_stream": "refunds"})


def test_a_rollup_may_not_publish_the_stream_it_waits_on():
    five = WindowedAggregateOperator(**{**EVENTS, "output_stream": "orders_1h"})
    with pytest.raises(ValueError, match="output_stream='orders_1h' is the stream its watermark follows"):
        WindowedAggregateOperator(**{**ROLLUP, "upstream": five, "events": None})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "orders_5m"}, r"upstream=UpstreamPanes\('orders_5m', ...\) is pipeline='orders_5m' itself"),
        ({"event_time": "event_time"}, "event_time='event_time' with upstream=: a rollup reads the upstream's panes"),
        ({"arrival_column": "ingested_at"}, "arrival_column='ingested_at' with upstream=: a rollup reads"),
        ({"events_format": "json"}, "events_format='json' with upstream=: a rollup reads the upstream's Parquet"),
        ({"output": "/data/orders_5m"}, "output='/data/orders_5m' is the same path as events='/data/orders_5m'"),
    ],
)
def test_a_rollup_of_itself_or_with_arguments_it_would_ignore_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**ROLLUP, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arrival_column": "ingested_at"}, "arrival_column='ingested_at'$"),
        ({"events_format": "orc"}, "events_format='orc'"),
    ],
)
def test_a_merge_takes_arrival_column_and_events_format_per_input(kwargs, message):
    with pytest.raises(ValueError, match=f"inputs= gives each input its .*: not also {message}"):
        WindowedAggregateOperator(**{**MERGE, **kwargs})


def test_without_an_arrival_column_the_events_path_must_be_templated_per_run():
    """Otherwise every run reads the whole path again and counts its events again."""
    with pytest.raises(ValueError, match=r"^events='/data/orders' with arrival_column=None: without an arrival col"):
        WindowedAggregateOperator(**{**EVENTS, "arrival_column": None})
    templated = "/data/orders/ingest_date={{ ds }}"
    assert WindowedAggregateOperator(**{**EVENTS, "arrival_column": None, "events": templated}).events == templated


def test_without_an_arrival_column_a_merged_inputs_events_must_be_templated_per_run():
    message = r"^inputs\['refunds'\].events='/data/refunds' with inputs\['refunds'\].arrival_column=None"
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**MERGE, "inputs": with_input("refunds", arrival_column=None)})
    templated = with_input("refunds", arrival_column=None, events="/data/refunds/{{ ds }}")
    assert WindowedAggregateOperator(**{**MERGE, "inputs": templated}).inputs[1]["events"] == "/data/refunds/{{ ds }}"


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (lambda: windowed_arguments.sliding("PT10M", "PT0S"), "window slide='PT0S' must be positive"),
        (lambda: windowed_arguments.session(0.0), "session gap=0.0 must be positive"),
    ],
)
def test_a_window_of_zero_length_is_refused_naming_what_the_author_wrote(window, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        window()


@pytest.mark.parametrize("spec", ["sum(*)", "max()", "avg(orders.*)"])
def test_an_aggregate_other_than_count_without_a_column_is_refused_showing_its_text(spec):
    with pytest.raises(ValueError, match=rf"^aggregates\['n'\]='{re.escape(spec)}' must name a column"):
        windowed_arguments.parse_aggregates({"n": spec}, ["orders"])


@pytest.mark.parametrize("value", [-1, "1000", 1.5, True, None])
def test_driver_output_rows_that_is_not_a_count_is_refused(value):
    with pytest.raises(ValueError, match=f"^driver_output_rows={re.escape(repr(value))} must be a whole number >= 0$"):
        WindowedAggregateOperator(**EVENTS, driver_output_rows=value)


def test_driver_output_rows_defaults_to_the_contracts_limit_and_zero_means_always_spark():
    from airflow_provider_wm.contracts import DRIVER_OUTPUT_ROWS

    assert WindowedAggregateOperator(**EVENTS).driver_output_rows == DRIVER_OUTPUT_ROWS == 500_000
    assert WindowedAggregateOperator(**EVENTS, driver_output_rows=0).driver_output_rows == 0
