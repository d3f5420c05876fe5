"""Input files a job cannot read are set aside and reported, never a failed run.

Spark takes a Parquet or ORC dataset's schema from one file and fails the whole query when it meets a file that
is not of the format (a stray or half-written file) or, in Parquet, whose column has another type (``x`` an int in
one file, a string in the next: ``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``; Spark's ORC reader converts
the column instead). Because the controller rescans its marks folder each round, one such file would fail every
later round too.

A job runs optimistically, reading its inputs as Spark does. Only when an attempt fails reading a file does
:class:`FileScreen` read the footers of the datasets the attempt read, set aside the files that cannot be read
with the others, and run the job again on the rest, with an explicit schema:

- a file whose footer cannot be read is unreadable;
- each column's type is the one that most files can be read as (a file's ``int`` reads as the dataset's
  ``bigint``, a ``float`` as a ``double``); a file with a column of another type is set aside.

E.g. ``part-0`` and ``part-1`` have ``x bigint``, ``part-2`` has ``x string``: ``part-2`` is set aside, the run
reads the other two, and the manifest lists ``part-2`` with its reason (:class:`UnreadableFile`). The files stay
where they are; a later run reads them once they are fixed. Hidden files are skipped as Spark skips them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
from pyarrow import ArrowException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, DoubleType, FloatType, IntegralType, StringType, StructField, StructType

from airflow_provider_wm.contracts import UnreadableFile

log = logging.getLogger(__name__)

SCREENED_FORMATS = ("parquet", "orc")
"""Formats that carry a schema per file (JSON infers one over all files; Delta and Avro enforce their own)."""

_INTEGER_WIDTHS = {"tinyint": 1, "smallint": 2, "int": 4, "bigint": 8}


def is_unreadable_file_error(exc: BaseException) -> bool:
    """Whether Spark failed reading an input file (a classic session raises a Py4J error carrying the
    condition in its text, Spark Connect its own exception)."""
    text = str(exc)
    return "FAILED_READ_FILE" in text or "CANNOT_READ_FILE_FOOTER" in text


def reads_as(have: DataType, want: DataType) -> bool:
    """Whether a file's column of type ``have`` reads as ``want`` (Spark's Parquet reader widens an integer to a
    wider integer and a float to a double, nothing else).

    >>> from pyspark.sql.types import IntegerType, LongType, StringType
    >>> reads_as(IntegerType(), LongType()), reads_as(LongType(), IntegerType()), reads_as(StringType(), LongType())
    (True, False, False)
    """
    if have.simpleString() == want.simpleString():
        return True
    if isinstance(have, IntegralType) and isinstance(want, IntegralType):
        return _INTEGER_WIDTHS[have.simpleString()] <= _INTEGER_WIDTHS[want.simpleString()]
    return isinstance(have, FloatType) and isinstance(want, DoubleType)


@dataclass(frozen=True)
class ScreenedDataset:
    """What to read of a screened dataset: the files kept and the schema they are read with."""

    files: list[str]
    schema: StructType | None
    """None when a column's type has no Spark equivalent: the kept files agree on it, Spark infers it."""


class FileScreen:
    """The datasets an attempt of a job read, and what screening them kept and set aside."""

    def __init__(self) -> None:
        self.read: dict[str, str] = {}
        self.screened: dict[str, ScreenedDataset] = {}
        self.unreadable: list[UnreadableFile] = []

    def screen_read_datasets(self) -> bool:
        """Screen each dataset read and not screened yet; True when it set any file aside (a new attempt can
        succeed), False when there was nothing to set aside (the failure is of another kind)."""
        found = False
        for path, data_format in list(self.read.items()):
            if path in self.screened or data_format not in SCREENED_FORMATS:
                continue
            kept, schema, unreadable, uniform = screen_dataset(path, data_format)
            if unreadable or not uniform:  # files to set aside, or one widened type Spark's inference misses
                self.screened[path] = ScreenedDataset(kept, schema)
                self.unreadable.extend(unreadable)
                found = True
        return found


_SCREEN: contextvars.ContextVar[FileScreen | None] = contextvars.ContextVar("file_screen", default=None)


@contextlib.contextmanager
def screening() -> Iterator[FileScreen]:
    """The screen of one run of a job: :func:`load` records and filters the datasets read within it."""
    screen = FileScreen()
    token = _SCREEN.set(screen)
    try:
        yield screen
    finally:
        _SCREEN.reset(token)


