"""Partition planning (DIL): the seed's worked examples, DST, backfill, cap, bad bounds, and properties."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.partitions import (
    DAY_MS,
    HOUR_MS,
    PartitionSpec,
    PartitionState,
    QuarantineReason,
    Reason,
    TimeBound,
    UnitResult,
    UnitStatus,
    complete_until,
    format_day,
    iso_ms,
    local_dates,
    never_before,
    plan,
    quarantine_reason,
    succeeded,
    work_units_not_done,
)
from airflow_provider_wm.core.times import MAX_TIME_MS


def days(p):
    """Executing units as (range start, range end, reason) with dates."""
    return [(format_day(u.range_start), format_day(u.range_end), u.reason.value) for u in p.executing()]


def run_ok(state, p):
    return state.apply(succeeded(p))


DAILY_2020 = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily")


def test_example_a_daily_with_grace_reexecutes_three_days_and_adds_the_new_one():
    first = plan(DAILY_2020, PartitionState.empty(), iso_ms("2020-02-21"), grace_ms=3 * DAY_MS)
    assert len(first.executing()) == 51
    assert days(first)[-1] == ("2020-02-20", "2020-02-21", "new")
    second = plan(DAILY_2020, run_ok(PartitionState.empty(), first), iso_ms("2020-02-22"), grace_ms=3 * DAY_MS)
    assert second.cutoff_ms == iso_ms("2020-02-18")
    assert days(second) == [
        ("2020-02-18", "2020-02-19", "within grace"),
        ("2020-02-19", "2020-02-20", "within grace"),
        ("2020-02-20", "2020-02-21", "within grace"),
        ("2020-02-21", "2020-02-22", "new"),
    ]
    assert {u.reason for u in second.units if not u.executes} == {Reason.UP_TO_DATE}


def test_example_b_monthly_partial_partition_grows_and_reexecutes_from_the_cutoff():
    spec = PartitionSpec.build({"from": "2019-01-01", "to": "-"}, "monthly")
    first = plan(spec, PartitionState.empty(), iso_ms("2020-02-21"), grace_ms=3 * DAY_MS)
    parts = [(format_day(u.partition_start), format_day(u.partition_end)) for u in first.executing()]
    assert len(parts) == 14 and parts[0] == ("2019-01-01", "2019-02-01") and parts[12] == ("2020-01-01", "2020-02-01")
    assert parts[-1] == ("2020-02-01", "2020-02-21")
    second = plan(spec, run_ok(PartitionState.empty(), first), iso_ms("2020-02-22"), grace_ms=3 * DAY_MS)
    assert days(second) == [("2020-02-18", "2020-02-22", "within grace")]
    assert (format_day(second.executing()[0].partition_start), format_day(second.executing()[0].partition_end)) == (
        "2020-02-01",
        "2020-02-22",
    )


def test_example_c_abstinent_day_skips_a_run_then_extracts_only_the_new_day():
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "none")
    kwargs = {"abstinent_ms": DAY_MS, "grace_ms": 0}
    state = PartitionState.empty()
    first = plan(spec, state, iso_ms("2020-01-15"), **kwargs)
    assert days(first) == [("2020-01-01", "2020-01-15", "new")]
    state = run_ok(state, first)
    second = plan(spec, state, iso_ms("2020-01-16"), **kwargs)
    assert days(second) == [] and second.units[0].reason is Reason.UP_TO_DATE
    state = run_ok(state, second)
    third = plan(spec, state, iso_ms("2020-01-17"), **kwargs)
    assert days(third) == [("2020-01-16", "2020-01-17", "new time")]


def test_example_d_a_unit_that_failed_two_months_ago_executes_in_full():
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily")
    units = ["eu", "us"]
    first = plan(spec, PartitionState.empty(), iso_ms("2020-01-11"), units=units, grace_ms=2 * DAY_MS)
    results = [
        UnitResult(
            u.partition_start,
            u.partition_end,
            u.unit,
            UnitStatus.FAILED
            if (u.unit, format_day(u.partition_start)) == ("us", "2020-01-05")
            else UnitStatus.SUCCEEDED,
        )
        for u in first.executing()
    ]
    state = PartitionState.empty().apply(results)
    later = plan(spec, state, iso_ms("2020-03-11"), units=units, grace_ms=2 * DAY_MS)
    failed = [u for u in later.executing() if u.reason is Reason.FAILED_BEFORE]
    assert [(format_day(u.range_start), format_day(u.range_end), u.unit) for u in failed] == [
        ("2020-01-05", "2020-01-06", "us")
    ]
    assert all(
        u.partition_start >= iso_ms("2020-01-09") for u in later.executing() if u.reason is not Reason.FAILED_BEFORE
    )


def test_a_failure_after_a_success_keeps_the_high_watermark_and_reexecutes_in_full():
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, "daily")
    state = run_ok(PartitionState.empty(), plan(spec, PartitionState.empty(), iso_ms("2020-01-05")))
    state = state.apply([UnitResult(iso_ms("2020-01-02"), iso_ms("2020-01-03"), "", UnitStatus.FAILED)])
    history = state.history("", iso_ms("2020-01-02"), iso_ms("2020-01-03"))
    assert (
        history is not None
        and history.high_watermark_ms == iso_ms("2020-01-03")
        and history.status is UnitStatus.FAILED
    )
    again = plan(spec, state, iso_ms("2020-01-05"))
    assert days(again) == [("2020-01-02", "2020-01-03", "failed before")]


def test_backfill_reexecutes_overlapping_units_and_never_lowers_a_high_watermark():
    state = run_ok(PartitionState.empty(), plan(DAILY_2020, PartitionState.empty(), iso_ms("2020-01-10")))
    before = state.max_high_watermark()
    p = plan(DAILY_2020, state, iso_ms("2020-01-10"), backfill=(iso_ms("2020-01-03T12:00"), iso_ms("2020-01-05")))
    assert days(p) == [("2020-01-03", "2020-01-04", "backfill"), ("2020-01-04", "2020-01-05", "backfill")]
    after = run_ok(state, p)
    assert after.max_high_watermark() == before
    assert after.runs == state.runs


def test_max_work_units_runs_the_oldest_first_and_reports_the_rest():
    p = plan(DAILY_2020, PartitionState.empty(), iso_ms("2020-01-11"), units=["a", "b"], max_work_units=3)
    assert [(format_day(u.partition_start), u.unit) for u in p.executing()] == [
        ("2020-01-01", "a"),
        ("2020-01-01", "b"),
        ("2020-01-02", "a"),
    ]
    assert sum(u.reason is Reason.CAPPED for u in p.units) == 17
    state = run_ok(PartitionState.empty(), p)
    nxt = plan(DAILY_2020, state, iso_ms("2020-01-11"), units=["a", "b"], max_work_units=3)
    assert [(format_day(u.partition_start), u.unit) for u in nxt.executing()] == [
        ("2020-01-02", "b"),
        ("2020-01-03", "a"),
        ("2020-01-03", "b"),
    ]


def test_under_max_work_units_units_never_done_go_before_grace_re_reads_so_each_run_progresses():
    """Grace 2 days, two units, a cap of 4: the four re-reads of the last two days would fill every run's cap, and
    the new day would wait for ever. New units go first: each daily run writes its new day."""
    state, executed = PartitionState.empty(), []
    for day in range(3, 9):  # daily runs 2020-01-03 .. 2020-01-08
        p = plan(DAILY_2020, state, iso_ms("2020-01-01") + (day - 1) * DAY_MS, units=["a", "b"], grace_ms=2 * DAY_MS,
                 max_work_units=4)  # fmt: skip
        executed.append([(format_day(u.partition_start), u.unit, u.reason.value) for u in p.executing()])
        state = run_ok(state, p)
    assert executed[0] == [(f"2020-01-0{d}", u, "new") for d in (1, 2) for u in "ab"]
    assert executed[1] == [
        ("2020-01-01", "a", "within grace"), ("2020-01-01", "b", "within grace"),
        ("2020-01-03", "a", "new"), ("2020-01-03", "b", "new"),
    ]  # fmt: skip
    assert all(sum(reason == "new" for *_, reason in run) == 2 for run in executed[1:])  # the new day, every run
    assert format_day(state.max_high_watermark()) == "2020-01-08"


@pytest.mark.parametrize(
    ("partition", "day", "hours"),
    [("daily", "2026-03-29", 23), ("daily", "2026-10-25", 25), ("hourly", "2026-03-29", 1)],
)
def test_partitions_follow_the_configured_time_zone_across_dst(partition, day, hours):
    spec = PartitionSpec.build({"from": "2026-03-01", "to": "2026-11-01"}, partition, timezone="Europe/Berlin")
    start = iso_ms(day, "Europe/Berlin")
    part = next(p for p in spec.partitions(0) if p.start == start)
    assert part.end - part.start == hours * HOUR_MS


def test_hourly_partitions_on_a_dst_day_number_23_and_25():
    for day, expected in (("2026-03-29", 23), ("2026-10-25", 25)):
        spec = PartitionSpec.build({"from": day, "to": "P0D"}, "hourly", timezone="Europe/Berlin")
        next_day = iso_ms(day, "Europe/Berlin") + 30 * HOUR_MS
        assert len(spec.partitions(next_day)) == expected


def test_monthly_partitions_step_calendar_months_from_a_day_that_not_every_month_has():
    spec = PartitionSpec.build({"from": "2020-01-31", "to": "2020-05-01"}, "monthly", partial_partition=False)
    assert [format_day(p.start) for p in spec.partitions(0)] == ["2020-01-31", "2020-02-29", "2020-03-31"]


def test_without_partial_partition_the_last_incomplete_one_is_dropped():
    spec = PartitionSpec.build({"from": "2020-01-06", "to": "-"}, "weekly", partial_partition=False)
    parts = spec.partitions(iso_ms("2020-02-21"))
    assert format_day(parts[-1].end) == "2020-02-17"
    with_partial = PartitionSpec.build({"from": "2020-01-06", "to": "-"}, "weekly").partitions(iso_ms("2020-02-21"))
    assert (format_day(with_partial[-1].start), format_day(with_partial[-1].end)) == ("2020-02-17", "2020-02-21")


def test_composite_partitioning_concatenates_pieces_sorted_by_start():
    spec = PartitionSpec.build(None, {"daily": ["2020-03-01", "2020-03-03"], "monthly": ["2020-01-01", "2020-03-01"]})
    assert [(format_day(a), format_day(b)) for a, b in spec.partitions(0)] == [
        ("2020-01-01", "2020-02-01"),
        ("2020-02-01", "2020-03-01"),
        ("2020-03-01", "2020-03-02"),
        ("2020-03-02", "2020-03-03"),
    ]


@given(
    start=st.integers(0, 4_000_000_000_000),
    length=st.integers(1, 40 * DAY_MS),
    fraction=st.floats(0, 1),
    zone=st.sampled_from(["UTC", "America/New_York", "Pacific/Kiritimati", "Etc/GMT+12", "Europe/Berlin"]),
)
def test_local_dates_hold_the_date_of_every_instant_of_the_range_and_are_within_a_day_of_the_utc_ones(
    start, length, fraction, zone
):
    """The dates a zone-dated source partition column reads (``local_dates``) hold every row of the range, and
    an unknown zone's margin of a day around the UTC dates holds them in turn."""
    first, last = local_dates(start, start + length, ZoneInfo(zone))
    inside = start + min(int(fraction * length), length - 1)
    assert first <= dt.datetime.fromtimestamp(inside / 1000, ZoneInfo(zone)).date() <= last
    assert first == dt.datetime.fromtimestamp(start / 1000, ZoneInfo(zone)).date()
    utc_first, utc_last = local_dates(start, start + length, dt.UTC)
    assert abs(first - utc_first) <= dt.timedelta(days=1) and abs(last - utc_last) <= dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "timezone", "expected"),
    [
        ("1970-01-01T00:00:16.281", "UTC", 16_281),  # through a float of seconds, 16280
        ("1970-01-01T01:00:16.281+01:00", "UTC", 16_281),
        ("2020-03-29T02:30:00.007", "Europe/Berlin", 1_585_445_400_007),  # in the DST gap: the earlier offset
    ],
)
def test_iso_ms_is_exact_to_the_millisecond(text, timezone, expected):
    assert iso_ms(text, timezone) == expected


