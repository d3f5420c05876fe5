"""The Spark job against the core reference: worked examples, bad rows, scale events, random rounds."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_wm.contracts import ControllerRequest
from airflow_provider_wm.core.controller import (
    ControllerConfig,
    ControllerState,
    RoundResult,
    StreamStatus,
    WriterMark,
    in_round,
    run_round,
)
from airflow_provider_wm.core.segments import Segment, segment_map
from airflow_provider_wm.core.times import MAX_TIME_MS
from spark_jobs.common import empty_frame
from spark_jobs.controller import run
from spark_jobs.controller.emission import SINGLE_TASK_MARKS, stream_results, writer_rounds
from spark_jobs.controller.marks import (
    aggregate_marks,
    is_known,
    names_unknown_segment,
    read_marks,
    read_segments,
    round_marks,
    with_key,
)
from spark_jobs.controller.schemas import PENDING_STATE_SCHEMA, STREAMS_STATE_SCHEMA, WRITERS_STATE_SCHEMA
from tests.factories import (
    E1,
    ROUND_1,
    ROUND_2,
    SPLIT,
    THIRDS,
    mark,
    read_state,
    run_spark_round,
    watermark_from_manifest,
    write_marks,
    write_segments,
)
from tests.spark_jobs.codegen import generated_code

SEGMENTS = {"s": SPLIT, "t": THIRDS}


def run_both(spark, tmp_path: Path, batches, config: ControllerConfig, segments=SEGMENTS, later_segments=None):
    """Run the same rounds through core and through the job; yields (core result, manifest, job state). A round
    without sequenced marks must account for each mark it read in exactly one count of its totals.
    ``later_segments``: the segments from the second round on (default: ``segments``)."""
    core_state, job_state, processed_until, processed_marks = ControllerState(), None, None, 0
    for i, batch in enumerate(batches):
        now = 2_000 * (i + 1)
        if i == 1 and later_segments is not None:
            segments = later_segments
        core_segments = {name: segment_map(segs) for name, segs in segments.items()}
        core = run_round(core_state, batch, core_segments, now, config)
        sequenced = any(m.is_sequenced and in_round(m.reported_at_ms, processed_until, now) for m in batch)
        manifest, job_state = run_spark_round(
            spark,
            tmp_path,
            batch,
            segments,
            now_ms=now,
            state_in=job_state,
            processed_until_ms=processed_until,
            processed_marks=processed_marks,
            writer_timeout_ms=config.writer_timeout_ms,
            initial_delay_ms=config.initial_delay_ms,
            round_name=f"round{i}",
        )
        if not sequenced:  # a released sequence counts once, a waiting chunk in none: see ControllerTotals
            assert counted(manifest["totals"]) == manifest["totals"]["marks_read"], manifest["totals"]
        yield core, manifest, read_state(job_state, now, manifest["processed_marks"])
        core_state, processed_until, processed_marks = core.state, now, manifest["processed_marks"]


def counted(totals: dict) -> int:
    """The marks of a round that its totals account for: each in exactly one count."""
    return (
        totals["marks_accepted"]
        + totals["shutdowns_accepted"]
        + sum(totals["rejected"].values())
        + sum(totals["quarantined"].values())
    )


def assert_same(core: RoundResult, manifest: dict, job_state: ControllerState, spark, round_out: str) -> None:
    assert job_state == core.state
    assert set(manifest["streams"]) == set(core.reports)
    for stream, report in core.reports.items():
        entry = manifest["streams"][stream]
        assert watermark_from_manifest(entry["watermark"]) == report.watermark, stream
        assert entry["status"] == report.status
        assert (
            entry["writers_seen"],
            entry["active_writers"],
            entry["marks_accepted"],
            entry["shutdowns_accepted"],
        ) == (report.writers_seen, report.active_writers, report.marks_accepted, report.shutdowns_accepted), stream
        assert entry["rejected"] == dict(report.rejected)
        assert entry["quarantined"] == dict(report.quarantined)
        assert tuple(entry["waiting_for"]) == report.waiting_for
        assert entry["pending_sequences"] == report.pending_sequences, stream
        if report.watermark is not None:
            assert entry["cut_complete"] == report.cut_complete
    totals = manifest["totals"]
    assert totals["deferred_marks"] == core.deferred_marks
    assert totals["late_marks"] == core.late_marks
    assert totals["marks_read"] == core.marks_read
    assert totals["marks_accepted"] == sum(r.marks_accepted for r in core.reports.values())
    assert totals["shutdowns_accepted"] == sum(r.shutdowns_accepted for r in core.reports.values())
    expected_bad = Counter(
        (m.stream, m.key, m.writer_id, m.time_ms, str(reason)) for m, reason in [*core.quarantined, *core.rejected]
    )
    if manifest["quarantine_path"] is None:
        assert not expected_bad
    else:
        rows = spark.read.parquet(manifest["quarantine_path"]).collect()
        got = Counter((r["stream"], r["wm_key"], r["writer_id"], r["time_ms"], r["reason"]) for r in rows)
        assert got == expected_bad


def test_worked_example_matches_the_reference_over_two_rounds(spark, tmp_path):
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    results = list(run_both(spark, tmp_path, [ROUND_1, ROUND_2], config, {"s": THIRDS}))
    (_, m1, _), (_, m2, _) = results
    assert m1["streams"]["s"]["watermark"] == {
        "stream": "s", "wm_key": None, "lower_ms": 100, "upper_ms": 102,
        "stream_cut": {"0": 200, "1": 200, "2": 200}, "computed_at_ms": 2_000,
    }  # fmt: skip
    assert m2["streams"]["s"]["watermark"]["lower_ms"] == 200
    assert m2["streams"]["s"]["watermark"]["stream_cut"] == {"0": 200, "1": 300, "2": 300}
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")


def test_bad_rows_are_quarantined_counted_and_do_not_crash_the_job(spark, tmp_path):
    bad = [
        mark("w", 1, {0: 1}, stream="../etc"),
        mark("w", 1, {0: 1}, stream=None),
        mark("w", 1, {0: 1}, wm_key="a:b"),
        mark("", 1, {0: 1}),
        mark("w", 1, {0: 1}, kind="flush"),
        mark("w", 1, {0: 1}, reported_at_ms=None),
        mark("w", -5, {0: 1}),
        mark("w", None, {0: 1}),
        mark("w", 10**15, {0: 1}),
        mark("w", 2**63 - 1, {0: 1}),
        mark("w", 1, None),
        mark("w", 1, {0: -1}),
        mark("w", 1, {0: None}),
        mark("w", 1, {99: 1}),
        mark("ghost", None, None, kind="shutdown"),
        mark("ok", 5, {0: 5}),
    ]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    ((core, manifest, state),) = run_both(spark, tmp_path, [bad], config, {"s": THIRDS})
    assert_same(core, manifest, state, spark, "")
    assert manifest["totals"]["quarantined"] == {
        "INVALID_REPORTED_AT": 1, "INVALID_STREAM": 2, "INVALID_WM_KEY": 1, "INVALID_TIME_VALUE": 4,
        "INVALID_WRITER": 1,
        "MISSING_POSITION": 1, "NEGATIVE_OFFSET": 2, "UNKNOWN_KIND": 1, "UNKNOWN_SEGMENT": 1,
    }  # fmt: skip
    assert manifest["totals"]["rejected"] == {"UNKNOWN_WRITER": 1}
    assert manifest["streams"]["s"]["watermark"]["lower_ms"] == 5


def test_backwards_time_and_positions_are_rejected_like_the_reference(spark, tmp_path):
    later = [
        mark("w1", 99, {0: 500}, reported_at_ms=3_000),
        mark("w2", 150, {1: 50}, reported_at_ms=3_000),
        mark("w3", 300, {2: 900}, reported_at_ms=3_000),
    ]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    results = list(run_both(spark, tmp_path, [ROUND_1, later], config, {"s": THIRDS}))
    core, manifest, state = results[1]
    assert_same(core, manifest, state, spark, "")
    assert manifest["streams"]["s"]["rejected"] == {"INVALID_POSITION": 1, "INVALID_TIME": 1}


def test_a_scale_event_moves_the_cut_to_the_successor_segments(spark, tmp_path):
    before = [mark("w1", 100, {0: 10, 1: 20}), mark("w2", 100, {1: 30, 2: 40})]
    after = [
        mark("w1", 200, {0: 15, E1 | 3: 5}, reported_at_ms=3_000),
        mark("w2", 200, {E1 | 4: 6, 2: 50}, reported_at_ms=3_000),
    ]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    results = list(run_both(spark, tmp_path, [before, after], config, {"s": SPLIT}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert results[1][1]["streams"]["s"]["watermark"]["stream_cut"] == {
        "0": 15, "2": 50, str(E1 | 3): 5, str(E1 | 4): 6,
    }  # fmt: skip


def test_a_segment_gone_from_the_segments_keeps_its_offset_in_the_cut_which_is_then_not_complete(spark, tmp_path):
    """The stored cut names segment 1, which the segments of the next round no longer hold (removed, or excluded
    as invalid): the cut keeps its offset instead of moving back over its key range (core crashed; the job
    dropped it)."""
    first = [mark("w1", 100, {0: 10, 1: 10, 2: 10}, reported_at_ms=1_000)]
    second = [mark("w1", 200, {0: 20}, reported_at_ms=3_000)]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    without_1 = {"s": [THIRDS[0], THIRDS[2]]}
    results = list(run_both(spark, tmp_path, [first, second], config, {"s": THIRDS}, later_segments=without_1))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    stream = results[1][1]["streams"]["s"]
    assert stream["watermark"]["stream_cut"] == {"0": 20, "1": 10, "2": 10} and stream["cut_complete"] is False


def test_a_plain_and_a_sequenced_mark_quarantined_for_the_same_reason_both_count(spark, tmp_path):
    plain = mark("c", -1, {0: 3}, reported_at_ms=2_053)
    numbered = replace(mark("c", -1, {1: 20}, reported_at_ms=3_542), origin_id="o", seq=1, chunk=1, last_chunk=True)
    config = ControllerConfig(writer_timeout_ms=4_501, initial_delay_ms=1_050)
    results = list(run_both(spark, tmp_path, [[], [plain, numbered]], config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert results[1][1]["streams"]["s"]["quarantined"] == {"INVALID_TIME_VALUE": 2}


@pytest.mark.parametrize("single_task", [True, False], ids=["one_task", "shuffled"])
def test_keyed_marks_give_one_watermark_per_key_like_the_reference(spark, tmp_path, monkeypatch, single_task):
    monkeypatch.setattr("spark_jobs.controller.job.SINGLE_TASK_MARKS", SINGLE_TASK_MARKS if single_task else 0)
    """Each key is a watermark of its own; ``eu`` lagging holds back neither ``us`` nor the unkeyed one. The same
    with the per-writer and per-watermark aggregations in one task and shuffled (a round above
    ``SINGLE_TASK_MARKS``)."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    first = [
        mark("w1", 100, {0: 10}, wm_key="eu"),
        mark("w1", 300, {1: 30}, wm_key="us"),
        mark("w2", 320, {2: 9}, wm_key="us"),
        mark("w2", 50, {2: 5}),
        mark("w3", 60, {1: 5}, wm_key=""),  # empty: the unkeyed watermark
    ]
    later = [mark("w1", 400, {1: 40}, wm_key="us", reported_at_ms=3_000), mark("w2", 330, {2: 10}, wm_key="us")]
    later[1] = replace(later[1], reported_at_ms=3_000)
    results = list(run_both(spark, tmp_path, [first, later], config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    (_, m1, _), (_, m2, _) = results
    assert {label: (e["wm_key"], e["watermark"]["lower_ms"]) for label, e in m1["streams"].items()} == {
        "s": (None, 50), "s:eu": ("eu", 100), "s:us": ("us", 300),
    }  # fmt: skip
    assert m2["streams"]["s:us"]["watermark"]["lower_ms"] == 330
    assert m2["streams"]["s:eu"]["status"] == StreamStatus.WAITING_FOR_WRITERS


@pytest.mark.parametrize("single_task", [True, False], ids=["one_task", "shuffled"])
def test_writer_timeout_and_shutdown_match_the_reference(spark, tmp_path, monkeypatch, single_task):
    monkeypatch.setattr("spark_jobs.controller.job.SINGLE_TASK_MARKS", SINGLE_TASK_MARKS if single_task else 0)
    config = ControllerConfig(writer_timeout_ms=3_000, initial_delay_ms=0)
    later = [
        mark("w1", 300, {0: 300}, reported_at_ms=3_000),
        mark("w2", 301, {1: 300}, reported_at_ms=3_000),
        mark("w3", None, None, kind="shutdown", reported_at_ms=3_100),
    ]
    results = list(run_both(spark, tmp_path, [ROUND_1, later, []], config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert results[2][1]["streams"]["s"]["status"] == StreamStatus.EMITTED
    assert results[2][1]["streams"]["s"]["active_writers"] == 2


def test_every_mark_of_a_round_lands_in_exactly_one_count_of_the_totals(spark, tmp_path):
    """Notes, commits, shutdowns of known writers (one superseded by a later note of its writer), a shutdown of a
    writer never seen, rejected and quarantined rows, over two rounds: the totals add up to the marks read."""
    first = [
        mark("w1", 100, {0: 1}),
        mark("w2", 100, {1: 1}, kind="commit"),
        mark("w3", 100, {2: 1}, wm_key="eu"),
        mark("w1", 5, {0: -1}),  # NEGATIVE_OFFSET
        mark("w1", 150, {0: 2}, reported_at_ms=3_500),  # deferred to round 2
    ]
    second = [
        mark("w2", None, None, kind="shutdown", reported_at_ms=3_000),  # known: stops w2
        mark("w3", None, None, kind="shutdown", reported_at_ms=3_000, wm_key="eu"),  # known in its key
        mark("w1", None, None, kind="shutdown", reported_at_ms=2_500),  # accepted, then revived by a later note
        mark("ghost", None, None, kind="shutdown", reported_at_ms=3_000),  # UNKNOWN_WRITER
        mark("w2", 50, {1: 1}, kind="commit", reported_at_ms=2_100),  # INVALID_TIME
        mark("w9", 100, {0: 1}, stream="../etc", reported_at_ms=3_000),  # INVALID_STREAM: the totals only
        *first,  # marks of round 1 again: not this round's, except the deferred one
    ]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    results = list(run_both(spark, tmp_path, [first, second], config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    picked = ["marks_read", "marks_accepted", "shutdowns_accepted", "rejected", "quarantined", "deferred_marks"]
    (_, one, _), (_, two, _) = results
    assert {k: one["totals"][k] for k in picked} == {
        "marks_read": 4, "marks_accepted": 3, "shutdowns_accepted": 0, "rejected": {},
        "quarantined": {"NEGATIVE_OFFSET": 1}, "deferred_marks": 1,
    }  # fmt: skip
    assert {k: two["totals"][k] for k in picked} == {
        "marks_read": 7, "marks_accepted": 1, "shutdowns_accepted": 3,
        "rejected": {"INVALID_TIME": 1, "UNKNOWN_WRITER": 1}, "quarantined": {"INVALID_STREAM": 1},
        "deferred_marks": 0,
    }  # fmt: skip
    assert {label: e["shutdowns_accepted"] for label, e in two["streams"].items()} == {"s": 2, "s:eu": 1}
    for manifest in (one, two):
        assert counted(manifest["totals"]) == manifest["totals"]["marks_read"]


# ------------------------------------------------------------------------------------ differential

all_segments = [s.segment_id for s in SPLIT]
random_mark = st.builds(
    WriterMark,
    stream=st.sampled_from(["s", "s", "t", "../bad"]),
    writer_id=st.sampled_from(["a", "b", "c", "d"]),
    time_ms=st.one_of(st.integers(0, 40), st.sampled_from([-1, MAX_TIME_MS + 1, 2**63 - 1])),
    position=st.dictionaries(st.sampled_from(all_segments), st.integers(-1, 40), max_size=3),
    kind=st.sampled_from(["note", "note", "note", "commit", "shutdown"]),
    reported_at_ms=st.integers(0, 8_000),
    wm_key=st.sampled_from([None, None, None, "eu", "", "b:ad"]),
)
#: a third of the marks sequenced, mostly whole one-chunk sequences (the dense path), sometimes not
random_progress = st.one_of(
    st.just({}),
    st.just({}),
    st.fixed_dictionaries(
        {
            "origin_id": st.sampled_from([None, "o"]),
            "seq": st.sampled_from([1, 2, 3, 4, 5, 6, 0]),
            "chunk": st.sampled_from([1, 1, 1, 2]),
            "last_chunk": st.sampled_from([True, True, True, False]),
        }
    ),
)
random_mark = st.tuples(random_mark, random_progress).map(lambda pair: replace(pair[0], **pair[1]))


@pytest.mark.slow
@settings(
    max_examples=int(__import__("os").environ.get("WM_DIFFERENTIAL_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(st.lists(random_mark, max_size=14), min_size=2, max_size=3),
    st.integers(0, 5_000),
    st.integers(0, 3_000),
)
def test_random_rounds_give_the_same_results_in_spark_and_in_core(spark, tmp_path_factory, batches, timeout, delay):
    config = ControllerConfig(writer_timeout_ms=timeout, initial_delay_ms=delay)
    workdir = tmp_path_factory.mktemp("differential")
    for core, manifest, state in run_both(spark, workdir, batches, config):
        assert_same(core, manifest, state, spark, "")


def test_marks_that_land_after_their_round_are_counted_as_late(spark, tmp_path):
    on_time = mark("w", 10, {0: 1}, reported_at_ms=1_500)
    landed_late = mark("w", 11, {0: 2}, reported_at_ms=1_900)  # appended after round 1 ran
    later = mark("w", 30, {0: 3}, reported_at_ms=3_000)
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    results = list(run_both(spark, tmp_path, [[on_time], [on_time, landed_late, later]], config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["totals"]["late_marks"] for _, m, _ in results] == [0, 1]
    assert results[1][1]["processed_marks"] == 3


# ---------------------------------------------------------------------------------- gap-free progress


def sequenced(
    writer: str, seq: int, time_ms: int, at: int, *, chunk: int = 1, last: bool = True, origin="o", wm_key=None
):
    base = mark(writer, time_ms, {0: time_ms, 1: seq}, reported_at_ms=at, wm_key=wm_key)
    return replace(base, origin_id=origin, seq=seq, chunk=chunk, last_chunk=last)


def test_sequences_arriving_out_of_order_over_rounds_match_the_reference(spark, tmp_path):
    """The issue's example order 1 2 4 6 3 7 5, spread over three rounds, plus a chunked sequence and bad rows."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [sequenced("w", 1, 100, 1_000), sequenced("w", 2, 200, 1_100), sequenced("w", 4, 400, 1_200)],
        [
            sequenced("w", 6, 600, 3_000),
            sequenced("w", 3, 300, 3_100),
            sequenced("w", 3, 301, 3_200),  # the same chunk again: quarantined
            sequenced("w", 0, 1, 3_300),  # sequence numbers start at 1
            sequenced("v", 1, 150, 3_000, chunk=2, last=True),  # chunk 2 of 2 first
            mark("u", 250, {2: 1}, reported_at_ms=3_000),  # an unsequenced writer beside them
        ],
        [
            sequenced("w", 7, 700, 5_000),
            sequenced("w", 5, 500, 5_100),
            sequenced("w", 2, 222, 5_200),  # already committed: quarantined
            sequenced("v", 1, 120, 5_000, chunk=1, last=False),
        ],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["pending_sequences"] for _, m, _ in results] == [1, 2, 0]
    assert results[1][1]["streams"]["s"]["quarantined"] == {"DUPLICATE_CHUNK": 1, "INVALID_SEQUENCE": 1}
    assert results[1][1]["streams"]["s"]["watermark"]["lower_ms"] == 250  # w at 400 (1..4), u at 250
    # v's sequence completes in round 3 at 150, behind the watermark; u did not advance: both hold it back
    assert results[2][1]["streams"]["s"]["waiting_for"] == ["u", "v"]
    assert results[2][2].streams["s"].writers["w"].time_ms == 700


@pytest.mark.parametrize("run_length", [63, 127])
def test_a_run_of_sequences_that_fills_all_but_the_top_bit_of_a_word_is_released_as_in_the_reference(
    spark, tmp_path, run_length
):
    """Committed 0, sequences 1..63 set bits 0-62 of the first 64-bit word (and 1..127 those of the second after a
    full first): the prefix ends at the last of them, without an overflow of the word's arithmetic; then 64 and
    the rest arrive in the next round."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [sequenced("w", seq, 10 * seq, 1_000) for seq in range(1, run_length + 1)],
        [sequenced("w", seq, 10 * seq, 3_000) for seq in range(run_length + 1, run_length + 3)],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["watermark"]["lower_ms"] for _, m, _ in results] == [
        10 * run_length,
        10 * (run_length + 2),
    ]


def test_a_writer_with_waiting_sequences_and_no_marks_in_a_round_is_not_seen_in_it(spark, tmp_path):
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    other = [mark("u", 100 * r, {2: r}, reported_at_ms=2_000 * r - 500) for r in (1, 2, 3)]
    rounds = [
        [sequenced("w", 1, 100, 1_000), sequenced("w", 3, 300, 1_100), other[0]],
        [sequenced("x", 1, 150, 3_000), other[1]],  # w's sequence 3 waits; w reports nothing
        [sequenced("w", 2, 200, 5_000), other[2]],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["writers_seen"] for _, m, _ in results] == [2, 2, 2]
    assert results[2][2].streams["s"].writers["w"].time_ms == 300


def test_a_round_without_sequenced_marks_carries_the_progress_state_over_file_for_file(spark, tmp_path):
    """Round 2 has plain marks only: it copies round 1's ``origins`` and ``pending`` as they are (the same files,
    not a rewrite by Spark) and reports the waiting sequences recorded beside them; round 3 fills the gap from
    the copy like the reference."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [sequenced("w", 1, 100, 1_000), sequenced("w", 3, 300, 1_100), mark("u", 100, {2: 1}, reported_at_ms=1_500)],
        [mark("u", 200, {2: 2}, reported_at_ms=3_500)],
        [sequenced("w", 2, 200, 5_000), mark("u", 300, {2: 3}, reported_at_ms=5_500)],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["pending_sequences"] for _, m, _ in results] == [1, 1, 0]

    def files(part: Path) -> dict[str, bytes]:
        return {str(f.relative_to(part)): f.read_bytes() for f in sorted(part.rglob("*")) if f.is_file()}

    for part in ("origins", "pending"):
        before, after = files(tmp_path / "round0-state" / part), files(tmp_path / "round1-state" / part)
        assert any(name.endswith(".parquet") for name in before) and after == before, part
    assert results[2][2].streams["s"].writers["w"].time_ms == 300


def test_a_carried_pending_part_whose_document_has_no_counts_is_counted_once_and_recorded(spark, tmp_path):
    """A state written before the counts were recorded beside ``pending``: the round that carries the part over
    counts its waiting sequences with Spark and records them beside what the document held (its schema and row
    count), not in place of it."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [sequenced("w", 1, 100, 1_000), sequenced("w", 3, 300, 1_100), mark("u", 100, {2: 1}, reported_at_ms=1_500)],
        [mark("u", 200, {2: 2}, reported_at_ms=3_500)],
    ]
    written = tmp_path / "round0-state" / "pending" / "_wm_schema.json"
    results = []
    for result in run_both(spark, tmp_path, rounds, config, {"s": THIRDS}):
        results.append(result)
        if len(results) == 1:  # as a state written before the counts were recorded, by a writer that counted rows
            older = {**json.loads(written.read_text()), "rows": 1}
            del older["sequences"]
            written.write_text(json.dumps(older))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["pending_sequences"] for _, m, _ in results] == [1, 1]
    recorded = json.loads((tmp_path / "round1-state" / "pending" / "_wm_schema.json").read_text())
    assert recorded == {**older, "sequences": {"s": 1}}


def test_stored_chunks_are_released_kept_or_joined_by_new_waiting_ones_like_the_reference(spark, tmp_path):
    """Every origin dense (no exact path): a stored chunk is released when its gap fills (w), kept while its gap
    stays open, with the round's new chunks waiting beside it (v), and kept for an origin without marks in the
    round (x)."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [
            sequenced("w", 1, 100, 1_000),
            sequenced("w", 3, 300, 1_100),
            sequenced("v", 1, 100, 1_000),
            sequenced("v", 4, 400, 1_100),
            sequenced("x", 2, 200, 1_000),
        ],
        [sequenced("w", 2, 200, 3_000), sequenced("v", 5, 500, 3_000), sequenced("v", 6, 600, 3_100)],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["pending_sequences"] for _, m, _ in results] == [3, 4]
    assert results[1][2].streams["s"].writers["w"].time_ms == 300


def test_a_round_that_releases_every_waiting_chunk_writes_an_empty_pending_state_the_next_round_reads(spark, tmp_path):
    """Round 2 fills both origins' gaps, so no chunk waits after it: its pending state is empty (written without
    reading round 1's), carries the state's schema, and round 3 continues from it like the reference."""
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    rounds = [
        [sequenced("w", 1, 100, 1_000), sequenced("w", 3, 300, 1_100), sequenced("v", 2, 200, 1_000)],
        [sequenced("w", 2, 200, 3_000), sequenced("v", 1, 100, 3_000)],
        [sequenced("w", 5, 500, 5_000), sequenced("v", 3, 300, 5_000)],
    ]
    results = list(run_both(spark, tmp_path, rounds, config, {"s": THIRDS}))
    for core, manifest, state in results:
        assert_same(core, manifest, state, spark, "")
    assert [m["streams"]["s"]["pending_sequences"] for _, m, _ in results] == [2, 0, 1]
    pending = pyarrow.parquet.read_table(tmp_path / "round1-state" / "pending")
    assert pending.num_rows == 0
    assert pending.schema.names == PENDING_STATE_SCHEMA.fieldNames()
    assert results[2][2].streams["s"].writers["v"].time_ms == 300


def tiling(first_id: int, count: int) -> list[Segment]:
    return [Segment(first_id + i, i / count, (i + 1) / count) for i in range(count)]


def test_segment_lookups_over_streams_of_many_segments_match_the_reference(spark, tmp_path, capsys):
    """More than ten segments per stream (Spark looks them up in a hash set, not a list): a segment of the
    other stream, or of none, is unknown, for plain and for sequenced marks."""
    segments = {"s": tiling(0, 40), "t": tiling(100, 40)}
    rounds = [
        [
            mark("w1", 100, {5: 10, 39: 3}),
            mark("w2", 100, {105: 1}),  # a segment of t
            mark("w3", 100, {100: 2, 139: 4}, stream="t"),
            mark("w4", 100, {7: 1}, stream="t"),  # a segment of s
            mark("w5", 100, {1_000: 1}, stream="t"),  # of no stream
            replace(sequenced("w6", 1, 100, 1_000), position={0: 1, 20: 2}),
            replace(sequenced("w7", 1, 100, 1_000), position={0: 1, 120: 2}),  # one of them is t's
            replace(sequenced("w8", 1, 100, 1_000), stream="t", position={139: 1}),
        ],
    ]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    ((core, manifest, state),) = run_both(spark, tmp_path, rounds, config, segments)
    assert_same(core, manifest, state, spark, "")
    assert manifest["totals"]["quarantined"] == {"UNKNOWN_SEGMENT": 4}
    by_id = {name: segment_map(segs) for name, segs in segments.items()}
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS stream", "id AS segment_id")  # not folded away
    rows.select(is_known(by_id)).explain()
    assert "INSET" in capsys.readouterr().out.upper()


LOOKUP_SEGMENTS = {
    "s": {i: Segment(i, 0.0, 1.0) for i in [*range(11), 2**32 + 5]},  # more than ten: a hash set
    "t": {7: Segment(7, 0.0, 1.0)},  # a short IN list
    "empty": {},
}


@pytest.mark.parametrize(
    ("stream", "segment_id", "position", "known", "names_unknown"),
    [
        ("s", 0, {0: 1}, True, False),
        ("s", 2**32 + 5, {2**32 + 5: 1}, True, False),
        ("s", 99, {0: 1, 99: 2}, False, True),
        ("t", 7, {7: 1}, True, False),
        ("t", 0, {0: 1}, False, True),  # a segment of s
        ("empty", 0, {0: 1}, False, True),  # a stream without valid segments
        ("nowhere", 0, {0: 1}, False, True),
        (None, 0, {0: 1}, False, True),
        ("s", None, {}, False, False),  # an empty position names no segment
        ("s", None, None, False, None),  # no position: quarantined before its segments are looked at
    ],
)
def test_a_segment_is_known_only_among_the_valid_segments_of_its_own_stream(
    spark, stream, segment_id, position, known, names_unknown
):
    row = spark.createDataFrame(
        [(stream, segment_id, position)], "stream string, segment_id bigint, position map<bigint, bigint>"
    ).select(is_known(LOOKUP_SEGMENTS).alias("known"), names_unknown_segment(LOOKUP_SEGMENTS).alias("unknown"))
    assert tuple(row.first()) == (known, names_unknown)  # one row: small


def test_without_any_valid_segment_no_segment_is_known(spark):
    rows = spark.createDataFrame(
        [("s", 0, {0: 1}), ("s", None, {})], "stream string, segment_id bigint, position map<bigint, bigint>"
    )
    got = [tuple(r) for r in rows.select(is_known({}), names_unknown_segment({})).collect()]  # two rows: small
    assert got == [(False, True), (False, False)]


def test_segments_of_streams_with_names_that_need_quoting_leave_the_job_running(spark, tmp_path):
    """Such streams are left out of the lookup: their marks are quarantined for the name, as in core."""
    segments = {"s": THIRDS, "o'k": THIRDS, "a b": THIRDS}
    rounds = [[mark("w", 100, {0: 5}), mark("v", 100, {0: 5}, stream="o'k"), mark("u", 100, {1: 5}, stream="a b")]]
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    ((core, manifest, state),) = run_both(spark, tmp_path, rounds, config, segments)
    assert_same(core, manifest, state, spark, "")
    assert manifest["totals"]["quarantined"] == {"INVALID_STREAM": 2}


def shuffled_rounds(draw_random, writers: int, sequences: int, rounds: int, chunked: bool):
    """Each writer's sequences 1..n (chunked: 1-2 chunks), times increasing, shuffled over ``rounds``; each
    writer reports for the unkeyed watermark or for key ``eu``, and the last one for both."""
    rows = []
    for w in range(writers):
        keys = [None, "eu"] if w == writers - 1 else [draw_random.choice([None, "eu"])]
        for key in keys:
            for seq in range(1, sequences + 1):
                count = draw_random.randint(1, 2) if chunked else 1
                rows += [(f"w{w}", key, seq, 100 * seq + w + c, c, c == count) for c in range(1, count + 1)]
    draw_random.shuffle(rows)
    if draw_random.random() < 0.5 and rows:  # a retried upload of something already sent
        rows.append(draw_random.choice(rows))
    size = -(-len(rows) // rounds)
    batches = []
    for r in range(rounds):
        part = rows[r * size : (r + 1) * size]
        at = 2_000 * r + 1_000
        batches.append(
            [
                sequenced(w, seq, t, at + i, chunk=c, last=last, wm_key=key)
                for i, (w, key, seq, t, c, last) in enumerate(part)
            ]
        )
    return batches


@pytest.mark.slow
@settings(
    max_examples=int(__import__("os").environ.get("WM_DIFFERENTIAL_EXAMPLES", "8")) // 3 or 1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.randoms(use_true_random=False), st.integers(1, 3), st.integers(1, 6), st.integers(2, 3), st.booleans())
def test_shuffled_sequences_give_the_same_results_in_spark_and_in_core(
    spark, tmp_path_factory, rnd, writers, sequences, rounds, chunked
):
    config = ControllerConfig(writer_timeout_ms=600_000, initial_delay_ms=0)
    batches = shuffled_rounds(rnd, writers, sequences, rounds, chunked)
    workdir = tmp_path_factory.mktemp("sequences")
    for core, manifest, state in run_both(spark, workdir, batches, config, {"s": THIRDS}):
        assert_same(core, manifest, state, spark, "")


# ------------------------------------------------------------------------------------ input types


def controller_request(tmp_path: Path, marks_path: str, segments_path: str) -> ControllerRequest:
    return ControllerRequest(
        controller="test",
        run_id="r",
        marks_path=marks_path,
        segments_path=segments_path,
        state_in=None,
        state_out=str(tmp_path / "state"),
        round_out=str(tmp_path / "out"),
        now_ms=2_000,
        processed_until_ms=None,
        processed_marks=0,
        writer_timeout_ms=600_000,
        initial_delay_ms=0,
    )


def test_the_writer_and_watermark_stages_of_rounds_at_another_now_generate_the_same_code(spark, tmp_path):
    """Spark compiles a stage's code again for every new literal number in it: past the scan of the round's marks
    (whose report-time filter keeps its literals, for Parquet), the stages read the round's ``now`` as a column
    (``with_now``), so the next round reuses the code compiled for the last one."""
    segments, _ = read_segments(spark, write_segments({"s": THIRDS}, tmp_path / "segments"))
    marks_path = write_marks(ROUND_1, tmp_path / "marks")
    request = controller_request(tmp_path, marks_path, str(tmp_path / "segments"))
    groups = aggregate_marks(round_marks(read_marks(spark, marks_path), request, None)).localCheckpoint()
    writers0 = with_key(empty_frame(spark, WRITERS_STATE_SCHEMA))
    streams0 = with_key(empty_frame(spark, STREAMS_STATE_SCHEMA))

    def plans(now_ms: int) -> list[str]:
        rounds = writer_rounds(groups, writers0, streams0, segments, now_ms, writer_timeout_ms=600_000)
        results = stream_results(spark, streams0, rounds.localCheckpoint(), [], [], now_ms, initial_delay_ms=0)
        return [generated_code(rounds), generated_code(results)]

    first, second = plans(1_000_000_000), plans(1_000_000_001)
    assert first == second
    assert not [plan for plan in first if "1000000000" in plan]


def test_a_parquet_timestamp_time_ms_is_read_as_epoch_milliseconds_not_seconds(spark, tmp_path):
    pandas = pytest.importorskip("pandas")
    marks = pandas.DataFrame(
        {
            "stream": ["s"],
            "writer_id": ["w"],
            "time_ms": [pandas.Timestamp("2026-01-01T01:00:00.250Z")],
            "position": [[(0, 7)]],
            "kind": ["note"],
            "reported_at_ms": [1_000],
        }
    )
    marks_path = tmp_path / "marks"
    marks_path.mkdir()
    marks.to_parquet(
        marks_path / "part-0.parquet",
        schema=pyarrow.schema(
            [
                ("stream", pyarrow.string()),
                ("writer_id", pyarrow.string()),
                ("time_ms", pyarrow.timestamp("ms", tz="UTC")),
                ("position", pyarrow.map_(pyarrow.int64(), pyarrow.int64())),
                ("kind", pyarrow.string()),
                ("reported_at_ms", pyarrow.int64()),
            ]
        ),
    )
    segments = write_segments({"s": [Segment(0, 0.0, 1.0)]}, tmp_path / "segments")
    manifest = run(spark, controller_request(tmp_path, str(marks_path), segments))
    watermark = manifest.streams["s"].watermark
    assert watermark is not None and watermark.lower_ms == 1_767_229_200_250


def test_a_time_ms_of_the_wrong_type_fails_naming_the_column_its_type_and_the_expected_one(spark, tmp_path):
    marks_path = tmp_path / "marks"
    marks_path.mkdir()
    pyarrow.parquet.write_table(
        pyarrow.table(
            {
                "stream": ["s"],
                "writer_id": ["w"],
                "time_ms": ["2026-01-01"],
                "position": pyarrow.array([[(0, 7)]], pyarrow.map_(pyarrow.int64(), pyarrow.int64())),
                "kind": ["note"],
                "reported_at_ms": [1_000],
            }
        ),
        marks_path / "part-0.parquet",
    )
    segments = write_segments({"s": [Segment(0, 0.0, 1.0)]}, tmp_path / "segments")
    with pytest.raises(ValueError, match=r"column 'time_ms' has type string, expected bigint"):
        run(spark, controller_request(tmp_path, str(marks_path), segments))
    assert not (tmp_path / "state").exists()


def test_invalid_duplicated_and_overlapping_segments_are_left_out_and_counted(spark, tmp_path):
    """Segments of one epoch split the key space: two that overlap are conflicting, and neither is used (a mark on
    either is then quarantined as an unknown segment) instead of the higher id silently replacing the lower."""
    rows = [
        ("s", 0, 0.0, 0.5), ("s", 1, 0.5, 1.0), ("s", 2**32 | 2, 0.0, 1.0),  # a valid split, then a merge
        ("s", 5, 0.7, 0.2),  # a bad range
        ("t", 0, 0.0, 0.6), ("t", 1, 0.5, 1.0), ("t", 2**32, 0.0, 1.0),  # 0 and 1 overlap in epoch 0
        ("u", 3, 0.0, 1.0), ("u", 3, 0.0, 0.5),  # one id, two ranges
    ]  # fmt: skip
    spark.createDataFrame(rows, "stream string, segment_id long, key_start double, key_end double").write.parquet(
        str(tmp_path / "segments")
    )
    by_stream, invalid = read_segments(spark, str(tmp_path / "segments"))
    assert {stream: sorted(known) for stream, known in by_stream.items()} == {
        "s": [0, 1, 2**32 | 2],
        "t": [2**32],
        "u": [],
    }
    assert invalid == 5


def test_empty_marks_and_segments_folders_are_a_round_with_no_marks(spark, tmp_path):
    (tmp_path / "marks").mkdir()
    (tmp_path / "segments").mkdir()
    manifest = run(spark, controller_request(tmp_path, str(tmp_path / "marks"), str(tmp_path / "segments")))
    assert manifest.processed_marks == 0
    assert manifest.streams == {}
