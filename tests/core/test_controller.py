from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.controller import (
    ControllerConfig,
    ControllerState,
    Quarantine,
    Rejection,
    StreamStatus,
    position_goes_back,
    run_round,
)
from airflow_provider_wm.core.names import is_valid_stream_name
from airflow_provider_wm.core.segments import cut_position_at, segment_map
from tests.factories import ROUND_1, ROUND_2, THIRDS, mark

SEGS = {"s": segment_map(THIRDS)}
NO_DELAY = ControllerConfig(writer_timeout_ms=1_000, initial_delay_ms=0)


def rounds(*batches, config=NO_DELAY, segments=SEGS, start=None):
    """Run consecutive rounds at now = 2000, 4000, ...; returns the results."""
    state = start or ControllerState()
    results = []
    for i, batch in enumerate(batches):
        result = run_round(state, batch, segments, 2_000 * (i + 1), config)
        results.append(result)
        state = result.state
    return results


def test_worked_example_round_one():
    (r1,) = rounds(ROUND_1)
    wm = r1.watermarks["s"]
    assert (wm.lower_ms, wm.upper_ms, wm.stream_cut) == (100, 102, {0: 200, 1: 200, 2: 200})


def test_worked_example_round_two_continues_from_round_one():
    _, r2 = rounds(ROUND_1, ROUND_2)
    wm = r2.watermarks["s"]
    assert (wm.lower_ms, wm.upper_ms, wm.stream_cut) == (200, 202, {0: 200, 1: 300, 2: 300})


def test_a_mark_whose_time_goes_back_is_rejected_and_changes_nothing():
    r1, r2 = rounds(ROUND_1, [mark("w1", 99, {0: 500}, reported_at_ms=3_000)])
    assert [(m.time_ms, reason) for m, reason in r2.rejected] == [(99, Rejection.INVALID_TIME)]
    before, after = r1.state.streams["s"].writers["w1"], r2.state.streams["s"].writers["w1"]
    assert (after.time_ms, after.position) == (before.time_ms, before.position)


def test_a_mark_at_the_same_time_is_accepted():
    _, r2 = rounds(ROUND_1, [mark("w1", 100, {0: 150, 1: 200}, reported_at_ms=3_000)])
    assert r2.rejected == []
    assert r2.state.streams["s"].writers["w1"].position == {0: 150, 1: 200}


def test_a_mark_whose_position_goes_back_is_rejected():
    _, r2 = rounds(ROUND_1, [mark("w1", 150, {0: 99, 2: 5}, reported_at_ms=3_000)])
    assert [reason for _, reason in r2.rejected] == [Rejection.INVALID_POSITION]
    assert r2.state.streams["s"].writers["w1"].time_ms == 100


def test_position_comparison_only_looks_at_shared_segments():
    assert position_goes_back({0: 10, 1: 5}, {1: 4}) is True
    assert position_goes_back({0: 10}, {1: 0, 2: 0}) is False
    assert position_goes_back({0: 10}, {0: 10}) is False


def test_the_largest_commit_time_of_a_round_counts_and_recommitting_is_idempotent():
    commits = [
        mark("t", 300, {0: 30}, kind="commit"),
        mark("t", 500, {0: 50}, kind="commit"),
        mark("t", 400, {0: 40}, kind="commit"),
    ]
    r1, r2 = rounds(commits, [mark("t", 500, {0: 50}, kind="commit", reported_at_ms=3_000)])
    assert r1.state.streams["s"].writers["t"].time_ms == 500
    assert r1.state.streams["s"].writers["t"].position == {0: 50}
    before, after = r1.state.streams["s"].writers["t"], r2.state.streams["s"].writers["t"]
    assert r2.rejected == [] and (after.time_ms, after.position) == (before.time_ms, before.position)


def test_the_position_of_a_round_is_the_top_marks_segments_at_their_highest_offsets():
    batch = [mark("w", 10, {0: 9, 1: 4}), mark("w", 20, {1: 3, 2: 1}), mark("w", 20, {2: 2})]
    (r1,) = rounds(batch)
    assert r1.state.streams["s"].writers["w"].position == {1: 4, 2: 2}