def test_dynamic_bounds_resolve_against_the_runs_now_in_the_time_zone():
    now = iso_ms("2020-02-21T13:47:12")
    assert TimeBound.parse("P0D", "to").resolve(now, "UTC") == iso_ms("2020-02-21")
    assert TimeBound.parse("P2D", "to").resolve(now, "UTC") == iso_ms("2020-02-19")
    assert TimeBound.parse("P0DT7H", "to").resolve(now, "UTC") == iso_ms("2020-02-21T06:00")
    assert TimeBound.parse("-", "to").resolve(now, "UTC") == iso_ms("2020-02-21T13:47")
    assert TimeBound.parse("P0D", "to").resolve(now, "Asia/Tokyo") == iso_ms("2020-02-20T15:00")
    assert TimeBound.parse("2020-02-01", "from").resolve(now, "Asia/Tokyo") == iso_ms("2020-01-31T15:00")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"watermark": {"from": "yesterday"}},
            r"watermark\['from'\]='yesterday' is not a time watermark bound; accepted forms",
        ),
        ({"watermark": {"from": "2020-01-01", "to": "P1DT25H"}}, r"watermark\['to'\]='P1DT25H'"),
        ({"watermark": {"from": "2020-01-01", "to": "1D"}}, r"watermark\['to'\]='1D'"),
        ({"watermark": {"from": "2020-02-01", "to": "2020-01-01"}}, r"from='2020-02-01' is not before to='2020-01-01'"),
        (
            {"watermark": {"from": "2020-01-01"}, "partition": "fortnightly"},
            r"partition='fortnightly' is not a partitioning",
        ),
        ({"watermark": {"from": "2020-01-01"}, "timezone": "Mars/Olympus"}, r"timezone='Mars/Olympus'"),
        ({"watermark": None}, r"watermark=None"),
        ({"watermark": {"start": "2020-01-01"}}, r"must have 'from'"),
    ],
)
def test_bad_bounds_and_partitioning_are_rejected_naming_the_argument(kwargs, message):
    args = {"watermark": {"from": "2020-01-01", "to": "-"}, "partition": "daily", **kwargs}
    with pytest.raises(ValueError, match=message):
        PartitionSpec.build(**args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"watermark": {"from": "P1D", "to": "P5D"}}, r"watermark=\{'from': 'P1D', 'to': 'P5D'\}: from='P1D' is at or"),
        ({"watermark": ["P1DT3H", "P1DT5H"]}, r"watermark=\['P1DT3H', 'P1DT5H'\]: from='P1DT3H' is at or after"),
        ({"watermark": {"from": "-", "to": "P0D"}}, r"from='-' is at or after to='P0D' at every time of day"),
        ({"watermark": {"from": "P1DT0H", "to": "P1D"}}, r"from='P1DT0H' is at or after to='P1D'"),
        ({"watermark": {"from": "P0D", "to": "P0D"}}, r"from='P0D' is at or after to='P0D'"),
        (
            {"watermark": None, "partition": {"monthly": ["P9D", "P8D"], "daily": ["P3D", "P7D"]}},
            r"partition\['daily'\]=\['P3D', 'P7D'\]: from='P3D' is at or after to='P7D'",
        ),
    ],
)
def test_a_relative_range_whose_from_is_never_before_its_to_fails_at_build_naming_the_argument(kwargs, message):
    """The issue's example: from 1 day ago, to 5 days ago, planned nothing at every run instead of failing."""
    with pytest.raises(ValueError, match=message):
        PartitionSpec.build(**{"partition": "daily", **kwargs})


