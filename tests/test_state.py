"""Cut-off state in Variables: committed only if nobody committed in between (no lost update)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from airflow.models.variable import Variable
from airflow.sdk import task

from airflow_provider_wm.state import (
    CutoffConflict,
    PipelineState,
    StateDamaged,
    commit_pipeline_state,
    cutoff_variable_key,
    pipeline_variable_key,
    read_cutoff,
    read_pipeline_state,
)
from tests.airflow_helpers import fresh_dag, run_dag, xcom


def document(version: int, run_id: str) -> PipelineState:
    return PipelineState(
        pipeline="p_state",
        version=version,
        run_id=run_id,
        committed_at="2026-01-01T00:00:00+00:00",
        spec={"pieces": [["daily", "2026-01-01", "P0D"]], "timezone": "UTC", "partial_partition": True},
        units=[],
        state={"version": 1, "units": {"": [[0, 10, "s", None]]}},
    )


def test_a_commit_based_on_a_stale_read_is_refused_and_the_newer_state_survives(airflow_db):
    dag = fresh_dag("state")
    with dag:

        @task
        def overlapping_runs() -> str:
            read_by_both = read_pipeline_state("p_state")  # two runs start from the same state
            commit_pipeline_state(document(1, "run-a"), read_by_both)  # the first one commits
            try:
                commit_pipeline_state(document(1, "run-b"), read_by_both)  # the second must not overwrite it
            except CutoffConflict as exc:
                return str(exc)
            return "overwrote"

        overlapping_runs()
    run, states = run_dag(dag)
    assert states == {"overlapping_runs": "success"}
    assert "moved from version 0 to 1" in xcom(run, "overlapping_runs")
    stored = Variable.get(pipeline_variable_key("p_state"), deserialize_json=True)
    assert stored["run_id"] == "run-a" and stored["version"] == 1


def test_a_partition_state_never_moves_its_cutoff_back(airflow_db):
    dag = fresh_dag("state_back")
    with dag:

        @task
        def older_after_newer() -> str:
            newer = replace(document(1, "newer"), pipeline="p_back", processed_until_ms=2_000)
            commit_pipeline_state(newer, None)
            older = replace(document(2, "older"), pipeline="p_back", processed_until_ms=1_000)
            try:
                commit_pipeline_state(older, newer)
            except CutoffConflict as exc:
                return str(exc)
            return "moved back"

        older_after_newer()
    run, states = run_dag(dag)
    assert states == {"older_after_newer": "success"}
    assert "refusing to move processed_until_ms back from 2000 to 1000" in xcom(run, "older_after_newer")
    assert Variable.get(pipeline_variable_key("p_back"), deserialize_json=True)["run_id"] == "newer"


@pytest.mark.parametrize("value", ["{not json", "null", "[]", "{}", '{"controller": "c", "version": "x"}'])
def test_a_variable_that_holds_no_state_document_fails_naming_the_variable(airflow_db, value):
    Variable.set(cutoff_variable_key("c_damaged"), value)
    dag = fresh_dag("damaged")
    with dag:

        @task
        def read() -> str:
            try:
                read_cutoff("c_damaged")
            except StateDamaged as exc:
                return str(exc)
            return "no error"

        read()
    try:
        run, states = run_dag(dag)
    finally:
        Variable.delete(cutoff_variable_key("c_damaged"))
    assert states == {"read": "success"}
    assert "Variable 'wm_controller__c_damaged' does not hold a state document" in xcom(run, "read")
