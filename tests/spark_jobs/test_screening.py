"""Input files a job cannot read are set aside, listed in the manifest, and the job runs on the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType

from airflow_provider_wm.contracts import ControllerRequest, PartitionsRequest, WindowedRequest, WorkUnitRequest
from airflow_provider_wm.core.partitions import DAY_MS, iso_ms
from airflow_provider_wm.core.segments import Segment
from airflow_provider_wm.core.windowing import Aggregate, AggregationSpec, StoreWatermark
from airflow_provider_wm.core.windows import Tumbling
from spark_jobs import controller, partitions, windowed
from spark_jobs.common import read_dataset_and_schema, run_and_record
from spark_jobs.screening import reads_as, screen_dataset, stored_spark_schema
from tests.factories import mark, write_marks, write_segments
from tests.flaky_store import failing_opens


def write_file(path: Path, columns: dict[str, pyarrow.Array | list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.table(columns), path)


def test_a_file_reads_as_a_wider_integer_or_a_double_but_not_as_another_kind():
    assert reads_as(IntegerType(), LongType())
    assert not reads_as(LongType(), IntegerType())
    assert not reads_as(StringType(), LongType())


def test_screening_keeps_files_that_read_together_and_names_why_each_other_one_is_set_aside(tmp_path):
    data = tmp_path / "data"
    write_file(data / "day=2026-01-01" / "a.parquet", {"k": ["a"], "x": pyarrow.array([1], pyarrow.int32())})
    write_file(data / "day=2026-01-01" / "b.parquet", {"k": ["b"], "x": pyarrow.array([2], pyarrow.int64())})
    write_file(data / "day=2026-01-02" / "c.parquet", {"k": ["c"], "x": pyarrow.array([3], pyarrow.int64())})
    write_file(data / "day=2026-01-02" / "d.parquet", {"k": ["d"], "x": ["three"]})
    (data / "day=2026-01-02" / "e.parquet").write_bytes(b"half a file")
    write_file(data / "_temporary" / "f.parquet", {"k": [1]})  # hidden, as Spark hides it
    (data / "_SUCCESS").write_bytes(b"")

    kept, schema, unreadable, uniform = screen_dataset(str(data), "parquet")

    assert sorted(Path(f).name for f in kept) == ["a.parquet", "b.parquet", "c.parquet"]
    assert schema is not None and schema.simpleString() == "struct<k:string,x:bigint>"
    assert not uniform  # a.parquet's x is an int: read with the dataset's bigint
    reasons = {Path(u.path).name: u.reason for u in unreadable}
    assert reasons["d.parquet"] == "column x is string; the dataset's is bigint"
    assert reasons["e.parquet"].startswith("not a readable parquet file")
    assert set(reasons) == {"d.parquet", "e.parquet"}
    assert {u.dataset for u in unreadable} == {str(data)}


SPARK_TYPES = """SELECT 'a' AS s, CAST(1 AS INT) AS i, id AS n, CAST(2.5 AS DOUBLE) AS d,
    CAST(1.25 AS DECIMAL(10, 2)) AS m, TIMESTAMP '2026-01-01 00:00:00' AS t,
    TIMESTAMP_NTZ '2026-01-01 00:00:00' AS tn, DATE '2026-01-01' AS day,
    map(id, id + 1) AS position, array('x', NULL) AS tags, named_struct('k', 'v', 'w', CAST(NULL AS BIGINT)) AS meta
    FROM range(3)"""


def test_a_folder_spark_wrote_is_read_with_the_schema_in_its_footer_as_spark_infers_it(spark, tmp_path):
    path = str(tmp_path / "written")
    spark.sql(SPARK_TYPES).repartition(2).write.parquet(path)
    inferred = spark.read.parquet(path)

    stored = stored_spark_schema(path, "parquet")
    read = read_dataset_and_schema(spark, path)

    assert stored is not None and stored.simpleString() == inferred.schema.simpleString()
    assert read is not None and read[1] == inferred.schema
    assert sorted(read[0].collect()) == sorted(inferred.collect())


def test_spark_infers_the_schema_of_a_folder_it_did_not_write_or_of_partition_folders(spark, tmp_path):
    by_pyarrow = tmp_path / "pyarrow"
    write_file(by_pyarrow / "part-0.parquet", {"k": ["a"]})
    partitioned = str(tmp_path / "partitioned")
    spark.sql("SELECT id, id % 2 AS day FROM range(4)").write.partitionBy("day").parquet(partitioned)
    garbage_first = tmp_path / "garbage_first"
    spark.sql("SELECT id FROM range(2)").write.parquet(str(garbage_first))
    (garbage_first / "a-stray.parquet").write_bytes(b"not Parquet")
    only_marker = tmp_path / "only_marker"
    only_marker.mkdir()
    (only_marker / "_SUCCESS").write_bytes(b"")

    assert stored_spark_schema(str(by_pyarrow), "parquet") is None  # no schema of Spark's in its footer
    assert stored_spark_schema(partitioned, "parquet") is None  # Spark types day from the folder names
    assert stored_spark_schema(str(garbage_first), "parquet") is None  # the first file does not read
    assert stored_spark_schema(str(only_marker), "parquet") is None  # no data file
    assert stored_spark_schema(str(tmp_path / "missing"), "parquet") is None
    assert stored_spark_schema(partitioned, "orc") is None
    read = read_dataset_and_schema(spark, partitioned)
    assert read is not None and read[1] == spark.read.parquet(partitioned).schema  # day as Spark types it


def test_partition_folders_add_string_columns_to_the_footers_schema_when_spark_does_not_type_them(spark, tmp_path):
    partitioned = str(tmp_path / "partitioned")
    spark.sql("SELECT id, id % 2 AS day, 'eu' AS region FROM range(4)").write.partitionBy("day", "region").parquet(
        partitioned
    )
    (tmp_path / "partitioned" / "_SUCCESS").touch(exist_ok=True)
    inference = "spark.sql.sources.partitionColumnTypeInference.enabled"
    previous = spark.conf.get(inference)  # the partitions job turns it off in the session it runs on
    spark.conf.set(inference, "false")
    try:
        stored = stored_spark_schema(partitioned, "parquet", partition_types_inferred=False)
        inferred = spark.read.parquet(partitioned)
        read = read_dataset_and_schema(spark, partitioned)

        assert stored is not None and stored.simpleString() == inferred.schema.simpleString()  # in level order
        assert read is not None and read[1] == inferred.schema
        assert sorted(read[0].collect()) == sorted(inferred.collect())
    finally:
        spark.conf.set(inference, previous)
    assert stored_spark_schema(partitioned, "parquet") is None  # Spark types them: only Spark can tell


def test_the_footer_of_spark_s_first_file_by_path_gives_the_schema_and_a_summary_file_leaves_it_to_spark(
    spark, tmp_path
):
    """Spark takes the footer of the first file by full path: ``region=eu-west/...`` sorts before ``region=eu/...``
    (``-`` before ``/``), so the schema has the column only that folder's files have. A summary file comes first."""
    evolved = tmp_path / "evolved"
    spark.sql("SELECT id FROM range(2)").write.parquet(str(evolved / "region=eu"))
    spark.sql("SELECT id, 'x' AS extra FROM range(2)").write.parquet(str(evolved / "region=eu-west"))
    summarised = tmp_path / "summarised"
    spark.sql("SELECT id FROM range(2)").write.parquet(str(summarised / "day=1"))
    (summarised / "_common_metadata").write_bytes((evolved / "region=eu" / "_SUCCESS").read_bytes())
    inference = "spark.sql.sources.partitionColumnTypeInference.enabled"
    previous = spark.conf.get(inference)
    spark.conf.set(inference, "false")
    try:
        inferred = spark.read.parquet(str(evolved)).schema
        stored = stored_spark_schema(str(evolved), "parquet", partition_types_inferred=False)
    finally:
        spark.conf.set(inference, previous)

    assert stored is not None and stored.simpleString() == inferred.simpleString()
    assert inferred.simpleString() == "struct<id:bigint,extra:string,region:string>"
    assert stored_spark_schema(str(summarised), "parquet", partition_types_inferred=False) is None


