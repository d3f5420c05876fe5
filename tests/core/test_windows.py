"""Window assigners: the formulas, validation at construction, session merging."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_wm.core.windows import (
    GLOBAL_END,
    GLOBAL_START,
    Global,
    Session,
    Sliding,
    Tumbling,
    Window,
    merge_sessions,
    window_from_json,
)


def test_tumbling_assigns_the_one_window_that_contains_the_time():
    assert Tumbling(1000).assign(0) == [Window(0, 1000)]
    assert Tumbling(1000).assign(999) == [Window(0, 1000)]
    assert Tumbling(1000, offset_ms=100).assign(50) == [Window(-900, 100)]


def test_sliding_assigns_size_over_slide_windows_newest_first():
    assert Sliding(600_000, 300_000).assign(0) == [Window(0, 600_000), Window(-300_000, 300_000)]
    assert Sliding(30, 10, offset_ms=5).assign(5) == [Window(5, 35), Window(-5, 25), Window(-15, 15)]


def test_session_opens_a_gap_long_window_at_the_event():
    assert Session(2000).assign(1100) == [Window(1100, 3100)]


def test_global_is_one_window_over_all_time():
    assert Global().assign(5) == [Window(GLOBAL_START, GLOBAL_END)]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Tumbling(0), "size_ms=0"),
        (lambda: Tumbling(-5), "size_ms=-5"),
        (lambda: Tumbling(1000, offset_ms=1000), "offset_ms=1000"),
        (lambda: Sliding(10, 3), "multiple of slide_ms=3"),
        (lambda: Sliding(10, 0), "slide_ms=0"),
        (lambda: Session(0), "gap_ms=0"),
        (lambda: Tumbling(1.5), "size_ms=1.5"),  # type: ignore[arg-type]
    ],
)
def test_bad_window_arguments_are_rejected_naming_the_argument(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_window_json_round_trips_and_rejects_unknown_kinds():
    for window in (Tumbling(5, 1), Sliding(10, 5, 2), Session(7), Global()):
        assert window_from_json(window.to_json()) == window
    with pytest.raises(ValueError, match="kind"):
        window_from_json({"kind": "hopping"})
    with pytest.raises(ValueError, match="size"):
        window_from_json({"kind": "tumbling"})


def test_sessions_merge_when_they_overlap_or_touch_and_stay_apart_across_a_gap():
    assert merge_sessions([Window(0, 10), Window(10, 20)]) == [(Window(0, 20), [0, 1])]
    assert merge_sessions([Window(0, 10), Window(11, 21)]) == [(Window(0, 10), [0]), (Window(11, 21), [1])]
    assert merge_sessions([Window(5, 15), Window(0, 10), Window(30, 40)]) == [
        (Window(0, 15), [1, 0]),
        (Window(30, 40), [2]),
    ]


@given(st.integers(0, 10**6), st.integers(1, 10**4), st.integers(0, 10**4))
def test_tumbling_windows_tile_time(t, size, offset):
    window = Tumbling(size, offset % size).assign(t)[0]
    assert window.contains(t) and window.end - window.start == size and (window.start - offset) % size == 0


@given(st.integers(0, 10**6), st.integers(1, 100), st.integers(1, 8), st.integers(0, 10**3))
def test_sliding_windows_are_exactly_those_containing_the_time(t, slide, per, offset):
    fn = Sliding(slide * per, slide, offset % slide)
    windows = fn.assign(t)
    assert len(set(windows)) == per and all(w.contains(t) for w in windows)
    assert all((w.start - fn.offset_ms) % slide == 0 for w in windows)
    # no other aligned window contains t
    before, after = windows[-1].start - slide, windows[0].start + slide
    assert not Window(before, before + fn.size_ms).contains(t) and not Window(after, after + fn.size_ms).contains(t)


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 20)), max_size=30))
def test_merged_sessions_are_disjoint_and_cover_their_members(pairs):
    windows = [Window(s, s + length) for s, length in pairs]
    groups = merge_sessions(windows)
    assert sorted(i for _, members in groups for i in members) == list(range(len(windows)))
    for (a, _), (b, _) in itertools.pairwise(groups):
        assert a.end < b.start
    for merged, members in groups:
        assert merged.start == min(windows[i].start for i in members)
        assert merged.end == max(windows[i].end for i in members)


@given(
    st.sampled_from([Tumbling(1000), Tumbling(1000, 250), Sliding(1000, 250), Sliding(900, 300, 100), Session(500)]),
    st.integers(-(10**6), 10**6),
    st.integers(-(10**6), 10**6),
)
def test_the_output_watermark_covers_only_complete_windows_and_every_later_window_ends_after_it(window, w, t):
    out = window.output_watermark(w)
    assert out is not None and out <= w
    for assigned in window.assign(t):
        assert assigned.end <= out or assigned.end > w  # no window ends between the output and the input watermark


def test_the_output_watermark_of_fixed_windows_is_the_last_window_end_and_a_global_window_has_none():
    assert Tumbling(1000, 250).output_watermark(2_100) == 1_250
    assert Sliding(1000, 250).output_watermark(2_100) == 2_000
    assert Global().output_watermark(2_100) is None
