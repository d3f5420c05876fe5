"""Helpers shared by the Spark jobs: sessions, running a job and recording its manifest, empty frames.

No airflow imports, and nothing that exists only in a classic session (the SparkContext, the JVM gateway,
RDDs): every job also runs as a Spark Connect client (a test greps for them). Files other than datasets
(requests, manifests) are read and written through fsspec (:mod:`airflow_provider_wm.documents`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    IntegralType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from airflow_provider_wm.contracts import JobFailure, JobManifest, JobRequest
from airflow_provider_wm.documents import delete_tree, exists, read_document, write_document
from spark_jobs.screening import FileScreen, is_unreadable_file_error, load, screening, stored_spark_schema
from spark_jobs.sql_text import string

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=JobRequest)
ManifestT = TypeVar("ManifestT", bound=JobManifest)


def get_session() -> SparkSession:
    """The session spark-submit configured (its ``--name`` is the application's name, its ``--conf`` the job's
    settings, :data:`~airflow_provider_wm.contracts.jobs.CLASSIC_CONF` among them when the operators submit)."""
    return SparkSession.builder.getOrCreate()


PARTITION_TYPES = "spark.sql.sources.partitionColumnTypeInference.enabled"
"""Whether Spark types a dataset's partition columns from their folder names (else each is a string)."""
PARQUET_TIMESTAMPS = "spark.sql.parquet.outputTimestampType"
"""How Spark writes a timestamp column to Parquet. Its default, ``INT96``, is deprecated by Parquet and read by
other engines (pyarrow, pandas, DuckDB) as a time without a zone; a job writes ``TIMESTAMP_MICROS`` (a UTC instant
to every reader) unless the submitter chose ``TIMESTAMP_MILLIS``. The events' own columns in a late output or a
partitions target keep their zone so."""


@contextlib.contextmanager
def job_session(spark: SparkSession) -> Iterator[None]:
    """The session as a job runs on it: its SQL time zone UTC, Parquet timestamps written as ``TIMESTAMP_MICROS``
    (:data:`PARQUET_TIMESTAMPS`), the thread's active session, and under a local master its file listings on the
    driver (:func:`list_files_on_driver`).

    Times in the data contracts are UTC: a timestamp without a zone (Parquet ``TIMESTAMP_NTZ``, what pandas
    writes for naive datetimes) or an ISO string without an offset is read as UTC whatever the cluster's default
    zone, so ``2026-01-01T00:00:30`` is 1767225630000 everywhere. The job leaves the zone set.

    Over Spark Connect, ``localCheckpoint`` returns a frame of ``SparkSession.active()``, not of the session
    it was called on (pyspark 4.2); a task's own session must be the active one, or joining the checkpoint
    with the job's other frames fails with SESSION_NOT_SAME. A classic session needs nothing.
    """
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    if spark.conf.get(PARQUET_TIMESTAMPS) == "INT96":
        spark.conf.set(PARQUET_TIMESTAMPS, "TIMESTAMP_MICROS")
    list_files_on_driver(spark)
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
    :class:`JobFailure` there instead (the operator reports its error) and re-raise. Input files that cannot be
    read are set aside and listed in the manifest (:mod:`spark_jobs.screening`). Both run modes go through
    here, so they leave the same files."""
    try:
        with screening() as screen:
            manifest = _run_screened(spark, request, run, screen)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        failure = JobFailure(job=request.job, error=error, traceback=traceback.format_exc(limit=20))
        write_document(request.manifest_url, failure.to_json())
        raise
    write_document(request.manifest_url, manifest.to_json())
    return manifest


def _run_screened(
    spark: SparkSession, request: RequestT, run: Callable[[SparkSession, RequestT], ManifestT], screen: FileScreen
) -> ManifestT:
    """Run the job; when an attempt fails reading an input file, set aside the files that do not read with
    their dataset (:mod:`spark_jobs.screening`) and run it again, at most once per dataset read."""
    while True:
        try:
            manifest = run(spark, request)
        except Exception as exc:
            if not is_unreadable_file_error(exc) or not screen.screen_read_datasets():
                raise
            log.warning("%s failed reading an input file; running it again without the files set aside", request.job)
            continue
        if not screen.unreadable:
            return manifest
        return dataclasses.replace(manifest, unreadable_files=list(screen.unreadable))  # type: ignore[type-var]


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
    """
    if spark.conf.get("spark.sql.shuffle.partitions") != "200":
        return
    cores = local_cores(_master(spark))
    if cores is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, cores)))


PARALLEL_LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"
"""Spark lists a folder with more subfolders than this in a Spark job of its own (default 32)."""


