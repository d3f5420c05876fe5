"""Shared argument checks: errors name the argument and the value; good values pass unchanged; an asset joins the
outlets the author gave."""

from __future__ import annotations

import doctest
import re
from datetime import timedelta

import pytest
from airflow.sdk import Asset

from airflow_provider_wm import arguments
from airflow_provider_wm.arguments import add_asset_outlet, location_argument, require_paths, wait_seconds_argument


def test_docstring_examples_hold():
    assert doctest.testmod(arguments).failed == 0


@pytest.mark.parametrize("value", ["", "  ", None, 5])
def test_a_missing_path_is_rejected_naming_the_argument(value):
    with pytest.raises(ValueError, match=f"target={value!r} must be a non-empty path"):
        require_paths(store_path="/wm", target=value)


@pytest.mark.parametrize("value", ["data/orders", "./orders", "s3:lake/orders"])
def test_a_relative_path_or_a_broken_url_is_rejected_naming_the_argument(value):
    with pytest.raises(ValueError, match=rf"^marks_path={re.escape(repr(value))} (must be an absolute|is not a URL)"):
        require_paths(store_path="/wm", marks_path=value)


def test_the_asset_is_added_after_the_authors_outlets():
    given, ours = Asset(name="a", uri="file:///a"), Asset(name="b", uri="file:///b")
    kwargs = {"outlets": [given]}
    add_asset_outlet(ours, kwargs)
    assert kwargs["outlets"] == [given, ours]
    untouched: dict = {}
    add_asset_outlet(None, untouched)
    assert untouched == {}


@pytest.mark.parametrize(
    "path",
    [
        "/data/wm",
        "s3://lake/wm",
        "file:///data/wm",
        "file:/data/wm",
        "memory://wm",
        "simplecache::s3://lake/wm",
        "{{ x }}",
    ],
)
def test_absolute_paths_urls_chained_urls_and_templates_are_stores(path):
    assert location_argument(path) == path


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("wm", "store_path='wm' must be an absolute path"),
        ("./wm", "store_path='./wm' must be an absolute path"),
        ("s3:lake/wm", "store_path='s3:lake/wm' is not a URL: write s3://"),
        ("file:data/wm", "store_path='file:data/wm' is not a URL: write file://"),
        ("simplecache::s3:/lake", "store_path='simplecache::s3:/lake' is not a URL: write s3://"),
    ],
)
def test_a_relative_path_or_a_malformed_url_is_no_store(path, message):
    with pytest.raises(ValueError, match=message):
        location_argument(path)


@pytest.mark.parametrize("value", [0, 2.5, timedelta(hours=1)])
def test_a_wait_is_seconds_or_a_timedelta(value):
    wait_seconds_argument(value, "timeout")


@pytest.mark.parametrize("value", [True, float("nan"), None, timedelta(seconds=-1)])
def test_a_wait_that_is_no_duration_is_refused(value):
    with pytest.raises(ValueError, match=re.escape(f"timeout={value!r} must be a finite, non-negative number")):
        wait_seconds_argument(value, "timeout")
