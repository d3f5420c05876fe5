from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from airflow_provider_wm.hooks.spark_submit import SparkConnectionNotFound, WmSparkSubmitHook, job_application


def test_no_connection_means_the_embedded_local_master_with_this_interpreter(airflow_db):
    hook = WmSparkSubmitHook(conn_id=None)
    assert hook.master == "local[*]"
    assert hook._conf["spark.pyspark.python"] == sys.executable
    assert hook._env_vars["PATH"].startswith(os.path.dirname(sys.executable))


def test_a_missing_named_connection_is_a_clear_error_not_yarn(airflow_db):
    with pytest.raises(SparkConnectionNotFound, match=r"spark_conn_id='nope'.*YARN"):
        WmSparkSubmitHook(conn_id="nope")


def test_a_defined_connection_gives_its_master(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MY_SPARK", "spark://127.0.0.1:7077")
    assert WmSparkSubmitHook(conn_id="my_spark").master == "spark://127.0.0.1:7077"


def test_jobs_are_located_in_the_installed_package():
    path = Path(job_application("controller_watermark"))
    assert path.is_file() and path.parent.name == "spark_jobs"
    with pytest.raises(FileNotFoundError, match="no_such_job"):
        job_application("no_such_job")
