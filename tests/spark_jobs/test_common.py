"""The session settings every job applies (spark_jobs.common): how a local master lists files and sizes shuffles;
the frames of rows the driver holds; what a frame's plan and its write observed."""

from __future__ import annotations

import os
import re

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from spark_jobs.common import (
    PARALLEL_LISTING,
    job_session,
    list_files_on_driver,
    local_cores,
    local_frame,
    observe,
    observed_below,
    physical_plan,
    plan_node,
    plan_operators,
)


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4,2]", 4),
        ("local[*]", os.cpu_count() or 2),
        ("spark://127.0.0.1:7077", None),
        ("yarn", None),
        ("local-cluster[2,1,1024]", None),
        ("", None),
    ],
)
def test_local_cores_counts_a_local_masters_cores_and_none_for_any_other_master(master, cores):
    assert local_cores(master) == cores


@pytest.fixture
def listing_threshold(spark):
    """The session's listing threshold restored after the test (the session is shared)."""
    before = spark.conf.get(PARALLEL_LISTING)
    spark.conf.unset(PARALLEL_LISTING)
    yield
    spark.conf.set(PARALLEL_LISTING, before)


def test_a_job_on_a_local_master_lists_every_folder_on_the_driver(spark, listing_threshold):
    assert spark.conf.get(PARALLEL_LISTING) == "32"  # Spark's default
    with job_session(spark):
        assert spark.conf.get(PARALLEL_LISTING) == str(2**31 - 1)


def test_a_listing_threshold_the_submitter_set_is_kept(spark, listing_threshold):
    spark.conf.set(PARALLEL_LISTING, "64")
    list_files_on_driver(spark)
    assert spark.conf.get(PARALLEL_LISTING) == "64"


def test_a_partitioned_folder_of_many_partitions_reads_the_same_listed_on_the_driver(
    spark, tmp_path, listing_threshold
):
    """40 partition folders, more than Spark's default threshold: every row and partition value reads back."""
    path = str(tmp_path / "days")
    spark.range(400).selectExpr("id", "CAST(id % 40 AS INT) AS day").write.partitionBy("day").parquet(path)
    list_files_on_driver(spark)
    rows = spark.read.parquet(path).selectExpr("count(1) AS n", "count(DISTINCT day) AS days", "sum(id) AS ids")
    assert rows.first().asDict() == {"n": 400, "days": 40, "ids": sum(range(400))}


def test_a_local_frame_holds_the_driver_rows_in_the_schemas_order_and_types(spark):
    schema = StructType(
        [
            StructField("stream", StringType()),
            StructField("offset", LongType()),
            StructField("position", MapType(LongType(), LongType())),
        ]
    )
    rows = [("orders", 3, {0: 3, 4294967296: 4}), ("payments", None, None)]

    frame = local_frame(spark, rows, schema)

    assert frame.schema == schema
    assert [tuple(row) for row in frame.orderBy("stream").collect()] == rows
    assert local_frame(spark, [], schema).count() == 0


def test_a_physical_plan_prints_the_root_first_and_each_child_under_its_parent(spark):
    frame = spark.range(10).where("id > 3").selectExpr("id * 2 AS twice")

    plan = physical_plan(frame)

    assert plan_operators(plan) == ["Project", "Filter", "Range"]
    lines = plan.splitlines()
    assert lines[0].startswith("*(1) Project ")  # in whole-stage generated code
    assert lines[1].startswith("+- *(1) Filter ") and lines[2].startswith("   +- *(1) Range ")
    assert [(operator, re.sub(r"#\d+", "#", rest)) for operator, rest in map(plan_node, lines[:2])] == [
        ("Project", "[(id#L * 2) AS twice#L]"),
        ("Filter", "(id#L > 3)"),
    ]


def test_metrics_observed_below_a_view_are_read_from_the_write_that_computed_them(spark, tmp_path):
    """SQL over a view of an observed frame, with a column added (as the partitions job adds its run's): the write
    computes the observation and reports it (over Spark Connect in its execution info)."""
    observed, metrics = observe(spark.range(10), "rows_below", F.count(F.lit(1)).alias("n"))
    observed.createOrReplaceTempView("observed_numbers")
    frame = spark.sql("SELECT id FROM observed_numbers WHERE id % 2 = 0").withColumn("run", F.lit("r1"))

    frame.write.parquet(str(tmp_path / "even"))

    assert observed_below(frame, metrics) == {"n": 10}
