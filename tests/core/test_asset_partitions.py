"""Partition keys of asset events: the form Airflow's own partition mappers read, the rollups they allow."""

from __future__ import annotations

import pytest
from airflow.partition_mappers import (
    DayWindow,
    IdentityMapper,
    MonthWindow,
    ProductMapper,
    RollupMapper,
    StartOfDayMapper,
    StartOfHourMapper,
    StartOfMonthMapper,
)

from airflow_provider_wm.core.asset_partitions import hour_keys, partition_event_key
from airflow_provider_wm.core.partitions import HOUR_MS, PartitionSpec, iso_ms


def keys_of(spec: PartitionSpec, now: str, unit: str = "") -> list[str]:
    return [partition_event_key(p.start, unit, spec.timezone) for p in spec.partitions(iso_ms(now, spec.timezone))]


def test_daily_keys_map_to_their_day_with_start_of_day_and_per_unit_with_a_product_mapper():
    assert keys_of(PartitionSpec.build({"from": "2026-01-04", "to": "2026-01-06"}, "daily"), "2026-01-06") == [
        "2026-01-04T00:00:00",
        "2026-01-05T00:00:00",
    ]
    assert StartOfDayMapper().to_downstream(partition_event_key(iso_ms("2026-01-05"), "")) == "2026-01-05"
    per_unit = ProductMapper(IdentityMapper(), StartOfDayMapper())
    assert per_unit.to_downstream(partition_event_key(iso_ms("2026-01-05"), "eu")) == "eu|2026-01-05"


def test_keys_are_wall_clock_times_of_the_pipelines_zone_and_a_mapper_in_that_zone_keeps_the_day():
    berlin = PartitionSpec.build({"from": "2026-03-28", "to": "2026-03-31"}, "daily", timezone="Europe/Berlin")
    keys = keys_of(berlin, "2026-03-31")  # 03-29 is 23 hours long (DST)
    assert keys == ["2026-03-28T00:00:00", "2026-03-29T00:00:00", "2026-03-30T00:00:00"]
    assert [StartOfDayMapper(timezone="Europe/Berlin").to_downstream(k) for k in keys] == [
        "2026-03-28",
        "2026-03-29",
        "2026-03-30",
    ]


def test_hourly_keys_are_exactly_the_members_of_airflows_daily_rollup_and_daily_ones_of_the_monthly():
    hourly = PartitionSpec.build({"from": "2026-01-05", "to": "2026-01-06"}, "hourly")
    daily_rollup = RollupMapper(upstream_mapper=StartOfDayMapper(), window=DayWindow())
    assert daily_rollup.to_upstream("2026-01-05") == frozenset(keys_of(hourly, "2026-01-06"))
    assert {StartOfHourMapper().to_downstream(k) for k in keys_of(hourly, "2026-01-06")} == {
        f"2026-01-05T{hour:02d}" for hour in range(24)
    }
    daily = PartitionSpec.build({"from": "2026-02-01", "to": "2026-03-01"}, "daily")
    monthly_rollup = RollupMapper(upstream_mapper=StartOfMonthMapper(), window=MonthWindow())
    assert monthly_rollup.to_upstream("2026-02") == frozenset(keys_of(daily, "2026-03-01"))


def test_a_unit_holding_the_separator_is_refused():
    with pytest.raises(ValueError, match=r"unit 'eu\|west' contains '\|'"):
        partition_event_key(iso_ms("2026-01-05"), "eu|west")


def test_fired_windows_give_one_key_per_hour_of_their_starts_and_a_global_window_none():
    start = iso_ms("2026-01-05T22:00")
    one_minute_windows = [start + minute * 60_000 for minute in range(0, 180)]  # 22:00 .. 00:59 next day
    assert hour_keys(one_minute_windows) == ["2026-01-05T22:00:00", "2026-01-05T23:00:00", "2026-01-06T00:00:00"]
    assert hour_keys([start + HOUR_MS - 1, -(2**63)]) == ["2026-01-05T22:00:00"]
    assert hour_keys([]) == []
