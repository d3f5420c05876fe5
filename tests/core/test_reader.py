"""The reader's time window (core.reader): the issue's example, edge cases, and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.reader import LoggedWatermark, Relation, TimeWindow, compare, time_window
from airflow_provider_wm.core.segments import Segment, cut_position_at, segment_map

E1 = 1 << 32
E2 = 2 << 32

# Two segments of one epoch (the issue's example).
TWO = segment_map([Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0)])
LOG = [
    LoggedWatermark({0: 0, 1: 0}, 10, 19),
    LoggedWatermark({0: 2, 1: 0}, 20, 29),
    LoggedWatermark({0: 2, 1: 2}, 30, 39),
]

# Segment 1 splits into two successors of epoch 1.
SPLIT = segment_map(
    [Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0), Segment(E1 | 2, 0.5, 0.75), Segment(E1 | 3, 0.75, 1.0)]
)


@pytest.mark.parametrize(
    ("position", "expected"),
    [
        ({0: 1, 1: 0}, (10, 29)),
        ({0: 2, 1: 1}, (20, 39)),
        ({0: 3, 1: 1}, (20, None)),
        ({0: 3, 1: 3}, (30, None)),
    ],
)
def test_the_issues_example(position, expected):
    assert time_window(position, LOG, TWO) == TimeWindow(*expected)


def test_plain_tuples_work_as_watermarks():
    assert time_window({0: 1, 1: 0}, [tuple(w) for w in LOG], TWO) == (10, 29)


@pytest.mark.parametrize(
    ("position", "cut", "relation"),
    [
        ({0: 2, 1: 0}, {0: 2, 1: 0}, Relation.PASSED),  # exactly at the cut counts as passed
        ({0: 3, 1: 0}, {0: 2, 1: 0}, Relation.PASSED),
        ({0: 1, 1: 0}, {0: 2, 1: 0}, Relation.BEHIND),
        ({0: 1, 1: 1}, {0: 2, 1: 2}, Relation.BEHIND),
        ({0: 3, 1: 1}, {0: 2, 1: 2}, Relation.MIXED),
        ({0: -1, 1: 0}, {0: 500, 1: 0}, Relation.PASSED),  # -1 = end of segment, beyond any offset
        ({0: 500, 1: 0}, {0: -1, 1: 0}, Relation.BEHIND),
        ({0: -1, 1: -1}, {0: -1, 1: -1}, Relation.PASSED),
    ],
)
def test_compare_one_epoch(position, cut, relation):
    assert compare(position, cut, TWO) is relation


@pytest.mark.parametrize(
    ("position", "cut", "relation"),
    [
        # the position is still on the predecessor, the cut on its successors: behind, whatever the offsets
        ({0: 5, 1: 900}, {0: 5, E1 | 2: 0, E1 | 3: 0}, Relation.BEHIND),
        ({0: 5, 1: -1}, {0: 5, E1 | 2: 0, E1 | 3: 0}, Relation.BEHIND),
        ({0: 9, 1: -1}, {0: 5, E1 | 2: 0, E1 | 3: 0}, Relation.MIXED),
        # the position is on the successors, the cut on the predecessor: ahead, whatever the offsets
        ({0: 5, E1 | 2: 0, E1 | 3: 0}, {0: 5, 1: -1}, Relation.PASSED),
        ({0: 4, E1 | 2: 0, E1 | 3: 0}, {0: 5, 1: 7}, Relation.MIXED),
        # one successor passed, the other behind
        ({0: 5, E1 | 2: 3, E1 | 3: 1}, {0: 5, E1 | 2: 2, E1 | 3: 2}, Relation.MIXED),
        ({0: 5, E1 | 2: 2, E1 | 3: 2}, {0: 5, E1 | 2: 2, E1 | 3: 2}, Relation.PASSED),
    ],
)
def test_compare_across_a_split(position, cut, relation):
    assert compare(position, cut, SPLIT) is relation


def test_a_split_in_the_log():
    log = [
        LoggedWatermark({0: 5, 1: 100}, 10, 15),
        LoggedWatermark({0: 8, E1 | 2: 0, E1 | 3: 0}, 20, 25),
        LoggedWatermark({0: 9, E1 | 2: 4, E1 | 3: 4}, 30, 35),
    ]
    assert time_window({0: 6, 1: 120}, log, SPLIT) == (10, 25)  # on the predecessor: behind both later cuts
    assert time_window({0: 8, 1: -1}, log, SPLIT) == (10, 25)  # end of the predecessor is not the successors
    assert time_window({0: 8, E1 | 2: 1, E1 | 3: 0}, log, SPLIT) == (20, 35)
    assert time_window({0: 10, E1 | 2: 1, E1 | 3: 0}, log, SPLIT) == (20, None)  # mixed with the last one


def test_uncovered_key_ranges_are_unknown_so_never_passed_nor_behind():
    # the position says nothing about [.5, 1): it cannot have passed the cut there, nor be behind it
    assert compare({0: 9}, {0: 2, 1: 2}, TWO) is Relation.MIXED
    assert compare({0: 1}, {0: 2, 1: 2}, TWO) is Relation.MIXED
    # nor can a cut that says nothing about a range the position reads be passed
    assert compare({0: 9, 1: 9}, {0: 2}, TWO) is Relation.MIXED
    assert time_window({0: 9}, LOG, TWO) == (None, None)
    # key ranges no segment covers hold no data and do not count
    gappy = segment_map([Segment(0, 0.0, 0.25), Segment(1, 0.5, 1.0)])
    assert compare({0: 3, 1: 3}, {0: 2, 1: 2}, gappy) is Relation.PASSED


def test_an_empty_log_gives_no_bounds():
    assert time_window({0: 1, 1: 1}, [], TWO) == TimeWindow(None, None)


def test_before_the_first_watermark_and_after_the_last():
    assert time_window({0: 0, 1: 0}, LOG[1:], TWO) == (None, 29)
    assert time_window({0: -1, 1: -1}, LOG, TWO) == (30, None)


def test_only_mixed_watermarks_after_the_lower_one_give_no_upper():
    log = [
        LoggedWatermark({0: 0, 1: 0}, 10, 19),
        LoggedWatermark({0: 5, 1: 1}, 20, 29),
        LoggedWatermark({0: 6, 1: 2}, 30, 39),
    ]
    assert time_window({0: 1, 1: 4}, log, TWO) == (10, None)


def test_the_first_entirely_behind_watermark_after_mixed_ones_gives_the_upper():
    log = [
        LoggedWatermark({0: 0, 1: 0}, 10, 19),
        LoggedWatermark({0: 5, 1: 1}, 20, 29),
        LoggedWatermark({0: 6, 1: 6}, 30, 39),
    ]
    assert time_window({0: 1, 1: 4}, log, TWO) == (10, 39)


def test_older_watermarks_are_not_read_once_the_lower_one_is_found():
    log = [("not a watermark",), LoggedWatermark({0: 0, 1: 0}, 10, 19)]
    assert time_window({0: 1, 1: 1}, log, TWO) == (10, None)


@pytest.mark.parametrize(
    ("position", "message"),
    [
        ({0: 1, 7: 0}, "position has unknown segment 7"),
        ({0: 1, "1": 0}, r"position has unknown segment '1' \(segment ids are ints, not strings\)"),
        ({0: -2, 1: 0}, r"position\[0\]=-2: an offset must be >= -1"),
        ({0: 1.5, 1: 0}, r"position\[0\]=1.5: an offset must be an int"),
        ({0: True, 1: 0}, r"position\[0\]=True: an offset must be an int"),
        ({}, "position={} must be a non-empty mapping"),
    ],
)
def test_a_bad_position_is_named(position, message):
    with pytest.raises(ValueError, match=message):
        time_window(position, LOG, TWO)
    with pytest.raises(ValueError, match=message):
        compare(position, {0: 0, 1: 0}, TWO)


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ([LoggedWatermark({0: 0, 9: 0}, 10, 19)], r"watermarks\[0\].cut has unknown segment 9"),
        ([*LOG, LoggedWatermark({0: -3, 1: 0}, 40, 49)], r"watermarks\[3\].cut\[0\]=-3"),
        ([({0: 0, 1: 0}, 10)], r"watermarks\[0\]=.* must be \(cut, lower_ms, upper_ms\)"),
        ([([0, 1], 10, 19)], r"watermarks\[0\].cut=\[0, 1\] must be a mapping"),
        ([({0: 0, 1: 0}, 10, "19")], r"watermarks\[0\].upper_ms='19' must be an int"),
    ],
)
def test_a_bad_watermark_is_named(log, message):
    with pytest.raises(ValueError, match=message):
        time_window({0: 1, 1: 1}, log, TWO)


def test_compare_names_a_bad_cut():
    with pytest.raises(ValueError, match="cut has unknown segment 5"):
        compare({0: 1, 1: 1}, {5: 0}, TWO)


# ----------------------------------------------------------------------------------------------- properties
#
# A stream with a merge and a split: left [0, 2/3) is segments 0, 1 in epoch 0 and merges into E1|0 in
# epoch 1; right [2/3, 1) is segment 2 and splits into E2|1, E2|2 in epoch 2. A cut picks, for each side,
# a generation and offsets.

PROP = segment_map(
    [
        Segment(0, 0.0, 1 / 3),
        Segment(1, 1 / 3, 2 / 3),
        Segment(2, 2 / 3, 1.0),
        Segment(E1, 0.0, 2 / 3),
        Segment(E2 | 1, 2 / 3, 5 / 6),
        Segment(E2 | 2, 5 / 6, 1.0),
    ]
)
GENERATIONS = (((0, 1), (E1,)), ((2,), (E2 | 1, E2 | 2)))  # per side: the segments of generation 0 and 1
KEYS = (1 / 6, 1 / 2, 3 / 4, 11 / 12)  # one key inside every elementary key range

offsets = st.integers(min_value=0, max_value=6)
position_offsets = st.one_of(offsets, st.just(-1))


@st.composite
def cuts(draw, offset=offsets):
    cut: dict[int, int] = {}
    for side in GENERATIONS:
        for segment_id in side[draw(st.integers(0, 1))]:
            cut[segment_id] = draw(offset)
    return cut


def advance(cut: dict[int, int], draw) -> dict[int, int]:
    """The next cut of a monotone log: per side keep or raise the offsets, or move to the next generation."""
    nxt: dict[int, int] = {}
    for side in GENERATIONS:
        current = side[0] if side[0][0] in cut else side[1]
        if current is side[0] and draw(st.booleans()):
            for segment_id in side[1]:
                nxt[segment_id] = draw(offsets)
        else:
            for segment_id in current:
                nxt[segment_id] = cut[segment_id] + draw(st.integers(0, 3))
    return nxt


@st.composite
def logs(draw):
    """A well-formed log: cuts never go backwards, lower times strictly increase, upper >= lower."""
    result: list[LoggedWatermark] = []
    cut = draw(cuts())
    lower = draw(st.integers(0, 100))
    for _ in range(draw(st.integers(0, 6))):
        result.append(LoggedWatermark(cut, lower, lower + draw(st.integers(0, 30))))
        cut = advance(cut, draw)
        lower += draw(st.integers(1, 20))
    return result


def _at(cut, key):
    segment_id, offset = cut_position_at(cut, PROP, key)
    return segment_id, math.inf if offset == -1 else offset


def really_passed(position, cut) -> bool:
    return all(_at(position, k) >= _at(cut, k) for k in KEYS)


def really_behind(position, cut) -> bool:
    return all(_at(position, k) <= _at(cut, k) for k in KEYS) and any(_at(position, k) < _at(cut, k) for k in KEYS)


@settings(max_examples=300, deadline=None)
@given(logs(), cuts(position_offsets))
def test_lower_never_exceeds_upper(log, position):
    window = time_window(position, log, PROP)
    if window.lower_ms is not None and window.upper_ms is not None:
        assert window.lower_ms <= window.upper_ms


@settings(max_examples=300, deadline=None)
@given(logs(), cuts(position_offsets), st.data())
def test_advancing_a_position_never_lowers_lower(log, position, data):
    further = {
        s: -1 if o == -1 else data.draw(st.one_of(st.integers(o, o + 5), st.just(-1))) for s, o in position.items()
    }
    before, after = time_window(position, log, PROP).lower_ms, time_window(further, log, PROP).lower_ms
    assert before is None or (after is not None and after >= before)


@settings(max_examples=300, deadline=None)
@given(logs(), cuts(position_offsets))
def test_the_bounds_come_from_watermarks_the_position_really_passed_or_is_really_behind(log, position):
    window = time_window(position, log, PROP)
    passed = [i for i, w in enumerate(log) if really_passed(position, w.cut)]
    if window.lower_ms is None:
        assert not passed
    else:
        (index,) = [i for i, w in enumerate(log) if w.lower_ms == window.lower_ms]
        assert really_passed(position, log[index].cut)
        assert index == max(passed)
    later = range(max(passed, default=-1) + 1, len(log))
    behind = [i for i in later if really_behind(position, log[i].cut)]
    assert window.upper_ms == (log[behind[0]].upper_ms if behind else None)
