"""Submitting our Spark jobs through the apache-spark provider's ``SparkSubmitHook``.

Two things the provider's hook does not do for us:

- A named connection that does not exist makes ``SparkSubmitHook`` log a line and submit to YARN. Here it
  is an error that names the connection id.
- Without a connection (``conn_id=None``) we run on an explicit embedded default, ``local[*]``, with the
  driver's Python and ``spark-submit`` taken from the interpreter that runs Airflow, so the job can import
  this package exactly as installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection
from importlib import resources
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import Connection
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

__all__ = ["EMBEDDED_MASTER", "SparkConnectionNotFound", "WmSparkSubmitHook", "job_application"]

EMBEDDED_MASTER = "local[*]"
_EMBEDDED_CONN_ID = "__wm_embedded_spark__"


class SparkConnectionNotFound(LookupError):
    """The Spark connection named by the operator is not defined (never a silent fallback to YARN)."""


def job_application(module: str) -> str:
    """File path of a job in the installed ``spark_jobs`` package, e.g. ``controller_watermark``."""
    path = resources.files("spark_jobs").joinpath(f"{module}.py")
    if not path.is_file():
        raise FileNotFoundError(f"Spark job {module!r} is not installed with spark_jobs ({path})")
    return str(path)


class WmSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` with a clear error for a missing connection and an embedded ``local[*]`` default.

    :param conn_id: Spark connection id, or ``None`` for the embedded ``local[*]`` master.
    :param kwargs: passed to ``SparkSubmitHook`` unchanged (conf, application_args, name, ...).
    """

    def __init__(self, *, conn_id: str | None, **kwargs: Any) -> None:
        self._requested_conn_id = conn_id
        super().__init__(conn_id=conn_id or _EMBEDDED_CONN_ID, **kwargs)
        if self._runs_on_this_machine():
            self._use_this_interpreter()

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
        if conn_id == _EMBEDDED_CONN_ID:
            return Connection(conn_id=conn_id, conn_type="spark", host=EMBEDDED_MASTER)
        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException as exc:
            raise SparkConnectionNotFound(
                f"spark_conn_id={conn_id!r}: no such Airflow connection. Define it (for example "
                f"AIRFLOW_CONN_{conn_id.upper()}='spark://127.0.0.1:7077', or a Spark connection whose host "
                f"is local[*]) or pass spark_conn_id=None to run on the embedded {EMBEDDED_MASTER} master. "
                "(SparkSubmitHook alone would silently submit to YARN.)"
            ) from exc

    def submit_job(
        self,
        module: str,
        manifest_url: str,
        read_manifest: Callable[[str], dict[str, Any] | None],
        what: str,
        accepted: Collection[str] = ("succeeded",),
    ) -> dict[str, Any]:
        """Submit one of our jobs and return its manifest; a failure names the job's own error (from its
        ``failed`` manifest) and says that the state is unchanged."""
        try:
            self.submit(job_application(module))
        except Exception as exc:
            failed = read_manifest(manifest_url)
            if failed and failed.get("status") == "failed":
                raise AirflowException(f"{what} failed: {failed.get('error')}; the state is unchanged") from exc
            raise
        manifest = read_manifest(manifest_url)
        if manifest is None or manifest.get("status") not in accepted:
            raise AirflowException(
                f"{what} finished without a usable manifest at {manifest_url}: {manifest!r}; the state is unchanged"
            )
        return manifest

    @property
    def master(self) -> str:
        return str(self._connection["master"])

    def _runs_on_this_machine(self) -> bool:
        client_mode = self._connection.get("deploy_mode") in (None, "client")
        return client_mode and (self.master.startswith("local") or self.master.startswith("spark://"))

    def _use_this_interpreter(self) -> None:
        """Driver (and local executors) use this Python; spark-submit comes from its environment."""
        python = sys.executable
        self._conf.setdefault("spark.pyspark.python", python)
        self._conf.setdefault("spark.pyspark.driver.python", python)
        env = dict(self._env_vars or {})
        bin_dir = os.path.dirname(python)
        env.setdefault("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        self._env_vars = env
