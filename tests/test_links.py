"""Every operator and sensor of the provider carries the "Watermarks" link, pointing at its place on the page."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest

from airflow_provider_wm import get_provider_info
from airflow_provider_wm.links import WatermarksLink, watermarks_page_url


def provider_classes(kind: str) -> list[type]:
    classes = []
    for entry in get_provider_info()[kind]:
        for module_name in entry["python-modules"]:
            module = importlib.import_module(module_name)
            classes += [getattr(module, name) for name in module.__all__ if name.endswith(("Operator", "Sensor"))]
    return classes


@pytest.mark.parametrize("cls", provider_classes("operators") + provider_classes("sensors"), ids=lambda c: c.__name__)
def test_every_operator_and_sensor_has_the_watermarks_link(cls):
    assert [type(link) for link in cls.operator_extra_links] == [WatermarksLink]
    assert callable(cls.watermarks_page_query)


def test_the_link_points_at_the_stream_or_pipeline_of_the_task(airflow_db, tmp_path):
    from airflow_provider_wm.operators.controller_watermark import ControllerWatermarkOperator
    from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor

    store = str(tmp_path)
    streams = ["payments", "orders"]
    sensor = StreamWatermarkSensor(task_id="s", streams=streams, store_path=store, threshold="2026-01-01")
    controller = ControllerWatermarkOperator(
        task_id="c", controller="main", marks_path=store, segments_path=store, store_path=store,
        writer_timeout=timedelta(minutes=1),
    )  # fmt: skip
    link = WatermarksLink()
    assert link.get_link(sensor, ti_key=None) == "/wm/?stream=payments"
    assert link.get_link(controller, ti_key=None) == "/wm/?controller=main"
    assert watermarks_page_url({"pipeline": "a b"}, "http://h:1/") == "http://h:1/wm/?pipeline=a+b"
