"""Cut-off state in the asset state store (primary) and Variables (mirror): committed only if nobody committed in
between (no lost update); a Variable-only pipeline is migrated; the higher version wins when they disagree."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from airflow.models.variable import Variable
from airflow.sdk import Asset, task

from airflow_provider_wm.state import (
    PIPELINE_STATE,
    CommittedState,
    CutoffConflict,
    PipelineState,
    StateDamaged,
    commit_pipeline_state,
    cutoff_variable_key,
    pipeline_variable_key,
    read_cutoff,
    read_pipeline_state,
)
from tests.airflow_helpers import asset_state, fresh_dag, run_dag, xcom


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


def run_with_asset_state(body: Any) -> tuple[Any, str]:
    """Run ``body(asset_state_store_accessor)`` as a real task whose outlet is a fresh asset; returns its XCom and
    the asset's name (the accessor is Airflow's own ``context["asset_state_store"][asset]``)."""
    asset = Asset(name=f"state_{uuid.uuid4().hex[:8]}", uri=f"file:///tmp/state/{uuid.uuid4().hex[:8]}")
    dag = fresh_dag("asset_state")
    with dag:

        @task(outlets=[asset])
        def step(asset_state_store: Any = None) -> Any:
            return body(asset_state_store[asset])

        step()
    run, states = run_dag(dag)
    assert states == {"step": "success"}
    return xcom(run, "step"), asset.name


def test_the_asset_state_store_is_primary_and_a_stale_commit_is_refused_in_both_copies(airflow_db):
    def overlapping_runs(store: Any) -> str:
        carried = CommittedState(PIPELINE_STATE, "p_asset_race", store)
        read_by_both = carried.read()
        carried.commit(replace(document(1, "run-a"), pipeline="p_asset_race"), read_by_both)
        try:
            carried.commit(replace(document(1, "run-b"), pipeline="p_asset_race"), read_by_both)
        except CutoffConflict as exc:
            return str(exc)
        return "overwrote"

    message, asset = run_with_asset_state(overlapping_runs)
    assert "moved from version 0 to 1" in message
    assert asset_state(asset, "partition_state/p_asset_race")["run_id"] == "run-a"
    assert Variable.get(pipeline_variable_key("p_asset_race"), deserialize_json=True) == asset_state(
        asset, "partition_state/p_asset_race"
    )


def test_a_variable_only_pipeline_is_read_from_its_variable_and_migrated_by_its_next_commit(airflow_db, caplog):
    older = replace(document(4, "old-run"), pipeline="p_migrate", processed_until_ms=1_000)
    Variable.set(pipeline_variable_key("p_migrate"), json.dumps(older.to_json()))

    def next_run(store: Any) -> dict[str, Any]:
        carried = CommittedState(PIPELINE_STATE, "p_migrate", store)
        before = store.get("partition_state/p_migrate")
        committed = carried.read()
        assert committed is not None
        carried.commit(replace(committed, version=5, run_id="new-run", processed_until_ms=2_000), committed)
        return {"before": before, "read": committed.to_json()}

    result, asset = run_with_asset_state(next_run)
    assert result["before"] is None and result["read"] == older.to_json()
    assert asset_state(asset, "partition_state/p_migrate")["version"] == 5
    assert Variable.get(pipeline_variable_key("p_migrate"), deserialize_json=True)["run_id"] == "new-run"


@pytest.mark.parametrize(
    ("in_asset", "in_variable", "winner"),
    [(7, 6, 7), (6, 7, 7)],
    ids=["a restored (older) Variable loses", "a Variable ahead of the asset state store wins"],
)
def test_when_the_two_copies_disagree_the_higher_version_wins_and_the_next_commit_aligns_them(
    airflow_db, in_asset, in_variable, winner
):
    name = f"p_disagree_{in_asset}_{in_variable}"
    Variable.set(pipeline_variable_key(name), json.dumps(replace(document(in_variable, "v"), pipeline=name).to_json()))

    def next_run(store: Any) -> list[int]:
        store.set(f"partition_state/{name}", replace(document(in_asset, "a"), pipeline=name).to_json())
        carried = CommittedState(PIPELINE_STATE, name, store)
        committed = carried.read()
        assert committed is not None
        stale = replace(committed, version=min(in_asset, in_variable))
        try:  # a run that started from the losing copy cannot commit
            carried.commit(replace(committed, version=committed.version + 1), stale)
            refused = False
        except CutoffConflict:
            refused = True
        carried.commit(replace(committed, version=committed.version + 1, run_id="next"), committed)
        return [committed.version, refused]

    result, asset = run_with_asset_state(next_run)
    assert result == [winner, True]
    assert asset_state(asset, f"partition_state/{name}")["version"] == winner + 1
    mirror = Variable.get(pipeline_variable_key(name), deserialize_json=True)
    assert mirror == asset_state(asset, f"partition_state/{name}")


def test_an_asset_state_that_holds_no_state_document_fails_naming_the_key(airflow_db):
    def read(store: Any) -> str:
        store.set("partition_state/p_bad_asset", {"pipeline": "p_bad_asset"})
        try:
            CommittedState(PIPELINE_STATE, "p_bad_asset", store).read()
        except StateDamaged as exc:
            return str(exc)
        return "no error"

    message, _asset = run_with_asset_state(read)
    expected = "the asset state store key 'partition_state/p_bad_asset' does not hold a state document"
    assert f"pipeline 'p_bad_asset': {expected}" in message


def test_two_pipelines_sharing_an_asset_keep_a_document_each(airflow_db):
    def two_pipelines(store: Any) -> list[int | None]:
        first = CommittedState(PIPELINE_STATE, "p_shared_a", store)
        second = CommittedState(PIPELINE_STATE, "p_shared_b", store)
        first.commit(replace(document(1, "a-1"), pipeline="p_shared_a"), None)
        first.commit(replace(document(2, "a-2"), pipeline="p_shared_a"), first.read())
        unseen = second.read()  # the other pipeline's version 2 is not this one's state
        second.commit(replace(document(1, "b-1"), pipeline="p_shared_b"), unseen)
        read_a, read_b = first.read(), second.read()
        return [None if unseen is None else unseen.version, read_a and read_a.version, read_b and read_b.version]

    result, asset = run_with_asset_state(two_pipelines)
    assert result == [None, 2, 1]
    assert asset_state(asset, "partition_state/p_shared_a")["run_id"] == "a-2"
    assert asset_state(asset, "partition_state/p_shared_b")["run_id"] == "b-1"