@pytest.mark.parametrize(
    "watermark",
    [
        {"from": "P5D", "to": "P1D"},
        {"from": "P0D", "to": "-"},  # empty at 00:00 only
        {"from": "P0D", "to": "P0DT1H"},  # empty from 00:00 to 01:59 only
        {"from": "P0DT1H"},  # to '-' (hourly: a from in whole hours moves hourly partitions by whole ones)
        {"from": "P9D", "to": "2020-01-01"},  # a static bound: ordered at some runs, so accepted
    ],
)
def test_a_relative_range_that_is_not_empty_at_some_time_of_day_is_accepted(watermark):
    spec = PartitionSpec.build(watermark, "hourly" if "H" in watermark["from"] else "daily")
    now = iso_ms("2020-01-10T12:30")
    assert spec.partitions(now) or watermark.get("to") == "2020-01-01"


@pytest.mark.parametrize(
    ("watermark", "partition", "message"),
    [
        ({"from": "P0DT1H"}, "daily", r"from='P0DT1H' moves with every run, and daily partitions"),
        ({"from": "P30D", "to": "P0D"}, "monthly", r"from='P30D' moves with every run, and monthly partitions"),
        ({"from": "P7D"}, "weekly", "weekly partitions from a moving start"),
        ({"from": "P7D"}, "none", "none partitions from a moving start"),
        (
            None,
            {"monthly": ["2026-01-01", "P5D"], "daily": ["P5D", "P0D"]},
            r"from='P5D' moves .* every from is a date",
        ),
        (None, {"monthly": ["2026-01-01", "P5D"], "daily": ["2026-03-01", "P0D"]}, r"to='P5D' of the monthly piece"),
    ],
)
def test_a_moving_from_that_would_move_the_partitions_fails_at_build_naming_it(watermark, partition, message):
    """Partitions keyed by their start must be the same from run to run: with a monthly grid from 30 days ago, or
    a composite whose pieces meet 5 days ago, the days written under one run's partitions would be written again
    under the next run's, beside them in the target."""
    with pytest.raises(ValueError, match=message):
        PartitionSpec.build(watermark, partition)


