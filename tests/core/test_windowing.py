"""Windowed aggregation across runs: the issue's worked examples, each rule, and properties over random runs."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.times import MAX_TIME_MS, is_valid_time_ms
from airflow_provider_wm.core.windowing import (
    MAX_READ_INTERVALS,
    Accumulation,
    Aggregate,
    AggregationSpec,
    AggregationState,
    BoundedOutOfOrderness,
    Event,
    LateData,
    LateReason,
    SqlAggregate,
    StoreWatermark,
    Timing,
    UpstreamPane,
    UpstreamPanes,
    interval_read,
    next_watermark,
    pane_window_is_valid,
    read_by_run,
    run,
    run_on_panes,
    with_interval_read,
)
from airflow_provider_wm.core.windows import Global, Session, Sliding, Tumbling, Window, merge_sessions

SUM_V = (Aggregate("v", "sum", "v"),)


def tumbling_spec(accumulation: Accumulation, **kwargs: Any) -> AggregationSpec:
    return AggregationSpec(
        Tumbling(1000),
        SUM_V,
        keys=(),
        watermark=StoreWatermark("s"),
        allowed_lateness_ms=1000,
        accumulation=accumulation,
        **kwargs,
    )


def rows(result):
    return [(p.window.start, p.window.end, p.timing.value, p.index, p.retraction, p.values) for p in result.panes]


@pytest.mark.parametrize(
    ("accumulation", "run2"),
    [
        (Accumulation.ACCUMULATING, [(0, 1000, "LATE", 1, False, (9,))]),
        (Accumulation.DISCARDING, [(0, 1000, "LATE", 1, False, (4,))]),
        (
            Accumulation.ACCUMULATING_AND_RETRACTING,
            [(0, 1000, "ON_TIME", 0, True, (5,)), (0, 1000, "LATE", 1, False, (9,))],
        ),
    ],
)
def test_worked_example_on_time_then_late_then_too_late(accumulation, run2):
    spec = tumbling_spec(accumulation)
    r1 = run(spec, AggregationState(), [Event(100, (), {"v": 2}), Event(200, (), {"v": 3})], 1200)
    assert rows(r1) == [(0, 1000, "ON_TIME", 0, False, (5,))]
    r2 = run(spec, r1.state, [Event(900, (), {"v": 4})], 3000)
    assert rows(r2) == run2
    assert r2.state.windows == ()  # purged: 1000 <= 3000 - 1000
    r3 = run(spec, r2.state, [Event(120, (), {"v": 5})], 3000)
    assert r3.panes == [] and [(e.time_ms, why) for e, why in r3.late] == [(120, "TOO_LATE")]


def test_worked_example_session_merge_retracts_both_sessions():
    spec = AggregationSpec(
        Session(2000),
        SUM_V,
        keys=("k",),
        watermark=StoreWatermark("s"),
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING,
        early_firing=True,
    )
    r1 = run(spec, AggregationState(), [Event(1100, ("a",), {"v": 2}), Event(2000, ("a",), {"v": 3})], 0)
    assert rows(r1) == [(1100, 4000, "EARLY", 0, False, (5,))]
    r2 = run(spec, r1.state, [Event(5000, ("a",), {"v": 4})], 0)
    assert rows(r2) == [(5000, 7000, "EARLY", 0, False, (4,))]
    r3 = run(spec, r2.state, [Event(3500, ("a",), {"v": 3})], 0)
    assert rows(r3) == [
        (1100, 4000, "EARLY", 0, True, (5,)),
        (5000, 7000, "EARLY", 0, True, (4,)),
        (1100, 7000, "EARLY", 0, False, (12,)),
    ]


def test_a_merged_session_that_does_not_fire_keeps_owing_its_retractions():
    spec = AggregationSpec(
        Session(10),
        SUM_V,
        keys=("k",),
        watermark=StoreWatermark("s"),
        allowed_lateness_ms=100,
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING,
    )
    r1 = run(spec, AggregationState(), [Event(0, ("a",), {"v": 1})], 20)  # [0, 10) complete
    assert rows(r1) == [(0, 10, "ON_TIME", 0, False, (1,))]
    r2 = run(spec, r1.state, [Event(5, ("a",), {"v": 2})], 20)  # extends to [0, 15): complete, new window
    assert rows(r2) == [(0, 10, "ON_TIME", 0, True, (1,)), (0, 15, "ON_TIME", 0, False, (3,))]
    r3 = run(spec, r2.state, [Event(14, ("a",), {"v": 4})], 20)  # [0, 24): incomplete, no early firing
    assert rows(r3) == []
    r4 = run(spec, r3.state, [], 30)
    assert rows(r4) == [(0, 15, "ON_TIME", 0, True, (3,)), (0, 24, "ON_TIME", 0, False, (7,))]


def test_early_panes_fire_only_for_windows_with_new_data():
    spec = AggregationSpec(
        Tumbling(10), (Aggregate("n", "count"),), keys=(), watermark=StoreWatermark("s"), early_firing=True
    )
    r1 = run(spec, AggregationState(), [Event(1, ()), Event(12, ())], None)
    assert rows(r1) == [(0, 10, "EARLY", 0, False, (1,)), (10, 20, "EARLY", 0, False, (1,))]
    r2 = run(spec, r1.state, [Event(13, ())], 10)
    assert rows(r2) == [(0, 10, "ON_TIME", 1, False, (1,)), (10, 20, "EARLY", 1, False, (2,))]


def test_discarding_on_time_pane_after_early_firings_is_empty_but_fires():
    spec = AggregationSpec(
        Tumbling(10),
        (Aggregate("n", "count"), Aggregate("s", "sum", "v"), Aggregate("a", "avg", "v")),
        keys=(),
        watermark=StoreWatermark("s"),
        accumulation=Accumulation.DISCARDING,
        early_firing=True,
    )
    r1 = run(spec, AggregationState(), [Event(1, (), {"v": 4})], None)
    r2 = run(spec, r1.state, [], 10)
    assert rows(r2) == [(0, 10, "ON_TIME", 1, False, (0, None, None))]


def test_fire_only_updated_panes_skips_an_unchanged_pane_but_counts_the_on_time_firing():
    spec = AggregationSpec(
        Tumbling(10),
        (Aggregate("m", "max", "v"),),
        keys=(),
        watermark=StoreWatermark("s"),
        allowed_lateness_ms=100,
        early_firing=True,
        fire_only_updated_panes=True,
    )
    r1 = run(spec, AggregationState(), [Event(1, (), {"v": 4})], None)
    r2 = run(spec, r1.state, [], 10)  # ON_TIME pane would repeat the EARLY one
    assert rows(r2) == [] and r2.state.windows[0].on_time_fired
    r3 = run(spec, r2.state, [Event(2, (), {"v": 3})], 10)  # max unchanged: skipped again
    r4 = run(spec, r3.state, [Event(3, (), {"v": 9})], 10)
    assert rows(r3) == [] and rows(r4) == [(0, 10, "LATE", 1, False, (9,))]


def test_without_late_firing_late_data_fires_once_when_the_window_is_purged():
    spec = AggregationSpec(
        Tumbling(10), SUM_V, keys=(), watermark=StoreWatermark("s"), allowed_lateness_ms=20, late_firing=False
    )
    r1 = run(spec, AggregationState(), [Event(1, (), {"v": 1})], 10)
    r2 = run(spec, r1.state, [Event(2, (), {"v": 2})], 15)
    r3 = run(spec, r2.state, [Event(3, (), {"v": 3})], 20)
    r4 = run(spec, r3.state, [], 30)
    assert rows(r1) == [(0, 10, "ON_TIME", 0, False, (1,))]
    assert rows(r2) == rows(r3) == []
    assert rows(r4) == [(0, 10, "LATE", 1, False, (6,))] and r4.state.windows == ()


def test_keys_are_aggregated_independently_and_nulls_are_ignored_like_sql():
    spec = AggregationSpec(
        Tumbling(10),
        (
            Aggregate("n", "count"),
            Aggregate("nv", "count", "v"),
            Aggregate("lo", "min", "v"),
            Aggregate("a", "avg", "v"),
        ),
        keys=("k",),
        watermark=BoundedOutOfOrderness(0),
    )
    events = [Event(1, ("a",), {"v": 3}), Event(2, ("a",), {"v": None}), Event(3, ("b",), {"v": 1}), Event(11, ("a",))]
    result = run(spec, AggregationState(), events)
    assert {(p.key, p.window.start): p.values for p in result.panes} == {
        (("a",), 0): (2, 1, 3, 3.0),
        (("b",), 0): (1, 1, 1, 1.0),
    }
    assert result.watermark_ms == 11


def test_invalid_event_times_are_quarantined_not_aggregated():
    spec = AggregationSpec(Tumbling(10), SUM_V, keys=(), watermark=BoundedOutOfOrderness(0))
    result = run(
        spec, AggregationState(), [Event(None, (), {"v": 1}), Event(-5, (), {"v": 1}), Event(15, (), {"v": 2})]
    )
    assert [why for _, why in result.late] == ["INVALID_EVENT_TIME", "INVALID_EVENT_TIME"]
    assert result.state.max_event_time_ms == 15


NAN, INF = float("nan"), float("inf")


def test_nan_and_infinite_values_are_quarantined_before_too_late_and_an_accumulating_window_stays_finite():
    """The worked example of ``values_are_usable``: sum and max of ``v``, count(*); nulls and unread columns pass."""
    aggregates = (Aggregate("s", "sum", "v"), Aggregate("hi", "max", "v"), Aggregate("n", "count"))
    spec = AggregationSpec(Tumbling(10), aggregates, keys=(), watermark=BoundedOutOfOrderness(0), early_firing=True)
    nan, inf, minus_inf = Event(2, (), {"v": NAN}), Event(15, (), {"v": INF}), Event(4, (), {"v": -INF})
    first = run(spec, AggregationState(), [Event(1, (), {"v": 2.5}), nan, Event(3, (), {"v": None, "w": NAN}), inf])
    assert first.late == [(nan, "INVALID_VALUE"), (inf, "INVALID_VALUE")]
    assert first.state.max_event_time_ms == 15  # a quarantined value's time still counts as seen
    assert [(p.window.start, p.values) for p in first.panes] == [(0, (2.5, 2.5, 2))]
    late = Event(5, (), {"v": 1.0})
    second = run(spec, first.state, [minus_inf, late, Event(16, (), {"v": 1.0})])
    assert second.late == [(minus_inf, "INVALID_VALUE"), (late, "TOO_LATE")]  # both too late: one reason
    assert [(p.window.start, p.values) for p in second.panes] == [(10, (1.0, 1.0, 1))]


OUT_OF_RANGE_TIMES = [-1, MAX_TIME_MS + 1, 10**15, 2**63 - 1]
"""Times no event can have: before the epoch, after 9999-12-31 (10**15 is the year 33658), a bigint's maximum."""


