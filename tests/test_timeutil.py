"""Durations and times at the Airflow edge: bad values fail naming the argument."""

from __future__ import annotations

import math

import pytest

from airflow_provider_wm.timeutil import duration_ms


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_duration_that_is_not_a_finite_number_fails_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"grace_period=.* is not a finite number of seconds"):
        duration_ms(value, "grace_period")


def test_durations_in_every_accepted_form():
    assert duration_ms(90, "d") == duration_ms("PT1M30S", "d") == 90_000