def load(spark: SparkSession, path: str, data_format: str, schema: StructType | None = None) -> DataFrame | None:
    """The dataset at ``path`` as Spark reads it (with ``schema`` when given), or its kept files when screening
    set some aside (None: none is left). Outside :func:`screening` a plain read."""
    plain = spark.read.format(data_format) if schema is None else spark.read.format(data_format).schema(schema)
    screen = _SCREEN.get()
    if screen is None:
        return plain.load(path)
    screen.read[path] = data_format
    screened = screen.screened.get(path)
    if screened is None:
        return plain.load(path)
    if not screened.files:
        return None
    reader = spark.read.format(data_format).option("basePath", path)
    kept_schema = screened.schema or schema
    if kept_schema is not None:
        reader = reader.schema(kept_schema)
    return reader.load(screened.files)


SUMMARY_FILES = frozenset({"_metadata", "_common_metadata"})
"""Parquet summary files, whose schema Spark reads before any data file's (legacy writers leave them)."""
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
"""The footer key under which Spark stores the schema of a Parquet file it wrote (and reads it back from)."""


def stored_spark_schema(path: str, data_format: str, partition_types_inferred: bool = True) -> StructType | None:
    """The schema Spark would infer for the Parquet dataset at ``path``, read on the driver from one footer, or
    ``None`` when only Spark can tell (then it infers it, a Spark job of its own).

    Spark infers a Parquet dataset's schema from one data file's footer (unless ``mergeSchema``), and when Spark
    wrote that file the footer holds Spark's own schema (:data:`SPARK_SCHEMA_KEY`), which it takes as it is. So
    the first data file by path, when Spark wrote it, gives the same schema without a Spark job. Partition folders
    (``day=2026-01-01``) add their columns after the footer's, in the order of their levels; when Spark does not
    infer their types (``partition_types_inferred`` false: ``spark.sql.sources.partitionColumnTypeInference.enabled``
    off) each is a string, else only Spark can tell. Anything else (another format, a level that mixes folders and
    files or names two columns, a partition column the footer also has, a summary file in a folder on the way to
    that first file, no data file, a file Spark did not write or cannot read) is ``None``.

    E.g. a folder that Spark's ``df.write.parquet`` filled: its schema; one pandas wrote: ``None``; one of
    ``df.write.partitionBy("day")`` with partition types not inferred: its schema and ``day`` as a string.
    """
    if data_format != "parquet":
        return None
    try:
        fs, folder = fsspec.core.url_to_fs(path)
        partitions: list[str] = []
        while True:
            entries = fs.ls(folder, detail=True) if fs.isdir(folder) else [fs.info(folder)]
            if SUMMARY_FILES & {_base_name(e["name"]) for e in entries}:  # Spark's schema comes from those first
                return None
            visible = [e for e in entries if not _hidden(_base_name(e["name"]))]
            folders = [e for e in visible if e["type"] == "directory"]
            if not visible or not folders:
                break
            names = [_base_name(e["name"]) for e in folders]
            columns = {name.partition("=")[0] for name in names}
            if partition_types_inferred or len(folders) != len(visible) or len(columns) != 1 or "=" not in names[0]:
                return None
            partitions.append(columns.pop())
            # the folder of Spark's first file by path: "a" before "a-b", as "a/..." sorts before "a-b/..."
            folder = min(folders, key=lambda e: e["name"].rstrip("/") + "/")["name"]
        if not visible:
            return None
        from pyarrow import parquet

        with fs.open(min(e["name"] for e in visible), "rb") as handle:
            metadata = parquet.read_metadata(handle).metadata or {}
        stored = metadata.get(SPARK_SCHEMA_KEY)
        if stored is None:
            return None
        schema = StructType.fromJson(json.loads(stored))
        taken = {name.lower() for name in schema.names}
        if any("%" in p or p.lower() in taken for p in partitions) or len({p.lower() for p in partitions}) < len(
            partitions
        ):  # an escaped name, or a column of both kinds: Spark's rules
            return None
        return StructType([*schema.fields, *(StructField(p, StringType(), True) for p in partitions)])
    except (ArrowException, OSError, ValueError, KeyError, TypeError, ImportError) as exc:  # Spark infers it
        log.debug("no stored Spark schema for %s (%s): Spark infers it", path, exc)
        return None


