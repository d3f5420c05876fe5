"""Submitting our Spark jobs through the apache-spark provider's ``SparkSubmitHook``.

This is the *submit* run mode (a ``spark`` connection; see :mod:`airflow_provider_wm.hooks.spark_job`).
Three things the provider's hook does not do for us:

- A named connection that does not exist makes ``SparkSubmitHook`` log a line and submit to YARN. Here it
  is an error that names the connection id.
- For masters on this machine (``local[*]``, ``spark://`` in client mode) the driver's Python and
  ``spark-submit`` are taken from the interpreter that runs Airflow, so the job imports this package exactly
  as installed.
- The driver of a client-mode job is ``spark-submit``'s own JVM: its Spark logging is cut to warnings, so the
  task log shows the job's summary, not thousands of INFO lines.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_wm.contracts.jobs import CLASSIC_CONF
from airflow_provider_wm.spark_connect_server import quiet_java_options

__all__ = ["SparkConnectionNotFound", "WmSparkSubmitHook", "job_application"]


CONNECT_CLIENT_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_CONNECT_MODE")


class SparkConnectionNotFound(LookupError):
    """The Spark connection named by the operator is not defined (never a silent fallback to YARN)."""


def job_application(module: str) -> str:
    """File path of a job in the installed ``spark_jobs`` package, e.g. ``controller_watermark``."""
    path = resources.files("spark_jobs").joinpath(f"{module}.py")
    if not path.is_file():
        raise FileNotFoundError(f"Spark job {module!r} is not installed with spark_jobs ({path})")
    return str(path)


class WmSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` with a clear error for a missing connection, this interpreter for local masters and
    the jobs' :data:`~airflow_provider_wm.contracts.jobs.CLASSIC_CONF` where ``conf`` leaves a key unset.

    :param conn_id: a ``spark`` connection id.
    :param kwargs: passed to ``SparkSubmitHook`` unchanged (conf, application_args, name, ...).
    """

    def __init__(self, *, conn_id: str, **kwargs: Any) -> None:
        super().__init__(conn_id=conn_id, **kwargs)
        for key, value in CLASSIC_CONF.items():  # the submitter's own setting of a key wins
            self._conf.setdefault(key, value)
        if self._runs_on_this_machine():
            self._use_this_interpreter()

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException as exc:
            raise SparkConnectionNotFound(
                f"spark_conn_id={conn_id!r}: no such Airflow connection. Define it (for example "
                f"AIRFLOW_CONN_{conn_id.upper()}='spark://127.0.0.1:7077', or a Spark connection whose host "
                "is local[*]) or pass spark_conn_id=None for the embedded Spark Connect server. "
                "(SparkSubmitHook alone would silently submit to YARN.)"
            ) from exc

    def submit_application(self, module: str) -> None:
        """Submit ``spark_jobs/<module>.py`` with this hook's application arguments (raises on failure).

        A process that has opened a Spark Connect session carries ``SPARK_CONNECT_MODE_ENABLED`` (pyspark sets
        it) and perhaps ``SPARK_REMOTE``; ``spark-submit`` inherits the environment, and its driver would then
        take itself for a Connect client. They are left out of the submitted job's environment."""
        connect_only = {name: os.environ.pop(name) for name in CONNECT_CLIENT_VARIABLES if name in os.environ}
        try:
            self.submit(job_application(module))
        finally:
            os.environ.update(connect_only)

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
        # in client mode the driver is spark-submit's own JVM: Spark's INFO lines would fill the task log
        env.setdefault("SPARK_SUBMIT_OPTS", f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {quiet_java_options()}".strip())
        self._env_vars = env
