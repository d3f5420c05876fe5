"""Names of streams, keys and watermark labels: one rule for every layer."""

from __future__ import annotations

import re

import pytest

from airflow_provider_wm.core.names import parse_inputs, stream_name


def test_parse_inputs_reads_keys_and_rejects_duplicates_and_bad_names():
    assert parse_inputs(["orders", "orders:eu", "payments"], "streams") == [
        ("orders", None),
        ("orders", "eu"),
        ("payments", None),
    ]
    for bad, message in [
        (["orders", "orders"], "names 'orders' more than once"),
        (["orders:", "x"], "entry 'orders:'"),
        (["a:b:c"], "entry 'a:b:c'"),
        (["../etc"], "entry '../etc'"),
        ("orders", "must be a list"),
        ([], "names no stream"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_inputs(bad, "streams")


@pytest.mark.parametrize("value", ["a/b", "", None, "../etc", "x" * 201, "orders:eu"])
def test_stream_name_refuses_a_name_that_is_no_path_component_naming_the_argument(value):
    with pytest.raises(ValueError, match=rf"^upstream\.pipeline={re.escape(repr(value))} is not a valid name"):
        stream_name(value, "upstream.pipeline")
    assert stream_name("orders-eu.v1", "upstream.pipeline") == "orders-eu.v1"
