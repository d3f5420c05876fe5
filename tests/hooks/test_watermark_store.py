from __future__ import annotations

import pickle
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_wm.hooks.watermark_store import (
    DamagedRecordError,
    UnknownKeyError,
    UnknownNameError,
    UnknownPipelineError,
    UnknownStreamError,
    WatermarkStoreHook,
)


def record(lower: int, stream: str = "orders", computed_at: int | None = None, wm_key: str | None = None) -> dict:
    keyed = {} if wm_key is None else {"wm_key": wm_key}
    return {
        "stream": stream,
        **keyed,
        "lower_ms": lower,
        "upper_ms": lower + 5,
        "stream_cut": {"0": lower},
        "computed_at_ms": lower if computed_at is None else computed_at,
    }


def test_publish_then_read_latest_and_history(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.read_latest("orders") is None
    assert store.publish(record(10)) and store.publish(record(20))
    assert store.read_latest("orders")["lower_ms"] == 20
    assert [r["lower_ms"] for r in store.read_history("orders")] == [10, 20]
    assert [r["lower_ms"] for r in store.read_history("orders", limit=1)] == [20]


def test_a_lower_or_equal_watermark_is_never_written(tmp_path, caplog):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(20))
    assert store.publish(record(15)) is False
    assert store.publish(record(20)) is False
    assert store.read_latest("orders")["lower_ms"] == 20
    assert [r["lower_ms"] for r in store.read_history("orders")] == [20]
    assert "not written" in caplog.text


