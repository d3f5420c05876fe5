"""A rollup's pick of each upstream window's live pane on real Spark (``spark_jobs.windowed.rollup``): pane rows
that are too late or carry no window never change a SQL partial, and ranks that do not fit the packed long still
pick the pane ``core.windowing`` picks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from airflow_provider_wm.contracts import WindowedRequest
from airflow_provider_wm.core.windowing import (
    Accumulation,
    Aggregate,
    AggregationSpec,
    AggregationState,
    SqlAggregate,
    StoreWatermark,
    UpstreamPane,
    UpstreamPanes,
    run_on_panes,
)
from airflow_provider_wm.core.windows import Tumbling, Window
from spark_jobs.windowed.job import Job
from tests.spark_jobs.codegen import generated_code
from tests.spark_jobs.test_windowed_aggregate import Pipeline, Rollup, core_rows

PANE_SCHEMA = "window_start long, window_end long, k string, s long, pane string, pane_index long, retraction boolean"


def write_upstream(spark, upstream: Pipeline, version: int, rows: list[tuple[Any, ...]]) -> None:
    """``rows`` (:data:`PANE_SCHEMA`) as the upstream's panes of ``version``, the upstream at that version."""
    frame = spark.createDataFrame(rows, PANE_SCHEMA).withColumn("wm_run", F.lit(version))
    frame.write.mode("append").partitionBy("wm_run").parquet(str(upstream.base / "panes"))
    upstream.version = version


def roll_twice(spark, base: Path, spec: AggregationSpec, second: list[tuple[Any, ...]]) -> tuple[Rollup, dict]:
    """A rollup over two upstream versions: ``[0, 10)``, ``[10, 20)`` and ``[20, 30)`` of ``a`` at version 1
    (the watermark 20 fires and purges ``[0, 20)``), then ``second`` at version 2 (the watermark 40)."""
    upstream = Pipeline(spark, base / "up", spec)
    rollup = Rollup(spark, base / "rollup", spec, upstream)
    first = [(0, 10, "a", 1, "ON_TIME", 0, False), (10, 20, "a", 2, "ON_TIME", 0, False)]
    write_upstream(spark, upstream, 1, [*first, (20, 30, "a", 3, "ON_TIME", 0, False)])
    rollup.roll(20)
    write_upstream(spark, upstream, 2, second)
    return rollup, rollup.roll(40)


