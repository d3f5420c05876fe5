"""Durations and times at the Airflow edge: bad values fail naming the argument."""

from __future__ import annotations

import doctest
import math
import re
from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from airflow_provider_wm import timeutil
from airflow_provider_wm.core.windows import Session, Sliding, Tumbling
from airflow_provider_wm.operators.windowed_arguments import session, sliding, tumbling
from airflow_provider_wm.timeutil import MAX_DURATION_MS, duration_ms, format_ms, to_epoch_ms


def test_timeutil_docstring_examples_hold():
    assert doctest.testmod(timeutil).failed == 0


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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(milliseconds=16_281), 16_281),  # through a float of seconds, 16280
        (16.281, 16_281),  # a float of seconds is rounded to the nearest ms, not truncated
        ("PT1.001S", 1_001),
        ("PT16.281S", 16_281),
        (timedelta(microseconds=1_500), 2),
        (timedelta.max, MAX_DURATION_MS),
        (pendulum.duration(seconds=16, microseconds=281_000), 16_281),
    ],
)
def test_duration_ms_is_exact_to_the_millisecond(value, expected):
    assert duration_ms(value, "grace_period") == expected


def test_window_helpers_get_exact_milliseconds():
    assert tumbling(timedelta(milliseconds=1_001)) == Tumbling(1_001)
    assert sliding("PT1.002S", 0.501) == Sliding(1_002, 501) and session(16.281) == Session(16_281)


@pytest.mark.parametrize("value", [1e308, 10**20, "P1000000000D"])
def test_a_duration_too_large_fails_naming_the_argument_and_value(value):
    with pytest.raises(
        ValueError, match=rf"^writer_timeout={re.escape(repr(value))} is too large: at most 999999999 days"
    ):
        duration_ms(value, "writer_timeout")


@pytest.mark.parametrize("value", ["P1M", "P1Y", "P30M", "P1Y2M3DT4H", " P2M "])
def test_months_and_years_have_no_fixed_length_and_are_refused_naming_the_argument(value):
    with pytest.raises(ValueError, match=re.escape(f"window size={value!r} has a years or months component")) as info:
        duration_ms(value, "window size")
    assert "no fixed length; give minutes as PT30M or days as P30D" in str(info.value)
    with pytest.raises(ValueError, match=r"^window size=Duration\(months=30\) has a years or months component"):
        duration_ms(pendulum.duration(months=30), "window size")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-5, "-5"),
        ("-PT20M", "'-PT20M'"),
        ("-P2D", "'-P2D'"),
        ("PT-5M", "'PT-5M'"),
        (timedelta(minutes=-20), "-0:20:00 (a timedelta)"),
        (timedelta(microseconds=-1), "-0:00:00.000001 (a timedelta)"),
    ],
)
def test_a_negative_duration_in_any_form_must_not_be_negative(value, shown):
    with pytest.raises(ValueError, match=f"^allowed_lateness={re.escape(shown)} must not be negative$"):
        duration_ms(value, "allowed_lateness")


@pytest.mark.parametrize("value", ["PT0.0001S", timedelta(microseconds=400), 0.0004])
def test_a_duration_shorter_than_a_millisecond_fails_showing_what_the_author_wrote(value):
    message = f"^window size={re.escape(repr(value))} is shorter than a millisecond"
    with pytest.raises(ValueError, match=message):
        duration_ms(value, "window size")
    with pytest.raises(ValueError, match=message):
        tumbling(value)


@pytest.mark.parametrize("value", [0, 0.0, "P0D", "PT0S", timedelta(0)])
def test_a_zero_duration_is_refused_only_where_a_positive_one_is_required(value):
    assert duration_ms(value, "grace_period") == 0
    with pytest.raises(ValueError, match=f"^writer_timeout={re.escape(repr(value))} must be positive$"):
        duration_ms(value, "writer_timeout", positive=True)


@pytest.mark.parametrize(
    ("seconds", "timedelta_form", "iso"),
    [(0.0025, timedelta(microseconds=2500), "PT0.0025S"), (0.0005, timedelta(microseconds=500), "PT0.0005S")],
)
def test_every_form_of_a_duration_rounds_half_up_to_the_same_millisecond(seconds, timedelta_form, iso):
    assert duration_ms(seconds, "d") == duration_ms(timedelta_form, "d") == duration_ms(iso, "d")