def test_concurrent_publishers_never_make_latest_go_backwards(tmp_path):
    lowers = list(range(1, 201))

    def publish(values):
        store = WatermarkStoreHook(str(tmp_path))
        for value in values:
            store.publish(record(value))

    threads = [threading.Thread(target=publish, args=(lowers[i::4][::-1],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = WatermarkStoreHook(str(tmp_path))
    history = [r["lower_ms"] for r in store.read_history("orders")]
    assert store.read_latest("orders")["lower_ms"] == 200
    assert history == sorted(history) and len(history) == len(set(history))


@pytest.mark.parametrize("stream", ["../etc", "a/b", "", ".hidden"])
def test_stream_names_that_could_leave_the_store_are_rejected(tmp_path, stream):
    store = WatermarkStoreHook(str(tmp_path))
    with pytest.raises(ValueError, match="stream="):
        store.read_latest(stream)
    with pytest.raises(ValueError, match="stream"):
        store.publish(record(1, stream=stream))


def test_lower_bound_must_be_epoch_milliseconds(tmp_path):
    with pytest.raises(ValueError, match="lower_ms"):
        WatermarkStoreHook(str(tmp_path)).publish({**record(1), "lower_ms": "soon"})


def test_fsspec_urls_work_unchanged(tmp_path):
    store = WatermarkStoreHook(f"file://{tmp_path}")
    store.publish(record(7))
    assert WatermarkStoreHook(str(tmp_path)).read_latest("orders")["lower_ms"] == 7
    memory = WatermarkStoreHook("memory://wm-test-store")
    memory.publish(record(3))
    assert memory.read_latest("orders")["lower_ms"] == 3


def test_the_base_path_can_come_from_a_wm_store_connection(tmp_path, monkeypatch, airflow_db):
    monkeypatch.setenv("AIRFLOW_CONN_MY_STORE", f'{{"conn_type": "wm_store", "host": "{tmp_path}"}}')
    store = WatermarkStoreHook(wm_store_conn_id="my_store")
    assert store.base_path == str(tmp_path)


@pytest.mark.parametrize("base", ["local", "memory://wm-pipelines"])
def test_a_pipeline_state_document_round_trips_and_its_run_files_live_beside_it(tmp_path, base):
    store = WatermarkStoreHook(str(tmp_path) if base == "local" else base)
    assert store.read_pipeline_state("orders_daily") is None
    store.write_pipeline_state("orders_daily", {"pipeline": "orders_daily", "version": 1})
    store.write_pipeline_state("orders_daily", {"pipeline": "orders_daily", "version": 2})
    assert store.read_pipeline_state("orders_daily") == {"pipeline": "orders_daily", "version": 2}
    plan_url = store.pipeline_url("orders_daily", "runs", "r1", "plan.json")
    store.write_json_url(plan_url, {"work_units": []})
    assert store.read_json_url(plan_url) == {"work_units": []}


def test_a_pipeline_name_cannot_leave_the_store(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    with pytest.raises(ValueError, match=r"pipeline='\.\./x'"):
        store.read_pipeline_state("../x")
    with pytest.raises(ValueError, match=r"pipeline='a/b'"):
        store.pipeline_url("a/b")


def test_read_time_window_reads_the_log_of_a_real_store(tmp_path):
    from airflow_provider_wm.core.reader import TimeWindow
    from airflow_provider_wm.core.segments import Segment, segment_map

    store = WatermarkStoreHook(str(tmp_path))
    segments = segment_map([Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0)])
    assert store.read_time_window("orders", {0: 1, 1: 0}, segments) == TimeWindow(None, None)
    for cut, lower in (({"0": 0, "1": 0}, 10), ({"0": 2, "1": 0}, 20), ({"0": 2, "1": 2}, 30)):
        store.publish(
            {"stream": "orders", "lower_ms": lower, "upper_ms": lower + 9, "stream_cut": cut, "computed_at_ms": lower}
        )
    assert store.read_time_window("orders", {0: 1, 1: 0}, segments) == TimeWindow(10, 29)
    assert store.read_time_window("orders", {"0": 2, "1": 1}, segments) == TimeWindow(20, 39)  # JSON keys too
    assert store.read_time_window("orders", {0: 3, 1: 1}, segments) == TimeWindow(20, None)
    assert store.read_time_window("orders", {0: 3, 1: 3}, segments) == TimeWindow(30, None)
    # only the last watermark: a position behind it has an upper bound but no lower one
    assert store.read_time_window("orders", {0: 1, 1: 0}, segments, limit=1) == TimeWindow(None, 39)
    with pytest.raises(ValueError, match="position has unknown segment 7"):
        store.read_time_window("orders", {0: 1, 7: 0}, segments)
    with pytest.raises(ValueError, match="position has segment id 'x'"):
        store.read_time_window("orders", {"x": 1}, segments)
    with pytest.raises(ValueError, match="stream="):
        store.read_time_window("../etc", {0: 1, 1: 0}, segments)
    # a record without a stream cut says nothing about any position; a malformed one is named
    store.publish({"stream": "other", "lower_ms": 5, "upper_ms": 6, "computed_at_ms": 5})
    assert store.read_time_window("other", {0: 1, 1: 0}, segments) == TimeWindow(None, None)
    store.publish({"stream": "other", "lower_ms": 7, "upper_ms": 8, "stream_cut": {"a": 1}, "computed_at_ms": 7})
    with pytest.raises(ValueError, match="record computed_at_ms=7 is not a watermark"):
        store.read_time_window("other", {0: 1, 1: 0}, segments)


def test_keyed_watermarks_are_monotone_per_key_and_stored_apart(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.publish(record(100))
    assert store.publish(record(10, wm_key="eu"))  # below the unkeyed watermark: another watermark
    assert store.publish(record(20, wm_key="eu"))
    assert store.publish(record(5, wm_key="us"))
    assert store.publish(record(15, wm_key="eu")) is False
    assert store.publish(record(20, wm_key="eu")) is False
    assert store.read_latest("orders")["lower_ms"] == 100
    assert store.read_latest("orders", "eu")["lower_ms"] == 20
    assert store.read_latest("orders", wm_key="us")["lower_ms"] == 5
    assert store.read_latest("orders", "apac") is None
    assert [r["lower_ms"] for r in store.read_history("orders")] == [100]
    assert [r["lower_ms"] for r in store.read_history("orders", wm_key="eu")] == [10, 20]
    assert [r["lower_ms"] for r in store.read_history("orders", 1, "eu")] == [20]
    assert (tmp_path / "streams" / "orders" / "keys" / "eu" / "latest.json").is_file()
    assert len(list((tmp_path / "streams" / "orders" / "keys" / "eu" / "log").glob("*.json"))) == 2
    assert len(list((tmp_path / "streams" / "orders" / "log").glob("*.json"))) == 1


def test_a_null_wm_key_is_the_unkeyed_watermark(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.publish({**record(10), "wm_key": None})
    assert store.read_latest("orders")["lower_ms"] == 10
    assert store.publish(record(11)) and not (tmp_path / "streams" / "orders" / "keys").exists()


@pytest.mark.parametrize("key", ["../etc", "a/b", "", ".hidden"])
def test_watermark_keys_that_could_leave_the_store_are_rejected(tmp_path, key):
    store = WatermarkStoreHook(str(tmp_path))
    with pytest.raises(ValueError, match=r"record\['wm_key'\]="):
        store.publish(record(1, wm_key=key))
    with pytest.raises(ValueError, match="wm_key="):
        store.read_latest("orders", key)
    assert not (tmp_path / "streams").exists() or not any((tmp_path / "streams").rglob("*.json"))


def test_concurrent_keyed_publishers_never_make_a_keys_latest_go_backwards(tmp_path):
    def publish(key, values):
        store = WatermarkStoreHook(str(tmp_path))
        for value in values:
            store.publish(record(value, wm_key=key))

    threads = [
        threading.Thread(target=publish, args=(key, list(range(1, 101))[i::2][::-1]))
        for key in ("eu", "us")
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = WatermarkStoreHook(str(tmp_path))
    for key in ("eu", "us"):
        history = [r["lower_ms"] for r in store.read_history("orders", wm_key=key)]
        assert store.read_latest("orders", key)["lower_ms"] == 100
        assert history == sorted(history) and len(history) == len(set(history))


def test_the_log_index_comes_from_file_names_oldest_first(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    for lower in (30, 10, 20):
        store.publish(record(lower, computed_at=lower + 100))
    assert store.read_log_index("orders") == [(130, 30)]  # 10 and 20 came after 30: never written
    store.publish(record(40, computed_at=140))
    assert store.read_log_index("orders") == [(130, 30), (140, 40)]
    assert store.read_log_index("unknown") == []


def test_require_known_names_the_streams_the_store_has_never_seen_and_the_ones_it_has(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    with pytest.raises(
        UnknownStreamError, match=f"unknown stream 'orders': the store at {tmp_path} has no streams yet"
    ):
        store.require_known(["orders"])
    store.publish(record(10, stream="payments"))
    store.write_stream_status("orders", {"stream": "orders", "no_active_writers": True})
    store.require_known(["orders", "payments", "orders"])  # seen: a watermark or a controller's status
    store.require_known([])
    with pytest.raises(UnknownStreamError) as unknown:
        store.require_known(["payments", "refunds", "clicks"])
    assert (unknown.value.unknown, unknown.value.known) == (["clicks", "refunds"], ["orders", "payments"])
    assert str(unknown.value).endswith(
        "unknown streams 'clicks', 'refunds': the store at " + f"{tmp_path} has orders, payments"
    )
    assert str(pickle.loads(pickle.dumps(unknown.value))) == str(unknown.value)  # crosses process boundaries


def test_streams_pipelines_and_stream_status_are_listed_and_read_back(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.list_streams() == [] and store.list_pipelines() == []
    store.publish(record(10, stream="payments"))
    store.write_stream_status("orders", {"stream": "orders", "no_active_writers": True})
    store.write_pipeline_state("daily", {"version": 1})
    assert store.list_streams() == ["orders", "payments"]
    assert store.list_pipelines() == ["daily"]
    assert store.read_stream_status("orders") == {"stream": "orders", "no_active_writers": True}
    assert store.read_stream_status("payments") is None
    with pytest.raises(ValueError, match="stream"):
        store.read_stream_status("../pipelines")


def test_a_lost_latest_record_does_not_let_a_lower_watermark_in(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.publish(record(5000))
    (tmp_path / "streams" / "orders" / "latest.json").unlink()
    assert not store.publish(record(3000))  # the log still says 5000
    assert store.publish(record(6000))
    assert store.read_latest("orders")["lower_ms"] == 6000


def test_a_truncated_latest_record_does_not_let_a_lower_watermark_in(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.publish(record(5000))
    (tmp_path / "streams" / "orders" / "latest.json").write_text('{"stream": "ord')
    assert not store.publish(record(3000))
    assert store.publish(record(7000))
    assert store.read_latest("orders")["lower_ms"] == 7000


def test_a_stream_has_one_producer_so_a_pipeline_cannot_publish_into_a_controllers_stream(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.publish({**record(5000), "controller": "orders_controller"})
    with pytest.raises(ValueError, match="stream orders is published by controller orders_controller, not by pipeline"):
        store.publish({**record(9000), "pipeline": "orders", "stream_cut": None})
    assert store.read_latest("orders")["lower_ms"] == 5000


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(min_value=0, max_value=50)),
        st.tuples(st.sampled_from(["lose latest", "corrupt latest", "corrupt a log record", "restart"]), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_no_sequence_of_store_operations_lets_the_latest_watermark_regress(tmp_path_factory, operations):
    base = tmp_path_factory.mktemp("store")
    store, highest = WatermarkStoreHook(str(base)), None
    stream_dir = base / "streams" / "orders"
    for operation, value in operations:
        if operation == "publish":
            written = store.publish(record(value * 1000, computed_at=value))
            assert written == (highest is None or value * 1000 > highest)
            highest = value * 1000 if written else highest
        elif operation == "lose latest":
            (stream_dir / "latest.json").unlink(missing_ok=True)
        elif operation == "corrupt latest" and (stream_dir / "latest.json").exists():
            (stream_dir / "latest.json").write_text("{")
        elif operation == "corrupt a log record" and (stream_dir / "log").exists():
            logs = sorted((stream_dir / "log").glob("*.json"))
            if logs:
                logs[0].write_text("not json")
        elif operation == "restart":
            store = WatermarkStoreHook(str(base))
        latest = store.latest_lower_ms("orders")
        assert latest == highest


def damaged_store(tmp_path):
    """A store with one of each record, every one of them then overwritten with garbage."""
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10))
    store.write_stream_status("orders", {"status": "EMITTED"})
    store.write_pipeline_state("daily", {"version": 1})
    store.write_json_url(store.pipeline_url("daily", "runs", "v1", "manifest.json"), {"version": 1})
    for path in [*tmp_path.rglob("*.json")]:
        path.write_bytes(b'{"trunc')
    return store


@pytest.mark.parametrize(
    ("read", "relative"),
    [
        (lambda s: s.read_latest("orders"), "streams/orders/latest.json"),
        (lambda s: s.read_stream_status("orders"), "streams/orders/status.json"),
        (lambda s: s.read_history("orders"), "streams/orders/log/000000000000010-000000000000010.json"),
        (lambda s: s.read_pipeline_state("daily"), "pipelines/daily/state.json"),
        (lambda s: s.read_pipeline_run("daily", 1), "pipelines/daily/runs/v1/manifest.json"),
        (lambda s: s.read_pipeline_runs("daily", 5), "pipelines/daily/runs/v1/manifest.json"),
    ],
)
def test_a_damaged_record_raises_an_error_naming_its_path_and_reason(tmp_path, read, relative):
    store = damaged_store(tmp_path)
    with pytest.raises(DamagedRecordError) as raised:
        read(store)
    assert raised.value.path == str(tmp_path / relative)
    assert str(raised.value) == f"damaged record {tmp_path / relative}: {raised.value.reason}"
    assert raised.value.reason.startswith("not a JSON document") and "'{\"trunc'" in raised.value.reason
    assert isinstance(raised.value, ValueError)  # the publish path's fallback on a bad record still applies


def test_a_record_that_is_not_an_object_is_damaged(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    (tmp_path / "streams" / "orders").mkdir(parents=True)
    (tmp_path / "streams" / "orders" / "latest.json").write_text("[10]")
    with pytest.raises(DamagedRecordError, match=r"latest\.json: holds a JSON list, not a record"):
        store.read_latest("orders")


def test_a_folder_where_a_record_belongs_is_damaged(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    (tmp_path / "pipelines" / "daily" / "state.json").mkdir(parents=True)
    with pytest.raises(DamagedRecordError, match=r"state\.json: a folder where a JSON record belongs"):
        store.read_pipeline_state("daily")


def test_a_damaged_record_error_survives_pickling(tmp_path):
    error = DamagedRecordError(str(tmp_path / "latest.json"), "not a JSON document")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.reason, str(copy)) == (error.path, error.reason, str(error))


def test_the_runs_of_a_pipeline_are_read_one_by_one_past_a_damaged_manifest(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    for version in (1, 2, 10):
        store.write_json_url(store.pipeline_url("daily", "runs", f"v{version}", "manifest.json"), {"version": version})
    (tmp_path / "pipelines" / "daily" / "runs" / "v2" / "manifest.json").write_text("garbage")
    (tmp_path / "pipelines" / "daily" / "runs" / "v3").mkdir()  # a run that wrote no manifest (yet)
    (tmp_path / "pipelines" / "daily" / "runs" / "scratch").mkdir()  # not a run
    assert store.list_pipeline_runs("daily") == [1, 2, 3, 10]
    assert store.read_pipeline_run("daily", 10) == {"version": 10}
    assert store.read_pipeline_run("daily", 3) is None
    with pytest.raises(DamagedRecordError, match=r"v2/manifest\.json: not a JSON document"):
        store.read_pipeline_run("daily", 2)
    assert store.pipeline_run_path("daily", 2) == str(
        tmp_path / "pipelines" / "daily" / "runs" / "v2" / "manifest.json"
    )
    assert store.pipeline_state_path("daily") == str(tmp_path / "pipelines" / "daily" / "state.json")
    assert store.list_pipeline_runs("unknown") == []


def test_a_stray_file_where_a_folder_belongs_lists_no_names(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10))
    (tmp_path / "streams" / "junk").write_text("not a folder")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "daily").write_text("not a folder")
    assert store.list_streams() == ["junk", "orders"]
    assert store.list_keys("junk") == []
    assert store.list_pipeline_runs("daily") == []


# --- known and unknown names: what a sensor tells apart when it finds no record ----------------------------------


def test_listing_the_streams_reads_no_record_and_no_log(tmp_path, monkeypatch):
    store = WatermarkStoreHook(str(tmp_path))
    for lower in (10, 20, 30):
        store.publish(record(lower, stream="orders"))
    store.publish(record(5, stream="payments"))
    (tmp_path / "streams" / "payments" / "latest.json").write_text("{damaged")  # never opened by a listing
    opened = []
    real_open = store.fs.open
    monkeypatch.setattr(store.fs, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    assert store.list_streams() == ["orders", "payments"]
    store.require_known(["orders", "payments"])
    assert opened == []


def test_read_latest_inputs_returns_each_inputs_record_by_label_and_none_for_a_known_stream_without_one(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10, stream="orders"))
    store.publish(record(20, stream="orders", wm_key="eu"))
    store.write_stream_status("payments", {"stream": "payments", "status": "WAITING_FOR_WRITERS"})
    store.write_stream_status("orders", {"status": "WAITING_FOR_WRITERS"}, wm_key="us")
    inputs = [("orders", None), ("orders", "eu"), ("orders", "us"), ("payments", None)]
    records = store.read_latest_inputs(inputs, fail_on_unknown=True)
    assert list(records) == ["orders", "orders:eu", "orders:us", "payments"]
    assert (records["orders"]["lower_ms"], records["orders:eu"]["lower_ms"]) == (10, 20)
    assert records["orders:us"] is None and records["payments"] is None  # known, no watermark yet: wait
    assert store.read_latest_inputs([("ordres", None)]) == {"ordres": None}  # without the check: just missing


def test_read_latest_inputs_fails_on_a_stream_the_store_has_never_seen_naming_what_it_has(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10, stream="clicks"))
    store.write_stream_status("refunds", {"status": "WAITING_FOR_WRITERS"})
    with pytest.raises(UnknownStreamError) as unknown:
        store.read_latest_inputs([("clicks", None), ("clikcs", None)], fail_on_unknown=True)
    assert str(unknown.value) == f"unknown stream 'clikcs': the store at {tmp_path} has clicks, refunds"
    assert isinstance(unknown.value, UnknownNameError) and isinstance(unknown.value, LookupError)


def test_a_stream_with_a_watermark_is_never_checked_against_the_listing(tmp_path, monkeypatch):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10, stream="orders"))
    listed = []
    monkeypatch.setattr(store.fs, "ls", lambda *a, **k: listed.append(a) or [])
    assert store.read_latest_inputs([("orders", None)], fail_on_unknown=True)["orders"]["lower_ms"] == 10
    assert listed == []  # a poke stays one small read per input once every input has a watermark


def test_an_unknown_key_of_a_known_stream_names_the_keys_the_stream_has_as_labels(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.publish(record(10, stream="orders", wm_key="eu"))
    store.write_stream_status("orders", {"status": "WAITING_FOR_WRITERS"}, wm_key="us")
    store.publish(record(10, stream="payments"))
    with pytest.raises(UnknownKeyError) as unknown:
        store.read_latest_inputs([("orders", "ue"), ("orders", "eu"), ("orders", "uz")], fail_on_unknown=True)
    assert str(unknown.value) == (
        f"unknown keys 'ue', 'uz' of stream 'orders': the store at {tmp_path} has orders:eu, orders:us"
    )
    with pytest.raises(UnknownKeyError, match=r"of stream 'payments': the store at .* has no keyed watermark of"):
        store.read_latest_inputs([("payments", "eu")], fail_on_unknown=True)
    with pytest.raises(UnknownStreamError, match="unknown stream 'ordres'"):  # an unknown stream comes first
        store.read_latest_inputs([("ordres", "eu"), ("orders", "ue")], fail_on_unknown=True)


def test_a_pipeline_is_known_once_a_run_wrote_to_the_store_and_unknown_before(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    with pytest.raises(UnknownPipelineError, match=f"unknown pipeline 'daily': the store at {tmp_path} has no"):
        store.read_pipeline_state("daily", fail_on_unknown=True)
    assert store.read_pipeline_state("daily") is None  # without the check: no document yet
    store.write_json_url(store.pipeline_url("daily", "runs", "v1", "request.json"), {"pipeline": "daily"})
    store.write_pipeline_state("hourly", {"version": 1})
    assert store.read_pipeline_state("daily", fail_on_unknown=True) is None  # first run in flight: wait
    with pytest.raises(UnknownPipelineError) as unknown:
        store.read_pipeline_state("dialy", fail_on_unknown=True)
    assert str(unknown.value) == f"unknown pipeline 'dialy': the store at {tmp_path} has daily, hourly"
    assert store.read_pipeline_state("hourly", fail_on_unknown=True) == {"version": 1}


def test_unknown_name_errors_survive_pickling():
    for error in (
        UnknownStreamError(["a"], ["b", "c"], "/s"),
        UnknownKeyError("orders", ["ue"], ["eu"], "/s"),
        UnknownPipelineError(["p"], [], "/s"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and copy.known == error.known


def test_a_remote_store_reads_several_inputs_and_sees_a_stream_created_after_its_first_listing():
    store = WatermarkStoreHook("memory://known-names")
    store.publish(record(10, stream="orders"))
    assert store.read_latest_inputs([("orders", None), ("payments", None)]) == {
        "orders": store.read_latest("orders"),
        "payments": None,
    }
    with pytest.raises(UnknownStreamError, match="unknown stream 'payments': the store at memory://known-names"):
        store.read_latest_inputs([("payments", None)], fail_on_unknown=True)
    WatermarkStoreHook("memory://known-names").write_stream_status("payments", {"status": "WAITING_FOR_WRITERS"})
    assert store.read_latest_inputs([("orders", None), ("payments", None)], fail_on_unknown=True)["payments"] is None


def test_publish_logs_its_times_in_iso_utc(tmp_path, caplog):
    store = WatermarkStoreHook(str(tmp_path))
    caplog.set_level("INFO")
    store.publish(record(1_767_229_200_000))
    store.publish(record(1_767_225_600_000))
    assert "lower_ms=1767229200000 (2026-01-01T01:00:00.000Z)" in caplog.text
    assert "lower_ms=1767225600000 (2026-01-01T00:00:00.000Z) is not above the latest 2026-01-01T01:00:00.000Z" in (
        caplog.text
    )


def test_the_watermark_as_of_a_time_is_the_newest_computed_by_then_read_from_the_log_only_when_latest_is_newer(
    tmp_path, monkeypatch
):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.read_as_of("orders", 100) is None
    for computed, lower in [(100, 10), (200, 20), (300, 30)]:
        store.publish({"stream": "orders", "lower_ms": lower, "computed_at_ms": computed, "run_id": f"r{computed}"})
    assert store.read_as_of("orders", 250)["run_id"] == "r200"
    assert store.read_as_of("orders", 99) is None
    for path in (tmp_path / "streams" / "orders" / "log").iterdir():
        path.unlink()  # latest alone: at or after its own time, the log is not read
    assert store.read_as_of("orders", 300)["run_id"] == "r300"
    assert store.read_as_of("orders", 10**15)["lower_ms"] == 30


def test_the_store_copy_of_a_pipeline_state_never_goes_back_to_an_earlier_version(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    assert store.write_pipeline_state("p", {"version": 5, "run_id": "later"})
    assert not store.write_pipeline_state("p", {"version": 4, "run_id": "slow"})
    assert store.read_pipeline_state("p")["run_id"] == "later"
    assert store.write_pipeline_state("p", {"version": 5, "run_id": "later", "rewritten": True})
    (tmp_path / "pipelines" / "p" / "state.json").write_text("{damaged")
    assert store.write_pipeline_state("p", {"version": 3, "run_id": "restored"})


def test_a_restarted_pipelines_first_copy_replaces_the_copy_of_its_earlier_life(tmp_path):
    store = WatermarkStoreHook(str(tmp_path))
    store.write_pipeline_state("p", {"version": 57, "run_id": "old"})
    assert store.write_pipeline_state("p", {"version": 1, "run_id": "new"}, restart=True)
    assert store.read_pipeline_state("p")["run_id"] == "new"