def controller_request(tmp_path: Path, marks: str, segments: str, round_name: str, state_in: str | None):
    return ControllerRequest(
        controller="test",
        run_id=round_name,
        marks_path=marks,
        segments_path=segments,
        state_in=state_in,
        state_out=str(tmp_path / f"{round_name}-state"),
        round_out=str(tmp_path / f"{round_name}-out"),
        now_ms=2_000 if state_in is None else 4_000,
        processed_until_ms=None if state_in is None else 2_000,
        processed_marks=0,
        writer_timeout_ms=600_000,
        initial_delay_ms=0,
    )


def test_a_marks_file_of_another_type_is_set_aside_in_every_round_instead_of_failing_them(spark, tmp_path):
    marks = write_marks([mark("w1", 100, {0: 10}), mark("w2", 150, {0: 12})], tmp_path / "marks")
    bad = tmp_path / "marks" / "part-9.parquet"
    write_file(bad, {"stream": ["s"], "writer_id": ["w3"], "time_ms": ["2026-01-01"], "kind": ["note"]})
    segments = write_segments({"s": [Segment(0, 0.0, 1.0)]}, tmp_path / "segments")

    first = run_and_record(spark, controller_request(tmp_path, marks, segments, "r1", None), controller.run)
    watermark = first.streams["s"].watermark
    assert watermark is not None and watermark.lower_ms == 100
    assert [(u.path, u.reason) for u in first.unreadable_files] == [
        (str(bad), "column time_ms is string; the dataset's is bigint")
    ]
    assert first.processed_marks == 2

    second = run_and_record(
        spark, controller_request(tmp_path, marks, segments, "r2", first.state_path), controller.run
    )
    assert [u.path for u in second.unreadable_files] == [str(bad)]
    assert (tmp_path / "r2-out" / "manifest.json").read_text().count("part-9.parquet") == 1


