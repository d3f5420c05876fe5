"""The base of the stateful operators: what a run writes before and after its checked commit."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from airflow.models.variable import Variable
from airflow.sdk import Asset

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators.base import JobRound, Outcome
from airflow_provider_wm.operators.incremental_partitions import IncrementalPartitionsOperator
from airflow_provider_wm.operators.windowed_aggregate import WindowedAggregateOperator, tumbling
from airflow_provider_wm.state import PipelineState, commit_pipeline_state, pipeline_variable_key
from tests.airflow_helpers import asset_event_partition_keys, asset_state, fresh_dag, register, run_dag, xcom
from tests.operators.test_incremental_partitions import committed

JAN_6 = datetime(2026, 1, 6, tzinfo=UTC)


class OvertakenPartitionsOperator(IncrementalPartitionsOperator):
    """Its job runs for real; while it runs, an overlapping run of the same pipeline commits and mirrors its
    state (two DAGs sharing a pipeline name, or a zombie task and its retry)."""

    def compute(self, run: JobRound[PipelineState]) -> Outcome[PipelineState]:
        outcome = super().compute(run)
        assert outcome.document is not None
        overtaking = replace(outcome.document, run_id="overtaking_run")
        commit_pipeline_state(overtaking, run.committed)
        run.store.write_pipeline_state(self.pipeline, overtaking.to_json())
        return outcome


class FailingPastTheCommitOperator(IncrementalPartitionsOperator):
    """Its first attempt commits, then fails writing the store's copy (a store blip; a worker lost after the
    commit ends the same way): the retry finds its own run's commit."""

    failed: ClassVar[set[str]] = set()

    def mirror_document(self, document: PipelineState, summary: dict[str, Any] | None) -> dict[str, Any] | None:
        if self.pipeline not in self.failed:
            self.failed.add(self.pipeline)
            raise OSError("the store is not reachable")
        return super().mirror_document(document, summary)


def one_day_pipeline(tmp_path, operator: type[IncrementalPartitionsOperator], pipeline: str, **kwargs: Any):
    """A DAG of one partitions task over an empty source: the real job runs one day, 2026-01-05."""
    (tmp_path / "orders").mkdir()
    dag = fresh_dag(pipeline)
    with dag:
        operator(
            task_id="orders",
            pipeline=pipeline,
            source=str(tmp_path / "orders"),
            time_column="event_time",
            watermark={"from": "2026-01-05", "to": "P0D"},
            target=str(tmp_path / "target"),
            store_path=str(tmp_path / "store"),
            **kwargs,
        )
    return dag


@pytest.mark.slow
def test_a_run_whose_commit_is_refused_leaves_the_store_copy_and_the_state_xcom_to_the_run_that_committed(
    airflow_db, tmp_path
):
    dag = one_day_pipeline(tmp_path, OvertakenPartitionsOperator, "p_overtaken")
    run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "failed"}  # CutoffConflict: the state moved while the run computed
    assert committed("p_overtaken")["run_id"] == "overtaking_run"
    assert xcom(run, "orders", "state") is None  # the XCom holds only a committed document
    mirrored = WatermarkStoreHook(str(tmp_path / "store")).read_pipeline_state("p_overtaken")
    assert mirrored is not None and mirrored["run_id"] == "overtaking_run"


@pytest.mark.slow
def test_a_covered_run_repairs_a_missing_store_copy_and_a_pipeline_started_over_replaces_the_old_one(
    airflow_db, tmp_path
):
    dag = one_day_pipeline(tmp_path, IncrementalPartitionsOperator, "p_mirror")
    store = WatermarkStoreHook(str(tmp_path / "store"))
    _run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    first = committed("p_mirror")
    (tmp_path / "store" / "pipelines" / "p_mirror" / "state.json").unlink()  # killed between commit and copy
    _run, states = run_dag(dag, JAN_6)  # covered: nothing to compute
    assert states == {"orders": "success"}
    repaired = store.read_pipeline_state("p_mirror")
    assert repaired is not None and (repaired["version"], repaired["run_id"]) == (first["version"], first["run_id"])

    store.write_pipeline_state("p_mirror", {**repaired, "version": 57, "run_id": "before_starting_over"})
    Variable.delete(pipeline_variable_key("p_mirror"))  # starting over: its versions count from 1 again
    _run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    restarted = store.read_pipeline_state("p_mirror")
    assert restarted is not None and restarted["run_id"] == committed("p_mirror")["run_id"]
    assert restarted["version"] == 1


@pytest.mark.slow
def test_a_retry_after_a_failure_past_the_commit_publishes_the_committed_outcome_again(airflow_db, tmp_path):
    asset = Asset(name="past_the_commit_test", uri=f"file://{tmp_path / 'target'}")
    dag = one_day_pipeline(
        tmp_path, FailingPastTheCommitOperator, "p_past_commit", asset=asset, emit_partition_keys=True, retries=1,
        retry_delay=timedelta(seconds=0),
    )  # fmt: skip
    run, states = run_dag(dag, JAN_6)
    assert states == {"orders": "success"}
    state = committed("p_past_commit")
    assert state["version"] == 1 and state["run_id"] == run.run_id  # one commit, by the first attempt
    summary = xcom(run, "orders")
    assert "covered_by" not in summary and summary["executed"] == 1
    assert xcom(run, "orders", "state") == state
    # the retry's event is the committed attempt's: its version and the partition key it wrote
    assert asset_event_partition_keys("past_the_commit_test") == [(1, "2026-01-05T00:00:00")]
    mirrored = WatermarkStoreHook(str(tmp_path / "store")).read_pipeline_state("p_past_commit")
    assert mirrored is not None and mirrored["version"] == 1 and mirrored["last_summary"] == summary


