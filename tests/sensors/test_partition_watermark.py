from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, TaskDeferred

from airflow_provider_wm.core.partitions import PartitionSpec, UnitResult, UnitStatus, iso_ms
from airflow_provider_wm.sensors.base import DEFERRAL_MARGIN
from airflow_provider_wm.sensors.partition_watermark import PartitionWatermarkSensor
from airflow_provider_wm.triggers.partitions import PartitionWatermarkTrigger
from tests.airflow_helpers import fresh_dag, run_dag, xcom
from tests.triggers.test_partitions import first_event, known_pipeline, ran_until, state_document, write


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pipeline": "../etc"}, "pipeline='../etc'"),
        ({"store_path": ""}, "store_path=''"),
        ({"start": "yesterday-ish"}, "start='yesterday-ish'"),
        ({"end": "soon"}, "end='soon'"),
        ({"start": datetime(2026, 1, 1)}, "start=datetime.datetime"),  # naive: no time zone
        ({"start": "2026-01-02", "end": "2026-01-02"}, "start='2026-01-02' must be before end='2026-01-02'"),
        (
            {"start": 1767312000000, "end": 1767225600000},
            r"start=1767312000000 must be before end=1767225600000 \(the range \[2026-01-02T00:00:00.000Z, "
            r"2026-01-01T00:00:00.000Z\) is empty\)",
        ),
        ({"fail_on_unknown_pipeline": "yes"}, "fail_on_unknown_pipeline='yes' must be True or False"),
        ({"deferrable": "no"}, "deferrable='no' must be True or False"),
        ({"soft_fail": "no"}, "soft_fail='no' must be True or False"),  # truthy: every failure would skip
        ({"soft_fail": None}, "soft_fail=None must be True or False"),
        ({"never_fail": "false"}, "never_fail='false' must be True or False"),
        ({"storage_options": ["anon"]}, r"storage_options=\['anon'\] must be a mapping of fsspec options"),
        ({"store_path": "gs:/bucket/wm"}, "store_path='gs:/bucket/wm' is not a URL: write gs://"),
        ({"timeout": -1}, "timeout=-1 must be a finite, non-negative number of seconds or a timedelta"),
        ({"timeout": float("inf")}, "timeout=inf must be a finite, non-negative number of seconds"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs: dict[str, Any], message: str) -> None:
    args = {"task_id": "t", "pipeline": "orders", "store_path": "/tmp/x", "start": 0, "end": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        PartitionWatermarkSensor(**args)


def test_templated_arguments_are_checked_when_rendered() -> None:
    sensor = PartitionWatermarkSensor(task_id="t", pipeline="{{ params.p }}", store_path="/x", start="{{ ds }}")
    assert (sensor.start, sensor.end) == ("{{ ds }}", None)  # None: the run's data_interval_end
    sensor.start, sensor.end = "2026-01-02", "2026-01-01"  # as if rendered so
    with pytest.raises(ValueError, match="start='2026-01-02' must be before end='2026-01-01'"):
        sensor._range_ms({})


def sensor(store: str, start: str, end: str, **kwargs: Any) -> PartitionWatermarkSensor:
    return PartitionWatermarkSensor(task_id="t", pipeline="orders", store_path=store, start=start, end=end, **kwargs)


def test_poke_is_done_when_every_overlapping_work_unit_succeeded(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    result = sensor(str(tmp_path), "2026-01-01", "2026-01-10").poke({})
    assert result.is_done
    assert result.xcom_value == {
        "pipeline": "orders",
        "start_ms": iso_ms("2026-01-01"),
        "end_ms": iso_ms("2026-01-10"),
        "work_units": 18,
        "run_id": "r1",
        "committed_at": "2026-01-10T00:00:00+00:00",
    }


def test_poke_is_not_done_while_a_partition_of_the_range_is_missing(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    assert not sensor(str(tmp_path), "2026-01-05", "2026-01-11").poke({}).is_done


def test_poke_is_not_done_while_one_unit_of_a_partition_failed(tmp_path: Path) -> None:
    state = ran_until("2026-01-10").apply(
        [UnitResult(iso_ms("2026-01-03"), iso_ms("2026-01-04"), "eu", UnitStatus.FAILED)]
    )
    write(str(tmp_path), state_document(state=state))
    assert not sensor(str(tmp_path), "2026-01-01", "2026-01-10").poke({}).is_done
    assert sensor(str(tmp_path), "2026-01-04", "2026-01-10").poke({}).is_done


def test_poke_is_not_done_before_the_pipelines_first_commit(tmp_path: Path) -> None:
    known_pipeline(str(tmp_path))  # its first run has started
    assert not sensor(str(tmp_path), "2026-01-01", "2026-01-10").poke({}).is_done


def test_a_month_is_done_only_when_all_its_days_arrived(tmp_path: Path) -> None:
    monthly = PartitionSpec.build({"from": "2026-01-01", "to": "-"}, "monthly")
    part_of_january = ran_until("2026-01-20T00:00:00", spec=monthly)  # a partial partition [01-01, 01-20)
    write(str(tmp_path), state_document(spec=monthly, state=part_of_january))
    wait_for_january = sensor(str(tmp_path), "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z")
    assert not wait_for_january.poke({}).is_done
    all_of_january = ran_until("2026-02-01T00:00:00", spec=monthly, state=part_of_january)
    write(str(tmp_path), state_document(spec=monthly, state=all_of_january, run_id="r2"))
    result = wait_for_january.poke({})
    assert result.is_done and result.xcom_value is not None
    assert result.xcom_value["work_units"] == 2 and result.xcom_value["run_id"] == "r2"


def test_deferrable_execute_hands_waiting_to_the_trigger_with_the_range_and_timeout(tmp_path: Path) -> None:
    known_pipeline(str(tmp_path))
    waiting = sensor(str(tmp_path), "2026-01-01", "2026-01-10", deferrable=True, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, PartitionWatermarkTrigger)
    assert (trigger.pipeline, trigger.start_ms, trigger.end_ms) == (
        "orders",
        iso_ms("2026-01-01"),
        iso_ms("2026-01-10"),
    )
    # Airflow's deferral timeout leaves the trigger's own deadline a poll and a margin to report first
    assert deferred.value.timeout.total_seconds() == 60 + waiting.poke_interval + DEFERRAL_MARGIN
    assert trigger.timeout_at_ms is not None and 0 < trigger.timeout_at_ms - time.time() * 1000 <= 60_000
    assert trigger.serialize()[1]["unknown_pipeline_argument"] == "pipeline='orders'"


def test_deferrable_execute_returns_at_once_when_already_complete(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    result = sensor(str(tmp_path), "2026-01-01", "2026-01-10", deferrable=True).execute({})
    assert result["work_units"] == 18


# ------------------------------------------------------------------------------------ real runs (dag.test)

START, END = "2026-01-02", "2026-01-05"


def sensor_dag(store: str, **kwargs: Any) -> DAG:
    dag = fresh_dag("partition_sensor")
    with dag:
        PartitionWatermarkSensor(
            task_id="wait",
            pipeline="orders",
            store_path=store,
            start="{{ params.start }}",
            end="{{ params.end }}",
            params={"start": START, "end": END},
            poke_interval=0.5,
            **kwargs,
        )
    return dag


@pytest.mark.parametrize("deferrable", [False, True])
def test_passes_when_every_work_unit_of_the_range_succeeded(airflow_db: Path, tmp_path: Path, deferrable: bool) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    run, states = run_dag(sensor_dag(str(tmp_path), deferrable=deferrable, timeout=30))
    assert states == {"wait": "success"}
    assert xcom(run, "wait") == {
        "pipeline": "orders",
        "start_ms": iso_ms(START),
        "end_ms": iso_ms(END),
        "work_units": 6,  # 3 days x 2 units
        "run_id": "r1",
        "committed_at": "2026-01-10T00:00:00+00:00",
    }


@pytest.mark.parametrize("soft_fail", [False, True], ids=["fails", "soft_fail_skips"])
@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
def test_times_out_for_real_when_a_work_unit_stays_pending(
    airflow_db: Path, tmp_path: Path, deferrable: bool, soft_fail: bool
) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-04")))  # 01-04 never arrives
    started = time.monotonic()
    run, states = run_dag(sensor_dag(str(tmp_path), deferrable=deferrable, timeout=2, soft_fail=soft_fail))
    assert time.monotonic() - started >= 2
    assert states == {"wait": "skipped" if soft_fail else "failed"}
    assert str(run.state) == ("success" if soft_fail else "failed")


def test_reschedule_mode_times_out_too(airflow_db: Path, tmp_path: Path) -> None:
    known_pipeline(str(tmp_path))
    _run, states = run_dag(sensor_dag(str(tmp_path), mode="reschedule", timeout=2))
    assert states == {"wait": "failed"}


def test_deferred_sensor_resumes_when_the_pipeline_commits_later(airflow_db: Path, tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-04")))
    publisher = threading.Timer(
        2.0, write, args=(str(tmp_path), state_document(state=ran_until("2026-01-10"), run_id="r2"))
    )
    publisher.start()
    try:
        run, states = run_dag(sensor_dag(str(tmp_path), deferrable=True, timeout=60))
    finally:
        publisher.cancel()
    assert states == {"wait": "success"}
    assert xcom(run, "wait")["run_id"] == "r2"  # the first poke saw r1, incomplete


# ------------------------------------------------------------------------ pipelines the store has never seen


def test_a_pipeline_the_store_has_never_seen_fails_the_poke_at_once_naming_the_known_ones(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")), pipeline="orders_daily")
    known_pipeline(str(tmp_path), "orders_hourly")
    waiting = PartitionWatermarkSensor(
        task_id="t", pipeline="ordrs_daily", store_path=str(tmp_path), start="2026-01-01", end="2026-01-02"
    )
    with pytest.raises(AirflowFailException) as failed:
        waiting.poke({})
    assert str(failed.value) == (
        f"pipeline='ordrs_daily': unknown pipeline 'ordrs_daily': the store at {tmp_path} has orders_daily, "
        "orders_hourly"
    )


def test_a_deferrable_sensor_fails_at_its_first_poke_on_an_unknown_pipeline(tmp_path: Path) -> None:
    waiting = sensor(str(tmp_path), "2026-01-01", "2026-01-10", deferrable=True, timeout=60)
    with pytest.raises(AirflowFailException, match=f"unknown pipeline 'orders': the store at {tmp_path} has no"):
        waiting.execute({})


def test_the_trigger_of_a_deferrable_sensor_ends_with_the_known_names_and_the_sensor_fails(tmp_path: Path) -> None:
    known_pipeline(str(tmp_path), "orders_daily")
    waiting = PartitionWatermarkSensor(
        task_id="t", pipeline="ordrs", store_path=str(tmp_path), start="2026-01-01", end="2026-01-02", deferrable=True
    )
    trigger = waiting.trigger({}, int(time.time() * 1000) + 60_000)
    event = first_event(PartitionWatermarkTrigger(**trigger.serialize()[1]))  # as the triggerer loads it
    message = f"pipeline='ordrs': unknown pipeline 'ordrs': the store at {tmp_path} has orders_daily"
    assert event == {"status": "unknown_pipeline", "message": message}
    with pytest.raises(AirflowFailException) as failed:
        waiting.execute_complete({}, event)
    assert str(failed.value) == message


def test_with_fail_on_unknown_pipeline_off_a_sensor_waits_for_a_pipeline_not_run_yet(tmp_path: Path) -> None:
    waiting = sensor(
        str(tmp_path), "2026-01-01", "2026-01-10", fail_on_unknown_pipeline=False, deferrable=True, timeout=60
    )
    assert not waiting.poke({}).is_done
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute({})
    assert deferred.value.trigger.serialize()[1]["unknown_pipeline_argument"] is None


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferrable"])
def test_an_unknown_pipeline_fails_the_run_at_once_instead_of_timing_out(
    airflow_db: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    known_pipeline(str(tmp_path), "orders_daily")
    started = time.monotonic()
    _run, states = run_dag(sensor_dag(str(tmp_path), deferrable=deferrable, timeout=600, retries=3))
    assert states == {"wait": "failed"}  # no retry: a misspelt name does not heal
    assert time.monotonic() - started < 60
    assert f"unknown pipeline 'orders': the store at {tmp_path} has orders_daily" in capfd.readouterr().out


def test_with_soft_fail_an_unknown_pipeline_skips(airflow_db: Path, tmp_path: Path) -> None:
    _run, states = run_dag(sensor_dag(str(tmp_path), timeout=600, soft_fail=True))
    assert states == {"wait": "skipped"}


# ----------------------------------------------------------------------------------------- times in messages


def test_the_poke_log_line_shows_the_range_and_pending_work_units_in_iso_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    capsys.readouterr()
    assert not sensor(str(tmp_path), "2026-01-09", "2026-01-11").poke({}).is_done
    line = capsys.readouterr().out
    assert (
        "Pipeline orders: 2 of 4 work units in [2026-01-09T00:00:00.000Z, 2026-01-11T00:00:00.000Z) pending "
        "(run r1): [2026-01-10T00:00:00.000Z, 2026-01-11T00:00:00.000Z) eu, "
        "[2026-01-10T00:00:00.000Z, 2026-01-11T00:00:00.000Z) us"
    ) in line
    assert str(iso_ms("2026-01-09")) not in line


def test_the_timeout_message_shows_the_range_and_first_pending_units_in_iso_utc(tmp_path: Path) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    waiting = sensor(str(tmp_path), "2026-01-09", "2026-01-11", deferrable=True, timeout=1)
    trigger = waiting.trigger({}, int(time.time() * 1000))
    event = first_event(PartitionWatermarkTrigger(**{**trigger.serialize()[1], "poll_interval": 0.01}))
    with pytest.raises(AirflowSensorTimeout) as timed_out:
        waiting.execute_complete({}, event)
    message = str(timed_out.value)
    assert message == (
        "Pipeline orders has 2 work units pending (first: [2026-01-10T00:00:00.000Z, 2026-01-11T00:00:00.000Z) eu, "
        "[2026-01-10T00:00:00.000Z, 2026-01-11T00:00:00.000Z) us) in [2026-01-09T00:00:00.000Z, "
        "2026-01-11T00:00:00.000Z) after the timeout of 1.0s"
    )


def test_a_range_without_partitions_warns_with_its_bounds_in_iso_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(str(tmp_path), state_document(state=ran_until("2026-01-10")))
    capsys.readouterr()
    before_the_spec = sensor(str(tmp_path), "2025-12-01", "2025-12-02")
    assert before_the_spec.poke({}).is_done
    assert (
        "Pipeline orders has no partition overlapping [2025-12-01T00:00:00.000Z, 2025-12-02T00:00:00.000Z): "
        "nothing to wait for"
    ) in capsys.readouterr().out