def list_files_on_driver(spark: SparkSession) -> None:
    """Unless the submitter chose, list a dataset's folders on the driver under a local master, however many.

    Spark lists a folder of more than 32 subfolders (a source partitioned by day has 365 a year; an output has
    one ``wm_run=`` folder per run) in a Spark job with a task per subfolder, to spread a remote store's listing
    over the executors. Under a local master those tasks run in the driver's JVM anyway, so the job adds its
    scheduling and nothing else. Other masters keep Spark's setting.
    """
    if spark.conf.get(PARALLEL_LISTING) == "32" and local_cores(_master(spark)) is not None:
        spark.conf.set(PARALLEL_LISTING, str(2**31 - 1))


def local_cores(master: str) -> int | None:
    """The cores of a local master (``local``: 1, ``local[4]`` or ``local[4,2]``: 4, ``local[*]``: the machine's),
    ``None`` for any other master (``spark://host:7077``, ``yarn``)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if match is None:
        return None
    if match.group(1) is None:
        return 1
    return (os.cpu_count() or 2) if match.group(1) == "*" else int(match.group(1))


def _master(spark: SparkSession) -> str:
    """The session's master, read from its conf alone, which Spark Connect has too."""
    return str(spark.conf.get("spark.master", ""))


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """A frame of no rows (:func:`local_frame`: the optimizer knows it is empty)."""
    return local_frame(spark, [], schema)


def local_frame(spark: SparkSession, rows: Iterable[Sequence[Any]], schema: StructType) -> DataFrame:
    """A frame of ``rows`` (tuples in ``schema``'s field order) held by the driver, as a local relation of the
    plan: no Python worker runs for it, and an empty one is known to be empty (the optimizer drops what it cannot
    reach). ``createDataFrame`` of a list gives that over Spark Connect; in a classic session it parallelizes the
    rows as a Python RDD, and every task of a plan that reads them starts a Python worker to unpickle them. So
    there the rows go as an Arrow table, which Spark turns into a local relation. Example:
    ``local_frame(spark, [("s", "w1")], string_struct("stream", "writer_id"))``."""
    listed = [tuple(row) for row in rows]
    if is_connect(spark):
        return spark.createDataFrame(listed, schema)
    names = schema.fieldNames()
    table = pa.Table.from_pylist(
        [dict(zip(names, row, strict=True)) for row in listed], schema=to_arrow_schema(schema, timezone="UTC")
    )
    return spark.createDataFrame(table, schema)


def with_constants(frame: DataFrame, constants: dict[str, str]) -> DataFrame:
    """``frame`` with a column per constant (SQL text of a constant expression: a number, a string, an array of
    structs), the same on every row, generated from a one-element array of one struct (``inline``) rather than
    written into the expressions that read it.

    Spark writes a literal number into the Java code it generates for a stage, and compiles each distinct text once:
    a value that changes with every scheduled run (a watermark, a run's ranges) makes every run compile its stages
    again. An array is a constant the generated code refers to, not text in it, and the optimizer does not fold a
    generator's output into the expressions above it, so the code stays the same from run to run. (A join with a
    one-row frame does that too, but its broadcast is a Spark job per query.)

    Example: ``with_constants(windows, {"wm_cut_watermark": "CAST(60000 AS BIGINT)"})`` adds ``wm_cut_watermark``
    (60000 on every row), and ``"wm_cut_watermark >= window_end"`` compiles to the same code whatever its value."""
    fields = ", ".join(f"{string(name)}, {value}" for name, value in constants.items())
    return frame.selectExpr("*", f"inline(array(named_struct({fields})))")


def string_struct(*names: str) -> StructType:
    """A schema of nullable string fields ``names``."""
    return StructType([StructField(name, StringType()) for name in names])


def read_dataset(
    spark: SparkSession, path: str, data_format: str = "parquet", *, job_output: bool = False
) -> DataFrame | None:
    """The dataset at ``path``, or ``None`` when there is none: no path, or a folder with no data file yet
    (Spark cannot infer a schema from an empty folder; that is an input with no rows, not an error). Within
    :func:`run_and_record`, without the files :mod:`spark_jobs.screening` set aside, unless it is a
    ``job_output`` (a state or quarantine the jobs wrote: a file of it that does not read fails the run, as
    damaged state must be restored, not skipped)."""
    read = read_dataset_and_schema(spark, path, data_format, job_output=job_output)
    return None if read is None else read[0]


