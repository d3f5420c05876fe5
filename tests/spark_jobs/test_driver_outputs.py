"""Outputs written from the driver (``spark_jobs.driver_outputs``) on the shared Spark Connect session: one action
fetches several projections, and a folder written by pyarrow reads back in Spark exactly as Spark's own write of
the same rows does, for every type the jobs' outputs hold."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from pyspark.sql import functions as F

from spark_jobs.driver_outputs import driver_can_write, fetch_tables, replace_folder, spark_schema

TYPED = (
    "k string, b byte, sh short, i int, l bigint, f float, d double, dec decimal(12,3), big decimal(30,4), "
    "ok boolean, ts timestamp, ntz timestamp_ntz, day date, bin binary, xs array<bigint>, m map<string,bigint>, "
    "pane struct<window_start:bigint, timing:string, values:struct<n:bigint, total:double>>, "
    "owed array<struct<window_start:bigint, timing:string>>"
)
ROWS = [
    (
        "a", 1, 2, 3, 2**40, 1.5, 2.25, decimal.Decimal("1.250"), decimal.Decimal("12345678901234567890.1234"),
        True, dt.datetime(2026, 1, 5, 1, 2, 3, 4000, tzinfo=dt.UTC), dt.datetime(2026, 1, 5, 1, 2, 3),
        dt.date(2026, 1, 5), b"\x00\x01", [1, None, 3], {"x": 1},
        (0, "ON_TIME", (3, 4.5)), [(0, "EARLY")],
    ),
    ("b", None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None),
    ("c", -1, -2, -3, -(2**40), float("nan"), float("-inf"), decimal.Decimal("0.001"), None, False, None, None, None,
     b"", [], {}, (1, None, None), []),
]  # fmt: skip


def test_a_folder_written_from_the_driver_reads_back_as_sparks_own_write_of_the_same_rows(spark, tmp_path):
    frame = spark.createDataFrame(ROWS, TYPED)
    (table,) = fetch_tables([(frame, frame.columns)])
    replace_folder(table, str(tmp_path / "arrow"))
    frame.write.parquet(str(tmp_path / "spark"))
    arrow, native = spark.read.parquet(str(tmp_path / "arrow")), spark.read.parquet(str(tmp_path / "spark"))
    assert arrow.schema == native.schema
    assert spark_schema(table) == native.schema
    assert sorted(map(repr, arrow.collect())) == sorted(map(repr, native.collect()))
    assert (tmp_path / "arrow" / "_SUCCESS").exists()


def test_one_action_fetches_each_projection_with_its_own_columns_and_a_null_struct_of_another(spark):
    frame = spark.createDataFrame(ROWS, TYPED)
    panes = frame.where("pane IS NOT NULL").select("k", "pane")
    counts = frame.groupBy().agg(F.count(F.lit(1)).alias("rows"))
    named, counted, empty = fetch_tables([(panes, ["k", "pane"]), (counts, ["rows"]), (frame.where("false"), ["k"])])
    assert named.column_names == ["k", "pane"] and sorted(named.column("k").to_pylist()) == ["a", "c"]
    assert counted.to_pylist() == [{"rows": 3}]
    assert empty.num_rows == 0 and empty.column_names == ["k"]


def test_replacing_a_folder_removes_what_an_earlier_attempt_wrote_there(spark, tmp_path):
    target = tmp_path / "wm_run=3"
    (first,) = fetch_tables([(spark.range(5), ["id"])])
    replace_folder(first, str(target))
    (retry,) = fetch_tables([(spark.range(2), ["id"])])
    replace_folder(retry, str(target))
    assert sorted(r["id"] for r in spark.read.parquet(str(target)).collect()) == [0, 1]
    assert [p.name.startswith("_") for p in target.iterdir()].count(False) == 1  # one data file, no leftovers


@pytest.mark.parametrize("url", ["nosuchscheme://bucket/panes", "hdfs-not-installed-zz://x/y"])
def test_a_url_fsspec_cannot_open_is_left_to_spark(url):
    assert not driver_can_write("/tmp/panes", url)