@pytest.mark.parametrize(
    ("watermark", "partition"),
    [
        ({"from": "P30D", "to": "P0D"}, "daily"),
        ({"from": "P2DT3H", "to": "-"}, "hourly"),
        (None, {"monthly": ["2026-01-01", "2026-03-01"], "daily": ["2026-03-01", "P0D"]}),
    ],
)
def test_a_moving_bound_that_keeps_the_partitions_in_place_is_accepted(watermark, partition):
    spec = PartitionSpec.build(watermark, partition)
    day = iso_ms("2026-04-10")
    first, second = spec.partitions(day), spec.partitions(day + DAY_MS)
    # a day later the same partition starts, where the two runs' ranges overlap (the target is keyed by start)
    assert {p.start for p in first if p.start >= second[0].start} <= {p.start for p in second}


RELATIVE_BOUNDS = st.one_of(
    st.just("-"),
    st.integers(0, 3).map(lambda d: f"P{d}D"),
    st.tuples(st.integers(0, 2), st.integers(0, 23)).map(lambda dh: f"P{dh[0]}DT{dh[1]}H"),
)


@settings(max_examples=80, deadline=None)
@given(RELATIVE_BOUNDS, RELATIVE_BOUNDS)
def test_never_before_agrees_with_every_minute_of_two_days(from_text, to_text):
    from_, to = TimeBound.parse(from_text, "from"), TimeBound.parse(to_text, "to")
    day = iso_ms("2020-03-02")
    minutes = range(0, 2 * DAY_MS, 60_000)
    assert never_before(from_, to) == all(from_.resolve(day + m, "UTC") >= to.resolve(day + m, "UTC") for m in minutes)