def read_dataset_and_schema(
    spark: SparkSession, path: str, data_format: str = "parquet", *, job_output: bool = False
) -> tuple[DataFrame, StructType] | None:
    """:func:`read_dataset` and the dataset's schema (asking a Spark Connect server for it once). A Parquet
    dataset Spark wrote is read with the schema stored in its footer (:func:`stored_spark_schema`): Spark
    would infer the same one, in a Spark job of its own. A ``job_output`` partitioned by folder, whose partition
    columns no footer holds, is read with the schema :func:`write_schema_document` stored beside it, if any."""
    if not path_exists(spark, path):
        return None
    merges = str(spark.conf.get("spark.sql.parquet.mergeSchema", "false")).lower() == "true"
    # a job output's partition columns have the types of its schema document (below), not a string
    typed = job_output or str(spark.conf.get(PARTITION_TYPES, "true")).lower() != "false"
    stored = None if merges else stored_spark_schema(path, data_format, partition_types_inferred=typed)
    if stored is None and not merges and job_output and data_format == "parquet":
        document = read_schema_document(path)
        stored = None if document is None else StructType.fromJson(document)

    def read(schema: StructType | None = None) -> DataFrame | None:
        if not job_output:
            return load(spark, path, data_format, schema)
        reader = spark.read.format(data_format)
        return (reader if schema is None else reader.schema(schema)).load(path)

    try:
        frame = read(stored)
        if frame is None:
            return None
        schema = frame.schema  # resolves the read now, so an empty folder is told apart here
    except AnalysisException as exc:
        if exc.getCondition() == "UNABLE_TO_INFER_SCHEMA":
            return None
        raise
    # a Spark Connect server resolves the read again for every query of the frame: given its schema, it lists the
    # files without inferring the schema from a footer again (a Spark job and its planning per query)
    if is_connect(frame) and stored is None:
        frame = read(schema)
        assert frame is not None, "the same files as a moment ago"
    return frame, schema


SCHEMA_DOCUMENT = "_wm_schema.json"
"""Beside a dataset a job wrote for its next run (a state, a rollup's live snapshot): its schema and row count
(Spark's listing skips names starting with ``_``)."""


def write_schema_document(
    path: str, schema: StructType, rows: int | None = None, extra: dict[str, Any] | None = None
) -> None:
    """Beside the dataset written at ``path``: its schema and row count (``None``: not counted), so that the next
    run reads it without a Spark job to infer the schema (a Spark Connect server would infer it again for every
    query), and knows how many rows it holds before reading it. The schema as a read of the files infers it (every
    field nullable), so both reads see one schema. ``extra``: more facts about the rows, for a job to read back."""
    write_document(_schema_document_url(path), {**(extra or {}), **_nullable(schema).jsonValue(), "rows": rows})


def read_schema_document(path: str) -> dict[str, Any] | None:
    """What :func:`write_schema_document` wrote beside ``path`` (``None``: nothing, e.g. written before it)."""
    document: dict[str, Any] | None = read_document(_schema_document_url(path))
    return document


def read_written(spark: SparkSession, path: str) -> DataFrame | None:
    """The dataset the job wrote at ``path`` for this run, with the schema stored beside it (inferred when there is
    none); ``None`` when there is no such dataset."""
    document = read_schema_document(path)
    if document is not None:
        return spark.read.schema(StructType.fromJson(document)).parquet(path)
    return spark.read.parquet(path) if path_exists(spark, path) else None


def _schema_document_url(path: str) -> str:
    return f"{path.rstrip('/')}/{SCHEMA_DOCUMENT}"


