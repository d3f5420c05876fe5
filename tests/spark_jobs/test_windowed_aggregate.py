"""The windowed-aggregate job on real Spark: the worked examples, bad data, retries, and differential tests
against ``core.windowing`` over random runs for every window kind and accumulation mode, and for rollups of
every upstream accumulation mode (window propagation); the random inputs include event times outside the
valid range (``core.times``), which no window kind may overflow on, and NaN and infinite values, which both
quarantine (``INVALID_VALUE``)."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from airflow_provider_wm.contracts import WindowedRequest
from airflow_provider_wm.core.times import MAX_TIME_MS, is_valid_time_ms
from airflow_provider_wm.core.windowing import (
    ROW_COLUMN,
    Accumulation,
    Aggregate,
    AggregationSpec,
    AggregationState,
    BoundedOutOfOrderness,
    Event,
    LateData,
    MergedWatermark,
    SqlAggregate,
    StoreWatermark,
    UpstreamPane,
    UpstreamPanes,
    input_column,
    merge_inputs,
    read_by_run,
    run,
    run_on_panes,
)
from airflow_provider_wm.core.windows import Global, Session, Sliding, Tumbling, Window
from spark_jobs.common import (
    SCHEMA_DOCUMENT,
    physical_plan,
    plan_operators,
    read_dataset_and_schema,
    write_schema_document,
)
from spark_jobs.windowed import run_request as run_windowed
from spark_jobs.windowed.base import EXACT_SUMS, RUN_PARTITION
from spark_jobs.windowed.job import Job
from tests.spark_jobs.codegen import generated_code

EVENT_SCHEMA = "k string, t long, v int, arrival long"
DOUBLE_SCHEMA = "k string, t long, v double, arrival long"
NAN, INF = float("nan"), float("inf")


class Pipeline:
    """Runs the job run after run on the shared session, carrying state and cut-offs like the operator."""

    def __init__(
        self, spark, tmp_path: Path, spec: AggregationSpec, event_time: str = "t", schema: str = EVENT_SCHEMA
    ) -> None:
        self.spark, self.base, self.spec, self.event_time, self.schema = spark, tmp_path, spec, event_time, schema
        self.version, self.previous, self.state, self.arrival = 0, {}, None, None
        self.fired_hours = False
        self.driver_output_rows: int | None = None  # None: the request's default

    def write(self, rows: list[tuple[Any, ...]], arrival: int, schema: str | None = None) -> None:
        self.spark.createDataFrame([(*r, arrival) for r in rows], schema or self.schema).write.mode("append").parquet(
            str(self.base / "events")
        )

    def request(self, arrival_until: int, source: int | None, version: int) -> dict[str, Any]:
        run_dir = self.base / "runs" / str(version)
        return {
            "pipeline": "p",
            "run_id": f"run-{version}",
            "version": version,
            "spec": self.spec.to_json(),
            "events": str(self.base / "events"),
            "event_time": self.event_time,
            "arrival_column": "arrival",
            "arrival_from_ms": self.arrival,
            "arrival_until_ms": arrival_until,
            "previous_watermark_ms": self.previous.get("watermark_ms"),
            "previous_max_event_time_ms": self.previous.get("max_event_time_ms"),
            "source_watermark_ms": source,
            "state_in": self.state,
            "state_out": str(self.base / "state" / f"v{version}"),
            "output": str(self.base / "panes"),
            "late_output": str(self.base / "late"),
            "round_out": str(run_dir),
            "fired_hours": self.fired_hours,
            **({} if self.driver_output_rows is None else {"driver_output_rows": self.driver_output_rows}),
        }

    def run(self, rows, source: int | None = None, arrival: int | None = None, commit: bool = True):
        arrival = (self.arrival or 0) + 1 if arrival is None else arrival
        if rows:
            self.write(rows, arrival)
        version = self.version + 1
        manifest = run_windowed(self.spark, self.request(arrival, source, version))
        if commit:
            self.version, self.arrival, self.state = version, arrival, manifest["state_path"]
            self.previous = {
                "watermark_ms": manifest["watermark_ms"],
                "max_event_time_ms": manifest["max_event_time_ms"],
            }
        return manifest

    def panes(self, version: int | None = None) -> list[tuple[Any, ...]]:
        frame = self.spark.read.parquet(str(self.base / "panes"))
        if version is not None:  # wm_run is a string when another job turned partition type inference off
            frame = frame.where(f"CAST(wm_run AS INT) = {version}")
        names = [a.name for a in self.spec.aggregates]
        rows = [
            (
                tuple(r[k] for k in self.spec.keys),
                r["window_start"],
                r["window_end"],
                tuple(r[n] for n in names),
                r["pane"],
                r["pane_index"],
                r["retraction"],
                r["watermark_ms"],
            )
            for r in frame.collect()
        ]
        return sorted(rows, key=repr)

    def late(self) -> list[tuple[Any, ...]]:
        path = self.base / "late"
        if not path.exists():
            return []
        rows = self.spark.read.parquet(str(path)).collect()
        return sorted(((r["k"], r[self.event_time], r["reason"], int(r["wm_run"])) for r in rows), key=repr)


def core_rows(spec: AggregationSpec, results) -> list[tuple[Any, ...]]:
    rows = [
        (p.key, p.window.start, p.window.end, p.values, p.timing.value, p.index, p.retraction, p.watermark_ms)
        for r in results
        for p in r.panes
    ]
    return sorted(rows, key=repr)


SUM_V = (Aggregate("v", "sum", "v"),)


def test_worked_example_tumbling_retracting_then_purged_then_too_late(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(1000),
        SUM_V,
        keys=("k",),
        watermark=StoreWatermark("s"),
        allowed_lateness_ms=1000,
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING,
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    m1 = pipeline.run([("a", 100, 2), ("a", 200, 3)], source=1200)
    m2 = pipeline.run([("a", 900, 4)], source=3000)
    m3 = pipeline.run([("a", 120, 5)], source=3000)
    assert pipeline.panes() == [
        (("a",), 0, 1000, (5,), "ON_TIME", 0, False, 1200),
        (("a",), 0, 1000, (5,), "ON_TIME", 0, True, 3000),
        (("a",), 0, 1000, (9,), "LATE", 1, False, 3000),
    ]
    assert m1["totals"]["panes"]["ON_TIME"] == 1 and m2["totals"]["panes"] == {
        "EARLY": 0, "ON_TIME": 0, "LATE": 1, "RETRACTION": 1,
    }  # fmt: skip
    assert m2["totals"]["windows_purged"] == 1 and m2["totals"]["windows_open"] == 0
    assert m3["totals"]["too_late"] == 1 and m3["totals"]["events_aggregated"] == 0
    assert pipeline.late() == [("a", 120, "TOO_LATE", 3)]


def test_the_manifest_reports_the_hours_of_the_windows_each_run_fired_when_asked(spark, tmp_path):
    minute, hour = 60_000, 3_600_000
    spec = AggregationSpec(
        Tumbling(30 * minute), SUM_V, keys=("k",), watermark=StoreWatermark("s"), allowed_lateness_ms=3 * hour
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.fired_hours = True
    rows = [("a", 10 * minute, 1), ("b", 15 * minute, 1), ("a", 70 * minute, 2), ("a", 130 * minute, 3)]
    assert pipeline.run(rows, source=3 * hour)["fired_hours_ms"] == [0, hour, 2 * hour]
    assert pipeline.run([("a", 20 * minute, 4)], source=3 * hour)["fired_hours_ms"] == [0]  # a late pane
    assert pipeline.run([], source=3 * hour)["fired_hours_ms"] == []
    pipeline.fired_hours = False
    assert pipeline.run([("a", 25 * minute, 5)], source=3 * hour)["fired_hours_ms"] is None


def test_worked_example_session_merge_retracts_both_sessions(spark, tmp_path):
    spec = AggregationSpec(
        Session(2000),
        SUM_V,
        keys=("k",),
        watermark=StoreWatermark("s"),
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING,
        early_firing=True,
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1100, 2), ("a", 2000, 3)], source=0)
    pipeline.run([("a", 5000, 4)], source=0)
    pipeline.run([("a", 3500, 3)], source=0)
    assert [p[1:7] for p in pipeline.panes(3)] == [
        (1100, 4000, (5,), "EARLY", 0, True),
        (1100, 7000, (12,), "EARLY", 0, False),
        (5000, 7000, (4,), "EARLY", 0, True),
    ]


@pytest.mark.parametrize(
    ("late_data", "late", "session_a"),
    [
        (LateData.WINDOW_END, [("a", 22_000, "WINDOW_CLOSED", 2)], (25_000, 48_000, (3, 11))),
        (LateData.EVENT_TIME, [("a", 22_000, "TOO_LATE", 2), ("a", 25_000, "TOO_LATE", 2)], (30_000, 48_000, (2, 3))),
    ],
)
def test_worked_example_a_session_event_is_judged_by_its_own_window_before_merging_as_core_does(
    spark, tmp_path, late_data, late, session_a
):
    """``core.windowing.LateData``'s session example: gap 10 s, ``H = 33 s``, stored open session ``[30 s, 48 s)``.
    Under ``"window_end"`` 25 s (own window open) extends it and 22 s (own window closed) is dropped although it
    would merge into it; under ``"event_time"`` both are too late."""
    spec = AggregationSpec(
        Session(10_000), (Aggregate("n", "count"), *SUM_V), ("k",), BoundedOutOfOrderness(5_000), late_data=late_data
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    state, results = AggregationState(), []
    for rows in ([("a", 30_000, 1), ("a", 38_000, 2)], [("a", 22_000, 4), ("a", 25_000, 8)], [("b", 100_000, 16)]):
        result = run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows])
        state = result.state
        results.append(result)
        manifest = pipeline.run(rows)
        assert manifest["totals"]["too_late"] == len(result.late) and manifest["watermark_ms"] == result.watermark_ms
    assert pipeline.late() == late
    assert pipeline.panes() == core_rows(spec, results) == [(("a",), *session_a, "ON_TIME", 0, False, 95_000)]


def test_a_session_run_counts_each_reason_of_one_key_apart_and_a_too_late_time_raises_the_highest_seen(spark, tmp_path):
    """One key with a too-late row, an invalid time and an unusable arrival in one run over a stored state: each is
    counted under its own reason, and the too-late time is still an event time seen (as in core)."""
    spec = AggregationSpec(Session(5), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec)
    first = run(spec, AggregationState(), [Event(10, ("a",), {})], 100)
    pipeline.run([("a", 10, 1)], source=100)
    unusable_arrivals = [("a", t, 1, None) for t in (60, 61, 62)]  # counts that differ: no reason stands in for another
    spark.createDataFrame(unusable_arrivals, EVENT_SCHEMA).write.mode("append").parquet(str(tmp_path / "events"))
    second = run(spec, first.state, [Event(t, ("a",), {}) for t in (50, 52, None)], 200)
    manifest = pipeline.run([("a", 50, 1), ("a", 52, 1), ("a", None, 1)], source=200)
    totals = manifest["totals"]
    assert (totals["too_late"], totals["invalid_event_time"], totals["invalid_arrival"]) == (2, 1, 3)
    assert Counter(str(why) for _, why in second.late) == {"TOO_LATE": 2, "INVALID_EVENT_TIME": 1}
    assert manifest["max_event_time_ms"] == second.state.max_event_time_ms == 52
    assert pipeline.panes() == core_rows(spec, [first, second])


def test_a_session_scan_shuffles_its_rows_by_key_before_any_aggregation(spark, tmp_path):
    """Sessions: no aggregation before the scan's shuffle. Spark would otherwise aggregate each event's own window
    before the shuffle, about one group per event, which a large first run spilled to disk; the aggregation runs
    after a shuffle by the keys, where the sessions merge."""
    spec = AggregationSpec(
        Session(5), (Aggregate("n", "count"), Aggregate("s", "sum", "v")), ("k",), StoreWatermark("s")
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.write([("a", 10, 1), ("b", 12, 2)], arrival=1)
    job = Job(spark, WindowedRequest.from_json(pipeline.request(1, 100, 1)))
    events = job.read_events()
    assert events is not None
    operators = plan_operators(physical_plan(job.new_partials(job.classified(events), by_reason=True)))
    exchanges = [i for i, operator in enumerate(operators) if operator == "Exchange"]
    assert len(exchanges) == 1
    assert "HashAggregate" in operators[: exchanges[0]]
    assert not {"HashAggregate", "SortAggregate", "ObjectHashAggregate"} & set(operators[exchanges[0] :])


def test_events_columns_named_as_the_late_outputs_own_are_kept_under_another_name(spark, tmp_path):
    """An events column ``reason`` or ``run_id``: the late output adds its own, so the event's are written as
    ``event_reason`` and ``event_run_id`` (the run with the first late row failed on the clash, and every retry)."""
    spec = AggregationSpec(Tumbling(10), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"))
    schema = "k string, t long, reason string, run_id string, arrival long"
    pipeline = Pipeline(spark, tmp_path, spec, schema=schema)
    pipeline.run([("a", 1, "x", "r1")], source=20)
    manifest = pipeline.run([("a", 2, "y", "r2"), ("a", 25, "z", "r3")], source=40)  # t=2: too late
    assert manifest["totals"]["too_late"] == 1
    late = spark.read.parquet(str(tmp_path / "late")).collect()
    assert [(r["reason"], r["run_id"], r["event_reason"], r["event_run_id"]) for r in late] == [
        ("TOO_LATE", "run-2", "y", "r2")
    ]


def test_events_columns_named_as_the_jobs_own_fail_the_run_naming_them(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec, schema="k string, t long, wm_t long, arrival long")
    with pytest.raises(ValueError, match=r"have the columns \['wm_t'\]: names starting with 'wm_' are the job's own"):
        pipeline.run([("a", 1, 1)], source=20)


def test_an_arrival_with_microseconds_is_read_by_the_run_of_its_millisecond(spark, tmp_path):
    """Spark's own timestamps carry microseconds: a row that arrived at 10.5 ms arrived at 10 ms (rule 0 on whole
    milliseconds), so the run up to 10 reads it; the filter pushed to Parquet once dropped it there, and the next
    run's exact filter too."""
    spec = AggregationSpec(Tumbling(10), (Aggregate("n", "count"),), ("k",), StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec)
    (tmp_path / "events").mkdir()
    arrivals = pa.array([5_000, 10_500, 15_000], pa.timestamp("us", tz="UTC"))
    pq.write_table(
        pa.table({"k": ["a", "b", "c"], "t": pa.array([1, 2, 3], pa.int64()), "v": pa.array([1] * 3, pa.int32()),
                  "arrival": arrivals}),
        tmp_path / "events" / "part-0.parquet",
    )  # fmt: skip
    read = [pipeline.run([], source=100, arrival=until)["totals"]["events_read"] for until in (10, 20)]
    assert read == [2, 1]  # 5 ms and 10.5 ms, then 15 ms