def test_quarantine_reasons_follow_the_rule_in_order():
    day = [(iso_ms("2026-01-05"), iso_ms("2026-01-06"))]
    noon = iso_ms("2026-01-05T12:00")
    units = ["eu", "us"]
    assert quarantine_reason(None, None, ranges=day, unit=None, units=units) is QuarantineReason.NULL_TIME
    assert quarantine_reason("soon", None, ranges=day, unit=None, units=units) is QuarantineReason.UNPARSEABLE_TIME
    for bad_time in (-1, MAX_TIME_MS + 1, 10**15, 2**63 - 1):
        assert quarantine_reason(bad_time, bad_time, unit="eu", units=units) is QuarantineReason.TIME_OUT_OF_RANGE
    assert quarantine_reason(noon, noon, ranges=day, unit=None, units=units) is QuarantineReason.NULL_UNIT
    assert quarantine_reason(noon, noon, ranges=day, unit="EU", units=units) is QuarantineReason.UNKNOWN_UNIT
    assert quarantine_reason(noon, noon, ranges=day, unit="us", units=units) is None  # known, up to date or not
    assert quarantine_reason(noon, noon, ranges=[], unit=None, units=units) is None  # not this run's range
    assert quarantine_reason(noon, noon, ranges=day, unit=None, units=None) is None  # a pipeline without units
    assert quarantine_reason(0, 0) is None and quarantine_reason(MAX_TIME_MS, MAX_TIME_MS) is None