def test_a_file_of_the_jobs_own_state_that_does_not_read_fails_the_round_instead_of_being_set_aside(spark, tmp_path):
    marks = write_marks([mark("w1", 100, {0: 10})], tmp_path / "marks")
    segments = write_segments({"s": [Segment(0, 0.0, 1.0)]}, tmp_path / "segments")
    first = run_and_record(spark, controller_request(tmp_path, marks, segments, "r1", None), controller.run)
    writers = next(p for p in Path(first.state_path).iterdir() if p.is_dir() and list(p.glob("*.parquet")))
    (writers / "part-damaged.parquet").write_bytes(b"not Parquet")

    with pytest.raises(Exception, match="FAILED_READ_FILE"):
        run_and_record(spark, controller_request(tmp_path, marks, segments, "r2", first.state_path), controller.run)
    assert '"status": "failed"' in (tmp_path / "r2-out" / "manifest.json").read_text()


def windowed_request(tmp_path: Path, events: Path) -> WindowedRequest:
    spec = AggregationSpec(
        Tumbling(10_000), (Aggregate("n", "count"), Aggregate("total", "sum", "v")), ("k",), StoreWatermark("s")
    )
    return WindowedRequest.from_json(
        {
            "pipeline": "p",
            "run_id": "r1",
            "version": 1,
            "spec": spec.to_json(),
            "events": str(events),
            "event_time": "t",
            "arrival_column": "arrival",
            "arrival_from_ms": None,
            "arrival_until_ms": 1,
            "previous_watermark_ms": None,
            "previous_max_event_time_ms": None,
            "source_watermark_ms": 20_000,
            "state_in": None,
            "state_out": str(tmp_path / "state"),
            "output": str(tmp_path / "panes"),
            "late_output": str(tmp_path / "late"),
            "round_out": str(tmp_path / "run"),
        }
    )


