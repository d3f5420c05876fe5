"""``make airflow`` for real: ``airflow standalone`` with our DAGs and plugin, driven through the REST API, and the
Watermarks page in headless Chromium.

The test starts ``python -m airflow_provider_wm.demo.standalone`` (what ``make airflow`` runs) in a temporary
directory on a free loopback port, with no replay: it triggers the example DAGs through the REST API itself,
two hours of the controller DAG one after the other, then an hour of the windowed aggregate beside the controller
that publishes its watermark (so the aggregate's sensor must defer), and a day of the partitions DAG. The asset
event of the aggregate starts the downstream ``example_revenue_report``. Then it checks the REST view of the
sensor (deferred, resumed by the triggerer), the extra links, the 401 and the path check of the page's routes,
and opens the page in Chromium (Debian's ``chromium``, driven by Playwright): after logging in through Airflow's
login page, the tables and the chart show what the runs produced. The screenshot is kept as
``$WM_TEST_ARTIFACTS/watermarks-page.png`` (default ``.artifacts/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_wm.demo import data, orders_data
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from tests.integration.standalone import Api, running_standalone, wait_until

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("WM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts"))


@pytest.fixture(scope="module")
def airflow_standalone(tmp_path_factory, spark_connect_url):
    # The run's shared Spark Connect server answers before standalone starts: standalone then uses it and
    # leaves it running, instead of starting one on the shared port that it would stop when it ends.
    env = {"WM_EXAMPLE_CATCHUP_INTERVALS": "0", "WM_EXAMPLE_SENSOR_TIMEOUT": "600"}
    with running_standalone(tmp_path_factory.mktemp("standalone"), env) as airflow:
        yield airflow.api, airflow.home, airflow.process


def test_example_dags_run_through_the_rest_api_and_the_watermarks_page_shows_them(airflow_standalone):
    api, home, process = airflow_standalone
    api.request("PATCH", "/api/v2/dags/example_revenue_report", {"is_paused": False})
    hour = timedelta(hours=1)
    first, second = data.START + hour, data.START + 2 * hour  # ends of the first two demo hours
    api.trigger("example_stream_watermark", "rest_hour_1", data.START, first)
    api.wait_for_success("example_stream_watermark", "rest_hour_1", process)
    # The aggregate's sensor starts while the controller of hour 2 still computes: it must defer.
    api.trigger("example_windowed_aggregate", "rest_hour_2", first, second)
    api.trigger("example_stream_watermark", "rest_hour_2", first, second)
    day = orders_data.START + timedelta(days=2)
    api.trigger("example_incremental_partitions", "rest_day_2", day - timedelta(days=1), day)
    for dag_id, run_id in [
        ("example_stream_watermark", "rest_hour_2"),
        ("example_windowed_aggregate", "rest_hour_2"),
        ("example_incremental_partitions", "rest_day_2"),
    ]:
        api.wait_for_success(dag_id, run_id, process)

    check_the_sensor_deferred_and_the_triggerer_resumed_it(api, home)
    check_the_downstream_dag_ran_on_the_asset_event(api, process)
    check_extra_links(api)
    check_the_routes_refuse_anonymous_and_foreign_paths(api)
    store = WatermarkStoreHook(str(home / "data" / "store"))
    check_the_page_in_chromium(api, store)


def check_the_sensor_deferred_and_the_triggerer_resumed_it(api: Api, home: Path) -> None:
    """The task log (REST) shows the sensor paused as DEFERRED, then resumed in ``execute_complete``; the
    triggerer's own log of that trigger shows it polling the store and firing the event that resumed it."""
    path = "/api/v2/dags/example_windowed_aggregate/dagRuns/rest_hour_2/taskInstances/wait_for_orders"
    ti = api.request("GET", path)
    assert ti["state"] == "success" and ti["try_number"] == 1, ti
    events = [str(e.get("event")) for e in api.request("GET", f"{path}/logs/1?full_content=true")["content"]]
    deferred = [i for i, event in enumerate(events) if "Pausing task as DEFERRED" in event]
    resumed = [i for i, event in enumerate(events) if "watermark reached the threshold" in event]
    assert deferred and resumed and deferred[0] < resumed[-1], events
    task_logs = home / "logs" / "dag_id=example_windowed_aggregate" / "run_id=rest_hour_2" / "task_id=wait_for_orders"
    trigger_log = "".join(p.read_text() for p in task_logs.glob("attempt=1.log.trigger.*.log"))
    assert "next poll in" in trigger_log and "Trigger fired event" in trigger_log, trigger_log[-3000:]


