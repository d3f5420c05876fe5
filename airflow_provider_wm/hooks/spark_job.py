"""Running one of our Spark jobs in the mode its connection chooses.

- **connect** (a ``spark_connect`` connection, the apache-spark provider's ``SparkConnectHook``): the job
  function runs in the task's own process as a Spark Connect client; the worker needs no JVM, and a task
  pays about a second to connect instead of a JVM start.
- **submit** (a ``spark`` connection): ``SparkSubmitHook`` runs ``spark_jobs/<job>.py <request.json>``, for
  standalone, YARN and Kubernetes masters and cluster deploy mode.
- **embedded** (no connection): connect mode against the embedded Spark Connect server on loopback
  (:mod:`airflow_provider_wm.spark_connect_server`), started on first use when none answers.

Every mode writes the same ``request.json`` and gets the same ``manifest.json`` in the request's
``round_out``, written by :func:`spark_jobs.common.run_and_record`.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any, Literal, TypeVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_provider_wm.contracts import JobFailure, JobManifest, JobRequest, parse_manifest
from airflow_provider_wm.documents import read_document, write_document
from airflow_provider_wm.hooks.spark_submit import SparkConnectionNotFound, WmSparkSubmitHook
from airflow_provider_wm.spark_connect_server import embedded_url, ensure_embedded_server

__all__ = ["RunMode", "SparkJobHook"]

RunMode = Literal["connect", "submit"]
ManifestT = TypeVar("ManifestT", bound=JobManifest)

log = logging.getLogger(__name__)


class SparkJobHook:
    """Run a job request and return its manifest.

    :param conn_id: a ``spark_connect`` or ``spark`` connection, or ``None`` for the embedded server.
    :param conf: Spark configuration: ``--conf`` in submit mode; in connect mode set on the task's session
        (runtime SQL options only: static ones such as executor memory belong to the server).
    :param name: the application name (submit mode).
    """

    def __init__(self, conn_id: str | None, conf: dict[str, Any] | None = None, name: str = "wm-job") -> None:
        self.conn_id = conn_id
        self.conf = {str(k): str(v) for k, v in (conf or {}).items()}
        self.name = name
        self.mode: RunMode = "connect" if conn_id is None else self._mode_of(conn_id)

    @staticmethod
    def _mode_of(conn_id: str) -> RunMode:
        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException as exc:
            raise SparkConnectionNotFound(
                f"spark_conn_id={conn_id!r}: no such Airflow connection. Define it as a Spark Connect server "
                f"(AIRFLOW_CONN_{conn_id.upper()}='spark-connect://127.0.0.1:15002') or a spark-submit master "
                f"(AIRFLOW_CONN_{conn_id.upper()}='spark://127.0.0.1:7077', or a Spark connection whose host is "
                "local[*]), or pass spark_conn_id=None for the embedded Spark Connect server. (SparkSubmitHook "
                "alone would silently submit to YARN.)"
            ) from exc
        if conn.conn_type == "spark_connect":
            return "connect"
        if conn.conn_type == "spark":
            return "submit"
        raise ValueError(
            f"spark_conn_id={conn_id!r} is a connection of type {conn.conn_type!r}; use a 'spark_connect' "
            "connection (Spark Connect) or a 'spark' connection (spark-submit)"
        )

    def describe(self) -> str:
        if self.conn_id is None:
            return f"the embedded Spark Connect server {embedded_url()}"
        return f"Spark Connect ({self.conn_id})" if self.mode == "connect" else f"spark-submit ({self.conn_id})"

    def run(self, request: JobRequest, manifest_type: type[ManifestT], what: str) -> ManifestT:
        """Write the request, run the job, and return its manifest. A failure raises an error that names the
        job's own error and says that the state is unchanged."""
        write_document(request.request_url, request.to_json())
        started = time.monotonic()
        if self.mode == "connect":
            manifest = self._run_connect(request, manifest_type, what)
        else:
            manifest = self._run_submit(request, manifest_type, what)
        log.info("%s ran in %.1f s on %s", what, time.monotonic() - started, self.describe())
        return manifest

    def connect_url(self) -> str:
        if self.conn_id is None:
            return ensure_embedded_server()
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(conn_id=self.conn_id).get_connection_url()

    def _run_connect(self, request: JobRequest, manifest_type: type[ManifestT], what: str) -> ManifestT:
        from pyspark.sql import SparkSession

        from spark_jobs.common import run_and_record

        job = importlib.import_module(f"spark_jobs.{request.job}")
        # a session of its own: its SQL options and temporary views are this task's, whatever ran before
        spark = SparkSession.builder.remote(self.connect_url()).create()
        try:
            for key, value in self.conf.items():
                spark.conf.set(key, value)
            manifest = run_and_record(spark, request, job.run)
        except Exception as exc:
            raise AirflowException(f"{what} failed: {type(exc).__name__}: {exc}; the state is unchanged") from exc
        finally:
            spark.stop()
        if not isinstance(manifest, manifest_type):
            raise AirflowException(f"{what} returned {type(manifest).__name__}, not {manifest_type.__name__}")
        return manifest

    def _run_submit(self, request: JobRequest, manifest_type: type[ManifestT], what: str) -> ManifestT:
        assert self.conn_id is not None  # submit mode is chosen by a named connection
        hook = WmSparkSubmitHook(
            conn_id=self.conn_id, conf=self.conf, application_args=[request.request_url], name=self.name
        )
        try:
            hook.submit_application(request.job)
        except Exception as exc:
            failed = self._read_manifest(request, manifest_type)
            if isinstance(failed, JobFailure):
                raise AirflowException(f"{what} failed: {failed.error}; the state is unchanged") from exc
            raise
        manifest = self._read_manifest(request, manifest_type)
        if manifest is None or isinstance(manifest, JobFailure):
            raise AirflowException(
                f"{what} finished without a usable manifest at {request.manifest_url}: {manifest!r}; the state "
                "is unchanged"
            )
        return manifest

    @staticmethod
    def _read_manifest(request: JobRequest, manifest_type: type[ManifestT]) -> ManifestT | JobFailure | None:
        document = read_document(request.manifest_url)
        if document is None:
            return None
        return parse_manifest(manifest_type, document)  # type: ignore[return-value]
