"""Helpers shared by the Spark jobs: sessions, atomic manifests, empty frames. No airflow imports."""

from __future__ import annotations

import json
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegralType, StringType, StructType, TimestampNTZType, TimestampType

MANIFEST_NAME = "manifest.json"


def get_session(app_name: str) -> SparkSession:
    """The active session (tests share one) or a new one configured by spark-submit."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return SparkSession.builder.appName(app_name).getOrCreate()


def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]


def write_json_atomic(spark: SparkSession, path: str, payload: dict[str, Any]) -> None:
    """Write JSON through Hadoop's FileSystem (any scheme Spark can write) as temp file + rename.

    A reader sees the old manifest or the new one, never half of one.
    """
    text = json.dumps(payload, indent=2, sort_keys=True, default=str)
    target, fs = _hadoop_path(spark, path)
    tmp, _ = _hadoop_path(spark, f"{path}.tmp-{uuid.uuid4().hex}")
    stream = fs.create(tmp, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    if fs.exists(target):
        fs.delete(target, False)
    if not fs.rename(tmp, target):
        raise OSError(f"could not rename {tmp} to {target}")


def read_json(spark: SparkSession, path: str) -> Any:
    """Read a small JSON document (a plan, a manifest) through Hadoop's FileSystem."""
    source, fs = _hadoop_path(spark, path)
    stream = fs.open(source)
    try:
        reader = spark.sparkContext._jvm.java.io.BufferedReader(  # type: ignore[union-attr]
            spark.sparkContext._jvm.java.io.InputStreamReader(stream, "UTF-8")  # type: ignore[union-attr]
        )
        text = "\n".join(iter(reader.readLine, None))
    finally:
        stream.close()
    return json.loads(text)


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete a file or directory tree; False when it did not exist."""
    target, fs = _hadoop_path(spark, path)
    return bool(fs.delete(target, True))


def path_exists(spark: SparkSession, path: str) -> bool:
    target, fs = _hadoop_path(spark, path)
    return bool(fs.exists(target))


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    return spark.createDataFrame([], schema)


def read_parquet_or_empty(spark: SparkSession, path: str | None, schema: StructType) -> DataFrame:
    """The Parquet dataset at ``path`` with ``schema``'s columns, or an empty frame when there is none."""
    if not path or not path_exists(spark, path):
        return empty_frame(spark, schema)
    df = spark.read.parquet(path)
    missing = [f.name for f in schema.fields if f.name not in df.columns]
    if missing:
        raise ValueError(f"dataset {path} lacks required columns {missing}; it has {df.columns}")
    return df.select(*[df[f.name].cast(f.dataType).alias(f.name) for f in schema.fields])


def write_manifest_after(
    spark: SparkSession, job: str, manifest_path: str, compute: Callable[[], dict[str, Any]]
) -> int:
    """Run ``compute`` and write its manifest atomically; on an exception write a ``failed`` manifest (the
    operator reads the error from it) and re-raise, so ``spark-submit`` exits non-zero."""
    try:
        manifest = compute()
    except Exception as exc:
        failed = {
            "status": "failed",
            "job": job,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=20),
        }
        write_json_atomic(spark, manifest_path, failed)
        raise
    write_json_atomic(spark, manifest_path, manifest)
    return 0


def parse_time(column: Column, data_type: Any, name: str) -> Column:
    """The time column as a timestamp; null when missing or unparseable (``try_to_timestamp``)."""
    if isinstance(data_type, (TimestampType, TimestampNTZType, DateType)):
        return column.cast("timestamp")
    if isinstance(data_type, IntegralType):
        return F.timestamp_millis(column)
    if isinstance(data_type, StringType):
        return F.try_to_timestamp(column)
    raise ValueError(
        f"time_column={name!r} has type {data_type.simpleString()}; use a timestamp, date, epoch-millisecond "
        "number or ISO-8601 string"
    )


def time_ms(column: Column, data_type: Any, name: str) -> Column:
    """The time column as UTC epoch milliseconds; null when missing or unparseable."""
    if isinstance(data_type, IntegralType):
        return column.cast("long")
    return F.unix_millis(parse_time(column, data_type, name))