@pytest.mark.parametrize("window", [Tumbling(10, 3), Sliding(12, 4), Session(5), Global()], ids=repr)
def test_event_times_outside_the_valid_range_are_quarantined_and_the_last_valid_one_is_assigned(window):
    spec = AggregationSpec(window, SUM_V, keys=("k",), watermark=BoundedOutOfOrderness(0), early_firing=True)
    bad = [Event(t, ("a",), {"v": 1}) for t in [None, *OUT_OF_RANGE_TIMES]]
    last = Event(MAX_TIME_MS, ("a",), {"v": 2})
    result = run(spec, AggregationState(), [*bad, last])
    assert result.late == [(e, "INVALID_EVENT_TIME") for e in bad]
    assert result.state.max_event_time_ms == MAX_TIME_MS == result.watermark_ms
    assert {p.values for p in result.panes} == {(2,)} and all(p.window.contains(MAX_TIME_MS) for p in result.panes)


def test_a_run_reads_its_arrival_range_once_and_every_row_without_a_valid_arrival_every_time():
    cuts = [None, 10, 20, 30]
    arrivals = [1, 10, 11, 20, 25, 30, 31, None, -1, MAX_TIME_MS + 1, 10**15]
    readers = {a: [until for since, until in pairwise(cuts) if read_by_run(a, since, until)] for a in arrivals}
    assert readers == {
        1: [10], 10: [10], 11: [20], 20: [20], 25: [30], 30: [30], 31: [],  # 31: the next run's
        None: [10, 20, 30], -1: [10, 20, 30], MAX_TIME_MS + 1: [10, 20, 30], 10**15: [10, 20, 30],
    }  # fmt: skip