@pytest.mark.parametrize("window_kind", ["tumbling", "sliding"])
def test_a_first_run_counts_each_reason_of_one_key_apart_and_a_sliding_event_once(spark, tmp_path, window_kind):
    """A run without stored windows groups its rows by reason too (its counters are counts of those groups): one key
    with an invalid time, two unusable values and three unusable arrivals is counted under each reason, every row
    read once (a sliding event in its first window only), as core counts them."""
    spec = AggregationSpec(WINDOWS[window_kind], SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec, schema=DOUBLE_SCHEMA)
    unusable_arrivals = [("a", t, 1.0, None) for t in (60, 61, 62)]
    spark.createDataFrame(unusable_arrivals, DOUBLE_SCHEMA).write.parquet(str(tmp_path / "events"))
    rows = [("a", 12, 1.0), ("a", 14, 2.0), ("a", None, 1.0), ("a", 13, NAN), ("a", 31, INF)]
    expected = run(spec, AggregationState(), [Event(t, (k,), {"v": v}) for k, t, v in rows], 20)
    totals = pipeline.run(rows, source=20)["totals"]
    counted = (totals["events_read"], totals["events_aggregated"], totals["invalid_event_time"])
    assert counted == (5, 2, 1)
    assert (totals["invalid_value"], totals["invalid_arrival"], totals["too_late"]) == (2, 3, 0)
    assert Counter(str(why) for _, why in expected.late) == {"INVALID_EVENT_TIME": 1, "INVALID_VALUE": 2}
    assert pipeline.panes() == core_rows(spec, [expected])