def _base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _hidden(name: str) -> bool:
    """A file or folder name Spark's listing skips: ``_x`` (but ``_x=1`` is a partition), ``.x``, a copy under
    way."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def screen_dataset(path: str, data_format: str) -> tuple[list[str], StructType | None, list[UnreadableFile], bool]:
    """The files of a dataset that read together, the schema to read them with, the others with why, and
    whether the kept files all have the schema's types (else Spark, inferring from one file, may fail on a
    wider one: an ``int`` file first, a ``bigint`` one next)."""
    protocol = path.split("://", 1)[0] + "://" if "://" in path else ""
    fs, root = fsspec.core.url_to_fs(path)

    def footer(file: str) -> dict[str, DataType | str] | str:
        try:
            return _column_types(fs, file, data_format)
        except (ArrowException, ValueError) as exc:  # a footer pyarrow cannot parse, Spark cannot either; a
            # failed read (a connection reset, a timeout, no credentials) is raised: the file may be good
            return f"not a readable {data_format} file ({type(exc).__name__}: {exc})"

    files = _data_files(fs, root)
    with ThreadPoolExecutor(max_workers=16) as pool:  # one small read per file: an object store's latency
        footers = dict(zip(files, pool.map(footer, files), strict=True))
    types: dict[str, dict[str, DataType | str]] = {}
    unreadable: list[UnreadableFile] = []
    for file, found in footers.items():
        url = f"{protocol}{file}"
        if isinstance(found, str):
            unreadable.append(UnreadableFile(path, url, found))
        else:
            types[url] = found
    reference = _reference_types(types.values())
    kept = []
    uniform = True
    for url, columns in types.items():
        wrong = [
            f"column {name} is {_show(have)}; the dataset's is {_show(reference[name])}"
            for name, have in columns.items()
            if not _reads_as(have, reference[name])
        ]
        if wrong:
            unreadable.append(UnreadableFile(path, url, "; ".join(wrong)))
        else:
            kept.append(url)
            uniform = uniform and all(_show(have) == _show(reference[name]) for name, have in columns.items())
    for aside in unreadable:
        log.warning("setting aside %s: %s", aside.path, aside.reason)
    schema = None
    if all(isinstance(t, DataType) for t in reference.values()):
        schema = StructType([StructField(name, t) for name, t in reference.items() if isinstance(t, DataType)])
    return kept, schema, unreadable, uniform


def _data_files(fs: Any, root: str) -> list[str]:
    """The files Spark reads under ``root``: none in a folder named ``_x`` (but ``_x=1`` is a partition) or
    ``.x``, and no file so named or still being copied."""

    base = root.rstrip("/")
    files = sorted(fs.find(base)) if fs.isdir(base) else [base]
    return [f for f in files if not any(_hidden(p) for p in f[len(base) :].split("/") if p)]


def _column_types(fs: Any, file: str, data_format: str) -> dict[str, DataType | str]:
    """A file's columns and their Spark types (an Arrow type Spark has no equivalent for: its name)."""
    import pyarrow as pa

    with fs.open(file, "rb") as handle:
        if data_format == "orc":
            from pyarrow import orc

            schema = orc.ORCFile(handle).schema
        else:
            from pyarrow import parquet

            schema = parquet.read_schema(handle)
    return {field.name: _spark_type(field.type, pa) for field in schema}


def _spark_type(arrow_type: Any, pa: Any) -> DataType | str:
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    try:
        return from_arrow_type(arrow_type)
    except Exception:  # a type Spark maps differently or not at all: compared by its Arrow name
        return str(arrow_type)


def _reads_as(have: DataType | str, want: DataType | str) -> bool:
    if isinstance(have, DataType) and isinstance(want, DataType):
        return reads_as(have, want)
    return _show(have) == _show(want)


def _reference_types(files: Any) -> dict[str, DataType | str]:
    """Per column, the type the most files read as (ties: the one met first)."""
    seen: dict[str, list[DataType | str]] = {}
    for columns in files:
        for name, column_type in columns.items():
            seen.setdefault(name, []).append(column_type)
    reference: dict[str, DataType | str] = {}
    for name, found in seen.items():
        candidates = {_show(t): t for t in found}
        score = Counter({key: sum(_reads_as(t, want) for t in found) for key, want in candidates.items()})
        reference[name] = candidates[score.most_common(1)[0][0]]
    return reference


def _show(column_type: DataType | str) -> str:
    return column_type.simpleString() if isinstance(column_type, DataType) else column_type