def test_runs_reading_a_folder_each_read_every_interval_once_in_any_order():
    read: list[tuple[int, int]] = []
    for interval in [(30, 40), (10, 20), (20, 30)]:  # the run of 20-30 goes last
        assert not interval_read(read, interval)
        read = with_interval_read(read, interval)
        assert interval_read(read, interval)
    assert read == [(10, 40)]  # consecutive intervals merge: a pipeline run in order keeps one range
    assert not interval_read(read, (5, 15)) and not interval_read(read, (40, 40))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 20)), max_size=MAX_READ_INTERVALS + 30))
def test_the_intervals_read_stay_disjoint_sorted_bounded_and_hold_every_run_read(runs):
    read: list[tuple[int, int]] = []
    for start, length in runs:
        read = with_interval_read(read, (start, start + length))
    assert len(read) <= MAX_READ_INTERVALS
    assert all(start < end for start, end in read)
    assert all(end < next_start for (_, end), (next_start, _) in pairwise(read))  # touching ranges merge
    assert all(interval_read(read, (start, start + length)) for start, length in runs)


def test_above_the_bound_the_oldest_gap_closes():
    read: list[tuple[int, int]] = []
    for instant in range(0, 10 * (MAX_READ_INTERVALS + 1), 10):  # a trigger timetable's runs: empty intervals
        read = with_interval_read(read, (instant, instant))
    assert len(read) == MAX_READ_INTERVALS and read[0] == (0, 11)
    assert interval_read(read, (5, 5)) and not interval_read(read, (15, 15))


def test_global_window_fires_only_early_panes():
    spec = AggregationSpec(Global(), SUM_V, keys=(), watermark=BoundedOutOfOrderness(0), early_firing=True)
    r1 = run(spec, AggregationState(), [Event(5, (), {"v": 1})])
    r2 = run(spec, r1.state, [Event(10**12, (), {"v": 2})])
    assert [(p.timing, p.values) for p in r1.panes + r2.panes] == [(Timing.EARLY, (1,)), (Timing.EARLY, (3,))]


def test_watermark_never_goes_back():
    assert next_watermark(StoreWatermark("s"), 100, None, 50) == 100
    assert next_watermark(StoreWatermark("s"), 100, None, None) == 100
    assert next_watermark(BoundedOutOfOrderness(10), None, None, None) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allowed_lateness_ms": -1}, "allowed_lateness_ms=-1"),
        ({"aggregates": ()}, "at least one aggregate"),
        ({"aggregates": (Aggregate("v", "sum", "v"), Aggregate("v", "max", "v"))}, r"\['v'\] are used twice"),
        ({"aggregates": (Aggregate("pane", "count"),)}, "output columns"),
        ({"keys": ("bad key",)}, "keys\\[\\]='bad key'"),
        ({"window": "tumbling"}, "window='tumbling'"),
        ({"accumulation": "SOMETIMES"}, "accumulation='SOMETIMES' must be one of"),
        ({"accumulation": None}, "accumulation=None must be one of"),
    ],
)
def test_bad_specs_are_rejected_naming_the_argument(kwargs, message):
    arguments: dict[str, Any] = {
        "window": Tumbling(10),
        "aggregates": SUM_V,
        "keys": (),
        "watermark": StoreWatermark("s"),
    }
    with pytest.raises(ValueError, match=message):
        AggregationSpec(**{**arguments, **kwargs})