def test_ten_years_of_hourly_partitions_fit_well_under_64_kb_of_state():
    spec = PartitionSpec.build({"from": "2016-01-01", "to": "P0D"}, "hourly")
    now = iso_ms("2026-01-01")
    first = plan(spec, PartitionState.empty(), now)
    assert len(first.units) > 87_000
    results = succeeded(first)
    # a failure every ten days keeps runs from collapsing completely
    results = [r._replace(status=UnitStatus.FAILED) if i % 240 == 7 else r for i, r in enumerate(results)]
    state = PartitionState.empty().apply(results)
    encoded = json.dumps(state.to_json(), separators=(",", ":"))
    assert len(encoded) < 64 * 1024
    assert PartitionState.from_json(json.loads(encoded)) == state


def test_a_completeness_check_waits_for_every_overlapping_unit_to_reach_its_partition_end():
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "-"}, "monthly")
    first = plan(spec, PartitionState.empty(), iso_ms("2020-02-21"), units=["a", "b"])
    state = run_ok(PartitionState.empty(), first)
    jan, feb, mar = iso_ms("2020-01-01"), iso_ms("2020-02-01"), iso_ms("2020-03-01")
    assert work_units_not_done(spec, state, ["a", "b"], jan, feb) == []
    assert work_units_not_done(spec, state, ["a", "b"], feb, mar) == [(feb, mar, "a"), (feb, mar, "b")]
    state = run_ok(state, plan(spec, state, mar, units=["a", "b"]))
    assert work_units_not_done(spec, state, ["a", "b"], jan, mar) == []


# --- properties -------------------------------------------------------------------------------------------

SPECS = st.builds(
    lambda g, tz, partial, start_day, length: PartitionSpec.build(
        {"from": f"2020-{1 + start_day // 28:02d}-{1 + start_day % 28:02d}", "to": "-"},
        g,
        timezone=tz,
        partial_partition=partial,
    ),
    st.sampled_from(["none", "hourly", "daily", "weekly", "monthly", "yearly"]),
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]),
    st.booleans(),
    st.integers(0, 300),
    st.integers(0, 0),
)


@settings(max_examples=60, deadline=None)
@given(SPECS, st.integers(0, 500 * DAY_MS))
def test_partitions_tile_from_to_exactly(spec, after):
    start = spec.pieces[0].from_.resolve(0, spec.timezone)
    now = start + after
    end = spec.pieces[0].to.resolve(now, spec.timezone)
    parts = spec.partitions(now)
    for left, right in itertools.pairwise(parts):
        assert left.end == right.start
    if parts:
        assert parts[0].start == start
        assert parts[-1].end == end or (not spec.partial_partition and parts[-1].end < end)
    elif end > start:
        assert not spec.partial_partition or spec.pieces[0].granularity.value == "none"