def test_invalid_times_are_quarantined_with_their_columns_and_counted(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, keys=("k",), watermark=BoundedOutOfOrderness(0))
    pipeline = Pipeline(spark, tmp_path, spec)
    manifest = pipeline.run([("a", None, 1), ("a", -3, 1), ("b", 4, 7)])
    assert manifest["totals"]["invalid_event_time"] == 2 and manifest["totals"]["events_read"] == 3
    assert pipeline.late() == [("a", -3, "INVALID_EVENT_TIME", 1), ("a", None, "INVALID_EVENT_TIME", 1)]
    assert manifest["watermark_ms"] == 4 and manifest["max_event_time_ms"] == 4


def test_nan_and_infinite_values_are_quarantined_with_their_columns_counted_and_kept_out_of_the_windows(
    spark, tmp_path
):
    """Core's worked example (``values_are_usable``): a NaN in a column no aggregate reads (``x``) is aggregated; a
    row both too late and infinite is ``INVALID_VALUE``; a quarantined value's time counts as seen."""
    aggregates = (Aggregate("s", "sum", "v"), Aggregate("hi", "max", "v"), Aggregate("n", "count"))
    spec = AggregationSpec(Tumbling(10), aggregates, keys=("k",), watermark=BoundedOutOfOrderness(0), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec, schema="k string, t long, v double, x double, arrival long")
    runs = [
        [("a", 1, 2.5, NAN), ("a", 2, NAN, 0.0), ("a", 3, None, 0.0), ("a", 15, INF, 0.0)],
        [("a", 4, -INF, 0.0), ("a", 5, 1.0, 0.0), ("a", 16, 1.0, 0.0)],
    ]
    state, results, manifests = AggregationState(), [], []
    for rows in runs:
        results.append(run(spec, state, [Event(t, (k,), {"v": v, "x": x}) for k, t, v, x in rows]))
        state = results[-1].state
        manifests.append(pipeline.run(rows))
    totals = [m["totals"] for m in manifests]
    assert [(t["events_read"], t["events_aggregated"], t["invalid_value"], t["too_late"]) for t in totals] == [
        (4, 2, 2, 0),
        (3, 1, 1, 1),
    ]
    assert manifests[0]["max_event_time_ms"] == results[0].state.max_event_time_ms == 15
    assert pipeline.panes() == core_rows(spec, results)
    assert pipeline.late() == sorted(
        [
            ("a", 2, "INVALID_VALUE", 1),
            ("a", 15, "INVALID_VALUE", 1),
            ("a", 4, "INVALID_VALUE", 2),
            ("a", 5, "TOO_LATE", 2),
        ],
        key=repr,
    )
    quarantined = spark.read.parquet(str(tmp_path / "late")).where("reason = 'INVALID_VALUE'").collect()
    assert sorted(str(r["v"]) for r in quarantined) == ["-inf", "inf", "nan"]


OUT_OF_RANGE_TIMES = [-1, MAX_TIME_MS + 1, 10**15, 2**63 - 1]
"""Times no event can have: before the epoch, after 9999-12-31 (10**15 is the year 33658), a bigint's maximum."""


@pytest.mark.parametrize("window_kind", ["tumbling", "sliding", "session", "global"])
def test_times_outside_the_valid_range_are_quarantined_without_overflow_in_every_window_kind(
    spark, tmp_path, window_kind
):
    spec = AggregationSpec(
        WINDOWS[window_kind], SUM_V, keys=("k",), watermark=BoundedOutOfOrderness(0), early_firing=True
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    rows = [("a", t, 1) for t in [None, *OUT_OF_RANGE_TIMES]] + [("a", 40, 2), ("b", MAX_TIME_MS, 4)]
    manifest = pipeline.run(rows)
    expected = run(spec, AggregationState(), [Event(t, (k,), {"v": v}) for k, t, v in rows])
    assert manifest["totals"]["invalid_event_time"] == 5 and manifest["totals"]["events_aggregated"] == 2
    assert manifest["totals"]["events_read"] == 7
    assert manifest["max_event_time_ms"] == MAX_TIME_MS == expected.state.max_event_time_ms
    assert pipeline.panes() == core_rows(spec, [expected])
    assert pipeline.late() == sorted((("a", t, "INVALID_EVENT_TIME", 1) for t in [None, *OUT_OF_RANGE_TIMES]), key=repr)


def test_an_existing_empty_events_folder_is_a_run_with_no_events(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, keys=("k",), watermark=StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec)
    (tmp_path / "events").mkdir()
    manifest = pipeline.run([], source=20)
    assert manifest["totals"]["events_read"] == 0 and manifest["watermark_ms"] == 20
    assert manifest["late_output"] is None and manifest["state_path"] is None
    second = pipeline.run([("a", 25, 3)], source=40)  # data arrives later: read as usual
    assert second["totals"]["events_aggregated"] == 1 and pipeline.panes() == [
        (("a",), 20, 30, (3,), "ON_TIME", 0, False, 40)
    ]


def test_a_missing_events_path_fails_the_run_naming_it_unless_missing_events_are_allowed(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, keys=("k",), watermark=StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec)
    missing = tmp_path / "events"
    with pytest.raises(ValueError, match=rf"^events='{missing}' does not exist: create it"):
        run_windowed(spark, pipeline.request(1, 20, 1))
    allowed = run_windowed(spark, {**pipeline.request(1, 20, 1), "allow_missing_events": True})
    assert allowed["totals"]["events_read"] == 0 and allowed["watermark_ms"] == 20


def test_string_event_times_are_parsed_and_unparseable_ones_quarantined(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(60_000), (Aggregate("n", "count"),), keys=("k",), watermark=BoundedOutOfOrderness(0)
    )
    pipeline = Pipeline(spark, tmp_path, spec, event_time="ts")
    rows = [("a", "2026-01-01T00:00:30Z", 1), ("a", "not a time", 1), ("a", "2026-01-01T00:01:00Z", 1)]
    pipeline.write(rows, 1, schema="k string, ts string, v int, arrival long")
    manifest = run_windowed(spark, pipeline.request(1, None, 1))
    assert manifest["totals"]["invalid_event_time"] == 1
    assert [(p[1], p[3]) for p in pipeline.panes()] == [(1_767_225_600_000, (1,))]


def test_times_without_a_zone_are_read_as_utc_whatever_the_sessions_time_zone(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(60_000), (Aggregate("n", "count"),), keys=("k",), watermark=BoundedOutOfOrderness(0)
    )
    pipeline = Pipeline(spark, tmp_path, spec, event_time="ts")
    pipeline.write([("a", "2026-01-01T00:00:30", 1)], 1, schema="k string, ts string, v int, arrival long")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        manifest = run_windowed(spark, pipeline.request(1, None, 1))
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert manifest["max_event_time_ms"] == 1_767_225_630_000  # not 5 hours later


def test_a_time_column_of_an_unusable_type_fails_naming_its_argument_and_dataset(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(60_000), (Aggregate("n", "count"),), keys=("k",), watermark=BoundedOutOfOrderness(0)
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.write([("a", 30_000, 1)], 1.0, schema="k string, t long, v int, arrival double")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^arrival_column='arrival' of \S+ has type double; use a timestamp"):
        run_windowed(spark, pipeline.request(1, None, 1))


def test_a_retried_run_replaces_its_own_panes_and_starts_from_the_same_state(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, keys=("k",), watermark=StoreWatermark("s"))
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 1)], source=5)
    first = pipeline.run([("a", 7, 2)], source=10, commit=False)  # the task fails after the job
    second = pipeline.run([], source=10, arrival=2)  # its retry: same version, same cut-offs
    assert first["version"] == second["version"] == 2
    assert pipeline.panes() == [(("a",), 0, 10, (3,), "ON_TIME", 0, False, 10)]