def test_sql_aggregates_must_refer_to_their_partial_and_are_spark_only():
    with pytest.raises(ValueError, match="merge='sum"):
        SqlAggregate("u", partial="sum(x)", merge="sum(x)")
    spec = AggregationSpec(Tumbling(10), (SqlAggregate("u", "sum(x)", "sum({partial})"),), (), StoreWatermark("s"))
    with pytest.raises(NotImplementedError):
        run(spec, AggregationState(), [])


# ------------------------------------------------------------------------------------------ properties

WINDOWS = st.sampled_from([Tumbling(10), Tumbling(7, 3), Sliding(12, 4), Sliding(10, 5, 2), Session(5), Global()])
EVENT_TIMES = st.one_of(st.integers(0, 80), st.integers(0, 80), st.integers(0, 80), st.sampled_from(OUT_OF_RANGE_TIMES))
"""Mostly valid times, and about one in twelve outside the valid range (quarantined, never assigned)."""
EVENTS = st.lists(st.tuples(EVENT_TIMES, st.sampled_from(["a", "b", "c"]), st.integers(-3, 9)), max_size=40)


@st.composite
def scenarios(draw):
    window = draw(WINDOWS)
    spec = AggregationSpec(
        window,
        (Aggregate("n", "count"), Aggregate("s", "sum", "v"), Aggregate("lo", "min", "v"), Aggregate("a", "avg", "v")),
        keys=("k",),
        watermark=draw(st.sampled_from([StoreWatermark("s"), BoundedOutOfOrderness(draw(st.integers(0, 30)))])),
        allowed_lateness_ms=draw(st.integers(0, 30)),
        accumulation=draw(st.sampled_from(list(Accumulation))),
        early_firing=draw(st.booleans()) or isinstance(window, Global),
        late_firing=draw(st.booleans()),
    )
    events = [Event(t, (k,), {"v": v}) for t, k, v in draw(EVENTS)]
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=5)))
    batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    sources = draw(st.lists(st.integers(0, 100), min_size=len(batches), max_size=len(batches)))
    return spec, batches, sorted(sources)


def run_all(spec, batches, sources, flush=True):
    state, results = AggregationState(), []
    for batch, source in zip(batches, sources, strict=True):
        result = run(spec, state, batch, source)
        results.append(result)
        state = result.state
    if flush and not isinstance(spec.window, Global):
        results.append(run(spec, state, [], 10**6) if isinstance(spec.watermark, StoreWatermark) else None)
    return [r for r in results if r is not None]


def batch_windows(spec, events):
    """One-shot: every accepted event's windows, sessions merged per key, aggregated."""
    members: dict[tuple[Any, Window], list[Event]] = defaultdict(list)
    if isinstance(spec.window, Session):
        by_key = defaultdict(list)
        for event in events:
            by_key[event.key].append(event)
        for key, evs in by_key.items():
            for merged, idx in merge_sessions([spec.window.assign(e.time_ms)[0] for e in evs]):
                members[(key, merged)] = [evs[i] for i in idx]
    else:
        for event in events:
            for window in spec.window.assign(event.time_ms):
                members[(event.key, window)].append(event)
    aggregates = spec.builtin_aggregates()
    out = {}
    for slot, evs in members.items():
        partial = tuple(a.empty() for a in aggregates)
        for e in evs:
            partial = tuple(a.merge(p, a.of(e.values)) for a, p in zip(aggregates, partial, strict=True))
        out[slot] = tuple(a.finish(p) for a, p in zip(aggregates, partial, strict=True))
    return out


