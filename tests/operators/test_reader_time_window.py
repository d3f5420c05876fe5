"""ReaderTimeWindowOperator and reader_time_window on real Airflow (dag.test, SQLite) with a real store."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk import task

from airflow_provider_wm.core.segments import Segment, segment_map
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.operators.reader_time_window import (
    ReaderTimeWindowOperator,
    parse_position,
    read_segments,
    reader_time_window,
)
from tests.airflow_helpers import fresh_dag, run_dag, xcom

BASE = int(datetime(2026, 1, 5, tzinfo=UTC).timestamp() * 1000)
MINUTE = 60_000
E1 = 1 << 32
# the example, in minutes after BASE: m1 = ({0:0, 1:0}, 10..19), m2 = ({0:2, 1:0}, 20..29), m3 = ...
LOG = [({"0": 0, "1": 0}, 10, 19), ({"0": 2, "1": 0}, 20, 29), ({"0": 2, "1": 2}, 30, 39)]


def at(minutes: int) -> int:
    return BASE + minutes * MINUTE


def iso(minutes: int) -> str:
    return datetime.fromtimestamp(at(minutes) / 1000, UTC).isoformat(timespec="milliseconds")


def write_store(base) -> str:
    store = WatermarkStoreHook(str(base / "store"))
    for cut, lower, upper in LOG:
        assert store.publish(
            {
                "stream": "orders",
                "lower_ms": at(lower),
                "upper_ms": at(upper),
                "stream_cut": cut,
                "computed_at_ms": at(lower) + 1,
            }
        )
    return str(base / "store")


def write_segments(base) -> str:
    rows = [
        {"stream": "orders", "segment_id": 0, "key_start": 0.0, "key_end": 0.5},
        {"stream": "orders", "segment_id": 1, "key_start": 0.5, "key_end": 1.0},
        # another stream's segments, with ids that would clash: filtered out
        {"stream": "payments", "segment_id": 0, "key_start": 0.0, "key_end": 1.0},
        {"stream": "payments", "segment_id": 7, "key_start": 0.0, "key_end": 1.0},
    ]
    schema = pa.schema(
        [("stream", pa.string()), ("segment_id", pa.int64()), ("key_start", pa.float64()), ("key_end", pa.float64())]
    )
    (base / "segments").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema), base / "segments" / "part-0.parquet")
    return str(base / "segments")


REQUIRED = {
    "task_id": "w",
    "stream": "orders",
    "store_path": "/store",
    "position": {"0": 1, "1": 0},
    "segments_path": "/segments",
}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": "../x"}, "stream='../x'"),
        ({"store_path": ""}, "store_path='' must be a non-empty path"),
        ({"segments_path": None}, "segments_path=None must be a non-empty path"),
        ({"position": "not json"}, "position='not json' is not JSON of a stream cut"),
        ({"position": {"x": 1}}, r"position=\{'x': 1\}: segment id 'x' is not an integer"),
        ({"position": '{"0": -2}'}, r"position='\{\"0\": -2\}': offset -2 of segment 0 must be an int >= -1"),
        ({"position": {0: 1.5}}, r"offset 1.5 of segment 0 must be an int"),
        ({"position": {}}, "position={} must be a non-empty stream cut"),
        ({"position": "[1, 2]"}, r"position='\[1, 2\]' must be a non-empty stream cut"),
        ({"position": 5}, "position=5 must be a stream cut"),
        ({"storage_options": "anon"}, "storage_options='anon' must be a mapping"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReaderTimeWindowOperator(**{**REQUIRED, **kwargs})


def test_templated_positions_are_checked_only_once_rendered():
    ReaderTimeWindowOperator(**{**REQUIRED, "position": "{{ ti.xcom_pull(task_ids='up') | tojson }}"})
    ReaderTimeWindowOperator(**{**REQUIRED, "position": {"0": "{{ params.offset }}", "1": 0}})
    op = ReaderTimeWindowOperator(**REQUIRED)
    assert set(op.template_fields) == {"store_path", "position", "segments_path"}


def test_parse_position_accepts_json_text_string_ids_and_offsets_and_end_of_segment():
    assert parse_position('{"0": 5, "4294967298": -1}') == {0: 5, E1 | 2: -1}
    assert parse_position({0: "7", "1": -1}) == {0: 7, 1: -1}


def test_the_function_computes_the_window_with_any_form_of_segments(tmp_path):
    store = write_store(tmp_path)
    segments_path = write_segments(tmp_path)
    by_id = segment_map([Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0)])
    as_dicts = [{"segment_id": s.segment_id, "key_start": s.key_start, "key_end": s.key_end} for s in by_id.values()]
    for segments in (segments_path, by_id, list(by_id.values()), as_dicts):
        result = reader_time_window(store, "orders", {0: 1, 1: 0}, segments)
        assert result == {
            "stream": "orders",
            "lower_ms": at(10),
            "upper_ms": at(29),
            "lower": iso(10),
            "upper": iso(29),
            "position": {"0": 1, "1": 0},
        }
    assert read_segments(segments_path, "payments") == segment_map([Segment(0, 0.0, 1.0), Segment(7, 0.0, 1.0)])
    expected = {(2, 1): (20, 39), (3, 1): (20, None), (3, 3): (30, None), (-1, -1): (30, None)}
    for (s0, s1), (lower, upper) in expected.items():
        result = reader_time_window(store, "orders", f'{{"0": {s0}, "1": {s1}}}', segments_path)
        assert (result["lower_ms"], result["upper_ms"]) == (at(lower), None if upper is None else at(upper))
        assert result["upper"] == (None if upper is None else iso(upper))


def test_the_function_names_what_is_wrong(tmp_path):
    store = write_store(tmp_path)
    segments_path = write_segments(tmp_path)
    with pytest.raises(ValueError, match="position has unknown segment 9"):
        reader_time_window(store, "orders", {0: 1, 9: 0}, segments_path)
    with pytest.raises(ValueError, match="has no segments of stream 'clicks'"):
        reader_time_window(store, "clicks", {0: 1}, segments_path)
    with pytest.raises(ValueError, match=r"segments_path='.*nowhere' does not exist"):
        reader_time_window(store, "orders", {0: 1}, str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"segments: \{'segment_id': 0\} is not a segment"):
        reader_time_window(store, "orders", {0: 1}, [{"segment_id": 0}])
    with pytest.raises(ValueError, match="stream='a/b'"):
        reader_time_window(store, "a/b", {0: 1}, segments_path)
    pq.write_table(pa.table({"stream": ["orders"], "segment_id": [0]}), tmp_path / "thin.parquet")
    with pytest.raises(ValueError, match=r"has no column\(s\) \['key_start', 'key_end'\]"):
        reader_time_window(store, "orders", {0: 1}, str(tmp_path / "thin.parquet"))


def test_no_watermark_yet_gives_no_bounds(tmp_path):
    result = reader_time_window(str(tmp_path / "empty-store"), "orders", {0: 1, 1: 0}, write_segments(tmp_path))
    assert (result["lower_ms"], result["upper_ms"], result["lower"], result["upper"]) == (None, None, None, None)


def test_the_operator_pushes_the_window_of_a_literal_position(airflow_db, tmp_path):
    store, segments_path = write_store(tmp_path), write_segments(tmp_path)
    dag = fresh_dag("reader_window")
    with dag:
        # --8<-- [start:operator]
        ReaderTimeWindowOperator(
            task_id="window", stream="orders", store_path=store, position={0: 2, 1: 1}, segments_path=segments_path
        )
        # --8<-- [end:operator]
    run, states = run_dag(dag)
    assert states == {"window": "success"}
    assert xcom(run, "window") == {
        "stream": "orders",
        "lower_ms": at(20),
        "upper_ms": at(39),
        "lower": iso(20),
        "upper": iso(39),
        "position": {"0": 2, "1": 1},
    }


def test_the_operator_reads_the_cut_an_upstream_task_pushed(airflow_db, tmp_path):
    store, segments_path = write_store(tmp_path), write_segments(tmp_path)
    dag = fresh_dag("reader_window_xcom")
    with dag:

        @task
        def consume() -> dict:
            return {"stream": "orders", "cut": {"0": 3, "1": 1}}

        @task
        def consume_plain() -> dict:
            return {"0": 1, "1": 0}

        up = consume()
        plain = consume_plain()
        templated = ReaderTimeWindowOperator(
            task_id="templated",
            stream="orders",
            store_path=store,
            position="{{ ti.xcom_pull(task_ids='consume')['cut'] | tojson }}",
            segments_path=segments_path,
        )
        up >> templated
        ReaderTimeWindowOperator(
            task_id="from_xcomarg", stream="orders", store_path=store, position=plain, segments_path=segments_path
        )

        @task
        def in_a_task(cut: dict) -> dict:
            return reader_time_window(store, "orders", cut, segments_path)

        in_a_task(plain)

    run, states = run_dag(dag)
    assert set(states.values()) == {"success"}, states
    templated_window = xcom(run, "templated")
    assert (templated_window["lower"], templated_window["upper"]) == (iso(20), None)
    assert templated_window["position"] == {"0": 3, "1": 1}
    assert (xcom(run, "from_xcomarg")["lower_ms"], xcom(run, "from_xcomarg")["upper_ms"]) == (at(10), at(29))
    assert xcom(run, "in_a_task") == xcom(run, "from_xcomarg")


def test_a_position_on_an_unknown_segment_fails_the_task(airflow_db, tmp_path):
    store, segments_path = write_store(tmp_path), write_segments(tmp_path)
    dag = fresh_dag("reader_window_bad")
    with dag:
        ReaderTimeWindowOperator(
            task_id="window", stream="orders", store_path=store, position={0: 2, 7: 1}, segments_path=segments_path
        )
    run, states = run_dag(dag)
    assert states == {"window": "failed"}
    assert xcom(run, "window") is None


@pytest.mark.parametrize(("argument", "rendered"), [("store_path", "store"), ("segments_path", "segments")])
def test_a_templated_path_is_checked_as_rendered_before_anything_is_read(argument, rendered):
    operator = ReaderTimeWindowOperator(
        task_id="window",
        stream="orders",
        store_path="{{ params.store }}",
        position={"0": 5},
        segments_path="{{ params.segments }}",
    )
    operator.store_path, operator.segments_path = "/wm", "/segments"
    setattr(operator, argument, rendered)  # what the template rendered to
    with pytest.raises(ValueError, match=rf"^{argument}={rendered!r} must be an absolute path or a URL"):
        operator.execute({})  # type: ignore[arg-type]
