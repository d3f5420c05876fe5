"""The controller's state between rounds: per part (writers, streams, origins, pending) a Parquet dataset with
its schema stored beside it, so the next round reads it with no Spark job to infer the schema."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from airflow_provider_wm.documents import copy_tree
from spark_jobs.common import conform, local_frame, read_dataset, read_schema_document, write_schema_document
from spark_jobs.controller.marks import with_key
from spark_jobs.driver_outputs import driver_can_write, replace_folder

__all__ = ["carry_state", "read_state", "write_driver_state", "write_state"]

log = logging.getLogger(__name__)


def read_state(spark: SparkSession, state_in: str | None, name: str, schema: StructType) -> DataFrame | None:
    """A part of the previous state, or ``None`` when it has none (first round, or a part never written). Read
    with the schema stored beside it (:func:`write_state`): no Spark job infers it from a file footer. A state
    written before that is inferred; one written before keyed watermarks has no ``wm_key`` column: read as the
    unkeyed watermark."""
    if not state_in:
        return None
    path = f"{state_in.rstrip('/')}/{name}"
    document = read_schema_document(path)
    if document is not None:
        stored = StructType.fromJson(document)
        frame: DataFrame | None = spark.read.schema(stored).parquet(path)
        names = stored.fieldNames()
    else:
        frame = read_dataset(spark, path, job_output=True)
        names = [] if frame is None else frame.columns
    if frame is None:
        return None
    if "wm_key" not in names:
        frame = frame.withColumn("wm_key", F.lit(None).cast("string"))
    return with_key(conform(frame, schema, path))


def write_state(frame: DataFrame, path: str, schema: StructType) -> None:
    """Replace the state part at ``path`` with ``frame``'s columns of ``schema``, of its types, and store the schema
    beside it (:func:`read_state` reads it back without inferring it)."""
    frame.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields]).write.mode("overwrite").parquet(path)
    write_schema_document(path, schema)


def write_driver_state(spark: SparkSession, rows: Sequence[Mapping[str, Any]], path: str, schema: StructType) -> None:
    """:func:`write_state` for a state part whose ``rows`` (dicts with ``schema``'s fields) are on the driver:
    written by pyarrow (:func:`spark_jobs.driver_outputs.replace_folder`), no Spark job, when fsspec can write
    ``path``; else, or when that write fails, by Spark."""
    if driver_can_write(path):
        try:
            replace_folder(pa.Table.from_pylist([dict(r) for r in rows], schema=to_arrow_schema(schema)), path)
            write_schema_document(path, schema, len(rows))
            return
        except OSError as exc:
            log.warning("writing %s from the driver failed (%s); writing it with Spark", path, exc)
    write_state(local_frame(spark, [[r[f.name] for f in schema.fields] for r in rows], schema), path, schema)


def carry_state(state_in: str, state_out: str, name: str) -> dict[str, Any] | None:
    """Copy a part of the previous state that the round leaves as it is into the next state, file by file
    through fsspec (no Spark job), and return the schema document stored beside it (:func:`write_state`).
    ``None`` when it cannot: the part has no schema document (written before them; a rewrite with Spark brings it
    up to date), fsspec cannot reach it, or the copy fails. Then write the part with Spark.

    E.g. a round with no sequenced mark leaves gap-free progress's ``origins`` and ``pending`` as they were.
    """
    source, target = f"{state_in.rstrip('/')}/{name}", f"{state_out.rstrip('/')}/{name}"
    if not driver_can_write(source, target):
        return None
    document = read_schema_document(source)
    if document is None:
        return None
    try:
        copy_tree(source, target)
    except OSError as exc:
        log.warning("copying the state part %s to %s failed (%s); writing it with Spark", source, target, exc)
        return None
    return document