def accepted_events(results, batches):
    late = {id(e) for r in results for e, _ in r.late}
    return [e for batch in batches for e in batch if id(e) not in late]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_watermark_is_monotone_and_too_late_is_exactly_below_previous_watermark_minus_lateness(scenario):
    spec, batches, sources = scenario
    state = AggregationState()
    for batch, source in zip(batches, sources, strict=True):
        result = run(spec, state, batch, source)
        horizon = None if state.watermark_ms is None else state.watermark_ms - spec.allowed_lateness_ms
        expected_late = [
            (e, "INVALID_EVENT_TIME") if not is_valid_time_ms(e.time_ms) else (e, "TOO_LATE")
            for e in batch
            if not is_valid_time_ms(e.time_ms) or (horizon is not None and e.time_ms < horizon)
        ]
        assert result.late == expected_late
        if state.watermark_ms is not None:
            assert result.watermark_ms >= state.watermark_ms
        state = result.state


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_retractions_undo_exactly_the_panes_they_repeat_and_the_live_panes_equal_a_batch(scenario):
    spec, batches, sources = scenario
    if spec.accumulation is not Accumulation.ACCUMULATING_AND_RETRACTING:
        return
    results = run_all(spec, batches, sources)
    live: dict[tuple[Any, Window], tuple[Any, ...]] = {}
    for result in results:
        for pane in result.panes:
            slot = (pane.key, pane.window)
            if pane.retraction:
                assert live.pop(slot) == pane.values
            else:
                assert slot not in live
                live[slot] = pane.values
    if isinstance(spec.window, Global) or isinstance(spec.watermark, BoundedOutOfOrderness):
        return  # not every window is forced to fire
    assert live == batch_windows(spec, accepted_events(results, batches))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_accumulating_last_pane_per_window_equals_a_one_shot_batch_over_events_not_too_late(scenario):
    spec, batches, sources = scenario
    if spec.accumulation is Accumulation.DISCARDING or not isinstance(spec.watermark, StoreWatermark):
        return
    if isinstance(spec.window, Global):
        return
    results = run_all(spec, batches, sources)
    last = {}
    for result in results:
        for pane in result.panes:
            if not pane.retraction:
                last[(pane.key, pane.window)] = pane.values
    expected = batch_windows(spec, accepted_events(results, batches))
    assert {slot: last.get(slot) for slot in expected} == expected


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_discarding_panes_of_a_window_add_up_to_its_batch_count(scenario):
    spec, batches, sources = scenario
    if spec.accumulation is not Accumulation.DISCARDING or spec.window.merging:
        return
    if isinstance(spec.window, Global) or not isinstance(spec.watermark, StoreWatermark):
        return
    results = run_all(spec, batches, sources)
    counts: dict[Any, int] = defaultdict(int)
    for result in results:
        for pane in result.panes:
            counts[(pane.key, pane.window)] += pane.values[0]
    expected = batch_windows(spec, accepted_events(results, batches))
    assert dict(counts) == {slot: values[0] for slot, values in expected.items()}


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.randoms())
def test_the_order_of_events_within_a_run_does_not_matter(scenario, rnd):
    spec, batches, sources = scenario
    shuffled = [rnd.sample(batch, len(batch)) for batch in batches]
    a, b = run_all(spec, batches, sources), run_all(spec, shuffled, sources)
    pane_set = lambda results: [sorted(map(repr, r.panes)) for r in results]  # noqa: E731
    assert pane_set(a) == pane_set(b)
    assert a[-1].state.watermark_ms == b[-1].state.watermark_ms


def test_an_early_count_trigger_fires_once_enough_events_are_pending_across_runs():
    spec = tumbling_spec(Accumulation.ACCUMULATING, early_firing_count=2)
    r1 = run(spec, AggregationState(), [Event(100, (), {"v": 1})], 0)
    assert rows(r1) == [] and r1.state.windows[0].pending == 1
    r2 = run(spec, r1.state, [Event(200, (), {"v": 2})], 0)
    assert rows(r2) == [(0, 1000, "EARLY", 0, False, (3,))] and r2.state.windows[0].pending == 0
    r3 = run(spec, r2.state, [Event(300, (), {"v": 4})], 1000)  # complete: ON_TIME whatever the count
    assert rows(r3) == [(0, 1000, "ON_TIME", 1, False, (7,))]


def test_a_late_count_trigger_waits_for_enough_late_events_or_the_purge():
    spec = tumbling_spec(Accumulation.DISCARDING, late_firing_count=2)
    r1 = run(spec, AggregationState(), [Event(100, (), {"v": 1})], 1000)
    assert rows(r1) == [(0, 1000, "ON_TIME", 0, False, (1,))]
    r2 = run(spec, r1.state, [Event(200, (), {"v": 2})], 1200)
    assert rows(r2) == []
    r3 = run(spec, r2.state, [Event(300, (), {"v": 4}), Event(400, (), {"v": 8})], 1500)
    assert rows(r3) == [(0, 1000, "LATE", 1, False, (14,))]
    r4 = run(spec, r3.state, [Event(500, (), {"v": 16})], 1500)
    assert rows(r4) == []
    r5 = run(spec, r4.state, [], 2000)  # purged with one pending event: it fires
    assert rows(r5) == [(0, 1000, "LATE", 2, False, (16,))] and r5.state.windows == ()


def test_a_merged_session_counts_the_pending_events_of_its_members():
    spec = AggregationSpec(Session(200), SUM_V, ("k",), StoreWatermark("s"), early_firing_count=3)
    r1 = run(spec, AggregationState(), [Event(0, ("a",), {"v": 1}), Event(300, ("a",), {"v": 2})], 0)
    assert rows(r1) == [] and [w.pending for w in r1.state.windows] == [1, 1]
    r2 = run(spec, r1.state, [Event(150, ("a",), {"v": 4})], 0)  # bridges both sessions: 1 + 1 + 1 pending
    assert [(p.window, p.timing.value, p.values) for p in r2.panes] == [(Window(0, 500), "EARLY", (7,))]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"early_firing_count": 0}, "early_firing_count=0 must be a number of events >= 1"),
        ({"late_firing_count": True}, "late_firing_count=True must be"),
        ({"early_firing": True, "early_firing_count": 5}, "pass one of them"),
        ({"late_firing": False, "late_firing_count": 5}, "pass one of them"),
    ],
)
def test_bad_count_triggers_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tumbling_spec(Accumulation.ACCUMULATING, **kwargs)