def test_too_late_and_windowless_panes_do_not_change_a_null_sensitive_sql_partial(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(20),
        (
            SqlAggregate("panes", "count(1)", "sum({partial})"),  # counts rows, null values or not
            SqlAggregate("values", "collect_list(coalesce(s, -1))", "flatten(collect_list({partial}))",
                         "array_sort({partial})"),
        ),
        ("k",), StoreWatermark("up"),
        upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    accepted = [(30, 40, "a", 4, "ON_TIME", 0, False)]
    too_late = [(0, 10, "a", 100, "LATE", 1, False), (10, 20, "a", 200, "LATE", 1, False)]
    windowless = [(None, 40, "a", 300, "ON_TIME", 0, False)]
    rollup, manifest = roll_twice(spark, tmp_path / "late", spec, [*accepted, *too_late, *windowless])
    clean, clean_manifest = roll_twice(spark, tmp_path / "clean", spec, accepted)
    assert (manifest["totals"]["too_late"], manifest["totals"]["invalid_window"]) == (2, 1)
    assert clean_manifest["totals"]["too_late"] == clean_manifest["totals"]["invalid_window"] == 0
    assert manifest["totals"]["panes"] == clean_manifest["totals"]["panes"]
    assert rollup.panes() == clean.panes()
    # [0, 20) fired with its two panes, [20, 40) with the stored live pane [20, 30) and the new one [30, 40)
    assert [(p[1], p[3], p[4]) for p in rollup.panes()] == [(0, (2, [1, 2]), "ON_TIME"), (20, (2, [3, 4]), "ON_TIME")]


def test_ranks_beyond_a_packed_long_pick_the_live_pane_core_picks(spark, tmp_path):
    upstream_mode = Accumulation.ACCUMULATING_AND_RETRACTING
    spec = AggregationSpec(
        Tumbling(20), (Aggregate("s", "sum", "s"), Aggregate("panes", "count")), ("k",), StoreWatermark("up"),
        early_firing=True, upstream=UpstreamPanes("up", Tumbling(10), upstream_mode),
    )  # fmt: skip
    big = 2**40  # a pane index no packed rank holds
    runs = [
        [(0, 10, "a", 1, "EARLY", big, False), (10, 20, "a", 7, "EARLY", 0, False)],
        # the retraction of the stored live pane and its successor; a pane of a window read for the first time
        [(0, 10, "a", 1, "LATE", big, True), (0, 10, "a", 5, "ON_TIME", big + 1, False)],
    ]
    upstream = Pipeline(spark, tmp_path / "up", spec)
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    state, results = AggregationState(), []
    for version, (rows, source) in enumerate(zip(runs, [5, 25], strict=True), start=1):
        write_upstream(spark, upstream, version, rows)
        panes = [
            UpstreamPane((k,), Window(start, end), {"s": s}, index, retraction, version)
            for start, end, k, s, _, index, retraction in rows
        ]
        result = run_on_panes(spec, state, panes, source)
        state = result.state
        results.append(result)
        manifest = rollup.roll(source)
        assert manifest["totals"]["panes"] == result.pane_counts(), version
    assert rollup.panes() == core_rows(spec, results)
    assert [p[3] for p in rollup.panes() if p[4] == "ON_TIME"] == [(12, 2)]


def test_a_stored_live_pane_whose_rank_does_not_fit_survives_runs_that_read_other_windows(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(20), (Aggregate("s", "sum", "s"), Aggregate("panes", "count")), ("k",), StoreWatermark("up"),
        early_firing=True, upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    runs = [
        [(0, 10, "a", 1, "EARLY", 2**40, False)],
        [(20, 30, "a", 2, "EARLY", 0, False)],  # another target window only: [0, 10)'s live pane is only stored
        [(10, 20, "a", 3, "EARLY", 0, False)],  # [0, 20) again: its sum needs the stored live pane of [0, 10)
    ]
    upstream = Pipeline(spark, tmp_path / "up", spec)
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    state, results = AggregationState(), []
    for version, rows in enumerate(runs, start=1):
        write_upstream(spark, upstream, version, rows)
        panes = [UpstreamPane((k,), Window(start, end), {"s": s}, index, retraction, version)
                 for start, end, k, s, _, index, retraction in rows]  # fmt: skip
        result = run_on_panes(spec, state, panes, 5)
        state = result.state
        results.append(result)
        rollup.roll(5)
    assert rollup.panes() == core_rows(spec, results)
    assert (4, 2) in [p[3] for p in rollup.panes()]  # [0, 20) fired with both upstream windows


def roll_once(spark, base: Path, spec: AggregationSpec, versions: list[list[tuple[Any, ...]]], source: int):
    """The first run of a rollup over the upstream ``versions`` (:data:`PANE_SCHEMA` rows each), at the watermark
    ``source``; the rollup and what ``core.windowing`` rolls up of the same rows (``None`` for a spec with a SQL
    aggregate, which core does not evaluate)."""
    upstream = Pipeline(spark, base / "up", spec)
    rollup = Rollup(spark, base / "rollup", spec, upstream)
    panes = []
    for version, rows in enumerate(versions, start=1):
        write_upstream(spark, upstream, version, rows)
        panes += [
            UpstreamPane((k,), None if start is None else Window(start, end), {"s": s}, index, retraction, version)
            for start, end, k, s, _, index, retraction in rows
        ]
    rollup.roll(source)
    if any(isinstance(a, SqlAggregate) for a in spec.aggregates):
        return rollup, None
    return rollup, run_on_panes(spec, AggregationState(), panes, source)


def rollup_log(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "spark_jobs.windowed.rollup"]


def test_a_first_run_combines_the_closed_target_windows_picks_the_open_one_and_the_next_run_reads_its_live_panes(
    spark, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(30), (Aggregate("s", "sum", "s"), Aggregate("panes", "count")), ("k",), StoreWatermark("up"),
        early_firing=True, upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    first = [
        (start, start + 10, k, s, "ON_TIME", 0, False)
        for k, s in (("a", 1), ("b", 100))
        for start in (0, 10, 20, 30)  # [0, 30) closes at 35, [30, 60) stays open
    ]
    first.append((None, 10, "a", 7, "ON_TIME", 0, False))  # no window: quarantined, counted with the combined
    second = [(40, 50, "a", 2, "ON_TIME", 0, False), (30, 40, "b", 300, "LATE", 1, False)]
    rollup, expected = roll_once(spark, tmp_path, spec, [first], 35)
    assert rollup_log(caplog) == [
        "run-1: 9 pane rows rolled up per target window, each its upstream window's live pane"
    ]
    write_upstream(spark, rollup.upstream, 2, second)
    rollup.roll(65)
    panes = [UpstreamPane((k,), Window(start, end), {"s": s}, index, retraction, 2)
             for start, end, k, s, _, index, retraction in second]  # fmt: skip
    results = [expected, run_on_panes(spec, expected.state, panes, 65)]
    assert rollup.panes() == core_rows(spec, results)
    # [30, 60) on time: of a, the live pane [30, 40) the first run stored and [40, 50); of b, [30, 40) replaced
    on_time = [(p[0], p[3]) for p in rollup.panes() if p[1] == 30 and p[4] == "ON_TIME"]
    assert on_time == [(("a",), (3, 2)), (("b",), (300, 1))]
    assert (
        rollup_log(caplog)[1] == "run-2: 2 pane rows rolled up through the pick of each upstream window's live pane"
    )  # the live panes stored


@pytest.mark.parametrize("upstream_mode", [Accumulation.ACCUMULATING, Accumulation.DISCARDING])
def test_a_first_run_that_reads_an_upstream_window_twice_rolls_up_again_through_the_pick(
    spark, tmp_path, caplog, upstream_mode
):
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(30), (Aggregate("s", "sum", "s"), Aggregate("panes", "count")), ("k",), StoreWatermark("up"),
        early_firing=True, upstream=UpstreamPanes("up", Tumbling(10), upstream_mode),
    )  # fmt: skip
    versions = [
        [(0, 10, "a", 1, "EARLY", 0, False), (10, 20, "a", 2, "ON_TIME", 0, False)],
        [(0, 10, "a", 5, "ON_TIME", 1, False)],  # [0, 10) again: the pick decides which pane counts
    ]
    rollup, expected = roll_once(spark, tmp_path, spec, versions, 40)
    assert rollup.panes() == core_rows(spec, [expected])
    # accumulating: the ON_TIME pane replaces the EARLY one; discarding: each pane holds new rows
    counted = {Accumulation.ACCUMULATING: (7, 2), Accumulation.DISCARDING: (8, 3)}[upstream_mode]
    assert [p[3] for p in rollup.panes()] == [counted]
    assert rollup_log(caplog) == [
        "run-1: 1 pane rows repeat an upstream window: rolling up again through the pick",
        "run-1: 3 pane rows rolled up through the pick of each upstream window's live pane",
    ]


@pytest.mark.parametrize(
    ("second", "log"),
    [
        (
            (70, 71),
            "pane rows rolled up per target window, each its upstream window's live pane",
        ),  # slot 70 of 100: the same bit of the second long as slot 6 of the first
        (
            (6, 7),
            "pane rows rolled up through the pick of each upstream window's live pane",
        ),  # slot 6 again: read twice
    ],
)
def test_slots_beyond_64_tell_two_upstream_windows_from_one_read_twice(spark, tmp_path, caplog, second, log):
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(100), (Aggregate("s", "sum", "s"),), ("k",), StoreWatermark("up"), early_firing=True,
        upstream=UpstreamPanes("up", Tumbling(1), Accumulation.ACCUMULATING),
    )  # fmt: skip
    versions = [[(6, 7, "a", 1, "EARLY", 0, False), (50, 51, "a", 2, "ON_TIME", 0, False)],
                [(*second, "a", 4, "ON_TIME", 1, False)]]  # fmt: skip
    rollup, expected = roll_once(spark, tmp_path, spec, versions, 100)
    assert rollup.panes() == core_rows(spec, [expected])
    assert rollup_log(caplog)[-1] == f"run-1: 3 {log}"


def test_a_run_after_one_that_kept_no_live_panes_rolls_up_per_target_window_too(spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(30), (Aggregate("s", "sum", "s"), Aggregate("panes", "count")), ("k",), StoreWatermark("up"),
        upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    first = [(start, start + 10, "a", start + 1, "ON_TIME", 0, False) for start in (0, 10, 20)]
    rollup, expected = roll_once(spark, tmp_path, spec, [first], 30)  # closes [0, 30): no live pane kept
    second = [(start, start + 10, "a", start + 1, "ON_TIME", 0, False) for start in (30, 40, 50)]
    second.append((0, 10, "a", 100, "LATE", 1, False))  # [0, 30) is purged: too late
    write_upstream(spark, rollup.upstream, 2, second)
    manifest = rollup.roll(60)
    panes = [UpstreamPane((k,), Window(start, end), {"s": s}, index, retraction, 2)
             for start, end, k, s, _, index, retraction in second]  # fmt: skip
    result = run_on_panes(spec, expected.state, panes, 60)
    assert rollup.panes() == core_rows(spec, [expected, result])
    assert [p[3] for p in rollup.panes()] == [(33, 3), (123, 3)]
    assert manifest["totals"]["too_late"] == 1
    assert rollup_log(caplog) == [
        "run-1: 3 pane rows rolled up per target window, each its upstream window's live pane",
        "run-2: 4 pane rows rolled up per target window, each its upstream window's live pane",
    ]


HUGE = 2**62
"""Two values of it overflow a bigint sum (Spark's ANSI mode fails the query); one does not."""


def test_a_combined_run_never_sums_values_of_too_late_or_windowless_panes(spark, tmp_path, caplog):
    """The pick reads only an accepted live pane's values; the combined roll-up must leave the others out too, or
    their sum overflows where core's does not."""
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(30), (Aggregate("s", "sum", "s"),), ("k",), StoreWatermark("up"),
        upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    windowless = [(None, end, "a", HUGE, "ON_TIME", 0, False) for end in (10, 20)]
    rollup, expected = roll_once(spark, tmp_path, spec, [[*windowless, (0, 10, "a", 5, "ON_TIME", 0, False)]], 30)
    too_late = [(start, start + 10, "a", HUGE, "LATE", 1, False) for start in (0, 10)]  # [0, 30) closed
    second = [*too_late, (30, 40, "a", 7, "ON_TIME", 0, False)]
    write_upstream(spark, rollup.upstream, 2, second)
    manifest = rollup.roll(60)
    panes = [UpstreamPane((k,), Window(start, end), {"s": s}, index, retraction, 2)
             for start, end, k, s, _, index, retraction in second]  # fmt: skip
    assert rollup.panes() == core_rows(spec, [expected, run_on_panes(spec, expected.state, panes, 60)])
    assert [p[3] for p in rollup.panes()] == [(5,), (7,)]
    assert manifest["totals"]["too_late"] == 2
    assert all("rolled up per target window" in line for line in rollup_log(caplog))


@pytest.mark.parametrize(
    ("aggregate", "first_log"),
    [
        (Aggregate("s", "sum", "s"), "run-1: 1 pane rows repeat an upstream window: rolling up again through the pick"),
        (
            SqlAggregate("s", "sum(s)", "sum({partial})"),  # a sum of longs: two HUGE overflow
            "run-1: the combined roll-up overflowed: rolling up again through the pick",
        ),
    ],
    ids=["exact-sum", "sql-sum"],
)
def test_a_combined_run_whose_window_read_twice_sums_past_a_long_rolls_up_again_through_the_pick(
    spark, tmp_path, caplog, aggregate, first_log
):
    """The combined roll-up also sums the other panes of an upstream window read twice: a built-in sum of
    integers is exact and the run starts over for the window read twice; a SQL sum overflows and starts over."""
    caplog.set_level(logging.INFO, logger="spark_jobs.windowed.rollup")
    spec = AggregationSpec(
        Tumbling(30), (aggregate,), ("k",), StoreWatermark("up"), early_firing=True,
        upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    versions = [[(0, 10, "a", HUGE, "EARLY", 0, False)], [(0, 10, "a", HUGE, "ON_TIME", 1, False)]]
    rollup, expected = roll_once(spark, tmp_path, spec, versions, 40)
    if isinstance(aggregate, Aggregate):  # core evaluates the built-ins
        assert rollup.panes() == core_rows(spec, [expected])
    assert [p[3] for p in rollup.panes()] == [(HUGE,)]
    assert rollup_log(caplog) == [
        first_log,
        "run-1: 2 pane rows rolled up through the pick of each upstream window's live pane",
    ]


@pytest.mark.parametrize("live_stored", [False, True], ids=["combined", "picked"])
def test_rollup_runs_that_differ_only_in_their_cut_offs_generate_the_same_code(spark, tmp_path, live_stored):
    """The horizons of a rollup run are generated columns, as the windowed runs' are
    (``test_runs_that_differ_only_in_their_cut_offs_generate_the_same_code``): the stages that classify the pane
    rows and pick or combine them compile once for every run of the pipeline."""
    spec = AggregationSpec(
        Tumbling(20), (Aggregate("s", "sum", "s"),), ("k",), StoreWatermark("up"), allowed_lateness_ms=5,
        upstream=UpstreamPanes("up", Tumbling(10), Accumulation.ACCUMULATING),
    )  # fmt: skip
    upstream = Pipeline(spark, tmp_path / "up", spec)
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    write_upstream(spark, upstream, 1, [(0, 10, "a", 1, "ON_TIME", 0, False), (20, 30, "a", 3, "EARLY", 0, False)])
    if live_stored:
        rollup.roll(20)  # [20, 40) stays open: its live pane [20, 30) is stored
        write_upstream(spark, upstream, 2, [(30, 40, "a", 4, "ON_TIME", 0, False)])

    def plans(previous_watermark: int, watermark: int) -> list[str]:
        request = {
            **rollup.request(upstream.version, watermark, rollup.version + 1),
            "previous_watermark_ms": previous_watermark,
            "run_id": f"run-{watermark}",  # each run has its own
        }
        job = Job(spark, WindowedRequest.from_json(request))
        classified = job.classify_panes(job.read_panes())
        slots = None if live_stored else job.combine_slots()
        planned = job.live_panes(classified, job.read_live(), watermark - spec.allowed_lateness_ms, slots=slots)
        assert planned is not None
        frame, live = planned
        assert (live is None) == live_stored
        return [generated_code(f) for f in (frame, *([] if live is None else [live.frame]))]

    first, second = plans(1_000_000_020, 1_000_000_030), plans(1_000_000_021, 1_000_000_031)
    assert first == second
    cut_offs = ("1000000015", "1000000025")  # W_prev - L, W - L
    assert not [value for value in cut_offs for plan in first if value in plan]
