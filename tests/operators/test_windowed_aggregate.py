"""WindowedAggregateOperator on real Airflow (dag.test, SQLite) submitting the real job through SparkSubmitHook."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.models.variable import Variable
from airflow.sdk import Asset

from airflow_provider_wm.contracts import WindowedManifest
from airflow_provider_wm.core.windowing import (
    Accumulation,
    BoundedOutOfOrderness,
    LateData,
    SqlAggregate,
    StoreWatermark,
    UpstreamPanes,
)
from airflow_provider_wm.core.windows import Session, Sliding, Tumbling
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators.windowed_aggregate import (
    WindowedAggregateOperator,
    global_window,
    session,
    sliding,
    tumbling,
)
from airflow_provider_wm.state import windowed_variable_key
from tests.airflow_helpers import asset_event_partition_keys, fresh_dag, run_dag, xcom

T0 = datetime(2026, 1, 5, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
MINUTE = 60_000
REQUIRED = {
    "task_id": "w",
    "pipeline": "w1",
    "events": "/events",
    "event_time": "event_time",
    "arrival_column": "ingested_at",
    "window": tumbling("PT5M"),
    "aggregates": {"n": "count(*)"},
    "output": "/out",
    "store_path": "/store",
    "watermark": {"stream": "orders"},
}


def test_window_helpers_take_durations():
    assert tumbling("PT5M") == Tumbling(300_000)
    assert tumbling(timedelta(hours=1), offset=60) == Tumbling(3_600_000, 60_000)
    assert sliding("PT10M", "PT5M") == Sliding(600_000, 300_000)
    assert session(120) == Session(120_000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "../x"}, "pipeline='../x'"),
        ({"output_stream": "a/b"}, "output_stream='a/b'"),
        ({"early_firing_count": 0}, "early_firing_count=0 must be a number of events >= 1"),
        ({"late_firing_count": 2, "late_firing": False}, "pass one of them"),
        ({"window": "5 minutes"}, "window='5 minutes' must be a Tumbling"),
        ({"aggregates": {"n": "median(x)"}}, r"aggregates\['n'\]='median\(x\)' must be count"),
        ({"aggregates": {}}, "at least one aggregate"),
        ({"allowed_lateness": -5}, "allowed_lateness=-5 must not be negative"),
        ({"allowed_lateness": "soon"}, "allowed_lateness='soon'"),
        ({"accumulation": "SOMETIMES"}, "accumulation='SOMETIMES'"),
        ({"accumulation": "DISCARDING", "fire_only_updated_panes": True}, "fire_only_updated_panes=True is invalid"),
        ({"window": session("PT2M")}, "keyed only"),
        ({"late_data": "window-end"}, r"late_data='window-end' must be one of \['event_time', 'window_end'\]"),
        ({"watermark": {"stream": "../x"}}, r"watermark.stream='../x'"),
        ({"watermark": {"delay": 5}}, "watermark=.* must be"),
        ({"keys": "region"}, "keys='region' must be a list"),
        ({"keys": ["pane"]}, "output columns"),
        ({"event_time": "event time"}, "event_time='event time'"),
        ({"output": ""}, "output='' must be a non-empty path"),
        ({"max_active_tis_per_dag": 2}, "max_active_tis_per_dag=2: a pipeline's runs share one state"),
        ({"emit_partition_keys": True}, r"emit_partition_keys=True needs asset=Asset\(...\)"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**REQUIRED, **kwargs})


def test_bad_window_durations_fail_naming_the_argument():
    with pytest.raises(ValueError, match=r"^window size=0 must be positive$"):
        tumbling(0)
    with pytest.raises(ValueError, match=r"^sliding\(size='PT10M', slide='PT3M', offset=0\): .* multiple of slide_ms"):
        sliding("PT10M", "PT3M")
    with pytest.raises(ValueError, match=r"^tumbling\(size='PT15M', offset='PT20M'\): window offset_ms=1200000"):
        tumbling("PT15M", "PT20M")


def test_arguments_become_the_core_spec():
    op = WindowedAggregateOperator(
        **{
            **REQUIRED,
            "aggregates": {"n": "count(*)", "total": "SUM(amount)", "u": SqlAggregate("x", "sum(a)", "sum({partial})")},
            "watermark": {"max_delay": "PT1M"},
            "keys": ["region"],
            "accumulation": "accumulating_and_retracting",
            "allowed_lateness": "PT10M",
        }
    )
    assert [(a.name, getattr(a, "function", None)) for a in op.spec.aggregates] == [
        ("n", "count"),
        ("total", "sum"),
        ("u", None),
    ]
    assert op.spec.watermark == BoundedOutOfOrderness(60_000) and op.spec.allowed_lateness_ms == 600_000
    assert op.spec.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING
    assert op.max_active_tis_per_dag == 1 and op.late_output == "/out_late"
    global_op = WindowedAggregateOperator(**{**REQUIRED, "window": global_window(), "early_firing": True})
    assert global_op.spec.watermark == StoreWatermark("orders")


def test_late_data_window_end_is_accepted_with_session_windows_and_carried_to_the_job():
    op = WindowedAggregateOperator(
        **{**REQUIRED, "window": session("PT2M"), "keys": ["region"], "late_data": "window_end"}
    )
    assert op.spec.late_data is LateData.WINDOW_END and op.spec.to_json()["late_data"] == "window_end"


def write_events(path, batch: int, rows: list[tuple[str, int | None, int, int]]) -> None:
    """(region, event minute, amount, arrival minute) rows as one Parquet file."""
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "region": [r[0] for r in rows],
            "event_time": pa.array(
                [None if r[1] is None else T0 + timedelta(minutes=r[1]) for r in rows], pa.timestamp("ms", tz="UTC")
            ),
            "amount": [r[2] for r in rows],
            "ingested_at": pa.array([T0 + timedelta(minutes=r[3]) for r in rows], pa.timestamp("ms", tz="UTC")),
        }
    )
    pq.write_table(table, path / f"batch-{batch}.parquet")


def aggregate_dag(tmp_path, pipeline: str, **kwargs):
    arguments = {
        "events": str(tmp_path / "events"),
        "event_time": "event_time",
        "arrival_column": "ingested_at",
        "keys": ["region"],
        "window": tumbling("PT15M"),
        "aggregates": {"orders": "count(*)", "revenue": "sum(amount)"},
        "watermark": {"stream": "orders"},
        "allowed_lateness": "PT30M",
        "accumulation": "ACCUMULATING_AND_RETRACTING",
        "output": str(tmp_path / "panes"),
        "store_path": str(tmp_path / "store"),
    }
    dag = fresh_dag("windows")
    with dag:
        WindowedAggregateOperator(task_id="revenue", pipeline=pipeline, **{**arguments, **kwargs})
    return dag


def publish(tmp_path, minute: int) -> None:
    WatermarkStoreHook(str(tmp_path / "store")).publish(
        {
            "stream": "orders",
            "lower_ms": T0_MS + minute * MINUTE,
            "upper_ms": T0_MS + minute * MINUTE,
            "stream_cut": {},
            "computed_at_ms": T0_MS + minute * MINUTE,
            "run_id": f"m{minute}",
        }
    )


def committed(pipeline: str):
    return Variable.get(windowed_variable_key(pipeline), default_var=None, deserialize_json=True)


def panes(tmp_path) -> list[tuple]:
    table = pq.read_table(tmp_path / "panes").to_pylist()
    return sorted(
        (r["wm_run"], r["region"], r["window_start"] - T0_MS, r["pane"], r["retraction"], r["orders"], r["revenue"])
        for r in table
    )


@pytest.mark.slow
def test_runs_fire_on_time_then_late_panes_commit_the_state_and_count_too_late_events(airflow_db, tmp_path):
    asset = Asset(name="revenue_15m_test", uri=f"file://{tmp_path / 'panes'}")
    dag = aggregate_dag(tmp_path, "revenue_a", asset=asset, emit_partition_keys=True)
    write_events(tmp_path / "events", 1, [("eu", 1, 10, 2), ("eu", 16, 5, 17), ("us", 20, 7, 50), ("eu", None, 1, 3)])
    publish(tmp_path, 15)
    run1, states = run_dag(dag, T0 + timedelta(minutes=30))
    assert states == {"revenue": "success"}
    first = committed("revenue_a")
    assert first["version"] == 1 and first["watermark_ms"] == T0_MS + 15 * MINUTE
    assert first["arrival_until_ms"] == T0_MS + 30 * MINUTE
    summary = xcom(run1, "revenue")
    assert summary["panes"]["ON_TIME"] == 1 and summary["invalid_event_time"] == 1 and summary["events_read"] == 3
    assert xcom(run1, "revenue", "state") == first

    # run 2: the us event arrived at minute 50 (after run 1's cut-off), one late eu event, one too late
    write_events(tmp_path / "events", 2, [("eu", 5, 1, 55), ("eu", 0, 100, 56)])
    publish(tmp_path, 60)
    _run2, states = run_dag(dag, T0 + timedelta(minutes=60))
    assert states == {"revenue": "success"}
    assert panes(tmp_path) == [
        (1, "eu", 0, "ON_TIME", False, 1, 10),
        (2, "eu", 0, "LATE", False, 3, 111),
        (2, "eu", 0, "ON_TIME", True, 1, 10),
        (2, "eu", 15 * MINUTE, "ON_TIME", False, 1, 5),
        (2, "us", 15 * MINUTE, "ON_TIME", False, 1, 7),
    ]
    second = committed("revenue_a")
    assert second["version"] == 2 and second["watermark_ms"] == T0_MS + 60 * MINUTE

    write_events(tmp_path / "events", 3, [("eu", 2, 1000, 70)])  # 00:02 < 01:00 - 30 min: too late
    run3, states = run_dag(dag, T0 + timedelta(minutes=90))
    assert states == {"revenue": "success"} and xcom(run3, "revenue")["too_late"] == 1
    # the output watermark (a derived stream named after the pipeline): the last window end at the watermark;
    # run 3 did not move the watermark, so nothing new was published
    derived = WatermarkStoreHook(str(tmp_path / "store")).read_history("revenue_a")
    assert [(r["lower_ms"] - T0_MS, r["upstream"]) for r in derived] == [
        (15 * MINUTE, "orders"),
        (60 * MINUTE, "orders"),
    ]
    late = pq.read_table(tmp_path / "panes_late")
    assert sorted((r["wm_run"], r["reason"], r["amount"]) for r in late.to_pylist()) == [
        (1, "INVALID_EVENT_TIME", 1),
        (3, "TOO_LATE", 1000),
    ]
    # the events' own timestamps keep their zone for every reader (not Spark's default INT96, read as zone-less)
    assert late.schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert T0 + timedelta(minutes=2) in late.column("event_time").to_pylist()

    # an older interval run after a newer one (catch-up, a manual run) has nothing to do and changes nothing
    third = committed("revenue_a")
    run_old, states = run_dag(dag, T0 + timedelta(minutes=60))
    assert states == {"revenue": "success"}
    assert xcom(run_old, "revenue")["covered_by"] == third["run_id"]
    assert committed("revenue_a") == third
    # a keyed event per hour of the windows a run fired: runs 1 and 2 (its late pane included) fired windows of
    # 00:00-01:00; run 3 fired none and the covered run changed nothing: one event each without a key
    assert asset_event_partition_keys("revenue_15m_test") == [
        (1, "2026-01-05T00:00:00"),
        (2, "2026-01-05T00:00:00"),
        (3, None),
        (3, None),
    ]


@pytest.mark.slow
def test_a_run_catching_up_behind_the_controller_takes_the_watermark_of_its_own_time(airflow_db, tmp_path):
    """The controller's rounds of 00:15 and 02:00 both published before the run of 00:30 (a catch-up): the run
    reads the events that arrived until 00:30, so it pairs them with the 00:15 watermark. With the 02:00 one, the
    event of 00:40 that arrives at 00:45 would be too late for the run of 01:00."""
    dag = aggregate_dag(tmp_path, "revenue_catchup")
    write_events(tmp_path / "events", 1, [("eu", 1, 10, 2)])
    publish(tmp_path, 15)
    publish(tmp_path, 120)
    _run1, states = run_dag(dag, T0 + timedelta(minutes=30))
    assert states == {"revenue": "success"}
    assert committed("revenue_catchup")["watermark_ms"] == T0_MS + 15 * MINUTE
    write_events(tmp_path / "events", 2, [("eu", 40, 5, 45)])
    run2, states = run_dag(dag, T0 + timedelta(minutes=60))
    assert states == {"revenue": "success"}
    summary = xcom(run2, "revenue")
    assert summary["too_late"] == 0 and summary["events_aggregated"] == 1
    assert committed("revenue_catchup")["watermark_ms"] == T0_MS + 15 * MINUTE  # no round computed by 01:00


@pytest.mark.slow
def test_rows_without_an_arrival_are_quarantined_and_counted_by_every_run_never_dropped(airflow_db, tmp_path):
    write_events(tmp_path / "events", 1, [("eu", 1, 10, 2)])
    (tmp_path / "events").mkdir(exist_ok=True)
    no_arrival = pa.table(
        {
            "region": ["us"],
            "event_time": pa.array([T0 + timedelta(minutes=3)], pa.timestamp("ms", tz="UTC")),
            "amount": [7],
            "ingested_at": pa.array([None], pa.timestamp("ms", tz="UTC")),
        }
    )
    pq.write_table(no_arrival, tmp_path / "events" / "batch-null.parquet")
    publish(tmp_path, 15)
    dag = aggregate_dag(tmp_path, "revenue_c")
    summaries = []
    for minutes in (30, 60):
        run, states = run_dag(dag, T0 + timedelta(minutes=minutes))
        assert states == {"revenue": "success"}
        summaries.append(xcom(run, "revenue"))
    assert [(s["events_read"], s["invalid_arrival"]) for s in summaries] == [(1, 1), (0, 1)]
    late = pq.read_table(tmp_path / "panes_late").to_pylist()
    assert sorted((r["wm_run"], r["reason"], r["region"], r["amount"]) for r in late) == [
        (1, "INVALID_ARRIVAL", "us", 7),
        (2, "INVALID_ARRIVAL", "us", 7),
    ]
    assert panes(tmp_path) == [(1, "eu", 0, "ON_TIME", False, 1, 10)]  # the us row is in no pane


def test_a_run_with_rows_without_an_arrival_warns_naming_the_column_and_the_count(capsys):
    op = WindowedAggregateOperator(**REQUIRED)
    manifest = WindowedManifest.from_json(
        {
            "pipeline": "w1", "run_id": "r", "version": 3, "watermark_ms": None, "previous_watermark_ms": None,
            "max_event_time_ms": None, "arrival_from_ms": None, "arrival_until_ms": T0_MS,
            "totals": {"events_read": 0, "invalid_arrival": 4}, "output": "/out", "late_output": "/out_late",
        }
    )  # fmt: skip
    op._log_manifest(manifest)  # the task logger (structlog) writes to stdout here
    warning = next(line for line in capsys.readouterr().out.splitlines() if "INVALID_ARRIVAL" in line)
    assert "warning" in warning
    assert "4 rows of the events have a null, unparseable or out-of-range 'ingested_at'" in warning
    assert "INVALID_ARRIVAL in /out_late (wm_run=3)" in warning


def test_a_run_with_nan_or_infinite_values_warns_naming_the_aggregated_columns_and_the_count(capsys):
    op = WindowedAggregateOperator(
        **{**REQUIRED, "aggregates": {"n": "count(*)", "s": "sum(amount)", "a": "avg(amount)"}}
    )
    manifest = WindowedManifest.from_json(
        {
            "pipeline": "w1", "run_id": "r", "version": 3, "watermark_ms": None, "previous_watermark_ms": None,
            "max_event_time_ms": None, "arrival_from_ms": None, "arrival_until_ms": T0_MS,
            "totals": {"events_read": 5, "invalid_value": 2}, "output": "/out", "late_output": "/out_late",
        }
    )  # fmt: skip
    op._log_manifest(manifest)
    warning = next(line for line in capsys.readouterr().out.splitlines() if "INVALID_VALUE" in line)
    assert "warning" in warning
    assert "2 events hold NaN or infinity in a column the aggregates read ('amount')" in warning
    assert "INVALID_VALUE in /out_late (wm_run=3)" in warning


def test_a_run_with_sums_past_a_64_bit_integer_warns_with_the_count(capsys):
    op = WindowedAggregateOperator(**REQUIRED)
    manifest = WindowedManifest.from_json(
        {
            "pipeline": "w1", "run_id": "r", "version": 3, "watermark_ms": None, "previous_watermark_ms": None,
            "max_event_time_ms": None, "arrival_from_ms": None, "arrival_until_ms": T0_MS,
            "totals": {"events_read": 2, "sums_out_of_range": 1}, "output": "/out", "late_output": None,
        }
    )  # fmt: skip
    op._log_manifest(manifest)
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines() if "past a 64-bit integer" in line)
    assert "warning" in warning
    assert "1 panes of run v3 have a sum of integers past a 64-bit integer: written as null" in warning
    assert re.search(r"sums out of range +1\b", out)  # the totals table


@pytest.mark.slow
def test_a_failed_run_commits_nothing_and_a_changed_spec_is_refused(airflow_db, tmp_path):
    write_events(tmp_path / "events", 1, [("eu", 1, 10, 2)])
    publish(tmp_path, 15)
    broken = aggregate_dag(tmp_path, "revenue_b", event_time="no_such_column")
    _run, states = run_dag(broken, T0 + timedelta(minutes=30))
    assert states == {"revenue": "failed"} and committed("revenue_b") is None

    _run, states = run_dag(aggregate_dag(tmp_path, "revenue_b"), T0 + timedelta(minutes=30))
    assert states == {"revenue": "success"} and committed("revenue_b")["version"] == 1
    changed = aggregate_dag(tmp_path, "revenue_b", window=tumbling("PT5M"))
    _run, states = run_dag(changed, T0 + timedelta(minutes=60))
    assert states == {"revenue": "failed"} and committed("revenue_b")["version"] == 1


def test_a_missing_events_path_fails_the_run_and_commits_nothing_unless_missing_events_are_allowed(
    airflow_db, tmp_path, capfd
):
    publish(tmp_path, 15)
    _run, states = run_dag(aggregate_dag(tmp_path, "w_missing"), T0 + timedelta(minutes=30))
    assert states == {"revenue": "failed"} and committed("w_missing") is None
    assert f"events='{tmp_path / 'events'}' does not exist: create it" in capfd.readouterr().out

    allowed = aggregate_dag(tmp_path, "w_missing", allow_missing_events=True)
    _run, states = run_dag(allowed, T0 + timedelta(minutes=30))
    assert states == {"revenue": "success"} and committed("w_missing")["version"] == 1


def test_a_logical_time_in_the_future_is_refused_before_anything_is_read(airflow_db, tmp_path):
    future = datetime.now(UTC) + timedelta(days=1)
    _run, states = run_dag(aggregate_dag(tmp_path, "w_future", logical_time=future.isoformat()), T0)
    assert states == {"revenue": "failed"}
    assert committed("w_future") is None


def rollup_of(source, **kwargs):
    arguments = {
        "task_id": "hourly",
        "pipeline": "hourly",
        "upstream": source,
        "window": tumbling("PT1H"),
        "aggregates": {"n": "sum(n)"},
        "output": "/hourly",
        "store_path": "/store",
    }
    return WindowedAggregateOperator(**{**arguments, **kwargs})


def test_a_rollup_of_an_operator_reads_its_panes_and_waits_on_its_output_stream():
    five = WindowedAggregateOperator(**{**REQUIRED, "output_stream": "w1_out", "accumulation": "DISCARDING"})
    hourly = rollup_of(five)
    assert hourly.spec.upstream == UpstreamPanes("w1", Tumbling(300_000), Accumulation.DISCARDING)
    assert hourly.events == "/out" and hourly.spec.watermark == StoreWatermark("w1_out")
    kept = rollup_of(UpstreamPanes("w1", Tumbling(300_000)), window=None, events="/panes")
    assert kept.spec.output_window == Tumbling(300_000) and kept.spec.watermark == StoreWatermark("w1")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": tumbling("PT7M")}, "window=Tumbling.*must be a multiple of the upstream window"),
        ({"window": sliding("PT1H", "PT5M")}, "must be tumbling over tumbling panes"),
        ({"upstream": "w1"}, "upstream='w1' must be a WindowedAggregateOperator or UpstreamPanes"),
        ({"upstream": None}, "event_time=None: name the event-time column"),
    ],
)
def test_bad_rollups_fail_at_parse_time_naming_the_argument(kwargs, message):
    five = WindowedAggregateOperator(**REQUIRED)
    with pytest.raises(ValueError, match=message):
        rollup_of(five, **kwargs)


MERGE = {
    "task_id": "m",
    "pipeline": "m",
    "inputs": {
        "orders": {"events": "/orders", "event_time": "t", "arrival_column": "a", "watermark": {"stream": "orders"}},
        "deliveries": {"events": "/deliveries/{{ ds }}", "event_time": "t", "watermark": {"stream": "deliveries"}},
    },
    "window": tumbling("PT10M"),
    "aggregates": {"n": "count(orders.*)", "d": "count(deliveries.*)"},
    "output": "/out",
    "store_path": "/store",
}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"aggregates": {"n": "sum(amount)"}}, r"aggregates\['n'\]='sum\(amount\)' must say which input"),
        ({"aggregates": {"n": "sum(refunds.amount)"}}, "refers to input 'refunds', which is not among inputs"),
        ({"inputs": {"orders": MERGE["inputs"]["orders"]}}, "must map at least two input names"),
        ({"inputs": {**MERGE["inputs"], "x": {"events": "/x"}}}, r"inputs\['x'\]=.* must give events, event_time"),
        ({"inputs": {**MERGE["inputs"], "x": {**MERGE["inputs"]["orders"], "when": 1}}}, "unknown fields"),
        ({"inputs": {**MERGE["inputs"], "a__b": MERGE["inputs"]["orders"]}}, "a name without '__'"),
        ({"events": "/e"}, "inputs= gives each input its events"),
        ({"idle_timeout": 0}, "idle_timeout=0 must be positive"),
    ],
)
def test_bad_merges_fail_at_parse_time_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WindowedAggregateOperator(**{**MERGE, **kwargs})


def test_an_idle_timeout_without_inputs_is_refused():
    with pytest.raises(ValueError, match="applies to merged inputs= only"):
        WindowedAggregateOperator(**{**REQUIRED, "idle_timeout": "PT5M"})


def per_run_dag(tmp_path, pipeline: str):
    """Events in a folder per run (no arrival column): ``events/hour=<the run's logical hour>``."""
    dag = fresh_dag(pipeline)
    with dag:
        WindowedAggregateOperator(
            task_id="revenue", pipeline=pipeline,
            events=f"{tmp_path / 'events'}/hour={{{{ logical_date.strftime('%H') }}}}", event_time="event_time",
            window=tumbling("PT1H"), aggregates={"n": "count(*)"}, watermark={"max_delay": "PT1M"},
            allowed_lateness="PT2H", output=str(tmp_path / "panes"), store_path=str(tmp_path / "store"),
        )  # fmt: skip
    return dag


