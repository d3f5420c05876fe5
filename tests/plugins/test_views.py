"""How far each stream is behind its expected progress and a derived stream behind its upstream, read from a
real store written by the hook (the page's overview, no Airflow)."""

from __future__ import annotations

import json

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.plugins.views import explain_with_sensors, overview

JAN = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MIN, HOUR = 60_000, 3_600_000
NOW = JAN + 322 * 24 * HOUR  # the wall clock, months after the data


def controller_stream(store: WatermarkStoreHook, stream: str, lower: int, round_ms: int) -> None:
    store.publish({"stream": stream, "lower_ms": lower, "upper_ms": lower, "computed_at_ms": round_ms,
                   "controller": "marks"})  # fmt: skip
    store.write_stream_status(stream, {"stream": stream, "controller": "marks", "checked_at_ms": round_ms})


def derived_stream(store: WatermarkStoreHook, stream: str, lower: int, round_ms: int, upstream: str) -> None:
    store.publish({"stream": stream, "lower_ms": lower, "upper_ms": lower, "computed_at_ms": round_ms,
                   "pipeline": stream, "upstream": upstream})  # fmt: skip


def rows(store: WatermarkStoreHook) -> dict:
    return {row["stream"]: row for row in overview(store, NOW)["streams"]}


def test_a_stream_is_behind_its_controllers_latest_round_not_the_wall_clock(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR + 5 * MIN)
    store.write_stream_status("clicks", {"controller": "marks", "checked_at_ms": JAN + 13 * HOUR})  # no advance
    clicks = rows(store)["clicks"]
    assert clicks["lag"] == "321d 12h"  # wall-clock: tells nothing on replayed data
    assert (clicks["expected_ms"], clicks["behind_expected"]) == (JAN + 13 * HOUR, "1h")
    assert clicks["behind_upstream_ms"] is None and clicks["behind_reason"] is None


def test_a_derived_stream_that_has_not_run_since_its_upstream_advanced_is_flagged_with_why(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR)
    derived_stream(store, "sessions", JAN + 9 * HOUR, JAN + 9 * HOUR, "clicks")
    sessions = rows(store)["sessions"]
    assert sessions["behind_upstream_ms"] == 3 * HOUR and sessions["behind_expected"] == "0s"
    assert sessions["behind_reason"] == (
        "3h behind clicks: pipeline sessions last ran at 2026-01-01T09:00:00.000Z; clicks has been computed up "
        "to 2026-01-01T12:00:00.000Z since"
    )


def test_a_derived_stream_that_ran_but_did_not_advance_says_so(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR)
    derived_stream(store, "sessions", JAN + 11 * HOUR, JAN + 12 * HOUR, "clicks")
    sessions = rows(store)["sessions"]
    assert sessions["behind_expected"] == "1h"
    assert sessions["behind_reason"] == (
        "1h behind clicks: pipeline sessions ran at 2026-01-01T12:00:00.000Z and its watermark stayed at "
        "2026-01-01T11:00:00.000Z"
    )


def test_a_derived_stream_whose_pipeline_failed_partitions_names_them(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR)
    derived_stream(store, "sessions", JAN + 11 * HOUR, JAN + 12 * HOUR, "clicks")
    failed = ["2026-01-01T11:00:00Z/eu"]
    store.write_pipeline_state("sessions", {"units": [], "spec": {}, "state": {}, "last_summary": {"failed": failed}})
    assert rows(store)["sessions"]["behind_reason"] == (
        "1h behind clicks: the last run of pipeline sessions failed 1 partition(s): 2026-01-01T11:00:00Z/eu"
    )


def test_a_merged_stream_is_measured_against_its_slowest_upstream_and_level_is_not_flagged(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR)
    controller_stream(store, "views", JAN + 10 * HOUR, JAN + 12 * HOUR)
    derived_stream(store, "joined", JAN + 10 * HOUR, JAN + 12 * HOUR, "clicks, views")
    derived_stream(store, "late_join", JAN + 9 * HOUR, JAN + 12 * HOUR, "clicks, views")
    found = rows(store)
    assert found["joined"]["behind_upstream_ms"] is None  # level with views, the slower of its two upstreams
    assert found["late_join"]["behind_upstream_ms"] == HOUR
    assert found["late_join"]["behind_reason"].startswith("1h behind views: ")