def test_a_writer_that_stops_advancing_holds_the_watermark_until_its_timeout():
    config = ControllerConfig(writer_timeout_ms=3_000, initial_delay_ms=0)
    later = [mark("w1", 300, {0: 300}, reported_at_ms=3_000), mark("w2", 301, {1: 300}, reported_at_ms=3_000)]
    _, r2, r3, r4, r5 = rounds(ROUND_1, later, [], [], [], config=config)
    assert r2.watermarks["s"].lower_ms == 102  # w3 is still past the previous lower bound (100)
    assert r3.reports["s"].status == StreamStatus.WAITING_FOR_WRITERS
    assert r3.reports["s"].waiting_for == ("w3",)
    assert r4.reports["s"].status == StreamStatus.WAITING_FOR_WRITERS  # lagging 2000 ms < 3000 ms
    assert r5.reports["s"].status == StreamStatus.EMITTED  # lagging 4000 ms: dropped
    assert r5.watermarks["s"].lower_ms == 300
    assert "w3" not in r5.state.streams["s"].writers


def test_a_shut_down_writer_counts_while_it_participates_and_is_dropped_as_soon_as_it_lags():
    later = [
        mark("w1", 300, {0: 300}, reported_at_ms=3_000),
        mark("w2", 301, {1: 300}, reported_at_ms=3_000),
        mark("w3", None, None, kind="shutdown", reported_at_ms=3_000),
    ]
    _, r2, r3 = rounds(ROUND_1, later, [])
    assert r2.watermarks["s"].lower_ms == 102
    assert r2.state.streams["s"].writers["w3"].alive is False
    assert r3.watermarks["s"].lower_ms == 300
    assert set(r3.state.streams["s"].writers) == {"w1", "w2"}


def test_a_shutdown_then_a_later_mark_revives_the_writer():
    batch = [
        mark("w", 10, {0: 1}, reported_at_ms=100),
        mark("w", None, None, kind="shutdown", reported_at_ms=200),
        mark("w", 20, {0: 2}, reported_at_ms=300),
    ]
    (r1,) = rounds(batch)
    assert r1.state.streams["s"].writers["w"].alive is True


def test_a_shutdown_of_an_unknown_writer_is_rejected():
    (r1,) = rounds([mark("ghost", None, None, kind="shutdown")])
    assert [reason for _, reason in r1.rejected] == [Rejection.UNKNOWN_WRITER]


def test_each_mark_of_a_round_lands_in_one_count_and_accepted_shutdowns_have_their_own():
    batch = [
        mark("w", 10, {0: 1}),
        mark("w", None, None, kind="shutdown", reported_at_ms=1_100),
        mark("ghost", None, None, kind="shutdown"),
        mark("w", 5, {0: -1}),
    ]
    (r1,) = rounds(batch)
    report = r1.reports["s"]
    assert (r1.marks_read, report.marks_accepted, report.shutdowns_accepted) == (4, 1, 1)
    assert [reason for _, reason in r1.rejected] == [Rejection.UNKNOWN_WRITER]
    assert [reason for _, reason in r1.quarantined] == [Quarantine.NEGATIVE_OFFSET]


def test_no_watermark_during_the_initial_delay_of_a_new_stream():
    config = ControllerConfig(writer_timeout_ms=10_000, initial_delay_ms=1_500)
    r1, r2 = rounds([mark("w", 10, {0: 1}, reported_at_ms=1_000)], [], config=config)
    assert r1.reports["s"].status == StreamStatus.INITIAL_DELAY and not r1.watermarks
    assert r2.watermarks["s"].lower_ms == 10


