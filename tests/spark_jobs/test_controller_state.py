"""The controller's state parts (``spark_jobs.controller.state``) on the shared Spark Connect session: each is
stored with its schema beside it and read back with it; the streams' part reads the same whether the driver or
Spark wrote it; a part written before the schema was stored beside it still reads, by inferring it."""

from __future__ import annotations

import json
from pathlib import Path

from spark_jobs.common import SCHEMA_DOCUMENT
from spark_jobs.controller.schemas import STREAMS_STATE_SCHEMA, WRITERS_STATE_SCHEMA
from spark_jobs.controller.state import read_state, write_driver_state, write_state

STREAMS = [
    {
        "stream": "orders",
        "wm_key": "",
        "first_mark_at_ms": 1_000,
        "wm_lower_ms": 5_000,
        "wm_upper_ms": 7_000,
        "wm_cut": {0: 3, 4294967296: 4},
        "wm_computed_at_ms": 9_000,
        "status": "EMITTED",  # a field of the round's row that the state does not keep
    },
    {
        "stream": "orders",
        "wm_key": "eu",
        "first_mark_at_ms": None,
        "wm_lower_ms": None,
        "wm_upper_ms": None,
        "wm_cut": None,
        "wm_computed_at_ms": None,
        "status": "INITIAL_DELAY",
    },
]


def rows_of(spark, state: Path, part: str, schema) -> list[dict]:
    frame = read_state(spark, str(state), part, schema)
    assert frame is not None
    return sorted((row.asDict() for row in frame.collect()), key=lambda r: (r["stream"], r["wm_key"]))


def stored_schema(folder: Path) -> list[tuple[str, str]]:
    document = json.loads((folder / SCHEMA_DOCUMENT).read_text())
    return [(f["name"], json.dumps(f["type"], sort_keys=True)) for f in document["fields"]]


def schema_fields(schema) -> list[tuple[str, str]]:
    return [(f.name, json.dumps(f.dataType.jsonValue(), sort_keys=True)) for f in schema.fields]


def test_the_streams_part_reads_the_same_written_by_the_driver_or_by_spark_with_its_schema_beside_it(
    spark, tmp_path, monkeypatch
):
    write_driver_state(spark, STREAMS, str(tmp_path / "driver" / "streams"), STREAMS_STATE_SCHEMA)
    monkeypatch.setattr("spark_jobs.controller.state.driver_can_write", lambda *urls: False)
    write_driver_state(spark, STREAMS, str(tmp_path / "spark" / "streams"), STREAMS_STATE_SCHEMA)

    assert len(list((tmp_path / "driver" / "streams").glob("*.parquet"))) == 1
    expected = [{k: v for k, v in row.items() if k != "status"} for row in STREAMS]
    for writer in ("driver", "spark"):
        assert stored_schema(tmp_path / writer / "streams") == schema_fields(STREAMS_STATE_SCHEMA), writer
        assert rows_of(spark, tmp_path / writer, "streams", STREAMS_STATE_SCHEMA) == expected, writer


def test_a_part_written_before_its_schema_was_stored_beside_it_reads_the_same(spark, tmp_path):
    writers = spark.createDataFrame(
        [("orders", "", "w1", 5_000, {0: 3}, True, None), ("orders", "eu", "w2", 6_000, {1: 2}, False, 4_000)],
        WRITERS_STATE_SCHEMA,
    )
    write_state(writers, str(tmp_path / "stored" / "writers"), WRITERS_STATE_SCHEMA)
    write_state(writers, str(tmp_path / "inferred" / "writers"), WRITERS_STATE_SCHEMA)
    (tmp_path / "inferred" / "writers" / SCHEMA_DOCUMENT).unlink()

    stored = rows_of(spark, tmp_path / "stored", "writers", WRITERS_STATE_SCHEMA)
    assert stored == rows_of(spark, tmp_path / "inferred", "writers", WRITERS_STATE_SCHEMA)
    assert [(r["writer_id"], r["position"], r["lagging_since_ms"]) for r in stored] == [
        ("w1", {0: 3}, None),
        ("w2", {1: 2}, 4_000),
    ]
    assert read_state(spark, str(tmp_path / "stored"), "origins", WRITERS_STATE_SCHEMA) is None  # never written


def test_a_part_written_before_keyed_watermarks_reads_as_the_unkeyed_watermark(spark, tmp_path):
    writers = spark.createDataFrame([("orders", None, "w1", 5_000, {0: 3}, True, None)], WRITERS_STATE_SCHEMA).drop(
        "wm_key"
    )
    for stored in ("stored", "inferred"):
        writers.write.parquet(str(tmp_path / stored / "writers"))
    schema = [field for field in WRITERS_STATE_SCHEMA.fields if field.name != "wm_key"]
    (tmp_path / "stored" / "writers" / SCHEMA_DOCUMENT).write_text(
        json.dumps({"type": "struct", "fields": [field.jsonValue() for field in schema], "rows": 1})
    )

    for stored in ("stored", "inferred"):
        rows = rows_of(spark, tmp_path / stored, "writers", WRITERS_STATE_SCHEMA)
        assert [(r["stream"], r["wm_key"], r["writer_id"], r["position"]) for r in rows] == [
            ("orders", "", "w1", {0: 3})
        ], stored