def test_sql_aggregates_merge_across_runs_like_a_batch(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(100),
        (
            SqlAggregate("users", "hll_sketch_agg(k)", "hll_union_agg({partial})", "hll_sketch_estimate({partial})"),
            SqlAggregate("squares", "sum(v * v)", "sum({partial})"),
        ),
        keys=(),
        watermark=StoreWatermark("s"),
        allowed_lateness_ms=1000,
    )
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 2), ("b", 2, 3)], source=0)
    pipeline.run([("a", 3, 1), ("c", 4, 1)], source=100)
    assert [p[3] for p in pipeline.panes()] == [(3, 15)]


def test_changing_keys_of_an_existing_pipeline_is_refused(spark, tmp_path):
    pipeline = Pipeline(spark, tmp_path, AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s")))
    pipeline.run([("a", 1, 1)], source=0)
    pipeline.spec = AggregationSpec(Tumbling(10), SUM_V, (), StoreWatermark("s"))
    with pytest.raises(ValueError, match="spec changed"):
        pipeline.run([("a", 2, 1)], source=0)


# ------------------------------------------------------------------------------------ arrival column

UNUSABLE_ARRIVALS: dict[str, list[Any]] = {
    "long": [None, -1, MAX_TIME_MS + 1, 2**63 - 1],
    "timestamp": [None, -1, MAX_TIME_MS + 1],  # pushed down to Parquet as timestamp literals
    "string": [None, -1, "garbage"],  # not pushed down; "garbage" is unparseable
}
"""Per type of the arrival column: arrivals (ms, or a raw value) that no run's arrival range can hold."""


def write_arrivals(path: Path, rows: list[tuple[str, int, Any]], arrival_type: str) -> None:
    """``(k, t, arrival)`` rows as one Parquet file, ``arrival`` in ms (ISO-8601 for strings), None or raw."""
    arrivals: list[Any] = [r[2] for r in rows]
    if arrival_type == "string":
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        arrivals = [a if a is None or isinstance(a, str) else (epoch + dt.timedelta(milliseconds=a)).isoformat()
                    for a in arrivals]  # fmt: skip
    arrival_types = {"long": pa.int64(), "timestamp": pa.timestamp("ms", tz="UTC"), "string": pa.string()}
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "k": [r[0] for r in rows],
            "t": pa.array([r[1] for r in rows], pa.int64()),
            "v": pa.array([1] * len(rows), pa.int32()),
            "arrival": pa.array(arrivals, arrival_types[arrival_type]),
        }
    )
    pq.write_table(table, path / "batch.parquet")


@pytest.mark.parametrize(
    ("arrival_type", "window"),
    [*((a, Tumbling(10)) for a in UNUSABLE_ARRIVALS), ("long", Session(5))],
    ids=[*UNUSABLE_ARRIVALS, "long-session"],
)
def test_rows_without_a_usable_arrival_are_quarantined_and_counted_by_every_run_and_never_aggregated(
    spark, tmp_path, arrival_type, window
):
    spec = AggregationSpec(window, (Aggregate("n", "count"),), ("k",), StoreWatermark("s"), allowed_lateness_ms=1000)
    pipeline = Pipeline(spark, tmp_path, spec)
    unusable = UNUSABLE_ARRIVALS[arrival_type]
    rows = [("a", 1, 5), ("a", 2, 15), ("b", 3, 25)] + [("x", 4, a) for a in unusable]
    write_arrivals(tmp_path / "events", rows, arrival_type)
    state, results = AggregationState(), []
    for since, until in [(None, 10), (10, 20), (20, 30)]:
        manifest = pipeline.run([], source=until, arrival=until)
        read = [r for r in rows if read_by_run(r[2] if isinstance(r[2], int) else None, since, until)]
        events = [Event(t, (k,), {}) for k, t, arrival in read if is_valid_time_ms(arrival)]
        result = run(spec, state, events, until)
        state = result.state
        results.append(result)
        assert manifest["totals"]["events_read"] == len(events) == 1, (until, manifest)
        assert manifest["totals"]["invalid_arrival"] == len(read) - len(events) == len(unusable), (until, manifest)
        assert manifest["late_output"] == str(tmp_path / "late")
        assert manifest["max_event_time_ms"] == result.state.max_event_time_ms  # the quarantined t=4 is not seen
    assert pipeline.panes() == core_rows(spec, results)
    assert {p[0] for p in pipeline.panes()} == {("a",), ("b",)}  # nothing of "x" is aggregated
    # not the arrival column: Python cannot show a timestamp of the year 10000
    quarantined = spark.read.parquet(str(tmp_path / "late")).select("k", "reason", "wm_run").collect()
    assert sorted((r["k"], r["reason"], int(r["wm_run"])) for r in quarantined) == sorted(
        ("x", "INVALID_ARRIVAL", version) for version in (1, 2, 3) for _ in unusable
    )


def test_merged_inputs_quarantine_rows_without_a_usable_arrival_with_their_prefixed_columns(spark, tmp_path):
    watermark = MergedWatermark((("a", StoreWatermark("sa")), ("b", StoreWatermark("sb"))), 50, "highest")
    spec = AggregationSpec(Tumbling(10), MERGED_AGGREGATES, ("k",), watermark)
    pipeline = Merge(spark, tmp_path, spec)
    spark.createDataFrame([("x", 4, 1.0, None)], DOUBLE_SCHEMA).write.parquet(str(tmp_path / "a"))
    manifest = pipeline.merge([("y", 5, 2)], [("y", 6, 3)], source=10)
    assert manifest["totals"]["invalid_arrival"] == 1 and manifest["totals"]["events_aggregated"] == 2
    assert pipeline.late() == [("x", 4, "INVALID_ARRIVAL")]
    assert [(p[0], p[3][:3]) for p in pipeline.panes()] == [(("y",), (1, 2, 1))]


# ---------------------------------------------------------------------------------------- differential

WINDOWS = {
    "tumbling": Tumbling(10, 3),
    "sliding": Sliding(12, 4),
    "session": Session(5),
    "global": Global(),
}
AGGREGATES = (
    Aggregate("n", "count"),
    Aggregate("nv", "count", "v"),
    Aggregate("s", "sum", "v"),
    Aggregate("lo", "min", "v"),
    Aggregate("hi", "max", "v"),
    Aggregate("a", "avg", "v"),
)
EXAMPLES = int(os.environ.get("WM_WINDOW_EXAMPLES", "1"))  # random scenarios per window kind and mode


def random_time(rnd: random.Random, clock: int) -> int | None:
    """An event time near ``clock``; one in ten is null or outside the valid range (quarantined, never assigned)."""
    if rnd.random() < 0.1:
        return rnd.choice([None, *OUT_OF_RANGE_TIMES])
    return max(-1, clock - rnd.randint(0, 40))


def random_value(rnd: random.Random) -> float | None:
    """A value of ``v``: null or a small whole number; one in ten is NaN or +/-infinity (quarantined)."""
    if rnd.random() < 0.1:
        return rnd.choice([NAN, INF, -INF])
    return rnd.choice([None, *map(float, range(-3, 9))])


def spoiled(rnd: random.Random, value: int | None) -> float | None:
    """``value`` as a double, or one time in ten NaN or +/-infinity."""
    return rnd.choice([NAN, INF, -INF]) if rnd.random() < 0.1 else None if value is None else float(value)