def test_a_templated_store_path_is_checked_as_rendered_before_anything_is_read():
    operator = IncrementalPartitionsOperator(
        task_id="orders", pipeline="p", source="/src", time_column="t", target="/t",
        store_path="{{ var.value.wm_store }}", watermark={"from": "2026-01-01", "to": "P0D"},
    )  # fmt: skip
    operator.store_path = "data/wm"  # what the template rendered to
    with pytest.raises(ValueError, match=r"^store_path='data/wm' must be an absolute path or a URL"):
        operator.execute({})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "rendered", "message"),
    [
        ("source", "src", "source='src' must be an absolute path or a URL"),
        ("target", "./out/t", "target='./out/t' must be an absolute path or a URL"),
        ("target", "/src/daily", "target='/src/daily' lies inside source='/src': give each its own"),
    ],
)
def test_a_templated_data_path_is_checked_as_rendered_before_anything_is_read(argument, rendered, message):
    operator = IncrementalPartitionsOperator(
        task_id="orders", pipeline="p", source="{{ var.value.src }}", time_column="t", target="{{ var.value.t }}",
        store_path="/wm", watermark={"from": "2026-01-01", "to": "P0D"},
    )  # fmt: skip
    operator.source, operator.target = "/src", "/t"
    setattr(operator, argument, rendered)  # what the template rendered to
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        operator.execute({})  # type: ignore[arg-type]


def test_a_mapped_stateful_task_runs_one_instance_at_a_time_and_declares_its_asset_to_the_scheduler():
    from airflow.serialization.serialized_objects import DagSerialization

    asset = Asset(name="mapped_orders", uri="file:///tmp/wm-mapped/target")
    dag = fresh_dag("mapped_declared")
    with dag:
        IncrementalPartitionsOperator.partial(
            task_id="orders", source="/tmp/wm-mapped/source", time_column="event_time", target="/tmp/wm-mapped/t",
            store_path="/tmp/wm-mapped/store", watermark={"from": "2026-01-05", "to": "P0D"}, asset=asset,
        ).expand(pipeline=["eu", "us"])  # fmt: skip
        with pytest.raises(ValueError, match="max_active_tis_per_dag=2: a pipeline's runs share one state"):
            IncrementalPartitionsOperator.partial(
                task_id="parallel",
                source="/s",
                time_column="t",
                target="/t",
                store_path="/st",
                max_active_tis_per_dag=2,
            )
    seen = DagSerialization.from_dict(DagSerialization.to_dict(dag)).get_task("orders")  # what the scheduler reads
    assert seen.max_active_tis_per_dag == 1
    assert "'name': 'mapped_orders'" in str(seen.outlets)  # a mapped task keeps them encoded


@pytest.mark.slow
def test_mapped_pipelines_with_an_asset_each_commit_their_own_state_to_its_state_store(airflow_db, tmp_path):
    (tmp_path / "orders").mkdir()
    asset = Asset(name="mapped_pipelines", uri=f"file://{tmp_path}/target")
    dag = fresh_dag("mapped_pipelines")
    with dag:
        IncrementalPartitionsOperator.partial(
            task_id="orders", source=str(tmp_path / "orders"), time_column="event_time",
            watermark={"from": "2026-01-05", "to": "P0D"}, target=str(tmp_path / "target"),
            store_path=str(tmp_path / "store"), asset=asset,
        ).expand(pipeline=["mapped_eu", "mapped_us"])  # fmt: skip
    _run, states = run_dag(dag, JAN_6)
    assert set(states.values()) == {"success"}
    for pipeline in ("mapped_eu", "mapped_us"):
        assert asset_state("mapped_pipelines", f"partition_state/{pipeline}")["pipeline"] == pipeline


@pytest.mark.slow
def test_a_run_without_a_data_interval_takes_its_run_after_as_its_logical_time(airflow_db, tmp_path):
    """An asset-triggered run, or a manual one without a logical date, has no ``data_interval_end``."""
    dag = one_day_pipeline(tmp_path, IncrementalPartitionsOperator, "p_no_interval")
    register(dag)
    run = dag.test(logical_date=None, run_after=JAN_6)
    assert run.data_interval_end is None
    assert {ti.task_id: str(ti.state) for ti in run.get_task_instances()} == {"orders": "success"}
    assert committed("p_no_interval")["processed_until_ms"] == int(JAN_6.timestamp() * 1000)


def test_a_templated_output_that_renders_inside_the_events_is_refused_before_anything_is_read():
    operator = WindowedAggregateOperator(
        task_id="revenue", pipeline="p", events="/events/{{ ds }}", event_time="t", window=tumbling("PT1H"),
        aggregates={"n": "count(*)"}, watermark={"max_delay": "PT1M"}, output="{{ params.output }}",
        late_output="/late", store_path="/wm",
    )  # fmt: skip
    operator.events, operator.output_path = "/events/2026-01-05", "/events/2026-01-05/panes"  # as rendered
    with pytest.raises(ValueError, match=r"^output='/events/2026-01-05/panes' lies inside events='/events/2026-01-05'"):
        operator.execute({})  # type: ignore[arg-type]
