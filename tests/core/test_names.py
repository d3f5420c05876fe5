"""Names of streams, keys and watermark labels: one rule for every layer."""

from __future__ import annotations

import pytest

from airflow_provider_wm.core.names import parse_inputs


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