def random_case(rnd: random.Random, window_kind: str, accumulation: Accumulation):
    window = WINDOWS[window_kind]
    early_count, late_firing = rnd.choice([None, 2, 3]), rnd.random() < 0.7
    spec = AggregationSpec(
        window,
        AGGREGATES,
        keys=("k",),
        watermark=rnd.choice([StoreWatermark("s"), BoundedOutOfOrderness(rnd.randint(0, 20))]),
        allowed_lateness_ms=rnd.randint(0, 25),
        accumulation=accumulation,
        early_firing=early_count is None and (rnd.random() < 0.5 or window_kind == "global"),
        late_firing=late_firing,
        fire_only_updated_panes=accumulation is not Accumulation.DISCARDING and rnd.random() < 0.3,
        early_firing_count=early_count,
        late_firing_count=rnd.choice([None, 2]) if late_firing else None,
        late_data=rnd.choice(list(LateData)),
    )
    runs, clock = [], 0
    for _ in range(rnd.randint(3, 4)):
        clock += rnd.randint(5, 30)
        rows = [
            (rnd.choice(["a", "b", "c", None]), random_time(rnd, clock), random_value(rnd))
            for _ in range(rnd.randint(0, 15))
        ]
        runs.append((rows, clock - rnd.randint(0, 15)))
    return spec, runs


@pytest.mark.parametrize("accumulation", list(Accumulation))
@pytest.mark.parametrize("window_kind", list(WINDOWS))
def test_job_panes_equal_core_over_random_runs(spark, tmp_path, window_kind, accumulation):
    for example in range(EXAMPLES):
        seed = zlib.crc32(f"{window_kind}-{accumulation.value}-{example}".encode())
        spec, runs = random_case(random.Random(seed), window_kind, accumulation)
        pipeline = Pipeline(spark, tmp_path / f"e{example}", spec, schema=DOUBLE_SCHEMA)
        pipeline.driver_output_rows, writer = (0, "spark") if seed % 2 else (None, "arrow")  # both writers
        state, results, writers = AggregationState(), [], set()
        for rows, source in runs:
            result = run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows], source)
            state = result.state
            results.append(result)
            manifest = pipeline.run(rows, source=source)
            writers.add(manifest["writer"])  # None: a run with no windows wrote neither panes nor state
            assert manifest["watermark_ms"] == result.watermark_ms, (seed, manifest)
            assert manifest["max_event_time_ms"] == result.state.max_event_time_ms, (seed, manifest)
            assert manifest["totals"]["panes"] == result.pane_counts(), seed
            invalid_values = sum(why == "INVALID_VALUE" for _, why in result.late)
            assert manifest["totals"]["invalid_value"] == invalid_values, seed
        assert pipeline.panes() == core_rows(spec, results), seed
        expected_late = Counter((e.key[0], e.time_ms, why) for r in results for e, why in r.late)
        assert Counter(row[:3] for row in pipeline.late()) == expected_late, seed
        assert writers - {None} == {writer}, seed


LONG_SCHEMA = "k string, t long, v long, arrival long"
HUGE_LONGS = [2**62, -(2**62), 2**63 - 1, -(2**63), 2**53 + 1]


def out_of_range_sums(result) -> int:
    """The panes a core run fires (retractions aside) whose sum ``s`` is past a long: null while ``nv`` counts
    values (:data:`AGGREGATES`)."""
    return sum(p.values[2] is None and p.values[1] > 0 for p in result.panes if not p.retraction)


@pytest.mark.parametrize("window_kind", list(WINDOWS))
def test_job_sums_and_means_of_longs_near_the_64_bit_limits_equal_core_over_random_runs(spark, tmp_path, window_kind):
    """Sums of longs are exact across runs (a long ``sum`` overflowed, and failed every later run), a pane's sum
    past a long is null and counted, and a mean is the exact sum as a double over the count, as in core."""
    seed = zlib.crc32(f"longs-{window_kind}".encode())
    rnd = random.Random(seed)
    spec, runs = random_case(rnd, window_kind, rnd.choice(list(Accumulation)))
    runs = [([(k, t, rnd.choice([None, 3, -2, *HUGE_LONGS])) for k, t, _ in rows], source) for rows, source in runs]
    pipeline = Pipeline(spark, tmp_path, spec, schema=LONG_SCHEMA)
    pipeline.driver_output_rows = 0 if seed % 2 else None  # either writer
    state, results, out_of_range = AggregationState(), [], 0
    for rows, source in runs:
        result = run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows], source)
        state = result.state
        results.append(result)
        manifest = pipeline.run(rows, source=source)
        assert manifest["totals"]["sums_out_of_range"] == out_of_range_sums(result), seed
        out_of_range += out_of_range_sums(result)
    assert pipeline.panes() == core_rows(spec, results), seed
    assert dict(spark.read.parquet(str(tmp_path / "panes")).dtypes)["s"] == "bigint"


def test_a_sum_of_longs_past_a_long_is_null_and_counted_and_the_next_pane_back_in_range_is_exact(spark, tmp_path):
    spec = AggregationSpec(
        Tumbling(10), (Aggregate("s", "sum", "v"), Aggregate("a", "avg", "v")), ("k",), StoreWatermark("s"),
        early_firing=True,
    )  # fmt: skip
    pipeline = Pipeline(spark, tmp_path, spec, schema=LONG_SCHEMA)
    totals = [pipeline.run([("a", t, v)], source=0)["totals"] for t, v in ((1, 2**62), (2, 2**62), (3, -10))]
    assert [p[3] for p in sorted(pipeline.panes(), key=lambda p: p[5])] == [
        (2**62, 2.0**62),
        (None, 2.0**62),
        (2**63 - 10, float(2**63 - 10) / 3),
    ]
    assert [t["sums_out_of_range"] for t in totals] == [0, 1, 0]
    document = json.loads((tmp_path / "state" / "v3" / SCHEMA_DOCUMENT).read_text())
    assert document[EXACT_SUMS] == ["a", "s"]
    assert {f["name"]: f["type"] for f in document["fields"]}["p_s"] == "decimal(38,0)"


