"""What the store's reads raise for records of the wrong shape, a store that is not there, and names read
before (:mod:`airflow_provider_wm.hooks.store_errors` as the hook raises it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_wm.hooks.watermark_store import (
    DamagedRecordError,
    PipelineKindError,
    StoreUnreachableError,
    UnknownStreamError,
    WatermarkStoreHook,
    is_transient,
)
from tests.hooks.test_watermark_store import record
from tests.triggers.test_partitions import state_document, write


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"stream": "orders"}', "lower_ms=None is not epoch milliseconds"),
        ('{"stream": "orders", "lower_ms": "1767229200000"}', "lower_ms='1767229200000' is not epoch milliseconds"),
        ('{"stream": "orders", "lower_ms": 5, "computed_at_ms": "5"}', "computed_at_ms='5' is not epoch milliseconds"),
        ('{"stream": "orders", "lower_ms": true}', "lower_ms=True is not epoch milliseconds"),
    ],
)
def test_a_latest_record_that_is_not_a_watermark_is_damaged_naming_its_path(
    tmp_path: Path, content: str, reason: str
) -> None:
    (tmp_path / "streams" / "orders").mkdir(parents=True)
    (tmp_path / "streams" / "orders" / "latest.json").write_text(content)
    with pytest.raises(DamagedRecordError) as damaged:
        WatermarkStoreHook(str(tmp_path)).read_latest_inputs([("orders", None)])
    assert str(damaged.value) == f"damaged record {tmp_path}/streams/orders/latest.json: {reason}"
    assert not is_transient(damaged.value)


def test_a_missing_store_is_unreachable_and_transient_an_empty_one_has_no_streams(tmp_path: Path) -> None:
    with pytest.raises(StoreUnreachableError) as unreachable:
        WatermarkStoreHook(str(tmp_path / "unmounted")).read_latest_inputs([("orders", None)], fail_on_unknown=True)
    assert is_transient(unreachable.value)
    with pytest.raises(StoreUnreachableError):
        WatermarkStoreHook(str(tmp_path / "unmounted")).read_partitions_state("orders", fail_on_unknown=True)
    with pytest.raises(UnknownStreamError, match="has no streams yet"):
        WatermarkStoreHook(str(tmp_path)).read_latest_inputs([("orders", None)], fail_on_unknown=True)


def test_inputs_read_before_are_never_called_unknown(tmp_path: Path) -> None:
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10, "payments"))
    inputs = [("orders", None), ("payments", None)]
    assert store.read_latest_inputs(inputs, fail_on_unknown=True, seen={"orders"})["orders"] is None
    with pytest.raises(UnknownStreamError, match="unknown stream 'orders'"):
        store.read_latest_inputs(inputs, fail_on_unknown=True)


def test_the_partitions_state_of_a_windowed_pipeline_says_which_sensor_to_use(tmp_path: Path) -> None:
    write(str(tmp_path), {"pipeline": "orders_15m", "kind": "windowed", "version": 1, "spec": {}}, "orders_15m")
    with pytest.raises(PipelineKindError) as wrong:
        WatermarkStoreHook(str(tmp_path)).read_partitions_state("orders_15m")
    assert str(wrong.value) == (
        "pipeline 'orders_15m' is a windowed pipeline, not an incremental-partitions one: wait for it with "
        "StreamWatermarkSensor on its output stream"
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"spec": None}, "no spec"),
        ({"spec": {"timezone": "UTC"}}, "spec or state cannot be read (KeyError: 'pieces')"),
        ({"state": {"version": 7}}, "spec or state cannot be read (ValueError: partition state version 7"),
        ({"units": "eu"}, "units='eu' is not a list"),
    ],
)
def test_a_partitions_state_of_the_wrong_shape_is_damaged_naming_its_path(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    document = {**state_document(), **change}
    if change.get("spec", True) is None:
        del document["spec"]
    write(str(tmp_path), document)
    with pytest.raises(DamagedRecordError) as damaged:
        WatermarkStoreHook(str(tmp_path)).read_partitions_state("orders")
    assert str(damaged.value).startswith(f"damaged record {tmp_path}/pipelines/orders/state.json: {reason}")


def test_a_file_where_a_streams_folder_belongs_is_lasting_not_transient(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "orders").write_text("not a folder")
    with pytest.raises(OSError) as error:
        WatermarkStoreHook(str(tmp_path)).read_latest_inputs([("orders", None)])
    assert not is_transient(error.value)
    assert is_transient(ConnectionError("connection reset by peer")) and not is_transient(PermissionError("denied"))