OUTCOMES = st.lists(st.lists(st.booleans(), min_size=1, max_size=40), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(OUTCOMES, st.integers(0, 3), st.integers(0, 2), st.sampled_from(["daily", "none", "weekly"]))
def test_no_unit_ever_loses_data_across_successes_and_failures(outcomes, grace_days, abstinent_days, granularity):
    """After any sequence of runs: a work unit whose last execution failed is planned again, and no
    high watermark ever goes down."""
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, granularity)
    kwargs = {"units": ["x", "y"], "grace_ms": grace_days * DAY_MS, "abstinent_ms": abstinent_days * DAY_MS}
    state = PartitionState.empty()
    owed: set[tuple[int, str]] = set()  # (partition start, unit) whose last execution failed
    hws: dict[tuple[int, str], int] = {}
    for run, flags in enumerate(outcomes):
        now = iso_ms("2020-01-05") + run * DAY_MS
        p = plan(spec, state, now, **kwargs)
        assert owed <= {(u.partition_start, u.unit) for u in p.executing()}
        results = []
        for i, u in enumerate(p.executing()):
            ok = flags[i % len(flags)]
            results.append(
                UnitResult(
                    u.partition_start, u.partition_end, u.unit, UnitStatus.SUCCEEDED if ok else UnitStatus.FAILED
                )
            )
            (owed.discard if ok else owed.add)((u.partition_start, u.unit))
        state = state.apply(results)
        for part in spec.partitions(now):
            for unit in ("x", "y"):
                history = state.history(unit, part.start, part.end)
                hw = history.high_watermark_ms if history else None
                previous = hws.get((part.start, unit))
                assert previous is None or (hw is not None and hw >= previous)
                if hw is not None:
                    hws[(part.start, unit)] = hw


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3), st.integers(0, 2), st.integers(1, 20), st.sampled_from(["daily", "hourly", "monthly"]))
def test_planning_again_after_a_successful_run_executes_only_what_grace_and_new_time_demand(
    grace, abstinent, gap, granularity
):
    spec = PartitionSpec.build({"from": "2020-01-01", "to": "P0D"}, granularity)
    first_now = iso_ms("2020-03-01")
    state = run_ok(PartitionState.empty(), plan(spec, PartitionState.empty(), first_now))
    repeat = plan(spec, state, first_now, grace_ms=grace * DAY_MS, abstinent_ms=abstinent * DAY_MS)
    cutoff = first_now + (abstinent - grace) * DAY_MS
    assert all(u.partition_end > cutoff for u in repeat.executing())
    later = plan(spec, state, first_now + gap * DAY_MS, grace_ms=grace * DAY_MS, abstinent_ms=abstinent * DAY_MS)
    for u in later.executing():
        if u.reason is Reason.NEW:
            assert u.partition_end > first_now
        else:
            assert u.partition_end > cutoff
            assert u.range_start is not None and u.range_start >= min(u.partition_start, cutoff)


def test_complete_until_is_the_end_of_the_prefix_of_partitions_done_for_every_unit():
    spec = PartitionSpec.build({"from": "2026-01-01", "to": "-"}, "daily")
    day = lambda d: iso_ms(f"2026-01-{d:02d}")  # noqa: E731
    results = [UnitResult(day(d), day(d + 1), u, UnitStatus.SUCCEEDED) for d in (1, 2, 3) for u in ("eu", "us")]
    state = PartitionState.empty().apply(results).apply([UnitResult(day(3), day(4), "us", UnitStatus.FAILED)])
    assert complete_until(spec, state, ["eu", "us"], day(6)) == day(3)  # us failed when the 3rd was re-run
    assert complete_until(spec, state, ["eu"], day(6)) == day(4)
    assert complete_until(spec, PartitionState.empty(), ["eu"], day(6)) is None
