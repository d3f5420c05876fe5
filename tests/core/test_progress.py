"""Gap-free progress (NebulaStream): the issue's examples, bad rows, bounds, and arrival-order properties."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.controller import (
    ControllerConfig,
    ControllerState,
    Quarantine,
    StreamStatus,
    run_round,
)
from airflow_provider_wm.core.progress import MAX_PENDING_SEQUENCES, Chunk, OriginState, advance
from airflow_provider_wm.core.segments import segment_map
from tests.factories import THIRDS, mark


def one(seq: int, time_ms: int, *, chunk: int = 1, last: bool = True, at: int = 1) -> Chunk:
    return Chunk(seq, chunk, last, time_ms, {0: seq * 10 + chunk}, at, "note")


def run(arrivals) -> tuple[OriginState, list[int | None], list[tuple[Chunk, str]]]:
    """Feed chunks one round each; returns the state, the committed sequence after each, the bad rows."""
    state, committed, bad = OriginState(), [], []
    for chunk in arrivals:
        step = advance(state, [chunk])
        state = step.state
        committed.append(state.committed_seq)
        bad += step.quarantined
    return state, committed, bad


def test_the_origin_time_follows_the_gap_free_prefix_of_the_issue_example():
    t = {seq: 100 * seq for seq in range(1, 8)}
    state, times = OriginState(), []
    for seq in (1, 2, 4, 6, 3, 7, 5):
        step = advance(state, [one(seq, t[seq])])
        state = step.state
        released = [r.time_ms for r in step.released]
        times.append(max(released) if released else times[-1])
    assert times == [t[1], t[2], t[2], t[2], t[4], t[4], t[7]]


def test_a_chunked_sequence_counts_only_when_its_last_missing_chunk_arrives():
    step = advance(OriginState(), [one(1, 42, chunk=2, last=True)])
    assert step.released == [] and step.state.committed_seq == 0
    step = advance(step.state, [one(1, 2, chunk=1, last=False)])
    assert [r.time_ms for r in step.released] == [42]
    assert step.released[0].position == {0: 12}  # the highest offset of its chunks


def test_bad_rows_are_quarantined_with_their_reason_and_not_applied():
    arrivals = [
        one(1, 10, chunk=1, last=False),
        one(1, 11, chunk=2, last=True),  # seq 1 complete
        one(1, 12, chunk=2, last=True),  # a retried upload of a committed sequence
        one(3, 30, chunk=1, last=True),
        one(3, 31, chunk=1, last=True),  # the same chunk again while it waits
        one(3, 32, chunk=2, last=True),  # a second last chunk
        one(4, 40, chunk=1, last=True),
        one(4, 41, chunk=2, last=False),  # past the last chunk
        one(2 + MAX_PENDING_SEQUENCES, 9, chunk=1),
    ]
    state, committed, bad = run(arrivals)
    assert [(c.seq, c.chunk, reason) for c, reason in bad] == [
        (1, 2, "SEQUENCE_ALREADY_COMMITTED"),
        (3, 1, "DUPLICATE_CHUNK"),
        (3, 2, "DUPLICATE_LAST_CHUNK"),
        (4, 2, "CHUNK_AFTER_LAST"),
        (2 + MAX_PENDING_SEQUENCES, 1, "SEQUENCE_TOO_FAR_AHEAD"),
    ]
    assert committed[-1] == 1 and sorted({c.seq for c in state.pending}) == [3, 4]
    step = advance(state, [one(2, 20)])  # the gap fills: 2, 3 and 4 are released together
    assert [r.seq for r in step.released] == [2, 3, 4] and step.state.pending == ()


SEQUENCES = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 1000)), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(SEQUENCES, st.randoms(use_true_random=False), st.integers(1, 5))
def test_the_same_sequences_in_any_arrival_order_and_rounds_give_the_same_final_time(shape, rnd, rounds):
    """Each sequence i+1 has ``chunks`` chunks with times; shuffle all chunks, cut into rounds: the final
    committed sequence is the full prefix and the largest released time is the same."""
    chunks = []
    for index, (count, base) in enumerate(shape):
        seq = index + 1
        chunks += [Chunk(seq, c, c == count, base + c, {0: c}, 0, "note") for c in range(1, count + 1)]
    rnd.shuffle(chunks)
    chunks = [c._replace(reported_at_ms=i) for i, c in enumerate(chunks)]
    cuts = sorted(rnd.sample(range(1, len(chunks)), min(rounds - 1, len(chunks) - 1)))
    state, released = OriginState(), []
    for part in [chunks[a:b] for a, b in zip([0, *cuts], [*cuts, len(chunks)], strict=True)]:
        step = advance(state, part)
        assert step.quarantined == []
        state, released = step.state, released + list(step.released)
        # at every point, the committed sequence is exactly the longest complete prefix seen so far
        assert [r.seq for r in released] == list(range(1, state.committed_seq + 1))
    assert state.committed_seq == len(shape) and state.pending == ()
    assert max(r.time_ms for r in released) == max(base + count for count, base in shape)


# --- in the controller --------------------------------------------------------------------------------

SEGS = {"s": segment_map(THIRDS)}
CONFIG = ControllerConfig(writer_timeout_ms=10_000, initial_delay_ms=0)


def seq_mark(writer: str, seq: int, time_ms: int, *, chunk: int = 1, last: bool = True, at: int = 1_000):
    """A one-chunk (by default) mark of origin ``o`` at position ``{0: time_ms}``."""
    return replace(
        mark(writer, time_ms, {0: time_ms}, reported_at_ms=at), origin_id="o", seq=seq, chunk=chunk, last_chunk=last
    )


def test_the_controller_applies_a_writers_sequences_only_when_the_gap_before_them_is_filled():
    r1 = run_round(ControllerState(), [seq_mark("w", 1, 100), seq_mark("w", 3, 300)], SEGS, 2_000, CONFIG)
    assert r1.watermarks["s"].lower_ms == 100 and r1.reports["s"].pending_sequences == 1
    r2 = run_round(r1.state, [seq_mark("w", 2, 200, at=3_000)], SEGS, 4_000, CONFIG)
    assert r2.watermarks["s"].lower_ms == 300 and r2.reports["s"].pending_sequences == 0
    assert r2.reports["s"].writers_seen == 1 and r2.reports["s"].marks_accepted == 2
    assert run_round(r2.state, [], SEGS, 4_000, CONFIG).state == r2.state  # a re-run changes nothing


def test_sequence_bad_rows_reach_the_controllers_quarantine():
    marks = [
        seq_mark("w", 0, 100),  # sequence numbers start at 1
        seq_mark("w", 1, 100, chunk=0),
        seq_mark("w", 1, 100),
        seq_mark("w", 1, 101, at=1_500),  # the same sequence again
    ]
    result = run_round(ControllerState(), marks, SEGS, 2_000, CONFIG)
    assert sorted(reason for _, reason in result.quarantined) == [
        Quarantine.DUPLICATE_CHUNK,
        Quarantine.INVALID_SEQUENCE,
        Quarantine.INVALID_SEQUENCE,
    ]
    assert result.reports["s"].status is StreamStatus.EMITTED and result.watermarks["s"].lower_ms == 100


def test_a_stream_whose_only_marks_wait_behind_a_gap_keeps_them_in_its_state():
    result = run_round(ControllerState(), [seq_mark("w", 2, 200)], SEGS, 2_000, CONFIG)
    assert result.reports["s"].status is StreamStatus.NO_ACTIVE_WRITERS
    origin = result.state.streams["s"].origins[("w", "o")]
    assert origin.committed_seq == 0 and [c.seq for c in origin.pending] == [2]
