"""Durations and times at the Airflow edge: bad values fail naming the argument."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from airflow_provider_wm.timeutil import duration_ms, format_ms, to_epoch_ms


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_duration_that_is_not_a_finite_number_fails_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"grace_period=.* is not a finite number of seconds"):
        duration_ms(value, "grace_period")


def test_durations_in_every_accepted_form():
    assert duration_ms(90, "d") == duration_ms("PT1M30S", "d") == 90_000


def test_times_are_shown_in_iso_8601_utc_to_the_millisecond():
    assert format_ms(1_767_229_200_005) == "2026-01-01T01:00:00.005Z"
    assert format_ms(0) == "1970-01-01T00:00:00.000Z" and format_ms(None) == "-"
    assert format_ms(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"  # exact: no float rounding
    assert format_ms(10**18) == "1000000000000000000 ms (not a date-time)"  # a damaged value never breaks a message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1970-01-01T00:00:16.281Z", 16_281),  # through a float, 16.281 s was 16280 ms
        (datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), -1),
        ("2026-01-01T02:00:01.007+02:00", 1_767_225_601_007),
    ],
)
def test_to_epoch_ms_is_exact_to_the_millisecond(value, expected):
    assert to_epoch_ms(value, "threshold") == expected
