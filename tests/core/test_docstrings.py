"""The worked examples in core's docstrings are executable and stay true."""

from __future__ import annotations

import doctest

import pytest

from airflow_provider_wm.core import (
    coalescing,
    controller,
    names,
    partitions,
    progress,
    reader,
    segments,
    times,
    windowing,
    windows,
)


@pytest.mark.parametrize(
    "module", [coalescing, controller, names, partitions, progress, reader, segments, times, windowing, windows]
)
def test_docstring_examples_hold(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
