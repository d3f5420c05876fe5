from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from airflow_provider_wm.hooks.spark_submit import (
    CONNECT_CLIENT_VARIABLES,
    SparkConnectionNotFound,
    WmSparkSubmitHook,
    job_application,
)


def test_a_local_master_runs_the_driver_with_this_interpreter_and_quiet_spark_logs(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_SPARK", "spark://local%5B%2A%5D")
    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_SPARK", '{"conn_type": "spark", "host": "local[*]"}')
    hook = WmSparkSubmitHook(conn_id="local_spark")
    assert hook.master == "local[*]"
    assert hook._conf["spark.pyspark.python"] == sys.executable
    assert hook._env_vars["PATH"].startswith(os.path.dirname(sys.executable))
    assert "-Dlog4j2.configurationFile=file:" in hook._env_vars["SPARK_SUBMIT_OPTS"]
    config = hook._env_vars["SPARK_SUBMIT_OPTS"].split("-Dlog4j2.configurationFile=file:")[1].split()[0]
    assert "rootLogger.level = warn" in Path(config).read_text()


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


PROBE = """
import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
with open(sys.argv[1], "w") as out:
    out.write(spark.conf.get("spark.python.sql.dataFrameDebugging.enabled"))
spark.stop()
"""


@pytest.mark.slow
def test_jobs_are_submitted_with_dataframe_debugging_off_unless_the_operators_conf_sets_it(
    airflow_db, monkeypatch, tmp_path
):
    monkeypatch.setenv("AIRFLOW_CONN_LOCAL_SPARK", '{"conn_type": "spark", "host": "local[1]"}')
    for name in CONNECT_CLIENT_VARIABLES:  # as submit_application does: the worker may have opened a Connect session
        monkeypatch.delenv(name, raising=False)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)

    def submitted_setting(conf: dict[str, str] | None) -> str:
        out = tmp_path / "setting.txt"
        WmSparkSubmitHook(conn_id="local_spark", conf=conf, application_args=[str(out)]).submit(str(probe))
        return out.read_text()

    assert submitted_setting(None) == "false"
    assert submitted_setting({"spark.python.sql.dataFrameDebugging.enabled": "true"}) == "true"