# ------------------------------------------------------------------------------------ window propagation

FIVE_MINUTES = Tumbling(300_000)


def rollup_spec(**kwargs: Any) -> AggregationSpec:
    arguments: dict[str, Any] = {
        "window": Tumbling(3_600_000),
        "aggregates": (Aggregate("v", "sum", "v"),),
        "keys": (),
        "watermark": StoreWatermark("up"),
        "upstream": UpstreamPanes("up", FIVE_MINUTES, Accumulation.ACCUMULATING_AND_RETRACTING),
    }
    return AggregationSpec(**{**arguments, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": Tumbling(420_000)}, "window=Tumbling.*must be a multiple of the upstream window"),
        ({"window": Tumbling(3_600_000, 60_000)}, "must be a multiple of the upstream window"),
        ({"window": Sliding(3_600_000, 300_000)}, "a coarser window must be tumbling over tumbling panes"),
        ({"accumulation": Accumulation.DISCARDING}, "accumulation=DISCARDING: a rollup recomputes"),
        ({"watermark": BoundedOutOfOrderness(0)}, "a rollup's watermark is its upstream's output stream"),
        ({"upstream": None, "window": None}, "window=None must be a Tumbling"),
    ],
)
def test_bad_rollups_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rollup_spec(**kwargs)


def test_a_rollup_spec_round_trips_through_json():
    spec = rollup_spec(window=None)
    assert AggregationSpec.from_json(spec.to_json()) == spec
    assert spec.output_window == FIVE_MINUTES


def test_a_rollup_counts_each_upstream_window_once_whatever_its_panes():
    """EARLY then LATE panes of an accumulating upstream: only the latest counts; a rerun of an older upstream
    version (lower rank) does not displace it."""
    spec = rollup_spec(upstream=UpstreamPanes("up", FIVE_MINUTES, Accumulation.ACCUMULATING), allowed_lateness_ms=10**7)
    w = Window(0, 300_000)
    r1 = run_on_panes(spec, AggregationState(), [UpstreamPane((), w, {"v": 1}, 0, run=1)], 0)
    r2 = run_on_panes(spec, r1.state, [UpstreamPane((), w, {"v": 5}, 1, run=2)], 3_600_000)
    r3 = run_on_panes(spec, r2.state, [UpstreamPane((), w, {"v": 2}, 0, run=1)], 3_600_000)
    assert [p.values for p in r2.panes] == [(5,)]
    assert [(p.timing.value, p.values) for p in r3.panes] == [("LATE", (5,))]


def test_pane_rows_whose_window_no_upstream_can_emit_are_quarantined_as_invalid_window():
    spec = rollup_spec(allowed_lateness_ms=10**7)
    good = UpstreamPane((), Window(-60_000, 240_000), {"v": 1}, 0, run=1)
    bad = [
        UpstreamPane((), Window(2**63 - 300_001, 2**63 - 1), {"v": 2}, 0, run=1),  # after 9999-12-31
        UpstreamPane((), Window(10**15, 10**15 + 300_000), {"v": 4}, 0, run=1),  # the year 33658
        UpstreamPane((), Window(-(2**63), 0), {"v": 8}, 0, run=1),  # ends at the epoch: holds no valid time
        UpstreamPane((), Window(-(2**63), 300_000), {"v": 16}, 0, run=1),  # longer than the upstream's windows
        UpstreamPane((), Window(300_000, 300_000), {"v": 32}, 0, run=1),  # empty
    ]
    result = run_on_panes(spec, AggregationState(), [good, *bad], 3_600_000)
    assert result.late == [(row, "INVALID_WINDOW") for row in bad]
    assert [(p.window, p.values) for p in result.panes] == [(Window(-3_600_000, 0), (1,))]
    assert result.state.max_event_time_ms == 239_999
    assert pane_window_is_valid(Window(-(2**63), 2**63 - 1), Global())  # the global window's one pane


