"""Run modes: the connection's type chooses connect or submit; no connection is the embedded server."""

from __future__ import annotations

import pytest

from airflow_provider_wm.hooks.spark_job import SparkJobHook
from airflow_provider_wm.hooks.spark_submit import SparkConnectionNotFound


def test_no_connection_is_connect_mode_on_the_embedded_server(monkeypatch):
    monkeypatch.setenv("WM_SPARK_CONNECT_URL", "sc://127.0.0.1:15999")
    hook = SparkJobHook(None)
    assert hook.mode == "connect"
    assert "sc://127.0.0.1:15999" in hook.describe()


def test_a_spark_connect_connection_is_connect_mode_with_the_providers_url(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MY_CONNECT", "spark-connect://spark-host:15003")
    hook = SparkJobHook("my_connect")
    assert hook.mode == "connect"
    assert hook.connect_url() == "sc://spark-host:15003/"


def test_a_spark_connection_is_submit_mode(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MY_SUBMIT", "spark://127.0.0.1:7077")
    assert SparkJobHook("my_submit").mode == "submit"


def test_a_connection_of_another_type_is_refused_naming_it(airflow_db, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MY_PG", "postgres://u:p@db:5432/x")
    with pytest.raises(ValueError, match=r"spark_conn_id='my_pg' is a connection of type 'postgres'"):
        SparkJobHook("my_pg")


def test_a_missing_connection_names_it_and_both_kinds_it_could_be(airflow_db):
    with pytest.raises(SparkConnectionNotFound, match=r"spark_conn_id='absent'.*spark-connect://.*spark://"):
        SparkJobHook("absent")


def test_a_remote_embedded_url_that_does_not_answer_is_not_started_here(monkeypatch):
    # no traffic to a non-loopback address from the tests: the port check is replaced, the decision is real
    monkeypatch.setenv("WM_SPARK_CONNECT_URL", "sc://192.0.2.1:15002")
    monkeypatch.setattr("airflow_provider_wm.spark_connect_server.is_listening", lambda *_a, **_k: False)
    with pytest.raises(ConnectionError, match=r"no Spark Connect server answers at sc://192\.0\.2\.1:15002"):
        SparkJobHook(None).connect_url()
