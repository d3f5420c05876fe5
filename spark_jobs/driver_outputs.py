"""Small outputs written from the driver: the projections of one materialised frame fetched in one Spark action
and written as Parquet by pyarrow, through fsspec.

A run's outputs are usually small (an incremental run fires a few thousand panes and keeps a few thousand open
windows), and Spark's fixed cost per write (planning, a job, the commit protocol: about 0.1 s each on a local
master) then outweighs the work. So when a run's windows are at most
:data:`~airflow_provider_wm.contracts.jobs.DRIVER_OUTPUT_ROWS` and fsspec can
write where they go, the job fetches all of its outputs as Arrow in one action (:func:`fetch_tables`: the
projections of its checkpoint, unioned with a column that says whose row it is) and writes each one as a single
Parquet file (:func:`replace_folder`). Larger runs write with Spark, as before. Both produce the same rows, with
the same column names and types; the job's manifest says which wrote them (``writer``: ``arrow`` or ``spark``).

A folder is replaced as Spark's ``overwrite`` replaces it (a retry of a run writes over its own output): its old
files are deleted, then the new file is written under a temporary name that Spark's listing skips (``_``) and
renamed, then ``_SUCCESS`` is written, as Spark's committer does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from spark_jobs.common import is_connect
from spark_jobs.sql_text import ident

log = logging.getLogger(__name__)

KIND = "wm_output"
"""The column of :func:`fetch_tables`' union that says which projection a row belongs to."""


def driver_can_write(*urls: str) -> bool:
    """Whether fsspec has a file system for each URL (a protocol it knows, with its package installed); the
    write itself may still fail (credentials only Spark has), and the job then writes with Spark."""
    for url in urls:
        try:
            fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:  # an unknown protocol, or its package missing
            log.info("%s is not writable through fsspec (%s): the outputs are written with Spark", url, exc)
            return False
    return True


def fetch_tables(projections: Sequence[tuple[DataFrame, Sequence[str]]]) -> list[pa.Table]:
    """The rows of each ``(frame, columns)`` as an Arrow table with those columns, in one Spark action.

    Each frame's row goes into the union as one struct of its columns (``o<i>``) beside :data:`KIND`, which says
    whose row it is; the other frames' structs are null. The union is fetched and split by :data:`KIND`. One struct
    per frame, not a column per frame and column, keeps the union's plan small: Spark's optimizer works through
    every column of every branch, the null ones too. The frames should read one materialised frame (a
    checkpoint): the union computes each of them. Nested fields of the tables are nullable, as Spark reads
    Parquet back (a null struct's non-nullable fields would not be)."""
    union: DataFrame | None = None
    for index, (frame, columns) in enumerate(projections):
        fields = ", ".join(ident(c) for c in columns)
        part = frame.selectExpr(f"{index} AS {KIND}", f"struct({fields}) AS o{index}")
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    if union is None:
        return []
    fetched = _relaxed(_collect_arrow(union))
    kind = fetched.column(KIND)
    tables = []
    for index, (_, columns) in enumerate(projections):
        rows = fetched.filter(pc.equal(kind, index)).column(f"o{index}").combine_chunks()
        tables.append(pa.Table.from_struct_array(rows).rename_columns(list(columns)))
    return tables


def _collect_arrow(frame: DataFrame) -> pa.Table:
    """``frame`` as Arrow, in one Spark action. Not ``toArrow()``: it first asks for the frame's schema (one more
    round trip to a Spark Connect server) and then casts to it, which fails on a null struct with a non-nullable
    field (pyspark 4.2); the frame's own batches are taken as they are (``_collect_as_arrow`` in a classic
    session, ``_to_table`` over Spark Connect)."""
    if is_connect(frame):
        table, _ = frame._to_table()  # type: ignore[operator]
        return table
    batches = frame._collect_as_arrow(empty_list_if_zero_records=False)  # type: ignore[operator]
    return pa.Table.from_batches(batches)


def _relaxed(table: pa.Table) -> pa.Table:
    return table.cast(pa.schema([pa.field(f.name, _nullable_type(f.type), True) for f in table.schema]))


def _nullable_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), True) for f in data_type])
    if pa.types.is_large_list(data_type):
        return pa.large_list(pa.field(data_type.value_field.name, _nullable_type(data_type.value_type), True))
    if pa.types.is_list(data_type):
        return pa.list_(pa.field(data_type.value_field.name, _nullable_type(data_type.value_type), True))
    if pa.types.is_map(data_type):
        return pa.map_(data_type.key_type, _nullable_type(data_type.item_type))
    return data_type


def spark_schema(table: pa.Table) -> StructType:
    """The Spark schema of a fetched table (as Spark reads the written file back)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(table.schema, prefer_timestamp_ntz=True)


def replace_folder(table: pa.Table, url: str, **storage_options: Any) -> None:
    """Replace the folder ``url`` with one Parquet file of ``table`` and ``_SUCCESS`` (see the module docstring).
    Written as Spark writes Parquet: snappy, decimals as integers where they fit, timestamps in microseconds."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    path = path.rstrip("/")
    if fs.exists(path):
        fs.rm(path, recursive=True)
    fs.makedirs(path, exist_ok=True)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    temporary = f"{path}/_{name}.tmp"
    with fs.open(temporary, "wb") as handle:
        pq.write_table(
            table,
            handle,
            compression="snappy",
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
            store_decimal_as_integer=True,
        )
    fs.mv(temporary, f"{path}/{name}")
    fs.pipe_file(f"{path}/_SUCCESS", b"")