def test_panes_of_a_purged_window_are_too_late_and_bad_windows_quarantined():
    spec = rollup_spec()
    state = run_on_panes(spec, AggregationState(), [], 3_600_000).state
    late_row = UpstreamPane((), Window(0, 300_000), {"v": 1}, 1, run=3)
    bad_row = UpstreamPane((), None, {"v": 1}, 0, run=3)
    result = run_on_panes(spec, state, [late_row, bad_row], 3_600_000)
    assert result.late == [(late_row, "TOO_LATE"), (bad_row, "INVALID_WINDOW")] and result.panes == []


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.integers(1, 4))
def test_a_rollup_of_any_upstream_equals_the_batch_over_the_upstreams_accepted_events(scenario, factor):
    """Chained through panes (with their retractions and replaced EARLY panes), coarse windows of ``factor``
    upstream windows hold exactly what a one-shot batch over the upstream's non-late events gives."""
    upstream, batches, sources = scenario
    if not isinstance(upstream.window, Tumbling) or not isinstance(upstream.watermark, StoreWatermark):
        return
    upstream = AggregationSpec(
        upstream.window, SUM_V, ("k",), upstream.watermark, upstream.allowed_lateness_ms, upstream.accumulation,
        early_firing=upstream.early_firing,
    )  # fmt: skip
    coarse = Tumbling(upstream.window.size_ms * factor, upstream.window.offset_ms)
    spec = AggregationSpec(
        coarse, SUM_V, ("k",), StoreWatermark("up"), allowed_lateness_ms=10**6,
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING,
        upstream=UpstreamPanes("up", upstream.window, upstream.accumulation),
    )  # fmt: skip
    results = run_all(upstream, batches, sources)
    state, last = AggregationState(), {}
    for version, result in enumerate(results, start=1):
        rows = [UpstreamPane(p.key, p.window, {"v": p.values[0]}, p.index, p.retraction, version) for p in result.panes]
        rolled = run_on_panes(spec, state, rows, upstream.window.output_watermark(result.watermark_ms))
        state = rolled.state
        for pane in rolled.panes:
            if not pane.retraction:
                last[(pane.key, pane.window)] = pane.values
    expected = batch_windows(replace(upstream, window=coarse), accepted_events(results, batches))
    assert last == expected


# ------------------------------------------------------------------------------------ late_data policy