def _nullable(data_type: DataType) -> Any:
    """``data_type`` with every field, element and value nullable (what Spark reads back from Parquet)."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def is_connect(frame: DataFrame | SparkSession) -> bool:
    """Whether ``frame`` (or a session) is a Spark Connect client's (not a classic session's)."""
    return type(frame).__module__.startswith("pyspark.sql.connect")


class Observed(NamedTuple):
    """Metrics observed under ``name`` (:func:`observe`); ``observation`` holds them in a classic session."""

    name: str
    observation: Observation | None


def observe(frame: DataFrame, name: str, *metrics: Column) -> tuple[DataFrame, Observed]:
    """``frame`` with ``metrics`` observed under ``name`` as its rows are computed, and the handle that
    :func:`observed_below` reads them with after an action. A classic session fills an ``Observation``. Over Spark
    Connect the frame is observed by name only, and the metrics come with the action's execution info: an
    ``Observation`` object there costs a round trip of its own (the client first asks the server whether the
    frame is streaming, an analysis of its whole plan: 40-90 ms for a windowed run's, pyspark 4.2)."""
    if is_connect(frame):
        return frame.observe(name, *metrics), Observed(name, None)
    observation = Observation(name)
    return frame.observe(observation, *metrics), Observed(name, observation)


def observed_below(frame: DataFrame, observed: Observed) -> dict[str, Any] | None:
    """The metrics of ``observed``, observed below ``frame`` by ``frame``'s last action (its write, or its
    checkpoint); ``None`` when that action reported none. Over Spark Connect they come from the action's execution
    info, which also holds the metrics of a frame built on a temporary view (SQL over ``source``), whose client-side
    observation would stay empty. The server reports those when the frame has a step of its own above the SQL (a
    column added, say), not for the SQL statement's frame itself (pyspark 4.2)."""
    if observed.observation is not None:
        return observed.observation.get
    info = frame.executionInfo  # type: ignore[attr-defined]
    metrics = {} if info is None else dict(info.flows)
    return dict(metrics[observed.name]) if observed.name in metrics else None


def physical_plan(frame: DataFrame) -> str:
    """``frame``'s physical plan as Spark prints it: one operator per line, the root first, each child under its
    parent behind ``+-`` (the last child) or ``:-``, an operator of whole-stage generated code behind ``*(<stage>)``.
    Example: ``*(1) Project [(id#0L * 2) AS twice#2L]`` then ``+- *(1) Filter (id#0L > 3)`` then
    ``   +- *(1) Range (0, 10, step=1, splits=2)``. From ``explain``'s simple mode (over Spark Connect, one round
    trip): it plans the frame as its action would and prints that plan alone, where the extended mode also prints
    the analyzed and the optimized plans (on the partitions job's write, about 20 ms against 65 ms)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain(mode="simple")
    return printed.getvalue().split("== Physical Plan ==", 1)[1].strip("\n")


def plan_operators(plan: str) -> list[str]:
    """The operator of each line of a printed plan (:func:`physical_plan`), root first. Example: ``Project``,
    ``Filter``, ``Range`` for the plan of ``physical_plan``'s example; ``HashAggregate`` for a line
    ``HashAggregate(keys=[k#1], ...)``."""
    return [plan_node(line)[0] for line in plan.splitlines()]


def plan_node(line: str) -> tuple[str, str]:
    """A line of a printed plan as its operator and what follows it. Example: ``("Filter", "(id#0L > 3)")`` for
    ``+- *(1) Filter (id#0L > 3)``; ``("HashAggregate", "(keys=[k#1], ...)")`` for ``HashAggregate(keys=[k#1],
    ...)``."""
    node = re.sub(r"^\*\(\d+\) ", "", line.lstrip(" :|+-"))
    operator = re.split(r"[ (]", node, maxsplit=1)[0]
    return operator, node[len(operator) :].lstrip(" ")


def conform(frame: DataFrame, schema: StructType, path: str) -> DataFrame:
    """``frame``'s columns of ``schema``, each of its declared type, checked before any row is read.

    An integer of another width is widened; a Parquet ``TIMESTAMP`` where epoch milliseconds are declared
    (a ``*_ms`` column, as pandas writes datetimes) is converted with ``unix_millis``; any other type fails
    naming the dataset, the column, its type and the expected one, instead of a cast that silently changes
    the meaning (a timestamp cast to long is seconds, not milliseconds).
    """
    actual = {field.name: field.dataType for field in frame.schema.fields}
    missing = [f.name for f in schema.fields if f.name not in actual]
    if missing:
        raise ValueError(f"dataset {path} lacks required columns {missing}; it has {sorted(actual)}")
    columns = []
    for field in schema.fields:
        have, want, column = actual[field.name], field.dataType, frame[field.name]
        if have == want:
            columns.append(column)
        elif _widens(have, want):
            columns.append(column.cast(want).alias(field.name))
        elif isinstance(want, LongType) and field.name.endswith("_ms") and isinstance(have, _TIMESTAMPS):
            columns.append(F.unix_millis(column.cast("timestamp")).alias(field.name))
        else:
            raise ValueError(
                f"dataset {path}: column {field.name!r} has type {have.simpleString()}, expected {want.simpleString()}"
            )
    return frame.select(*columns)


_TIMESTAMPS = (TimestampType, TimestampNTZType)


def _widens(have: DataType, want: DataType) -> bool:
    """An integer into a wider-or-equal integer, an integer or float into a double, or a map/array whose parts
    widen: no change of meaning."""
    if isinstance(have, IntegralType) and isinstance(want, IntegralType):
        return _INTEGER_WIDTHS[type(have)] <= _INTEGER_WIDTHS[type(want)]
    if isinstance(want, DoubleType):
        return isinstance(have, (FloatType, IntegralType))
    if isinstance(have, MapType) and isinstance(want, MapType):
        return _widens(have.keyType, want.keyType) and _widens(have.valueType, want.valueType)
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return _widens(have.elementType, want.elementType)
    return have == want


_INTEGER_WIDTHS = {ByteType: 1, ShortType: 2, IntegerType: 4, LongType: 8}


def read_parquet_or_empty(spark: SparkSession, path: str | None, schema: StructType) -> DataFrame:
    """The Parquet dataset at ``path`` conformed to ``schema`` (:func:`conform`), or an empty frame when there
    is none (no path, or a folder with no data file)."""
    frame = read_dataset(spark, path) if path else None
    if frame is None:
        return empty_frame(spark, schema)
    return conform(frame, schema, path or "")
