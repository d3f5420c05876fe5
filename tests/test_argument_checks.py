"""The shared parse-time checks: errors name the argument and the value; good values pass unchanged."""

from __future__ import annotations

import doctest
import re
from datetime import timedelta

import pytest

from airflow_provider_wm import argument_checks
from airflow_provider_wm.argument_checks import store_path_argument, wait_seconds_argument


def test_docstring_examples_hold():
    assert doctest.testmod(argument_checks).failed == 0


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
    assert store_path_argument(path) == path


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
        store_path_argument(path)


@pytest.mark.parametrize("value", [0, 2.5, timedelta(hours=1)])
def test_a_wait_is_seconds_or_a_timedelta(value):
    wait_seconds_argument(value, "timeout")


@pytest.mark.parametrize("value", [True, float("nan"), None, timedelta(seconds=-1)])
def test_a_wait_that_is_no_duration_is_refused(value):
    with pytest.raises(ValueError, match=re.escape(f"timeout={value!r} must be a non-negative number")):
        wait_seconds_argument(value, "timeout")