def test_a_window_aggregate_that_has_read_all_its_upstream_is_not_behind_while_its_window_is_open(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 11 * HOUR + 55 * MIN, JAN + 12 * HOUR)
    derived_stream(store, "clicks_15m", JAN + 11 * HOUR + 45 * MIN, JAN + 12 * HOUR, "clicks")
    derived_stream(store, "clicks_1h", JAN + 10 * HOUR, JAN + 12 * HOUR, "clicks")
    for pipeline, consumed in (("clicks_15m", JAN + 11 * HOUR + 55 * MIN), ("clicks_1h", JAN + 10 * HOUR + 30 * MIN)):
        store.write_pipeline_state(pipeline, {"kind": "windowed", "version": 1, "watermark_ms": consumed})
    found = rows(store)
    assert found["clicks_15m"]["behind_upstream_ms"] is None  # 11:45 is the last window end before 11:55
    assert found["clicks_1h"]["behind_upstream_ms"] == 115 * MIN  # it read clicks only up to 10:30


def test_a_waiting_sensor_explains_a_derived_stream_behind_its_upstream_and_a_successful_one_does_not(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    controller_stream(store, "clicks", JAN + 12 * HOUR, JAN + 12 * HOUR)
    derived_stream(store, "sessions", JAN + 9 * HOUR, JAN + 9 * HOUR, "clicks")
    streams = overview(store, NOW)["streams"]
    store_reason = {row["stream"]: row for row in streams}["sessions"]["behind_reason"]
    for row in streams:
        row["dag_id"] = "sessions_dag" if row["stream"] == "sessions" else None
    sensor = {"dag_id": "sessions_dag", "task_id": "wait_for_clicks", "state": "success", "start_ms": JAN + 12 * HOUR,
              "end_ms": None, "interval_end_ms": JAN + 13 * HOUR}  # fmt: skip
    explain_with_sensors(streams, {"sessions_dag": sensor})
    assert {row["stream"]: row for row in streams}["sessions"]["behind_reason"] == store_reason

    explain_with_sensors(streams, {"sessions_dag": {**sensor, "state": "deferred"}})
    assert {row["stream"]: row for row in streams}["sessions"]["behind_reason"] == (
        "3h behind clicks: sensor wait_for_clicks of DAG sessions_dag has been waiting since "
        "2026-01-01T12:00:00.000Z (deferred), in the run of the interval ending 2026-01-01T13:00:00.000Z"
    )
    assert {row["stream"]: row for row in streams}["clicks"]["behind_reason"] is None


def test_a_windowed_runs_invalid_count_adds_every_invalid_reason_of_its_rows(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.write_pipeline_state("orders_5m", {"kind": "windowed", "version": 1, "watermark_ms": JAN}, restart=True)
    totals = {"events_read": 10, "too_late": 1, "invalid_event_time": 1, "invalid_value": 2, "invalid_arrival": 4}
    manifest = {"version": 1, "run_id": "r1", "watermark_ms": JAN, "totals": totals}
    store.fs.makedirs(store.pipeline_run_path("orders_5m", 1).rsplit("/", 1)[0], exist_ok=True)
    store.fs.pipe_file(store.pipeline_run_path("orders_5m", 1), json.dumps(manifest).encode())
    [run] = overview(store, NOW)["windowed_pipelines"][0]["runs"]
    assert (run["events_read"], run["too_late"], run["invalid"]) == (10, 1, 3)  # an invalid arrival is no run's row


def test_a_pipeline_row_names_the_dag_its_state_was_committed_by(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.write_pipeline_state("orders_5m", {"kind": "windowed", "version": 1, "dag_id": "orders"}, restart=True)
    store.write_pipeline_state("daily", {"units": [], "spec": {}, "state": {}}, restart=True)  # an older state
    data = overview(store, NOW)
    assert [(r["pipeline"], r["dag_id"]) for r in data["windowed_pipelines"]] == [("orders_5m", "orders")]
    assert [(r["pipeline"], r["dag_id"]) for r in data["partition_pipelines"]] == [("daily", None)]


def test_a_controller_stream_without_a_watermark_yet_names_the_dag_of_its_status(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.write_stream_status("orders", {"stream": "orders", "controller": "marks", "dag_id": "ingest"})
    assert [(r["stream"], r["dag_id"]) for r in overview(store, NOW)["streams"]] == [("orders", "ingest")]