def write_hour(tmp_path, hour: int, events: int) -> None:
    """``events`` events of the hour before ``hour``, in the folder of the run at ``hour``."""
    folder = tmp_path / "events" / f"hour={hour:02d}"
    folder.mkdir(parents=True)
    times = [T0 + timedelta(hours=hour - 1, minutes=5 + i) for i in range(events)]
    pq.write_table(pa.table({"event_time": pa.array(times, pa.timestamp("ms", tz="UTC"))}), folder / "part.parquet")


@pytest.mark.slow
def test_reading_a_folder_per_run_an_older_run_after_a_newer_one_reads_its_folder_once(airflow_db, tmp_path):
    """The run of 02:00 goes after the run of 03:00 (catch-up order, or it failed and was retried later): it reads
    its own folder, which the run of 03:00 did not read; run again, it reads nothing twice."""
    dag = per_run_dag(tmp_path, "w_per_run")
    write_hour(tmp_path, 2, 3)
    write_hour(tmp_path, 3, 4)
    newer, states = run_dag(dag, T0 + timedelta(hours=3))
    assert states == {"revenue": "success"} and xcom(newer, "revenue")["events_read"] == 4
    older, states = run_dag(dag, T0 + timedelta(hours=2))
    assert states == {"revenue": "success"}
    assert xcom(older, "revenue")["events_read"] == 3 and "covered_by" not in xcom(older, "revenue")
    state = committed("w_per_run")
    hour = 3_600_000
    assert state["version"] == 2 and state["arrival_until_ms"] == T0_MS + 3 * hour  # never back
    assert state["read_intervals"] == [
        [T0_MS + 2 * hour, T0_MS + 2 * hour + 1],
        [T0_MS + 3 * hour, T0_MS + 3 * hour + 1],
    ]

    again, states = run_dag(dag, T0 + timedelta(hours=3))  # both folders read: nothing to do
    assert states == {"revenue": "success"} and xcom(again, "revenue")["covered_by"] == state["run_id"]
    assert committed("w_per_run") == state
    # the watermark (02:07) had passed the window of 01:00 when its events came: it fired with all three (and stays
    # open for its lateness); the window of 02:00 holds the four of the run of 03:00
    fired = [(r["window_start"] - T0_MS, r["pane"], r["n"]) for r in pq.read_table(tmp_path / "panes").to_pylist()]
    assert fired == [(hour, "ON_TIME", 3)]
    open_windows = [(r["window_start"] - T0_MS, r["p_n"]) for r in pq.read_table(state["state_path"]).to_pylist()]
    assert open_windows == [(hour, 3), (2 * hour, 4)]