def test_a_windowed_run_aggregates_the_events_that_read_and_lists_the_file_that_does_not(spark, tmp_path):
    events = tmp_path / "events"
    write_file(events / "part-0.parquet", {"k": ["a", "a"], "t": [1_000, 2_000], "v": [1, 2], "arrival": [1, 1]})
    (events / "part-1.parquet").write_bytes(b"PAR1 and then nothing")
    request = windowed_request(tmp_path, events)

    manifest = run_and_record(spark, request, windowed.run)

    assert [Path(u.path).name for u in manifest.unreadable_files] == ["part-1.parquet"]
    assert manifest.totals.events_aggregated == 2
    panes = spark.read.parquet(str(tmp_path / "panes")).collect()  # small: one window
    assert [(r["n"], r["total"]) for r in panes] == [(2, 3)]


def test_a_partitions_run_writes_the_rows_that_read_and_lists_the_source_file_that_does_not(spark, tmp_path):
    source = tmp_path / "source"
    day = datetime(2020, 1, 1, tzinfo=UTC)
    for name, hours in (("a", [1, 2]), ("b", [3])):
        times = pyarrow.array([day + timedelta(hours=h) for h in hours], pyarrow.timestamp("us", tz="UTC"))
        write_file(
            source / "event_date=2020-01-01" / f"{name}.parquet",
            {"id": [f"{name}{h}" for h in hours], "event_time": times},
        )
    write_file(source / "event_date=2020-01-01" / "c.parquet", {"id": ["c"], "event_time": ["2020-01-01T05:00:00"]})
    start = iso_ms("2020-01-01")
    unit = WorkUnitRequest(start, start + DAY_MS, "all", start, start + DAY_MS, "new")
    request = PartitionsRequest(
        pipeline="p", run_id="r", work_units=[unit], source=str(source), time_column="event_time",
        source_partition_column="event_date", target=str(tmp_path / "target"), round_out=str(tmp_path / "run"),
    )  # fmt: skip

    manifest = run_and_record(spark, request, partitions.run)

    assert [(Path(u.path).name, u.reason) for u in manifest.unreadable_files] == [
        ("c.parquet", "column event_time is string; the dataset's is timestamp")
    ]
    assert manifest.status == "succeeded" and [w.rows_written for w in manifest.work_units] == [3]


def test_files_of_one_integer_column_in_two_widths_are_read_together_as_the_wider_one(spark, tmp_path):
    """Spark infers the schema from the first file (an ``int``) and fails on the next (a ``bigint``): the
    screen reads both with the wider type and sets nothing aside."""
    events = tmp_path / "events"
    write_file(
        events / "part-0.parquet", {"k": ["a"], "t": [1_000], "v": pyarrow.array([1], pyarrow.int32()), "arrival": [1]}
    )
    write_file(
        events / "part-1.parquet",
        {"k": ["a"], "t": [2_000], "v": pyarrow.array([2**40], pyarrow.int64()), "arrival": [1]},
    )
    manifest = run_and_record(spark, windowed_request(tmp_path, events), windowed.run)
    assert manifest.unreadable_files == [] and manifest.totals.events_aggregated == 2
    panes = spark.read.parquet(str(tmp_path / "panes")).collect()  # small: one window
    assert [(r["n"], r["total"]) for r in panes] == [(2, 2**40 + 1)]


def test_a_footer_read_that_fails_on_the_connection_fails_the_screen_instead_of_setting_a_good_file_aside(tmp_path):
    data = tmp_path / "data"
    write_file(data / "part-0.parquet", {"x": [1]})
    with failing_opens(1), pytest.raises(ConnectionError):
        screen_dataset(f"flaky://{data}", "parquet")