def test_late_data_is_checked_at_construction_and_carried_in_the_specs_json_only_when_not_the_default():
    base = AggregationSpec(Tumbling(10), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"))
    assert base.late_data is LateData.EVENT_TIME and "late_data" not in base.to_json()
    by_end = replace(base, late_data="window_end")
    assert by_end.late_data is LateData.WINDOW_END and by_end.to_json()["late_data"] == "window_end"
    assert AggregationSpec.from_json(by_end.to_json()) == by_end
    with pytest.raises(ValueError, match=r"late_data='window-end' must be one of \['event_time', 'window_end'\]"):
        replace(base, late_data="window-end")
    sessions = AggregationSpec(
        Session(10), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"), late_data="window_end"
    )
    assert AggregationSpec.from_json(sessions.to_json()) == sessions and sessions.late_data is LateData.WINDOW_END


def test_under_window_end_an_event_below_the_horizon_still_counts_in_its_open_window():
    spec = AggregationSpec(
        Tumbling(10_000), (Aggregate("n", "count"),), (), BoundedOutOfOrderness(0), late_data=LateData.WINDOW_END
    )
    first = run(spec, AggregationState(), [Event(25_000, (), {})])  # watermark 25 s: [20 s, 30 s) still open
    second = run(spec, first.state, [Event(22_000, (), {}), Event(18_000, (), {}), Event(31_000, (), {})])
    assert [(e.time_ms, reason) for e, reason in second.late] == [(18_000, "WINDOW_CLOSED")]
    assert [(p.window, p.values) for p in second.panes] == [(Window(20_000, 30_000), (2,))]
    by_time = run(replace(spec, late_data=LateData.EVENT_TIME), first.state, [Event(22_000, (), {})])
    assert [(e.time_ms, reason) for e, reason in by_time.late] == [(22_000, "TOO_LATE")]


def test_a_sliding_event_counts_only_in_its_windows_that_have_not_closed():
    spec = AggregationSpec(
        Sliding(10_000, 5_000), (Aggregate("n", "count"),), (), BoundedOutOfOrderness(0), late_data="window_end"
    )
    first = run(spec, AggregationState(), [Event(17_000, (), {})])  # watermark 17 s
    # 12 s falls in [5 s, 15 s), closed at 17 s, and in [10 s, 20 s), still open: it counts in the open one only
    second = run(spec, first.state, [Event(12_000, (), {}), Event(30_000, (), {})])
    assert second.late == []
    assert sorted((p.window, p.values) for p in second.panes) == [
        (Window(10_000, 20_000), (2,)),
        (Window(15_000, 25_000), (1,)),
    ]


def session_worked_example(late_data: LateData):
    """Gap 10 s, watermark 5 s behind the highest event: run 1 stores the open session ``[30 s, 48 s)`` and
    sets ``W = 33 s``; run 2 brings events at 22 s (own window ``[22 s, 32 s)``: closed) and 25 s (own window
    ``[25 s, 35 s)``: open), both below the horizon; run 3 moves the watermark past every session."""
    spec = AggregationSpec(
        Session(10_000), (Aggregate("n", "count"),), ("k",), BoundedOutOfOrderness(5_000), late_data=late_data
    )
    first = run(spec, AggregationState(), [Event(30_000, ("a",), {}), Event(38_000, ("a",), {})])
    second = run(spec, first.state, [Event(22_000, ("a",), {}), Event(25_000, ("a",), {})])
    third = run(spec, second.state, [Event(100_000, ("b",), {})])
    return first, second, third


def test_under_window_end_a_session_event_with_an_open_own_window_extends_the_stored_open_session():
    first, second, third = session_worked_example(LateData.WINDOW_END)
    assert first.watermark_ms == 33_000 and [w.window for w in first.state.windows] == [Window(30_000, 48_000)]
    assert [(e.time_ms, reason) for e, reason in second.late] == [(22_000, "WINDOW_CLOSED")]
    assert [(w.window, w.partial) for w in second.state.windows] == [(Window(25_000, 48_000), (3,))]
    assert [(p.key, p.window, p.timing.value, p.values) for p in third.panes] == [
        (("a",), Window(25_000, 48_000), "ON_TIME", (3,))
    ]


def test_under_window_end_a_session_event_whose_own_window_closed_is_dropped_though_it_would_merge_into_an_open_one():
    # [22 s, 32 s) overlaps the stored [30 s, 48 s) and the run's [25 s, 35 s): the merge would end at 48 s > 33 s,
    # but the event is judged before merging (Spark's rule), so it is dropped and the session starts at 25 s
    _, second, third = session_worked_example(LateData.WINDOW_END)
    assert [reason for e, reason in second.late if e.time_ms == 22_000] == ["WINDOW_CLOSED"]
    assert all(p.window.start == 25_000 for p in third.panes if p.key == ("a",))


def test_under_event_time_both_session_events_below_the_horizon_are_too_late():
    _, second, third = session_worked_example(LateData.EVENT_TIME)
    assert [(e.time_ms, reason) for e, reason in second.late] == [(22_000, "TOO_LATE"), (25_000, "TOO_LATE")]
    assert [(p.window, p.values) for p in third.panes if p.key == ("a",)] == [(Window(30_000, 48_000), (2,))]


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_window_end_drops_a_subset_of_what_event_time_drops_and_only_events_whose_windows_all_closed(scenario):
    """For sessions "its windows" is the event's own ``[t, t + gap)``: it is judged before merging."""
    spec, batches, sources = scenario
    by_end = replace(spec, late_data=LateData.WINDOW_END)
    state_time, state_end = AggregationState(), AggregationState()
    for batch, source in zip(batches, sources, strict=True):
        horizon = None if state_end.watermark_ms is None else state_end.watermark_ms - spec.allowed_lateness_ms
        r_time, r_end = run(spec, state_time, batch, source), run(by_end, state_end, batch, source)
        assert r_time.watermark_ms == r_end.watermark_ms  # lateness never changes the watermark
        late_time = {id(e) for e, reason in r_time.late if reason == LateReason.TOO_LATE}
        closed = [e for e, reason in r_end.late if reason == LateReason.WINDOW_CLOSED]
        assert {id(e) for e in closed} <= late_time
        for event in closed:
            assert horizon is not None and all(w.end <= horizon for w in spec.window.assign(event.time_ms))
        state_time, state_end = r_time.state, r_end.state


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StoreWatermark("a/b"), "watermark.stream='a/b' is not a valid name"),
        (lambda: StoreWatermark(""), "watermark.stream='' is not a valid name"),
        (lambda: StoreWatermark(None), "watermark.stream=None is not a valid name"),  # type: ignore[arg-type]
        (lambda: StoreWatermark("orders", "../eu"), r"watermark.wm_key='../eu' is not a valid name"),
        (lambda: UpstreamPanes("a/b", FIVE_MINUTES), "upstream.pipeline='a/b' is not a valid name"),
        (lambda: UpstreamPanes("", FIVE_MINUTES), "upstream.pipeline='' is not a valid name"),
        (lambda: UpstreamPanes("up", FIVE_MINUTES, "sometimes"), r"upstream.accumulation='sometimes' must be one of"),
        (lambda: UpstreamPanes("up", FIVE_MINUTES, None), r"upstream.accumulation=None must be one of"),
    ],
)
def test_a_store_watermark_or_upstream_with_a_bad_name_or_mode_fails_naming_the_argument(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        make()


@pytest.mark.parametrize(
    "text", ["ACCUMULATING_AND_RETRACTING", "accumulating_and_retracting", " Accumulating_And_Retracting "]
)
def test_upstream_panes_take_the_accumulation_as_its_value_in_any_case(text):
    panes = UpstreamPanes("orders_5m", FIVE_MINUTES, text)
    assert panes.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING
    assert panes == UpstreamPanes.from_json(panes.to_json())


def test_a_spec_takes_the_accumulation_as_a_string_and_a_rollup_still_refuses_discarding():
    spec = AggregationSpec(FIVE_MINUTES, SUM_V, (), StoreWatermark("s"), accumulation="discarding")  # type: ignore[arg-type]
    assert spec.accumulation is Accumulation.DISCARDING
    with pytest.raises(ValueError, match=r"^accumulation=DISCARDING: a rollup recomputes"):
        AggregationSpec(
            None, SUM_V, (), StoreWatermark("up"), accumulation="Discarding", upstream=UpstreamPanes("up", FIVE_MINUTES)
        )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Aggregate("n", "sum"),
            "aggregates['n'].column=None must be a column: sum needs one, as in sum(amount)",
        ),
        (lambda: Aggregate("n", "median", "x"), "aggregates['n'].function='median' must be one of count, sum"),
        (lambda: Aggregate("n", "max", "a b"), "aggregates['n'].column='a b' must be a column name"),
        (lambda: SqlAggregate("u", "", "x"), "aggregates['u'].partial='' must be a Spark SQL expression"),
    ],
)
def test_an_aggregate_error_names_the_aggregate_and_the_value_as_aggregates_name(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        make()
