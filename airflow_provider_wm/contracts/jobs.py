"""What every job's request and manifest share, and the failure document a job writes instead of a manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from airflow_provider_wm.contracts.codec import Contract

__all__ = [
    "CLASSIC_CONF",
    "DRIVER_OUTPUT_ROWS",
    "MANIFEST_NAME",
    "REQUEST_NAME",
    "JobFailure",
    "JobManifest",
    "JobRequest",
    "UnreadableFile",
    "parse_manifest",
]

REQUEST_NAME = "request.json"
MANIFEST_NAME = "manifest.json"

CLASSIC_CONF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}
"""The Spark settings a job submitted with spark-submit gets unless the submitter sets the same key (a ``--conf``
of the operator's ``spark_conf`` wins, e.g. ``{"spark.python.sql.dataFrameDebugging.enabled": "true"}`` to
debug). With DataFrame debugging on (Spark's default, a static setting), every Column function of a classic
session records its Python call site in the JVM first, about eight Py4J round trips each (pyspark 4.2): a run
that builds a few hundred expressions spends more time in those than in its small Spark jobs. Off, an analysis
error names the failing expression without the Python line that built it. Spark Connect clients build plans
locally and are not affected."""

DRIVER_OUTPUT_ROWS = 500_000
"""Up to this many windows, a windowed run writes its panes and state from the job's driver (one Spark action
fetches them as Arrow; pyarrow writes them through fsspec) instead of with Spark's writers, whose fixed cost per
write outweighs a small run's work; larger runs write with Spark. 500,000 windows are tens of MB of Arrow with a
few keys and aggregates. A request's ``driver_output_rows`` overrides it (0: always Spark)."""


class JobRequest(Contract):
    """A job's input. ``round_out`` is the folder of this run's request, manifest and quarantine."""

    job: ClassVar[str]
    round_out: str

    @property
    def request_url(self) -> str:
        return f"{self.round_out.rstrip('/')}/{REQUEST_NAME}"

    @property
    def manifest_url(self) -> str:
        return f"{self.round_out.rstrip('/')}/{MANIFEST_NAME}"


@dataclass(frozen=True)
class UnreadableFile(Contract):
    """A data file a job set aside, left in place: it could not be read, or a column has a type the other files
    of its dataset do not have. Its rows were not read; fix or remove it and a later run reads them.

    ``UnreadableFile("/data/marks", "/data/marks/part-7.parquet", "column time_ms is string; the dataset's
    is bigint")``
    """

    dataset: str
    path: str
    reason: str


class JobManifest(Contract):
    """A job's result, written atomically last. ``status`` is ``succeeded`` (or ``partial``);
    ``unreadable_files`` the input files the job set aside (:class:`UnreadableFile`)."""

    status: str
    unreadable_files: list[UnreadableFile]


@dataclass(frozen=True)
class JobFailure(Contract):
    """What a job writes in place of its manifest when it raised: the operator reports ``error``."""

    job: str
    error: str
    traceback: str = ""
    status: Literal["failed"] = "failed"


def parse_manifest(manifest_type: type[JobManifest], document: Any) -> JobManifest | JobFailure:
    """A manifest document as its contract, or the job's failure.

    >>> parse_manifest(JobManifest, {"status": "failed", "job": "x", "error": "boom"}).error
    'boom'
    """
    if isinstance(document, dict) and document.get("status") == "failed":
        return JobFailure.from_json(document)
    return manifest_type.from_json(document)
