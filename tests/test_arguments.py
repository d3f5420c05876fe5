"""Shared argument checks: errors name the argument; an asset joins the outlets the author gave."""

from __future__ import annotations

import doctest

import pytest
from airflow.sdk import Asset

from airflow_provider_wm import arguments
from airflow_provider_wm.arguments import add_asset_outlet, require_paths


def test_docstring_examples_hold():
    assert doctest.testmod(arguments).failed == 0


@pytest.mark.parametrize("value", ["", "  ", None, 5])
def test_a_missing_path_is_rejected_naming_the_argument(value):
    with pytest.raises(ValueError, match=f"target={value!r} must be a non-empty path"):
        require_paths(store_path="/wm", target=value)


def test_the_asset_is_added_after_the_authors_outlets():
    given, ours = Asset(name="a", uri="file:///a"), Asset(name="b", uri="file:///b")
    kwargs = {"outlets": [given]}
    add_asset_outlet(ours, kwargs)
    assert kwargs["outlets"] == [given, ours]
    untouched: dict = {}
    add_asset_outlet(None, untouched)
    assert untouched == {}
