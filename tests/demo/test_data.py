"""The demo's marks and segments, read back without Spark: the planted bad rows are the only ones the
reference controller refuses, and writing the demo again replaces its files."""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema

from airflow_provider_wm.core.controller import (
    ControllerConfig,
    ControllerState,
    Quarantine,
    Rejection,
    WriterMark,
    run_round,
)
from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.demo import data
from spark_jobs.controller import schemas


def rows(folder) -> list[dict]:
    return ds.dataset(str(folder)).to_table().to_pylist()


def test_writing_again_replaces_the_files(tmp_path):
    counts = data.write(tmp_path)
    first = rows(tmp_path / "marks")
    assert data.write(tmp_path) == counts == {"hour 0": 431, "hour 1": 339, "hour 2": 278, "hour 3": 248}
    assert rows(tmp_path / "marks") == first
    assert len(first) == sum(counts.values())
    for path in (tmp_path / "marks").iterdir():
        assert from_arrow_schema(pq.read_schema(path)) == schemas.MARKS_SCHEMA


def test_only_the_planted_rows_are_refused(tmp_path):
    data.write(tmp_path)
    marks = [
        WriterMark(**{**r, "position": None if r["position"] is None else dict(r["position"])})
        for r in rows(tmp_path / "marks")
    ]
    segments: dict[str, dict[int, Segment]] = {}
    for r in rows(tmp_path / "segments"):
        segments.setdefault(r["stream"], {})[r["segment_id"]] = Segment(r["segment_id"], r["key_start"], r["key_end"])
    assert {stream: sorted(s) for stream, s in segments.items()} == {
        stream: sorted(s.segment_id for s in segs) for stream, segs in data.segments().items()
    }
    state, quarantined, rejected = ControllerState(), [], []
    config = ControllerConfig(writer_timeout_ms=30 * data.MINUTE, initial_delay_ms=2 * data.MINUTE)
    for hour in range(1, data.HOURS + 1):
        result = run_round(state, marks, segments, data.START_MS + hour * data.HOUR, config)
        state = result.state
        quarantined += [(m.stream, m.writer_id, reason) for m, reason in result.quarantined]
        rejected += [(m.stream, m.writer_id, m.time_ms, reason) for m, reason in result.rejected]
    assert sorted(quarantined) == [
        (data.OUTSIDE, "w9", Quarantine.INVALID_STREAM),
        ("orders", "w1", Quarantine.NEGATIVE_OFFSET),
        ("orders", "w2", Quarantine.UNKNOWN_SEGMENT),
    ]
    assert rejected == [("orders", "w1", data.START_MS + 30 * data.MINUTE, Rejection.INVALID_TIME)]