@pytest.mark.parametrize("writer_rows", [0, None], ids=["spark", "arrow"])
def test_a_state_stored_with_long_sums_takes_the_next_runs_exact_sums(spark, tmp_path, writer_rows):
    """A state whose sums are longs, as stored before sums of integers were exact, merges with a run's exact
    sums; a run that reads no events keeps its long sums."""
    spec = AggregationSpec(Tumbling(10), (Aggregate("s", "sum", "v"),), ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec, schema=LONG_SCHEMA)
    pipeline.driver_output_rows = writer_rows
    pipeline.run([("a", 1, 2**62), ("b", 1, 5)], source=0)
    stored = tmp_path / "state" / "v1"
    files = list(stored.glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    for f in files:
        f.unlink()
    pq.write_table(table.set_column(table.schema.get_field_index("p_s"), "p_s", table["p_s"].cast(pa.int64())),
                   stored / "part-0.parquet")  # fmt: skip
    document = json.loads((stored / SCHEMA_DOCUMENT).read_text())
    del document[EXACT_SUMS]
    document["fields"] = [{**f, "type": "long"} if f["name"] == "p_s" else f for f in document["fields"]]
    (stored / SCHEMA_DOCUMENT).write_text(json.dumps(document))
    pipeline.run([], source=0)  # no events: the stored long sums as they are
    pipeline.run([("a", 2, 2**62), ("b", 2, 1)], source=0)
    assert sorted((p[0], p[3], p[5]) for p in pipeline.panes(3)) == [(("a",), (None,), 1), (("b",), (6,), 1)]
    pipeline.run([("a", 3, -1)], source=20)
    assert sorted((p[0], p[3], p[4]) for p in pipeline.panes(4)) == [
        (("a",), (2**63 - 1,), "ON_TIME"),
        (("b",), (6,), "ON_TIME"),
    ]


@pytest.mark.parametrize("writer_rows", [0, None], ids=["spark", "arrow"])
def test_a_sum_stored_as_a_double_stays_a_double_when_a_later_run_reads_the_column_as_an_integer(
    spark, tmp_path, writer_rows
):
    """A column that is a double in one run and an integer in the next: the stored sum is a double, so the merged
    sum is one too (core: int plus float), not an exact sum of integers truncated to a long."""
    spec = AggregationSpec(
        Tumbling(10), (Aggregate("s", "sum", "v"), Aggregate("a", "avg", "v")), ("k",), StoreWatermark("s"),
        early_firing=True,
    )  # fmt: skip
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.driver_output_rows = writer_rows
    runs = [([("a", 1, 2.5)], DOUBLE_SCHEMA), ([("a", 2, 1)], EVENT_SCHEMA), ([], EVENT_SCHEMA)]
    results, state = [], AggregationState()
    for version, (rows, schema) in enumerate(runs, start=1):
        if rows:  # an events folder of one type per run: Spark reads one type per column of a folder
            shutil.rmtree(tmp_path / "events", ignore_errors=True)
            pipeline.write(rows, version, schema)
        pipeline.run([], source=20 if version == 3 else 0, arrival=version)
        results.append(run(spec, state, [Event(t, (k,), {"v": v}) for k, t, v in rows], 20 if version == 3 else 0))
        state = results[-1].state
    assert [p[3] for p in sorted(pipeline.panes(), key=lambda p: p[5])] == [(2.5, 2.5), (3.5, 1.75), (3.5, 1.75)]
    assert pipeline.panes() == core_rows(spec, results)


WRITTEN_ELSEWHERE = ("output", "late_output", "state_path", "live_path", "duration_s", "writer")
"""The manifest's fields that name where a pipeline wrote, how long it took and what wrote it."""


@pytest.mark.parametrize("accumulation", [Accumulation.ACCUMULATING_AND_RETRACTING, Accumulation.DISCARDING])
def test_the_driver_and_spark_write_the_same_panes_late_rows_state_and_schemas(spark, tmp_path, accumulation):
    keys = SqlAggregate("keys", "collect_set(k)", "array_distinct(flatten(collect_list({partial})))")
    spec = AggregationSpec(
        Tumbling(10), (*AGGREGATES, keys), ("k",), BoundedOutOfOrderness(5), allowed_lateness_ms=10,
        accumulation=accumulation, early_firing=True,
    )  # fmt: skip
    runs = [
        ([("a", 1, 1.0), ("b", 3, NAN), ("a", 12, 2.5), ("c", None, 1.0)], None),
        ([("a", 4, 4.0), ("b", 21, None), ("b", 25, 7.0)], None),
        ([], None),  # no events: the stored windows alone are decided
        ([("a", 2, 1.0), ("c", 40, 3.0)], None),
    ]
    written = {}
    for limit, writer in ((None, "arrow"), (0, "spark")):
        pipeline = Pipeline(spark, tmp_path / writer, spec, schema=DOUBLE_SCHEMA)
        pipeline.driver_output_rows = limit
        manifests = [pipeline.run(rows, source=source) for rows, source in runs]
        assert [m["writer"] for m in manifests] == [writer] * len(runs)
        state = spark.read.parquet(pipeline.state)
        written[writer] = {
            "manifests": [{k: v for k, v in m.items() if k not in WRITTEN_ELSEWHERE} for m in manifests],
            "panes": pipeline.panes(),
            "pane schema": spark.read.parquet(str(pipeline.base / "panes")).schema,
            "late": pipeline.late(),
            "state": sorted(map(repr, state.collect())),
            "state schema": state.schema,
            "stored schema": json.loads((Path(pipeline.state) / "_wm_schema.json").read_text()),
            "pane output schema": json.loads((pipeline.base / "panes" / "_wm_schema.json").read_text()),
        }
    assert written["arrow"] == written["spark"]
    assert written["arrow"]["stored schema"]["rows"] == len(written["arrow"]["state"])


def test_a_run_of_more_windows_than_driver_output_rows_writes_with_spark(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.driver_output_rows = 2
    assert pipeline.run([("a", 1, 1), ("b", 12, 5)], source=5)["writer"] == "arrow"  # two windows
    assert pipeline.run([("c", 25, 1)], source=5)["writer"] == "spark"  # the two stored and a new one
    assert pipeline.panes(2) == [(("c",), 20, 30, (1,), "EARLY", 0, False, 5)]


def test_a_state_written_before_count_triggers_is_read_with_one_pending_event_per_dirty_window(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 1)], source=0)  # [0, 10) fires EARLY: not dirty
    events = [Event(1, ("a",), {"v": 1}), Event(12, ("a",), {"v": 2})]
    state = run(spec, AggregationState(), events[:1], 0).state
    pipeline.spec = replace(spec, early_firing=False)  # [10, 20) stays dirty after run 2
    pipeline.run([("a", 12, 2)], source=0)
    old = spark.read.parquet(pipeline.state)
    old.withColumn("pending", F.col("pending") > 0).withColumnRenamed("pending", "dirty").write.parquet(
        str(tmp_path / "old_state")
    )
    pipeline.state = str(tmp_path / "old_state")
    pipeline.spec = spec
    pipeline.run([], source=20)
    state = run(replace(spec, early_firing=False), state, events[1:], 0).state
    expected = run(spec, state, [], 20)
    assert pipeline.panes(3) == core_rows(spec, [expected])


def test_the_state_is_read_with_the_schema_stored_beside_it_and_one_without_it_is_inferred_alike(spark, tmp_path):
    spec = AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 1), ("b", 12, 5)], source=5)
    state = Path(pipeline.state)
    stored = StructType.fromJson(json.loads((state / "_wm_schema.json").read_text()))
    assert stored == spark.read.parquet(str(state)).schema  # what a read of the files infers
    with_schema = pipeline.run([("a", 6, 2), ("b", 14, 1)], source=20, commit=False)
    panes = pipeline.panes(2)
    shutil.copytree(state, tmp_path / "inferred", ignore=shutil.ignore_patterns("_wm_schema.json"))
    pipeline.state = str(tmp_path / "inferred")  # as a state written before schemas were stored beside it
    inferred = pipeline.run([], source=20, arrival=2)  # the same run again, from that state
    assert panes == pipeline.panes(2)
    assert [p[:4] for p in panes] == [(("a",), 0, 10, (3,)), (("b",), 10, 20, (6,))]
    assert inferred["totals"] == with_schema["totals"]


def test_the_pane_output_is_documented_with_the_schema_a_read_of_its_partitions_infers_and_read_with_it(
    spark, tmp_path
):
    spec = AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 1), ("b", 12, 5)], source=5)
    pipeline.run([("a", 21, 1)], source=30)
    output = pipeline.base / "panes"
    documented = StructType.fromJson(json.loads((output / "_wm_schema.json").read_text()))
    inference = "spark.sql.sources.partitionColumnTypeInference.enabled"
    previous = spark.conf.get(inference)  # the partitions job turns it off in the session it runs on
    spark.conf.set(inference, "true")  # Spark's default
    try:
        inferred = spark.read.parquet(str(output))
        inferred_schema, inferred_rows = inferred.schema, sorted(map(tuple, inferred.collect()))
    finally:
        spark.conf.set(inference, previous)
    assert documented == inferred_schema  # the run partition an int, as Spark infers it from the folder names
    assert documented[RUN_PARTITION].dataType == IntegerType()
    as_long = StructType([*documented.fields[:-1], StructField(RUN_PARTITION, LongType())])
    write_schema_document(str(output), as_long)
    read = read_dataset_and_schema(spark, str(output), job_output=True)
    assert read is not None
    frame, schema = read
    assert schema == as_long  # the document's, not inferred again
    assert sorted(map(tuple, frame.collect())) == inferred_rows


