"""Helpers shared by the Spark jobs: sessions, running a job and recording its manifest, empty frames.

No airflow imports, and nothing that exists only in a classic session (the SparkContext, the JVM gateway,
RDDs): every job also runs as a Spark Connect client (a test greps for them). Files other than datasets
(requests, manifests) are read and written through fsspec (:mod:`airflow_provider_wm.documents`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegralType, StringType, StructType, TimestampNTZType, TimestampType

from airflow_provider_wm.contracts import JobFailure, JobManifest, JobRequest
from airflow_provider_wm.documents import delete_tree, exists, read_document, write_document

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=JobRequest)
ManifestT = TypeVar("ManifestT", bound=JobManifest)


def get_session() -> SparkSession:
    """The session spark-submit configured (its ``--name`` is the application's name)."""
    return SparkSession.builder.getOrCreate()


@contextlib.contextmanager
def active_session(spark: SparkSession) -> Iterator[None]:
    """Make ``spark`` the thread's active session while a job runs, then restore the previous one.

    Over Spark Connect, ``localCheckpoint`` returns a frame of ``SparkSession.active()``, not of the session
    it was called on (pyspark 4.2); a task's own session must be the active one, or joining the checkpoint
    with the job's other frames fails with SESSION_NOT_SAME. A classic session needs nothing.
    """
    registry = getattr(type(spark), "_active_session", None)
    if not isinstance(registry, threading.local):
        yield
        return
    previous = getattr(registry, "session", None)
    registry.session = spark
    try:
        yield
    finally:
        registry.session = previous


def run_and_record(
    spark: SparkSession, request: RequestT, run: Callable[[SparkSession, RequestT], ManifestT]
) -> ManifestT:
    """Run a job and write its manifest atomically to ``request.manifest_url``; on an exception write a
    :class:`JobFailure` there instead (the operator reports its error) and re-raise. Both run modes go
    through here, so they leave the same files."""
    try:
        manifest = run(spark, request)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        failure = JobFailure(job=request.job, error=error, traceback=traceback.format_exc(limit=20))
        write_document(request.manifest_url, failure.to_json())
        raise
    write_document(request.manifest_url, manifest.to_json())
    return manifest


def submit_main(
    request_type: type[RequestT], run: Callable[[SparkSession, RequestT], Any], argv: Sequence[str] | None = None
) -> int:
    """The spark-submit entry point of a job: ``<job>.py <request.json URL>``. The driver's log gets one
    summary line (the manifest's totals), not the job's frames."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 1:
        raise SystemExit(f"usage: {request_type.job}.py <request.json URL>")
    document = read_document(arguments[0])
    if document is None:
        raise SystemExit(f"no request at {arguments[0]}")
    request = request_type.from_json(document)
    spark = get_session()
    manifest = run_and_record(spark, request, run)
    print(f"{request.job}: {json.dumps(manifest.to_json().get('totals'), sort_keys=True)}", flush=True)
    return 0


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether a dataset or file exists (checked through fsspec by the process that plans the job)."""
    return exists(path)


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete a file or directory tree; False when it did not exist."""
    return delete_tree(path)


def size_shuffles(spark: SparkSession) -> None:
    """Unless the submitter chose, shuffle into as many partitions as a local master has cores, not Spark's 200.

    After a job's first scan its frames are small; 200 partitions per shuffle would cost more than the work.
    Read from the session's conf alone, which Spark Connect has too.
    """
    if spark.conf.get("spark.sql.shuffle.partitions") != "200":
        return
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", str(spark.conf.get("spark.master", "")))
    if match:
        cores = (os.cpu_count() or 2) if match.group(1) in (None, "*") else int(match.group(1))
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, cores)))


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
