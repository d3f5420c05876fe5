"""The worked examples in core's docstrings are executable and stay true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

from airflow_provider_wm import core

#: modules that only declare values (enums, records): their rules and examples live beside them
WITHOUT_EXAMPLES = {
    "airflow_provider_wm.core",
    "airflow_provider_wm.core.controller.records",
    "airflow_provider_wm.core.monitoring",
    "airflow_provider_wm.core.windowing.state",
}
MODULES = sorted(
    ["airflow_provider_wm.core"]
    + [info.name for info in pkgutil.walk_packages(core.__path__, prefix="airflow_provider_wm.core.")]
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
    assert result.attempted > 0 or name in WITHOUT_EXAMPLES, f"{name} has no worked example"