@pytest.mark.parametrize(
    ("window", "late_data"),
    [(Tumbling(10), LateData.EVENT_TIME), (Sliding(20, 10), LateData.WINDOW_END), (Session(5), LateData.WINDOW_END)],
)
def test_runs_that_differ_only_in_their_cut_offs_generate_the_same_code(spark, tmp_path, window, late_data):
    """Spark compiles a stage's code again for every new literal number in it: a run's horizons and watermark are
    columns generated from an array (``with_cut_offs``), so the next scheduled run reuses the code compiled for the
    last one."""
    spec = AggregationSpec(
        window, (Aggregate("s", "sum", "v"),), ("k",), BoundedOutOfOrderness(0), allowed_lateness_ms=5,
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING, late_data=late_data,
    )  # fmt: skip
    pipeline = Pipeline(spark, tmp_path, spec)
    pipeline.run([("a", 1, 1), ("a", 25, 2)])  # a state to merge with
    pipeline.write([("a", 30, 3)], arrival=2)

    def plans(previous_watermark: int, watermark: int) -> list[str]:
        run_id = f"run-{watermark}"  # each run has its own
        request = {**pipeline.request(2, None, 2), "previous_watermark_ms": previous_watermark, "run_id": run_id}
        job = Job(spark, WindowedRequest.from_json(request))
        events = job.read_events()
        assert events is not None
        decided = job.decide(job.read_state(), watermark)
        frames = [job.new_partials(job.classified(events)), job.panes(decided, watermark), job.next_state(decided)]
        return [generated_code(frame) for frame in frames]

    first, second = plans(1_000_000_020, 1_000_000_030), plans(1_000_000_021, 1_000_000_031)
    assert first == second
    cut_offs = ("1000000020", "1000000015", "1000000030", "1000000025")  # W_prev, W_prev - L, W, W - L
    assert not [value for value in cut_offs for plan in first if value in plan]


# -------------------------------------------------------------------------------- rollups (propagation)


class Rollup(Pipeline):
    """A rollup over ``upstream``'s panes: its input cut-off is the upstream version it has read up to."""

    def __init__(self, spark, tmp_path: Path, spec: AggregationSpec, upstream: Pipeline) -> None:
        super().__init__(spark, tmp_path, spec)
        self.upstream, self.live = upstream, None

    def request(self, arrival_until: int, source: int | None, version: int) -> dict[str, Any]:
        return {
            **super().request(arrival_until, source, version),
            "events": str(self.upstream.base / "panes"),
            "event_time": "window_start",
            "arrival_column": None,
            "live_in": self.live,
            "live_out": str(self.base / "live" / f"v{version}"),
        }

    def roll(self, source: int | None):
        version = self.version + 1
        manifest = run_windowed(self.spark, self.request(self.upstream.version, source, version))
        self.version, self.arrival = version, self.upstream.version
        self.state, self.live = manifest["state_path"] or self.state, manifest["live_path"] or self.live
        self.previous = {"watermark_ms": manifest["watermark_ms"], "max_event_time_ms": manifest["max_event_time_ms"]}
        return manifest


def upstream_rows(result, names: tuple[str, ...], version: int) -> list[UpstreamPane]:
    return [
        UpstreamPane(p.key, p.window, dict(zip(names, p.values, strict=True)), p.index, p.retraction, version)
        for p in result.panes
    ]


ROLLUP_AGGREGATES = (
    Aggregate("n", "sum", "n"),
    Aggregate("s", "sum", "s"),
    Aggregate("lo", "min", "lo"),
    Aggregate("hi", "max", "hi"),
    Aggregate("panes", "count"),
    Aggregate("a", "avg", "a"),
)
ROLLUPS = {
    "retracting-into-coarse": (Accumulation.ACCUMULATING_AND_RETRACTING, Tumbling(10, 3), Tumbling(30, 3)),
    "accumulating-sliding-kept": (Accumulation.ACCUMULATING, Sliding(12, 4), None),
    "discarding-into-coarse": (Accumulation.DISCARDING, Tumbling(10, 3), Tumbling(20, 13)),
}


@pytest.mark.parametrize("case", list(ROLLUPS))
def test_rollup_panes_equal_core_over_random_upstream_runs(spark, tmp_path, case):
    upstream_accumulation, fine, coarse = ROLLUPS[case]
    rnd = random.Random(zlib.crc32(case.encode()))
    _, runs = random_case(rnd, "tumbling", upstream_accumulation)
    upstream_spec = AggregationSpec(
        fine, AGGREGATES, ("k",), StoreWatermark("s"), allowed_lateness_ms=10, accumulation=upstream_accumulation,
        early_firing=True,
    )  # fmt: skip
    spec = AggregationSpec(
        coarse, ROLLUP_AGGREGATES, ("k",), StoreWatermark("up"), allowed_lateness_ms=rnd.choice([0, 10]),
        accumulation=rnd.choice([Accumulation.ACCUMULATING, Accumulation.ACCUMULATING_AND_RETRACTING]),
        early_firing=True, upstream=UpstreamPanes("up", fine, upstream_accumulation),
    )  # fmt: skip
    upstream = Pipeline(spark, tmp_path / "up", upstream_spec, schema=DOUBLE_SCHEMA)
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    rollup.driver_output_rows = 0 if case == "accumulating-sliding-kept" else None  # both writers
    up_state, state, results = AggregationState(), AggregationState(), []
    names = tuple(a.name for a in AGGREGATES)
    for rows, source in [*runs, ([], 10_000)]:  # the last run completes and purges every window
        up = run(upstream_spec, up_state, [Event(t, (k,), {"v": v}) for k, t, v in rows], source)
        up_state = up.state
        upstream.run(rows, source=source)
        output_watermark = None if up.watermark_ms is None else fine.output_watermark(up.watermark_ms)
        result = run_on_panes(spec, state, upstream_rows(up, names, upstream.version), output_watermark)
        state = result.state
        results.append(result)
        manifest = rollup.roll(output_watermark)
        assert manifest["watermark_ms"] == result.watermark_ms, case
        assert manifest["totals"]["panes"] == result.pane_counts(), case
        assert manifest["totals"]["too_late"] == sum(why == "TOO_LATE" for _, why in result.late), case
    assert rollup.panes() == core_rows(spec, results), case
    assert state.windows == () and state.live == ()


def test_upstream_panes_without_a_window_are_quarantined_and_counted(spark, tmp_path):
    fine = Tumbling(10)
    spec = AggregationSpec(
        None, (Aggregate("s", "sum", "s"),), ("k",), StoreWatermark("up"),
        upstream=UpstreamPanes("up", fine, Accumulation.ACCUMULATING),
    )  # fmt: skip
    upstream = Pipeline(spark, tmp_path / "up", spec)
    schema = "window_start long, window_end long, k string, s long, pane string, pane_index long, retraction boolean"
    rows = [(0, 10, "a", 3, "ON_TIME", 0, False), (None, 10, "a", 9, "ON_TIME", 0, False)]
    spark.createDataFrame(rows, schema).withColumn("wm_run", F.lit(1)).write.partitionBy("wm_run").parquet(
        str(upstream.base / "panes")
    )
    upstream.version = 1
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    manifest = rollup.roll(10)
    assert manifest["totals"]["invalid_window"] == 1 and manifest["totals"]["events_aggregated"] == 1
    assert [p[1:4] for p in rollup.panes()] == [(0, 10, (3,))]
    quarantined = spark.read.parquet(str(rollup.base / "late")).collect()
    assert [(r["window_start"], r["s"], r["reason"], r["upstream_wm_run"]) for r in quarantined] == [
        (None, 9, "INVALID_WINDOW", 1)
    ]


def test_upstream_panes_with_windows_no_upstream_can_emit_are_quarantined_without_overflow(spark, tmp_path):
    fine = Tumbling(10, 3)
    spec = AggregationSpec(
        Tumbling(20, 3), (Aggregate("s", "sum", "s"),), ("k",), StoreWatermark("up"), allowed_lateness_ms=100,
        upstream=UpstreamPanes("up", fine, Accumulation.ACCUMULATING),
    )  # fmt: skip
    windows = [
        (-7, 3),  # valid: holds 0..2
        (2**63 - 11, 2**63 - 1),  # after 9999-12-31: its coarse window would overflow
        (10**15, 10**15 + 10),  # the year 33658
        (-(2**63), 0),  # holds no valid time; its end - 1 would overflow
        (-(2**63) + 1, 3),  # longer than the upstream's windows: its coarse start would overflow
        (None, 13),
    ]
    upstream = Pipeline(spark, tmp_path / "up", spec)
    schema = "window_start long, window_end long, k string, s long, pane string, pane_index long, retraction boolean"
    rows = [(start, end, "a", 2**i, "ON_TIME", 0, False) for i, (start, end) in enumerate(windows)]
    spark.createDataFrame(rows, schema).withColumn("wm_run", F.lit(1)).write.partitionBy("wm_run").parquet(
        str(upstream.base / "panes")
    )
    upstream.version = 1
    rollup = Rollup(spark, tmp_path / "rollup", spec, upstream)
    manifest = rollup.roll(50)
    panes = [
        UpstreamPane(("a",), None if start is None else Window(start, end), {"s": 2**i}, 0, run=1)
        for i, (start, end) in enumerate(windows)
    ]
    expected = run_on_panes(spec, AggregationState(), panes, 50)
    assert [why for _, why in expected.late] == ["INVALID_WINDOW"] * 5
    assert manifest["totals"]["invalid_window"] == 5 and manifest["totals"]["events_aggregated"] == 1
    assert manifest["max_event_time_ms"] == expected.state.max_event_time_ms == 2
    assert rollup.panes() == core_rows(spec, [expected]) == [(("a",), -17, 3, (1,), "ON_TIME", 0, False, 50)]
    quarantined = spark.read.parquet(str(rollup.base / "late")).collect()
    assert sorted(r["s"] for r in quarantined) == [2, 4, 8, 16, 32]