def test_time_that_does_not_advance_emits_nothing():
    _, r2 = rounds(ROUND_1, [mark("w1", 100, {0: 100}, reported_at_ms=3_000)])
    assert r2.reports["s"].status == StreamStatus.WAITING_FOR_WRITERS
    _, r2b = rounds([mark("w", 100, {0: 1})], [mark("w", 100, {0: 2}, reported_at_ms=3_000)])
    assert r2b.reports["s"].status == StreamStatus.WAITING_FOR_WRITERS


def test_no_active_writers_emit_nothing():
    config = ControllerConfig(writer_timeout_ms=0, initial_delay_ms=0)
    _, r2 = rounds([mark("w", 10, {0: 1})], [], config=config)
    assert r2.reports["s"].status == StreamStatus.NO_ACTIVE_WRITERS and not r2.watermarks


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (mark("w", 1, {0: 1}, stream="../etc"), Quarantine.INVALID_STREAM),
        (mark("w", 1, {0: 1}, wm_key="eu/west"), Quarantine.INVALID_WM_KEY),
        (mark("w", 1, {0: 1}, wm_key="a:b"), Quarantine.INVALID_WM_KEY),
        (mark("", 1, {0: 1}), Quarantine.INVALID_WRITER),
        (mark("w", 1, {0: 1}, kind="flush"), Quarantine.UNKNOWN_KIND),
        (mark("w", 1, {0: 1}, reported_at_ms=None), Quarantine.INVALID_REPORTED_AT),
        (mark("w", -5, {0: 1}), Quarantine.INVALID_TIME_VALUE),
        (mark("w", None, {0: 1}), Quarantine.INVALID_TIME_VALUE),
        (mark("w", 1, None), Quarantine.MISSING_POSITION),
        (mark("w", 1, {0: -1}), Quarantine.NEGATIVE_OFFSET),
        (mark("w", 1, {0: None}), Quarantine.NEGATIVE_OFFSET),
        (mark("w", 1, {7: 1}), Quarantine.UNKNOWN_SEGMENT),
    ],
)
def test_bad_rows_are_quarantined_with_their_reason_and_change_nothing(bad, reason):
    (r1,) = rounds([bad, mark("ok", 5, {0: 5})])
    assert r1.quarantined == [(bad, reason)]
    assert set(r1.state.streams["s"].writers) == {"ok"}


def test_each_watermark_key_has_its_own_writers_and_a_lagging_key_never_holds_another_back():
    r1, r2 = rounds(
        [mark("w1", 100, {0: 10}, wm_key="eu"), mark("w1", 300, {1: 30}, wm_key="us"), mark("w2", 50, {2: 5})],
        [mark("w1", 400, {1: 40}, wm_key="us", reported_at_ms=3_000)],
    )
    assert {label: (w.stream, w.wm_key, w.lower_ms) for label, w in r1.watermarks.items()} == {
        "s": ("s", None, 50),
        "s:eu": ("s", "eu", 100),
        "s:us": ("s", "us", 300),
    }
    assert r1.watermarks["s:eu"].stream_cut == {0: 10, 1: 0, 2: 0}
    # round 2: only "us" advances; "eu" and the unkeyed watermark wait for their own writers
    assert r2.reports["s:us"].watermark.lower_ms == 400
    assert r2.reports["s:eu"].status == StreamStatus.WAITING_FOR_WRITERS
    assert (r2.reports["s:us"].stream, r2.reports["s:us"].wm_key) == ("s", "us")


def test_an_empty_watermark_key_is_the_streams_unkeyed_watermark():
    (r1,) = rounds([mark("w1", 100, {0: 10}, wm_key=""), mark("w2", 200, {1: 10})])
    assert set(r1.watermarks) == {"s"} and r1.watermarks["s"].lower_ms == 100


def test_a_mark_with_an_invalid_key_counts_in_no_watermarks_report():
    (r1,) = rounds([mark("w1", 100, {0: 10}, wm_key="../x"), mark("w2", 200, {1: 10})])
    assert r1.reports["s"].quarantined == {} and set(r1.reports) == {"s"}


