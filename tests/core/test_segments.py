from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_wm.core.segments import (
    Segment,
    active_segments_at_epoch,
    complete_cut,
    cut_position_at,
    missing_ranges,
    segment_map,
    stream_cut,
    upper_bound,
)
from tests.factories import E1, SPLIT, THIRDS


def test_worked_example_cut_takes_the_highest_offset_per_segment():
    segs = segment_map(THIRDS)
    cut, complete = stream_cut([{0: 100, 1: 200}, {1: 100, 2: 200}, {2: 100, 0: 200}], None, segs)
    assert (cut, complete) == ({0: 200, 1: 200, 2: 200}, True)


def test_worked_example_second_round_merges_the_previous_cut():
    segs = segment_map(THIRDS)
    cut, _ = stream_cut([{1: 300}, {1: 100, 2: 300}, {2: 300}], {0: 200, 1: 200, 2: 200}, segs)
    assert cut == {0: 200, 1: 300, 2: 300}


def test_a_segment_whose_successor_is_reported_is_dropped_in_any_order():
    segs = segment_map(SPLIT)
    positions = [{1: 500, 0: 10}, {E1 | 3: 7}]
    assert upper_bound(positions, segs) == upper_bound(list(reversed(positions)), segs) == {0: 10, E1 | 3: 7}


def test_gaps_are_filled_with_the_newest_epochs_segments_at_offset_zero():
    segs = segment_map(SPLIT)
    cut, complete = complete_cut({0: 10, E1 | 3: 7}, segs)
    assert complete
    assert cut == {0: 10, E1 | 3: 7, E1 | 4: 0, 2: 0}


def test_an_empty_cut_starts_at_the_oldest_epoch():
    segs = segment_map(SPLIT)
    assert complete_cut({}, segs) == ({0: 0, 1: 0, 2: 0}, True)


def test_a_cut_over_segments_that_leave_a_gap_is_reported_incomplete():
    segs = segment_map([Segment(0, 0.0, 0.5)])
    assert complete_cut({0: 3}, segs) == ({0: 3}, False)


def test_missing_ranges_and_active_segments():
    segs = segment_map(SPLIT)
    assert missing_ranges({0: 1, 2: 1}, segs) == [(1 / 3, 2 / 3)]
    assert {s.segment_id for s in active_segments_at_epoch(1, segs)} == {0, 2, E1 | 3, E1 | 4}
    assert {s.segment_id for s in active_segments_at_epoch(0, segs)} == {0, 1, 2}


@pytest.mark.parametrize(("segment_id", "start", "end"), [(-1, 0.0, 1.0), (0, 0.5, 0.5), (0, -0.1, 0.5), (0, 0.5, 1.5)])
def test_invalid_segments_are_rejected_with_their_values(segment_id, start, end):
    with pytest.raises(ValueError, match="segment"):
        Segment(segment_id, start, end)


def test_conflicting_definitions_of_one_segment_id_are_rejected():
    with pytest.raises(ValueError, match="defined twice"):
        segment_map([Segment(0, 0.0, 0.5), Segment(0, 0.0, 1.0)])


position_strategy = st.dictionaries(st.sampled_from([s.segment_id for s in SPLIT]), st.integers(0, 50), max_size=3)


@given(st.lists(st.lists(position_strategy, max_size=4), min_size=1, max_size=5))
def test_the_cut_never_goes_backwards_at_any_routing_key(rounds):
    segs = segment_map(SPLIT)
    previous = None
    keys = [i / 60 for i in range(60)]
    for positions in rounds:
        cut, complete = stream_cut(positions, previous, segs)
        assert complete
        assert not missing_ranges(cut, segs)
        if previous is not None:
            for key in keys:
                assert cut_position_at(cut, segs, key) >= cut_position_at(previous, segs, key)
        previous = cut


@given(st.lists(position_strategy, max_size=5), st.randoms())
def test_the_upper_bound_does_not_depend_on_the_order_of_positions(positions, rnd):
    segs = segment_map(SPLIT)
    shuffled = list(positions)
    rnd.shuffle(shuffled)
    assert upper_bound(positions, segs) == upper_bound(shuffled, segs)
