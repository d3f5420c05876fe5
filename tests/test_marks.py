"""MarksWriter: the controller job's schema, atomic flushes, argument errors naming the value, and round trips."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import fsspec
import pendulum
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from airflow_provider_wm import marks
from airflow_provider_wm.core.controller import (
    ControllerConfig,
    ControllerState,
    Quarantine,
    StreamStatus,
    WriterMark,
    run_round,
)
from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.marks import MarksWriter
from spark_jobs.controller import schemas

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


def read_rows(folder) -> list[dict]:
    return ds.dataset(str(folder)).to_table().to_pylist()


def as_writer_marks(rows: list[dict]) -> list[WriterMark]:
    return [WriterMark(**{**r, "position": None if r["position"] is None else dict(r["position"])}) for r in rows]


def test_docstring_examples_hold():
    result = doctest.testmod(marks)
    assert result.failed == 0 and result.attempted > 0


def test_the_schemas_are_the_ones_the_controller_job_reads():
    assert from_arrow_schema(marks.MARKS_SCHEMA) == schemas.MARKS_SCHEMA
    assert from_arrow_schema(marks.SEGMENTS_SCHEMA) == schemas.SEGMENTS_SCHEMA


def test_every_flushed_file_has_the_whole_schema(tmp_path):
    writer = MarksWriter(tmp_path, "orders", clock=lambda: T0)
    writer.write_segments()
    writer.note("w1", T0, {0: 1})  # no optional column used: they are still written, as nulls
    marks_file, segments_file = writer.flush(), next((tmp_path / "segments").iterdir())
    assert from_arrow_schema(pq.read_schema(marks_file)) == schemas.MARKS_SCHEMA
    assert from_arrow_schema(pq.read_schema(segments_file)) == schemas.SEGMENTS_SCHEMA


def test_the_module_imports_neither_airflow_nor_pyspark():
    code = (
        "import sys, airflow_provider_wm.marks; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'pendulum')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_notes_commits_and_shutdowns_round_trip(tmp_path):
    writer = MarksWriter(tmp_path, "orders", clock=lambda: T0 + 10 * MINUTE)
    writer.note("w1", datetime(2026, 1, 1, tzinfo=UTC), {0: 5, 1: 7})
    writer.commit("txn", pendulum.datetime(2026, 1, 1, 0, 1, tz="Europe/Paris"), {1: 9}, reported_at=T0 + MINUTE)
    writer.note("w2", T0 + 2, {0: 3}, wm_key="eu", seq=4, origin_id="upload-1")
    writer.note("w2", T0 + 3, {0: 4}, seq=5, chunk=2, last_chunk=False)
    writer.shutdown("w3")
    writer.shutdown("w4", time=datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), wm_key="eu")
    assert writer.pending == 6
    path = writer.flush()
    assert writer.pending == 0 and writer.flush() is None
    stamped = T0 + 10 * MINUTE
    none = {"origin_id": None, "seq": None, "chunk": None, "last_chunk": None, "wm_key": None}
    assert pq.read_table(path).to_pylist() == [
        {"stream": "orders", "writer_id": "w1", "time_ms": T0, "position": [(0, 5), (1, 7)], "kind": "note",
         "reported_at_ms": stamped, **none},
        {"stream": "orders", "writer_id": "txn", "time_ms": T0 + MINUTE - 3_600_000, "position": [(1, 9)],
         "kind": "commit", "reported_at_ms": T0 + MINUTE, **none},
        {"stream": "orders", "writer_id": "w2", "time_ms": T0 + 2, "position": [(0, 3)], "kind": "note",
         "reported_at_ms": stamped, **{**none, "origin_id": "upload-1", "seq": 4, "chunk": 1, "last_chunk": True,
                                       "wm_key": "eu"}},
        {"stream": "orders", "writer_id": "w2", "time_ms": T0 + 3, "position": [(0, 4)], "kind": "note",
         "reported_at_ms": stamped, **{**none, "seq": 5, "chunk": 2, "last_chunk": False}},
        {"stream": "orders", "writer_id": "w3", "time_ms": None, "position": None, "kind": "shutdown",
         "reported_at_ms": stamped, **none},
        {"stream": "orders", "writer_id": "w4", "time_ms": T0, "position": None, "kind": "shutdown",
         "reported_at_ms": stamped, **{**none, "wm_key": "eu"}},
    ]  # fmt: skip


def test_the_reference_controller_reads_what_the_writer_wrote(tmp_path):
    segments = [Segment(0, 0.0, 0.5), Segment(1, 0.5, 1.0)]
    with MarksWriter(tmp_path, "orders") as writer:
        writer.write_segments(segments)
        writer.note("w1", T0 + 5 * MINUTE, {0: 100}, reported_at=T0 + 5 * MINUTE)
        writer.note("w2", T0 + 7 * MINUTE, {1: 50}, reported_at=T0 + 7 * MINUTE)
        writer.commit("txn", T0 + 6 * MINUTE, {0: 120}, reported_at=T0 + 8 * MINUTE)
    result = run_round(
        ControllerState(),
        as_writer_marks(read_rows(tmp_path / "marks")),
        {"orders": {s.segment_id: s for s in segments}},
        T0 + 10 * MINUTE,
        ControllerConfig(initial_delay_ms=0),
    )
    assert not result.quarantined and not result.rejected
    report = result.reports["orders"]
    assert report.status == StreamStatus.EMITTED
    assert report.watermark is not None
    assert (report.watermark.lower_ms, report.watermark.upper_ms) == (T0 + 5 * MINUTE, T0 + 7 * MINUTE)
    assert report.watermark.stream_cut == {0: 120, 1: 50}


def test_reported_at_is_stamped_when_the_marks_are_flushed(tmp_path):
    now = [T0]
    writer = MarksWriter(tmp_path, "orders", clock=lambda: now[0])
    writer.note("w1", T0, {0: 1})
    now[0] = T0 + MINUTE
    writer.note("w1", T0 + 1, {0: 2}, reported_at=T0 + 30_000)
    writer.flush()
    assert [r["reported_at_ms"] for r in read_rows(tmp_path / "marks")] == [T0 + MINUTE, T0 + 30_000]


def test_the_buffer_flushes_itself_at_max_rows(tmp_path):
    writer = MarksWriter(tmp_path, "orders", max_rows=2, clock=lambda: T0)
    for i in range(5):
        writer.note("w1", T0 + i, {0: i})
    assert writer.pending == 1
    assert len(list((tmp_path / "marks").iterdir())) == 2


def test_leaving_the_block_flushes_but_not_after_an_error(tmp_path):
    with MarksWriter(tmp_path, "orders", clock=lambda: T0) as writer:
        writer.note("w1", T0, {0: 1})
    assert len(read_rows(tmp_path / "marks")) == 1
    with pytest.raises(RuntimeError), MarksWriter(tmp_path, "orders", clock=lambda: T0) as failing:
        failing.note("w1", T0 + 1, {0: 2})
        raise RuntimeError("the producer failed")
    assert failing.pending == 1 and len(read_rows(tmp_path / "marks")) == 1


def test_a_flush_is_invisible_until_its_file_is_whole(tmp_path, monkeypatch):
    writer = MarksWriter(tmp_path, "orders", clock=lambda: T0)
    for i in range(1_000):
        writer.note("w1", T0 + i, {0: i})
    real_write = pq.write_table
    seen_while_writing = []

    def write_and_look(table, where, **kwargs):
        real_write(table, where, **kwargs)
        where.flush()
        listed = sorted(os.listdir(tmp_path / "marks"))
        seen_while_writing.append((listed, ds.dataset(str(tmp_path / "marks")).count_rows()))

    monkeypatch.setattr(pq, "write_table", write_and_look)
    path = writer.flush()
    [(listed, rows)] = seen_while_writing
    assert rows == 0  # the bytes are all there, under a hidden name that readers skip
    assert len(listed) == 1 and listed[0].startswith(".")
    assert os.listdir(tmp_path / "marks") == [os.path.basename(path)]
    assert pq.read_table(path).num_rows == 1_000


def test_a_failed_flush_leaves_no_file_and_keeps_the_marks(tmp_path, monkeypatch):
    writer = MarksWriter(tmp_path, "orders", clock=lambda: T0)
    writer.note("w1", T0, {0: 1})
    writer.shutdown("w1")

    def write_half(table, where, **kwargs):
        where.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", write_half)
    with pytest.raises(OSError, match="disk full"):
        writer.flush()
    assert os.listdir(tmp_path / "marks") == []
    assert writer.pending == 2
    monkeypatch.undo()
    writer.flush()
    assert [r["kind"] for r in read_rows(tmp_path / "marks")] == ["note", "shutdown"]


def test_a_named_flush_replaces_its_file(tmp_path):
    writer = MarksWriter(tmp_path, "orders", clock=lambda: T0)
    for _ in range(2):  # a retried batch
        writer.note("w1", T0, {0: 1})
        writer.flush(name="batch-0001")
    assert os.listdir(tmp_path / "marks") == ["batch-0001.parquet"]
    assert len(read_rows(tmp_path / "marks")) == 1


def test_any_fsspec_url_and_separate_paths(tmp_path):
    writer = MarksWriter(None, "orders", marks_path="memory://wm-test/m", segments_path="memory://wm-test/s")
    segments_url = writer.write_segments([(0, 0.0, 0.25), (1, 0.25, 1.0)])
    writer.note("w1", T0, {1: 3}, reported_at=T0)
    marks_url = writer.flush()
    assert marks_url is not None and marks_url.startswith("memory://wm-test/m/marks-orders-")
    with fsspec.open(segments_url) as handle:
        assert [r["segment_id"] for r in pq.read_table(handle).to_pylist()] == [0, 1]
    with fsspec.open(marks_url) as handle:
        assert pq.read_table(handle).column("position").to_pylist() == [[(1, 3)]]


def test_unchecked_writers_plant_bad_rows_for_the_controller_to_quarantine(tmp_path):
    MarksWriter(tmp_path, "orders").write_segments()
    with MarksWriter(tmp_path, "../outside", validate=False) as bad_stream:
        bad_stream.note("w9", T0, {0: 1}, reported_at=T0)
    with MarksWriter(tmp_path, "orders", validate=False) as bad_offset:
        bad_offset.note("w1", T0, {0: -1}, reported_at=T0)
    assert all(name.startswith("marks-") for name in os.listdir(tmp_path / "marks"))  # stays in the folder
    result = run_round(
        ControllerState(),
        as_writer_marks(read_rows(tmp_path / "marks")),
        {"orders": {0: Segment(0, 0.0, 1.0)}},
        T0 + MINUTE,
        ControllerConfig(),
    )
    assert sorted(reason for _mark, reason in result.quarantined) == [
        Quarantine.INVALID_STREAM,
        Quarantine.NEGATIVE_OFFSET,
    ]


def note(**overrides):
    arguments = {"writer_id": "w1", "time": T0, "position": {0: 1}, **overrides}
    return lambda writer: writer.note(**arguments)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (note(writer_id=""), "writer_id='' must be a non-empty string"),
        (note(writer_id=None), "writer_id=None must be a non-empty string"),
        (note(time=datetime(2026, 1, 1)), r"time=datetime.datetime\(2026, 1, 1, 0, 0\) has no time zone"),
        (note(time="2026-01-01T00:00:00Z"), "time='2026-01-01T00:00:00Z' is not a time"),
        (note(time=True), "time=True is not a time"),
        (note(time=-1), "time=-1 is outside the times the controller accepts"),
        (note(time=1.5e12), "time=1500000000000.0 is not a time"),
        (note(reported_at=10**16), "reported_at=10000000000000000 is outside the times"),
        (note(position=[(0, 1)]), r"position=\[\(0, 1\)\] must be a mapping of segment id -> offset"),
        (note(position={0: -1}), r"position=\{0: -1\}: segment 0 at offset -1; both must be >= 0"),
        (note(position={0: 1.5}), r"position=\{0: 1.5\}: offset 1.5 is not an int"),
        (note(position={"0": 1}), r"position=\{'0': 1\}: segment id '0' is not an int"),
        (note(position={0: 2**63}), "offset 9223372036854775808 does not fit a 64-bit integer"),
        (note(wm_key="a/b"), "wm_key='a/b' is not a key name"),
        (note(seq=0), "seq=0 must be from 1"),
        (note(seq=1, chunk=0, last_chunk=True), "chunk=0 must be from 1 to 10000"),
        (note(seq=1, chunk=2), "last_chunk=None must be True or False"),
        (note(chunk=1), "chunk=1 is given without seq"),
        (note(origin_id="o"), "origin_id='o' is given without seq"),
        (note(seq=1, origin_id=""), "origin_id='' must be a non-empty string or None"),
        (lambda w: w.shutdown("w1", time="later"), "time='later' is not a time"),
        (lambda w: w.flush(name=".hidden"), "name='.hidden' is not a file name"),
        (lambda w: w.flush(name="a/b"), "name='a/b' is not a file name"),
        (lambda w: w.write_segments([(0, 0.5, 0.5)]), r"segments\[0\]=\(0, 0.5, 0.5\): segment 0: key range"),
        (lambda w: w.write_segments([(0, 0.0, 1.0, 9)]), r"segments\[0\]=\(0, 0.0, 1.0, 9\) must be a Segment"),
        (lambda w: w.write_segments([(-1, 0.0, 1.0)]), r"segments\[0\]=\(-1, 0.0, 1.0\): segment_id -1 must be"),
        (lambda w: w.write_segments([]), r"segments=\[\] declares no segment"),
        (lambda w: w.write_segments([(0, 0.0, 0.5), (0, 0.5, 1.0)]), "segments=.*: segment id 0 is defined twice"),
        (
            lambda w: w.write_segments([(0, 0.0, 0.6), (1, 0.5, 1.0), (2**32, 0.0, 1.0)]),
            r"segments=.*: segments \[0, 1\] overlap within one epoch",
        ),
    ],
)
def test_a_bad_argument_is_named_with_its_value(tmp_path, call, message):
    writer = MarksWriter(tmp_path, "orders")
    with pytest.raises(ValueError, match=message):
        call(writer)
    assert writer.pending == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"base": "/tmp", "stream": "../etc"}, "stream='../etc' is not a stream name"),
        ({"base": "/tmp", "stream": ""}, "stream='' is not a stream name"),
        ({"base": " ", "stream": "orders"}, "base=' ' must be a non-empty path or URL"),
        ({"base": None, "stream": "orders", "marks_path": "/m"}, "base=None must be a non-empty path or URL"),
        ({"base": "/tmp", "stream": "orders", "max_rows": 0}, "max_rows=0 must be a positive int"),
    ],
)
def test_a_bad_constructor_argument_is_named_with_its_value(arguments, message):
    with pytest.raises(ValueError, match=message):
        MarksWriter(**arguments)


def test_unchecked_writers_still_check_types(tmp_path):
    writer = MarksWriter(tmp_path, "orders", validate=False)
    with pytest.raises(ValueError, match=r"position=\{0: '1'\}: offset '1' is not an int"):
        writer.note("w1", T0, {0: "1"})
    with pytest.raises(ValueError, match="writer_id=5 must be a non-empty string"):
        writer.shutdown(5)  # type: ignore[arg-type]


def test_the_docs_example_runs(tmp_path):
    page = (Path(__file__).resolve().parents[1] / "docs" / "contracts.md").read_text()
    example = page.split("## Writing marks from Python")[1].split("```python\n")[1].split("```")[0]
    exec(example.replace("s3a://lake", str(tmp_path)), {"datetime": datetime, "UTC": UTC})
    assert [r["kind"] for r in read_rows(tmp_path / "marks")] == ["note", "commit", "shutdown"]
    assert [(r["segment_id"], r["key_start"], r["key_end"]) for r in read_rows(tmp_path / "segments")] == [(0, 0, 1)]