def test_marks_are_taken_once_in_the_round_that_reaches_their_report_time():
    early, late = mark("w", 10, {0: 1}, reported_at_ms=1_500), mark("w", 20, {0: 2}, reported_at_ms=2_500)
    r1, r2 = rounds([early, late], [early, late])
    assert r1.deferred_marks == 1 and r1.state.streams["s"].writers["w"].time_ms == 10
    assert r2.deferred_marks == 0 and r2.state.streams["s"].writers["w"].time_ms == 20
    assert r2.rejected == []  # the early mark is not applied a second time


def test_marks_that_land_after_their_round_are_counted_as_late_not_silently_skipped():
    on_time = mark("w", 10, {0: 1}, reported_at_ms=1_500)
    landed_late = mark("w", 11, {0: 2}, reported_at_ms=1_900)  # visible only after round 1 ran
    r1, r2 = rounds([on_time], [on_time, landed_late, mark("w", 30, {0: 3}, reported_at_ms=3_000)])
    assert (r1.late_marks, r1.state.processed_marks) == (0, 1)
    assert (r2.late_marks, r2.state.processed_marks) == (1, 3)
    assert r2.state.streams["s"].writers["w"].time_ms == 30


def test_rounds_cannot_go_back_in_time():
    (r1,) = rounds(ROUND_1)
    with pytest.raises(ValueError, match="before the state's processed_until_ms"):
        run_round(r1.state, [], SEGS, 1_000, NO_DELAY)


@pytest.mark.parametrize("value", [-1, 1.5, "10"])
def test_config_rejects_bad_durations_naming_the_argument(value):
    with pytest.raises(ValueError, match="writer_timeout_ms"):
        ControllerConfig(writer_timeout_ms=value)


def test_stream_names_cannot_leave_the_store():
    assert is_valid_stream_name("orders-eu.v1")
    for bad in ("", "../x", "a/b", ".hidden", "x" * 201, "a\n", None):
        assert not is_valid_stream_name(bad)


# ----------------------------------------------------------------------------------------- properties

segment_ids = st.sampled_from([0, 1, 2])
random_mark = st.builds(
    lambda w, t, pos, kind, r: mark(w, t, pos, kind=kind, reported_at_ms=r),
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 60),
    st.dictionaries(segment_ids, st.integers(0, 60), max_size=2),
    st.sampled_from(["note", "note", "note", "commit", "shutdown"]),
    st.integers(0, 10_000),
)
scenario = st.lists(st.lists(random_mark, max_size=8), min_size=1, max_size=5)


#: marks of any kind for any stream and key, mostly sane, some not (no sequenced ones: see ``RoundResult``)
any_mark = st.builds(
    lambda w, t, pos, kind, r, stream, key: mark(w, t, pos, kind=kind, reported_at_ms=r, stream=stream, wm_key=key),
    st.sampled_from(["a", "b", "c", "a", "b", "c", ""]),
    st.sampled_from([*range(0, 60, 5), -1, None]),
    st.sampled_from([{0: 5}, {1: 10, 2: 3}, {0: 30}, {2: 40}, {}, {0: -1}, {7: 1}, None]),
    st.sampled_from(["note", "note", "commit", "shutdown", "shutdown", "flush"]),
    st.sampled_from([*range(0, 10_000, 250), None]),
    st.sampled_from(["s", "s", "s", "../bad"]),
    st.sampled_from([None, None, None, "eu", "a:b"]),
)


def _run_scenario(batches, config):
    state, results = ControllerState(), []
    for i, batch in enumerate(batches):
        result = run_round(state, batch, SEGS, 2_000 * (i + 1), config)
        results.append((state, result))
        state = result.state
    return results


@settings(max_examples=200)
@given(scenario, st.integers(0, 4_000))
def test_emitted_lower_bounds_strictly_increase_and_never_pass_an_active_writer(batches, timeout):
    config = ControllerConfig(writer_timeout_ms=timeout, initial_delay_ms=0)
    lowers = []
    for _, result in _run_scenario(batches, config):
        wm = result.watermarks.get("s")
        if wm is None:
            continue
        lowers.append(wm.lower_ms)
        for writer in result.state.streams["s"].writers.values():
            assert wm.lower_ms <= writer.time_ms
    assert lowers == sorted(set(lowers))