def check_the_downstream_dag_ran_on_the_asset_event(api: Api, process: subprocess.Popen) -> None:
    def report_runs() -> list[dict[str, Any]]:
        runs = api.request("GET", "/api/v2/dags/example_revenue_report/dagRuns")["dag_runs"]
        return [run for run in runs if run["state"] == "success"]

    [run] = wait_until(report_runs, "the asset-scheduled report to run", 180, process)
    assert run["run_type"] == "asset_triggered"
    events = api.request("GET", "/api/v2/assets/events?source_dag_id=example_windowed_aggregate")["asset_events"]
    [event] = [e for e in events if e["source_run_id"] == "rest_hour_2"]
    assert event["extra"]["pipeline"] == "orders_15m" and event["extra"]["version"] == 1


def check_extra_links(api: Api) -> None:
    def links(dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
        return api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/links")[
            "extra_links"
        ]

    base = api.url
    assert links("example_stream_watermark", "rest_hour_2", "controller_watermark") == {
        "Watermarks": f"{base}/wm/?controller=example_controller"
    }
    assert links("example_stream_watermark", "rest_hour_2", "wait_for_orders") == {
        "Watermarks": f"{base}/wm/?stream=orders"
    }
    assert links("example_windowed_aggregate", "rest_hour_2", "orders_15m") == {
        "Watermarks": f"{base}/wm/?pipeline=orders_15m"
    }
    assert links("example_incremental_partitions", "rest_day_2", "orders_daily") == {
        "Watermarks": f"{base}/wm/?pipeline=orders_daily"
    }


def check_the_routes_refuse_anonymous_and_foreign_paths(api: Api) -> None:
    for route in ("/wm/", "/wm/api/overview", "/wm/api/streams/orders/history"):
        assert api.status(route, token=None) == 401, route
        assert api.status(route, token=api.token) == 200, route
    for name in ("..", "..%2F..%2Fpasswords.json", ".lock", "orders%00"):
        assert api.status(f"/wm/api/streams/{name}/history", token=api.token) in (400, 404), name


def check_the_page_in_chromium(api: Api, store: WatermarkStoreHook) -> None:
    if CHROMIUM is None:
        subprocess.run(["apt-get", "install", "-y", "chromium"], check=True, capture_output=True)
    from playwright.sync_api import sync_playwright

    orders = store.read_latest("orders")
    assert orders is not None and orders["lower_ms"] == int((data.START + 2 * timedelta(hours=1)).timestamp() * 1000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM or shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(f"{api.url}/auth/login")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", api.password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)
            page.goto(f"{api.url}/wm/?stream=orders")
            page.wait_for_selector("body[data-loaded=true]", timeout=30_000)
            row = page.locator("#streams tbody tr[data-stream=orders]")
            assert row.locator("td.lower").inner_text() == "2026-01-05T02:00:00Z"
            assert row.locator("td.writers").inner_text() == str(orders_writers(store))
            derived = page.locator("#streams tbody tr[data-stream=orders_15m] td.derived")
            assert derived.inner_text() == "orders_15m (from orders)", "the aggregate's output watermark"
            chart = page.locator("#chart path[data-series=watermark]")
            assert chart.get_attribute("data-points") == "2", "the chart draws the two watermarks of the orders stream"
            strip = page.locator("#pipeline-orders_daily .strip div[data-status=done]")
            assert strip.count() >= 1
            runs = page.locator("#pipeline-orders_15m table.runs tbody tr")
            assert runs.count() == 1
            page.screenshot(path=str(ARTIFACTS / "watermarks-page.png"), full_page=True)
            page.goto(f"{api.url}/plugin/watermarks")
            page.wait_for_selector("iframe", timeout=30_000)
        finally:
            browser.close()


def orders_writers(store: WatermarkStoreHook) -> int:
    status = store.read_stream_status("orders")
    assert status is not None
    return int(status["active_writers"])