# ------------------------------------------------------------------------------------------- merges


class Merge(Pipeline):
    """A merge of inputs ``a`` (``k, t, v``) and ``b`` (``k, t2, w``), each with its own events folder."""

    def write_input(self, name: str, rows: list[tuple[Any, ...]], arrival: int) -> None:
        schema = DOUBLE_SCHEMA if name == "a" else "k string, t2 long, w int, arrival long"
        self.spark.createDataFrame([(*r, arrival) for r in rows], schema).write.mode("append").parquet(
            str(self.base / name)
        )

    def request(self, arrival_until: int, source: int | None, version: int) -> dict[str, Any]:
        inputs = [
            {"name": n, "events": str(self.base / n), "event_time": t, "arrival_column": "arrival"}
            for n, t in (("a", "t"), ("b", "t2"))
        ]
        return {**super().request(arrival_until, source, version), "events": None, "inputs": inputs}

    def merge(self, rows_a, rows_b, source: int | None):
        arrival = (self.arrival or 0) + 1
        for name, rows in (("a", rows_a), ("b", rows_b)):
            if rows:
                self.write_input(name, rows, arrival)
        return self.run([], source=source, arrival=arrival)

    def late(self) -> list[tuple[Any, ...]]:
        path = self.base / "late"
        if not path.exists():
            return []
        rows = self.spark.read.parquet(str(path)).collect()
        return sorted(((r["k"], r["a__t"] if r["a__wm_row"] else r["b__t2"], r["reason"]) for r in rows), key=repr)


MERGED_AGGREGATES = (
    Aggregate("orders", "count", input_column("a", ROW_COLUMN)),
    Aggregate("amount", "sum", "a__v"),
    Aggregate("deliveries", "count", input_column("b", ROW_COLUMN)),
    Aggregate("slowest", "max", "b__w"),
    Aggregate("mean", "avg", "b__w"),
    Aggregate("rows", "count"),
)


def test_a_merge_with_an_input_that_never_wrote_fails_naming_the_input_and_its_path(spark, tmp_path):
    watermark = MergedWatermark((("a", StoreWatermark("sa")), ("b", StoreWatermark("sb"))), 50, "highest")
    spec = AggregationSpec(Tumbling(100), MERGED_AGGREGATES, ("k",), watermark)
    pipeline = Merge(spark, tmp_path, spec)
    with pytest.raises(ValueError, match=rf"inputs\['b'\] has no data at {tmp_path / 'b'} yet"):
        pipeline.merge([("x", 5, 1.0)], [], source=10)


@pytest.mark.parametrize(
    ("window_kind", "late_data"),
    [("tumbling", LateData.EVENT_TIME), ("session", LateData.EVENT_TIME), ("session", LateData.WINDOW_END)],
)
def test_merged_inputs_panes_equal_core_over_random_runs(spark, tmp_path, window_kind, late_data):
    rnd = random.Random(zlib.crc32(f"merge-{window_kind}".encode()))
    noise = random.Random(window_kind)  # its own generator: the runs stay rnd's (whose first has rows of both inputs)
    watermark = MergedWatermark((("a", StoreWatermark("sa")), ("b", StoreWatermark("sb"))), 50, "highest")
    spec = AggregationSpec(
        WINDOWS[window_kind], MERGED_AGGREGATES, ("k",), watermark, allowed_lateness_ms=rnd.randint(0, 10),
        accumulation=Accumulation.ACCUMULATING_AND_RETRACTING, early_firing=True, late_data=late_data,
    )  # fmt: skip
    pipeline = Merge(spark, tmp_path, spec)
    state, results, clock = AggregationState(), [], 0
    for _ in range(3):
        clock += rnd.randint(5, 30)
        a, b = ([
            (rnd.choice(["x", "y", None]), random_time(rnd, clock), rnd.choice([None, *range(9)]))
            for _ in range(rnd.randint(0, 12))
        ] for _ in "ab")  # fmt: skip
        a = [(k, t, spoiled(noise, v)) for k, t, v in a]  # a's v is a double
        source = clock - rnd.randint(0, 15)
        events = merge_inputs({
            "a": [Event(t, (k,), {"t": t, "v": v, "arrival": 0}) for k, t, v in a],
            "b": [Event(t, (k,), {"t2": t, "w": w, "arrival": 0}) for k, t, w in b],
        })  # fmt: skip
        result = run(spec, state, events, source)
        state = result.state
        results.append(result)
        manifest = pipeline.merge(a, b, source)
        assert manifest["totals"]["panes"] == result.pane_counts()
    assert pipeline.panes() == core_rows(spec, results)
    expected_late = Counter(
        (e.key[0], e.values.get("a__t", e.values.get("b__t2")), why) for r in results for e, why in r.late
    )
    assert Counter(pipeline.late()) == expected_late


def test_a_checkpoint_reports_the_totals_observed_while_it_was_written_without_a_job_of_their_own(spark, monkeypatch):
    """The run's totals come with its checkpoint: observed as the checkpoint is written (over Spark Connect, read
    from the checkpoint command's execution info), never aggregated from the checkpoint in a Spark job of their
    own, which the fallback would run."""
    from spark_jobs.windowed.base import checkpoint_with_totals

    frame = spark.range(10).selectExpr("id % 3 AS k").groupBy("k").agg(F.count(F.lit(1)).alias("n"))
    monkeypatch.setattr(type(frame), "coalesce", lambda *_: pytest.fail("the totals were aggregated again"))

    checkpoint, totals = checkpoint_with_totals(frame, F.sum("n").alias("rows"), F.count(F.lit(1)).alias("groups"))

    assert (totals["rows"], totals["groups"]) == (10, 3)
    assert sorted(tuple(r) for r in checkpoint.collect()) == [(0, 4), (1, 3), (2, 3)]


def test_totals_an_action_does_not_report_are_counted_by_a_spark_job_of_their_own(spark, tmp_path, monkeypatch):
    """Should Spark report no observed metrics with the checkpoint or the state's write, the run counts its totals
    and its fired windows in a job of their own: the manifests say the same as with the metrics."""
    spec = AggregationSpec(Tumbling(10), SUM_V, ("k",), StoreWatermark("s"), early_firing=True)
    runs = [([("a", 1, 1), ("b", 12, 5), ("a", None, 2)], 5), ([("c", 25, 1), ("a", 3, 4)], 15)]
    manifests = {}
    for reported in (True, False):
        if not reported:
            monkeypatch.setattr("spark_jobs.windowed.base.observed_below", lambda *_: None)
            monkeypatch.setattr("spark_jobs.windowed.job.observed_below", lambda *_: None)
        pipeline = Pipeline(spark, tmp_path / str(reported), spec)
        pipeline.driver_output_rows = 0  # the Spark writer, whose fired windows are observed
        manifests[reported] = [
            {k: v for k, v in pipeline.run(rows, source=source).items() if k not in WRITTEN_ELSEWHERE}
            for rows, source in runs
        ]
    assert manifests[False] == manifests[True]
    assert manifests[True][1]["totals"]["panes"]["ON_TIME"] > 0
