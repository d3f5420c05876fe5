from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_wm.core.monitoring import PartitionStatus, downsample_lag, format_duration, partition_strip
from airflow_provider_wm.core.partitions import PartitionSpec, PartitionState, UnitResult, UnitStatus, iso_ms

DAY = 86_400_000


def test_a_short_log_is_returned_whole_with_its_lags():
    assert [tuple(p) for p in downsample_lag([(10, 5), (20, 20)], 5)] == [(10, 5, 5), (20, 20, 0)]


def test_each_bucket_keeps_its_last_watermark_and_its_largest_lag():
    entries = [(0, 0), (10, -90), (20, 15), (100, 100)]
    assert [tuple(p) for p in downsample_lag(entries, 2)] == [(20, 15, 100), (100, 100, 0)]


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=300), st.integers(1, 50))
def test_downsampling_bounds_the_points_and_loses_no_lag_spike(raw, max_points):
    entries = sorted(raw)
    points = downsample_lag(entries, max_points)
    assert len(points) <= max(max_points, 1)
    assert max(p.lag_ms for p in points) == max(t - lower for t, lower in entries)
    assert points[-1].computed_at_ms == entries[-1][0]
    assert [p.computed_at_ms for p in points] == sorted(p.computed_at_ms for p in points)


def test_max_points_below_one_is_refused():
    with pytest.raises(ValueError, match="max_points"):
        downsample_lag([(1, 1)], 0)


def test_durations_read_as_the_two_largest_units():
    assert format_duration(4 * DAY + 3 * 3_600_000 + 5_000) == "4d 3h"
    assert format_duration(61_000) == "1m 1s"
    assert format_duration(999) == "0s"


def test_the_strip_shows_done_failed_grace_pending_and_never_run_partitions_as_runs():
    spec = PartitionSpec.build({"from": "2026-01-01", "to": "2026-01-08"}, "daily")
    day = [iso_ms(f"2026-01-0{d}") for d in range(1, 9)]
    state = PartitionState.empty().apply(
        [UnitResult(day[i], day[i + 1], "eu", UnitStatus.SUCCEEDED) for i in range(4)]
        + [UnitResult(day[4], day[5], "eu", UnitStatus.FAILED)]
    )
    last_plan = [(day[3], "eu", "within grace"), (day[6], "eu", "capped")]
    strip = partition_strip(spec, state, ["eu", "us"], day[7], last_plan)
    assert [(r.status, r.partitions) for r in strip["eu"]] == [
        (PartitionStatus.DONE, 3),
        (PartitionStatus.WITHIN_GRACE, 1),
        (PartitionStatus.FAILED, 1),
        (PartitionStatus.NEVER_RUN, 1),
        (PartitionStatus.PENDING, 1),
    ]
    assert strip["eu"][0].start_ms == day[0] and strip["eu"][-1].end_ms == day[7]
    assert [(r.status, r.partitions) for r in strip["us"]] == [(PartitionStatus.NEVER_RUN, 7)]
