"""Packaging: Airflow discovers the provider, and the wheel ships the Spark jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

import airflow_provider_wm

REPO = Path(__file__).resolve().parents[1]


def test_provider_info_matches_airflows_schema_and_names_real_modules():
    import importlib

    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = airflow_provider_wm.get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-provider-wm"
    for section in ("hooks", "operators", "sensors", "triggers"):
        for module in info[section][0]["python-modules"]:
            importlib.import_module(module)


@pytest.mark.parametrize(
    ("section", "package", "base"),
    [
        ("triggers", "airflow_provider_wm.triggers", "airflow.triggers.base:BaseTrigger"),
        ("sensors", "airflow_provider_wm.sensors", "airflow.sdk:BaseSensorOperator"),
        ("operators", "airflow_provider_wm.operators", "airflow.sdk:BaseOperator"),
    ],
)
def test_provider_info_lists_every_module_that_defines_a_trigger_sensor_or_operator(section, package, base):
    """``airflow providers triggers`` (and the others) list what the provider info names, nothing else."""
    import importlib
    import inspect
    import pkgutil

    module_name, class_name = base.split(":")
    base_class = getattr(importlib.import_module(module_name), class_name)
    defining = set()
    for found in pkgutil.iter_modules(importlib.import_module(package).__path__, f"{package}."):
        if found.name.endswith(".base"):  # the shared base classes, which a DAG does not use itself
            continue
        module = importlib.import_module(found.name)
        for _name, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, base_class) and value.__module__ == module.__name__ and not inspect.isabstract(value):
                defining.add(found.name)
    listed = set(airflow_provider_wm.get_provider_info()[section][0]["python-modules"])
    assert defining <= listed


def test_airflow_providers_list_shows_the_package(airflow_db):
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    ).stdout
    providers = {p["package_name"]: p for p in json.loads(out[out.index("[") :])}
    assert providers["airflow-provider-wm"]["version"] == airflow_provider_wm.__version__
    assert "apache-airflow-providers-apache-spark" in providers


@pytest.mark.slow
def test_the_wheel_contains_the_spark_jobs_and_the_entry_point(tmp_path):
    # built from a copy: an in-tree build leaves airflow_provider_wm.egg-info in the clone, a second distribution of
    # the provider for every process with the clone on sys.path (Airflow then finds its plugins twice and, as of
    # 3.3.2, stops loading the plugins that come after a duplicate, the OpenLineage provider's among them)
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("airflow_provider_wm", "spark_jobs"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for file in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / file, source / file)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("airflow_provider_wm-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "airflow_provider_wm:get_provider_info" in zf.read(entry_points).decode()
    jobs = {
        f"spark_jobs/{entry}.py" for entry in ("controller_watermark", "windowed_aggregate", "incremental_partitions")
    }
    assert {*jobs, "spark_jobs/common.py"} <= names
    assert {f"spark_jobs/{job}/job.py" for job in ("controller", "windowed", "partitions")} <= names
    assert {"airflow_provider_wm/core/controller/round.py", "airflow_provider_wm/core/windowing/run.py"} <= names
    assert not any(n.startswith(("tests/", "dags/", "bench/")) for n in names)