@settings(max_examples=200)
@given(scenario)
def test_the_watermark_cut_never_decreases_per_key_range(batches):
    segs, previous = SEGS["s"], None
    for _, result in _run_scenario(batches, NO_DELAY):
        wm = result.watermarks.get("s")
        if wm is None:
            continue
        if previous is not None:
            for key in (0.1, 0.4, 0.9):
                assert cut_position_at(wm.stream_cut, segs, key) >= cut_position_at(previous, segs, key)
        previous = wm.stream_cut


@settings(max_examples=200)
@given(scenario)
def test_running_the_same_round_twice_changes_nothing(batches):
    for _, result in _run_scenario(batches, NO_DELAY):
        again = run_round(result.state, batches[-1], SEGS, result.state.processed_until_ms, NO_DELAY)
        assert again.state == result.state
        assert again.watermarks == {}


@st.composite
def consistent_writer_marks(draw: st.DrawFn) -> list:
    """Marks of writers that behave: time and offsets only grow, in report order."""
    marks = []
    for writer in draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True, min_size=1)):
        segments = draw(st.lists(segment_ids, unique=True, max_size=2))
        t, offsets = 0, dict.fromkeys(segments, 0)
        for r in range(draw(st.integers(1, 4))):
            t += draw(st.integers(1, 10))
            offsets = {seg: off + draw(st.integers(0, 5)) for seg, off in offsets.items()}
            marks.append(mark(writer, t, dict(offsets), reported_at_ms=100 * r))
    return marks


@settings(max_examples=200)
@given(consistent_writer_marks())
def test_feeding_the_same_marks_again_has_no_effect_beyond_the_passage_of_time(batch):
    first = run_round(ControllerState(), batch, SEGS, 2_000, NO_DELAY)
    replayed = [replace(m, reported_at_ms=m.reported_at_ms + 2_001) for m in batch]
    again = run_round(first.state, replayed, SEGS, 6_000, NO_DELAY)
    idle = run_round(first.state, [], SEGS, 6_000, NO_DELAY)
    assert again.state.streams == idle.state.streams
    assert again.watermarks == idle.watermarks


keyed_scenario = st.lists(
    st.lists(st.tuples(random_mark, st.sampled_from([None, "eu", "us"])), max_size=10), min_size=1, max_size=4
)


@settings(max_examples=200)
@given(keyed_scenario)
def test_each_keys_watermarks_are_those_of_its_marks_alone(batches):
    keyed = [[replace(m, wm_key=key) for m, key in batch] for batch in batches]
    together = _run_scenario(keyed, NO_DELAY)
    for key in (None, "eu", "us"):
        label = "s" if key is None else f"s:{key}"
        alone = _run_scenario([[m for m, k in batch if k == key] for batch in batches], NO_DELAY)
        unkeyed = lambda wm: wm and replace(wm, wm_key=None)  # noqa: E731
        for (_, with_others), (_, by_itself) in zip(together, alone, strict=True):
            mine, its = with_others.state.streams.get(label), by_itself.state.streams.get("s")
            assert (mine and replace(mine, watermark=unkeyed(mine.watermark))) == its
            assert unkeyed(with_others.watermarks.get(label)) == by_itself.watermarks.get("s")


@settings(max_examples=200)
@given(st.lists(st.lists(any_mark, max_size=10), min_size=1, max_size=4))
def test_every_mark_a_round_reads_lands_in_exactly_one_count(batches):
    for _, result in _run_scenario(batches, NO_DELAY):
        reports = result.reports.values()
        counted = sum(r.marks_accepted + r.shutdowns_accepted for r in reports)
        assert counted + len(result.rejected) + len(result.quarantined) == result.marks_read
        assert sum(sum(r.rejected.values()) for r in reports) == len(result.rejected)
