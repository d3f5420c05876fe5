"""The plugin's app under Airflow's real authentication (SimpleAuthManager JWTs), on a store written by the hook.

Damaged records are made by writing garbage into the real store's files; the page itself is checked in headless
Chromium (Debian's ``chromium``, driven by Playwright) against the app served by uvicorn on a loopback port.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

ROUTES = ["/wm/", "/wm/api/overview", "/wm/api/streams/orders/history"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__WM__STORE_PATH", str(tmp_path / "store"))
    hook = WatermarkStoreHook(str(tmp_path / "store"))
    for i in range(1, 6):
        hook.publish({"stream": "orders", "lower_ms": i * 1000, "upper_ms": i * 1000, "computed_at_ms": i * 1000 + 500})
    status = {"stream": "orders", "status": "EMITTED", "active_writers": 3, "no_active_writers": False}
    hook.write_stream_status("orders", status)
    return hook


@pytest.fixture
def app(airflow_db):
    from airflow.api_fastapi.app import init_auth_manager
    from fastapi import FastAPI

    from airflow_provider_wm.plugins.watermarks import WatermarksPlugin

    root = FastAPI()
    init_auth_manager(root)
    [entry] = WatermarksPlugin.fastapi_apps
    root.mount(entry["url_prefix"], entry["app"])
    return root


@pytest.fixture
def client(app):
    return TestClient(app)


@pytest.fixture
def token(client):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))


@pytest.mark.parametrize("route", ROUTES)
def test_an_anonymous_request_gets_401(client, store, route):
    assert client.get(route).status_code == 401


@pytest.mark.parametrize("route", ["/wm/docs", "/wm/redoc", "/wm/openapi.json"])
def test_no_api_documentation_is_served_outside_the_auth(client, store, token, route):
    assert client.get(route).status_code == 404
    assert client.get(route, headers={"Authorization": f"Bearer {token}"}).status_code == 404


def test_an_invalid_token_is_refused(client, store):
    assert client.get("/wm/api/overview", headers={"Authorization": "Bearer forged"}).status_code in (401, 403)


def test_an_authenticated_user_sees_the_streams_and_the_page(client, store, token):
    auth = {"Authorization": f"Bearer {token}"}
    overview = client.get("/wm/api/overview", headers=auth).json()
    [orders] = overview["streams"]
    seen = (orders["stream"], orders["lower_ms"], orders["writers"], orders["no_active_writers"])
    assert seen == ("orders", 5000, 3, False)
    assert "<svg" in client.get("/wm/", cookies={"_token": token}).text


def test_the_history_route_downsamples_on_the_server(client, store, token):
    auth = {"Authorization": f"Bearer {token}"}
    history = client.get("/wm/api/streams/orders/history?points=2", headers=auth).json()
    assert history["entries"] == 5 and len(history["points"]) == 2
    assert history["points"][-1] == {"t": 5500, "lower_ms": 5000, "lag_ms": 500}
    assert client.get("/wm/api/streams/orders/history?points=0", headers=auth).status_code == 422


def test_a_keyed_watermark_is_a_row_of_its_own_with_its_history(client, store, token):
    store.publish({"stream": "orders", "wm_key": "eu", "lower_ms": 7000, "upper_ms": 7000, "computed_at_ms": 7500})
    store.write_stream_status("orders", {"status": "EMITTED", "active_writers": 1}, wm_key="eu")
    auth = {"Authorization": f"Bearer {token}"}
    rows = {row["stream"]: row for row in client.get("/wm/api/overview", headers=auth).json()["streams"]}
    assert sorted(rows) == ["orders", "orders:eu"]
    assert (rows["orders:eu"]["wm_key"], rows["orders:eu"]["lower_ms"], rows["orders:eu"]["writers"]) == ("eu", 7000, 1)
    assert rows["orders"]["lower_ms"] == 5000  # the unkeyed watermark is unaffected
    history = client.get("/wm/api/streams/orders:eu/history", headers=auth).json()
    assert history["entries"] == 1 and history["points"] == [{"t": 7500, "lower_ms": 7000, "lag_ms": 500}]


@pytest.mark.parametrize(
    "name", ["..", "..%2F..%2Fsecret.json", ".hidden", "a%00b", "%2Fetc%2Fpasswd", "orders:..", "orders:a:b"]
)
def test_no_stream_name_reaches_outside_the_store(client, store, token, name):
    response = client.get(f"/wm/api/streams/{name}/history", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code in (400, 404), response.text  # 404: the router never matched a path with a "/"
    if response.status_code == 400:
        assert "is not a valid name" in response.json()["detail"]


# ------------------------------------------------------------------------------------------- damaged records


def records(stream: str, *lowers: int, wm_key: str | None = None) -> list[dict]:
    keyed = {} if wm_key is None else {"wm_key": wm_key}
    return [
        {"stream": stream, **keyed, "lower_ms": lower, "upper_ms": lower, "computed_at_ms": lower + 500}
        for lower in lowers
    ]


def publish(store: WatermarkStoreHook, *batch: dict) -> None:
    for record in batch:
        assert store.publish(record)


def damage(path: Path, content: bytes) -> str:
    """Overwrite a record of the store with ``content``; its path as the store names it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return str(path)


def overview_rows(client: TestClient, token: str) -> dict:
    response = client.get("/wm/api/overview", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


def healthy_orders(rows: dict) -> None:
    orders = next(row for row in rows["streams"] if row["stream"] == "orders")
    assert (orders["lower_ms"], orders["writers"], orders["error"]) == (5000, 3, None)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"stream": "paym', "not a JSON document"),  # a write cut short
        (b"", "not a JSON document"),  # an empty file
        (b"\x00\xff\xfe garbage", "not a JSON document"),
        (b"[1, 2]", "holds a JSON list, not a record"),
        (b'{"stream": "payments", "lower_ms": "soon"}', "lower_ms='soon' is not epoch milliseconds"),
        (b'{"stream": "payments", "upper_ms": 9000}', "lower_ms=None is not epoch milliseconds"),
        (
            b'{"stream": "payments", "lower_ms": 9000, "upper_ms": "later"}',
            "upper_ms='later' is not epoch milliseconds",
        ),
    ],
)
def test_a_damaged_latest_record_flags_its_stream_and_every_other_stream_still_answers(
    client, store, token, tmp_path, content, reason
):
    publish(store, *records("payments", 1000, 2000), *records("refunds", 3000))
    path = damage(tmp_path / "store" / "streams" / "payments" / "latest.json", content)
    rows = overview_rows(client, token)
    healthy_orders(rows)
    streams = {row["stream"]: row for row in rows["streams"]}
    assert sorted(streams) == ["orders", "payments", "refunds"]
    assert (streams["refunds"]["lower_ms"], streams["refunds"]["error"]) == (3000, None)
    payments = streams["payments"]
    assert payments["error"].startswith(f"damaged record {path}: {reason}"), payments["error"]
    # the bound the store keeps to (the log's highest), never a reset to "no watermark"
    assert (payments["lower_ms"], payments["lower_from"]) == (2000, "log")


def test_a_damaged_status_record_flags_its_stream_and_keeps_its_watermark(client, store, token, tmp_path):
    publish(store, *records("payments", 1000))
    path = damage(tmp_path / "store" / "streams" / "payments" / "status.json", b"{not json")
    rows = overview_rows(client, token)
    healthy_orders(rows)
    payments = next(row for row in rows["streams"] if row["stream"] == "payments")
    assert payments["error"].startswith(f"damaged record {path}: not a JSON document")
    assert (payments["lower_ms"], payments["lower_from"], payments["writers"]) == (1000, "latest", None)


def test_a_damaged_keyed_watermark_flags_only_its_own_row(client, store, token, tmp_path):
    publish(store, *records("orders", 7000, wm_key="eu"), *records("orders", 8000, wm_key="us"))
    path = damage(tmp_path / "store" / "streams" / "orders" / "keys" / "eu" / "latest.json", b"\x00")
    rows = {row["stream"]: row for row in overview_rows(client, token)["streams"]}
    assert sorted(rows) == ["orders", "orders:eu", "orders:us"]
    assert rows["orders"]["error"] is None and rows["orders:us"]["error"] is None
    assert rows["orders:eu"]["error"].startswith(f"damaged record {path}: ")
    assert rows["orders:eu"]["lower_ms"] == 7000


def test_a_stream_whose_only_record_is_damaged_is_still_listed_and_flagged(client, store, token, tmp_path):
    path = damage(tmp_path / "store" / "streams" / "lost" / "latest.json", b'{"stream": ')
    lost = next(row for row in overview_rows(client, token)["streams"] if row["stream"] == "lost")
    assert lost["error"].startswith(f"damaged record {path}: ")
    assert (lost["lower_ms"], lost["lag"]) == (None, "-")  # no log to fall back on: unknown, not zero


def test_a_garbage_record_in_a_streams_log_breaks_neither_the_overview_nor_its_history(client, store, token, tmp_path):
    log_dir = tmp_path / "store" / "streams" / "orders" / "log"
    damage(log_dir / sorted(p.name for p in log_dir.iterdir())[2], b"garbage")  # a logged watermark overwritten
    damage(log_dir / "not-a-watermark.json", b"[]")  # and a stray file beside them
    auth = {"Authorization": f"Bearer {token}"}
    healthy_orders(overview_rows(client, token))
    history = client.get("/wm/api/streams/orders/history", headers=auth)
    assert history.status_code == 200 and history.json()["entries"] == 5


def test_a_stray_file_where_a_folder_belongs_is_flagged_and_the_others_answer(client, store, token, tmp_path):
    path = damage(tmp_path / "store" / "streams" / "junk", b"not a folder")
    rows = overview_rows(client, token)
    healthy_orders(rows)
    junk = next(row for row in rows["streams"] if row["stream"] == "junk")
    assert junk["error"].startswith(f"damaged record {path}/latest.json: ")


def test_the_history_of_a_stream_with_a_damaged_log_is_a_json_error_naming_the_path(client, store, token, tmp_path):
    path = damage(tmp_path / "store" / "streams" / "payments" / "log", b"a file where the log folder belongs")
    response = client.get("/wm/api/streams/payments/history", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 500
    assert response.json()["detail"].startswith(f"damaged record {path}: ")
    assert client.get("/wm/api/streams/payments/history").status_code == 401  # the auth comes first


def test_a_damaged_store_still_refuses_anonymous_requests(client, store, tmp_path):
    damage(tmp_path / "store" / "streams" / "orders" / "latest.json", b"garbage")
    damage(tmp_path / "store" / "pipelines" / "daily" / "state.json", b"garbage")
    for route in ROUTES:
        assert client.get(route).status_code == 401, route


def windowed_pipeline(store: WatermarkStoreHook, pipeline: str, versions: int) -> None:
    for version in range(1, versions + 1):
        manifest = {
            "version": version,
            "run_id": f"run{version}",
            "watermark_ms": version * 1000,
            "totals": {"panes": {"ON_TIME": version}, "too_late": 0, "events_read": 10},
        }
        store.write_json_url(store.pipeline_url(pipeline, "runs", f"v{version}", "manifest.json"), manifest)
    store.write_pipeline_state(
        pipeline, {"kind": "windowed", "version": versions, "watermark_ms": versions * 1000, "run_id": f"run{versions}"}
    )


def test_a_damaged_pipeline_state_is_flagged_beside_the_healthy_pipelines(client, store, token, tmp_path):
    windowed_pipeline(store, "revenue", 2)
    path = damage(tmp_path / "store" / "pipelines" / "daily" / "state.json", b'{"version": 3, "sp')
    rows = overview_rows(client, token)
    healthy_orders(rows)
    [revenue] = rows["windowed_pipelines"]
    assert (revenue["pipeline"], revenue["error"], [r["version"] for r in revenue["runs"]]) == ("revenue", None, [1, 2])
    [daily] = rows["damaged_pipelines"]
    assert daily["pipeline"] == "daily" and daily["error"].startswith(f"damaged record {path}: not a JSON document")


def test_a_damaged_run_manifest_flags_its_run_and_keeps_the_other_runs(client, store, token, tmp_path):
    windowed_pipeline(store, "revenue", 3)
    path = damage(tmp_path / "store" / "pipelines" / "revenue" / "runs" / "v2" / "manifest.json", b"\xff\xfe")
    [revenue] = overview_rows(client, token)["windowed_pipelines"]
    assert revenue["error"] is None
    runs = {run["version"]: run for run in revenue["runs"]}
    assert sorted(runs) == [1, 2, 3]
    assert runs[1]["error"] is None and runs[3]["panes"] == {"ON_TIME": 3}
    assert runs[2]["error"].startswith(f"damaged record {path}: not a JSON document")


def test_a_partitions_state_that_cannot_be_read_as_one_flags_its_pipeline(client, store, token, tmp_path):
    store.write_pipeline_state("daily", {"units": [""], "spec": "nonsense", "state": {}, "processed_until_ms": 5})
    [daily] = overview_rows(client, token)["partition_pipelines"]
    path = tmp_path / "store" / "pipelines" / "daily" / "state.json"
    assert daily["pipeline"] == "daily" and daily["error"].startswith(f"damaged record {path}: ")
    assert daily["strip"] == {}


# ------------------------------------------------------------------------------------------------- the page


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(app):
    """The plugin's app on a loopback port (uvicorn in a thread), as a browser reaches it."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser():
    if CHROMIUM is None:
        # never a silent skip: `make test` (the README's test command) installs the browser first
        pytest.fail("the page test needs Debian's chromium: run `make browser` (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_page_marks_the_damaged_stream_and_pipeline_and_still_shows_the_healthy_ones(
    served, browser, store, token, tmp_path
):
    publish(store, *records("payments", 1000, 2000))
    windowed_pipeline(store, "revenue", 2)
    latest = damage(tmp_path / "store" / "streams" / "payments" / "latest.json", b'{"stream": "paym')
    state = damage(tmp_path / "store" / "pipelines" / "daily" / "state.json", b"garbage")
    manifest = damage(tmp_path / "store" / "pipelines" / "revenue" / "runs" / "v1" / "manifest.json", b"[]")
    context = browser.new_context()
    context.add_cookies([{"name": "_token", "value": token, "url": served}])
    page = context.new_page()
    page.goto(f"{served}/wm/?stream=payments")
    page.wait_for_selector("body[data-loaded]", timeout=30_000)
    assert page.locator("body").get_attribute("data-loaded") == "true", page.locator("#error").inner_text()

    orders = page.locator("#streams tbody tr[data-stream=orders]")
    assert orders.locator("td.lower").inner_text() == "1970-01-01T00:00:05Z"
    assert orders.locator(".damaged-flag").count() == 0
    payments = page.locator("#streams tbody tr[data-stream=payments]")
    assert payments.get_attribute("data-damaged") == "true" and "damaged" in payments.get_attribute("class")
    flag = payments.locator(".damaged-flag")
    assert flag.is_visible() and flag.inner_text().lower() == "damaged"
    assert payments.locator("td.problem").inner_text().startswith(f"damaged record {latest}: not a JSON document")
    assert payments.locator("td.lower").inner_text() == "1970-01-01T00:00:02Z (from the log)"
    assert page.locator("#chart path[data-series=watermark]").get_attribute("data-points") == "2"

    daily = page.locator("#damaged-pipelines section[data-pipeline=daily]")
    assert daily.locator(".damaged-flag").is_visible()
    assert daily.locator("p.problem").inner_text().startswith(f"damaged record {state}: ")
    run = page.locator("#pipeline-revenue table.runs tbody tr[data-damaged=true]")
    assert run.count() == 1 and run.locator(".damaged-flag").is_visible()
    assert run.locator("td.problem").inner_text().startswith(f"damaged record {manifest}: holds a JSON list")
    assert page.locator("#pipeline-revenue table.runs tbody tr").count() == 2
    banner = page.locator("#damaged")
    assert banner.get_attribute("data-count") == "3" and banner.is_visible(), banner.inner_text()
    assert "payments" in banner.inner_text() and "daily" in banner.inner_text()


def test_a_pipeline_and_a_controller_with_their_state_in_an_asset_state_store_link_to_their_asset_pages(
    client, served, browser, store, token
):
    from airflow.models.asset import AssetModel
    from airflow.sdk import Asset, task
    from airflow.utils.session import create_session

    from airflow_provider_wm.state import ControllerCutoff, WindowedState, commit_cutoff, commit_windowed_state
    from tests.airflow_helpers import fresh_dag, run_dag

    windowed_pipeline(store, "revenue", 1)
    windowed_pipeline(store, "no_asset", 1)
    store.write_stream_status("orders", {"stream": "orders", "status": "EMITTED", "controller": "page_controller"})
    revenue = Asset(name="page_revenue", uri="file:///lake/revenue")
    streams = Asset(name="page_streams", uri="file:///lake/store/streams")
    dag = fresh_dag("page_assets")
    with dag:

        @task(outlets=[revenue, streams])
        def commit(asset_state_store: Any = None) -> None:  # the operators' own commit path
            state = WindowedState("revenue", 1, "run1", "2026-01-01T00:00:00+00:00", None, 1000, None, 1000, {})
            commit_windowed_state(state, None, asset_state_store[revenue])
            cutoff = ControllerCutoff("page_controller", 1, 5000, "/x", "run1", "2026-01-01T00:00:00+00:00")
            commit_cutoff(cutoff, None, asset_state_store[streams])

        commit()
    _run, states = run_dag(dag)
    assert states == {"commit": "success"}
    with create_session() as session:
        ids = {a.name: a.id for a in session.query(AssetModel).filter(AssetModel.name.like("page_%"))}

    rows = overview_rows(client, token)
    windowed = {row["pipeline"]: row["asset"] for row in rows["windowed_pipelines"]}
    assert windowed == {
        "revenue": {"id": ids["page_revenue"], "name": "page_revenue", "uri": "file:///lake/revenue"},
        "no_asset": None,
    }
    orders = next(row for row in rows["streams"] if row["stream"] == "orders")
    assert orders["asset"] == {"id": ids["page_streams"], "name": "page_streams", "uri": "file:///lake/store/streams"}

    context = browser.new_context()
    context.add_cookies([{"name": "_token", "value": token, "url": served}])
    page = context.new_page()
    page.goto(f"{served}/wm/")
    page.wait_for_selector("body[data-loaded]", timeout=30_000)
    link = page.locator("#pipeline-revenue h3 a.asset")
    assert link.inner_text() == "asset page_revenue" and link.get_attribute("target") == "_top"
    assert page.evaluate("href => new URL(href, location.href).href", link.get_attribute("href")) == (
        f"{served}/assets/{ids['page_revenue']}"
    )
    assert page.locator("#pipeline-no_asset h3 a.asset").count() == 0
    assert page.locator("#streams tbody tr[data-stream=orders] a.asset").inner_text() == "asset page_streams"

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    no_role = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="guest", role=None))
    hidden = overview_rows(client, no_role)  # signed in, but may read no asset: no link, no name, no URI
    assert [row["asset"] for row in hidden["windowed_pipelines"]] == [None, None]
    assert all(row["asset"] is None for row in hidden["streams"])


def test_a_derived_stream_behind_its_upstream_is_explained_by_its_dags_sensor_that_timed_out(
    client, store, token, tmp_path
):
    from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor
    from tests.airflow_helpers import fresh_dag, run_dag

    jan = datetime(2026, 1, 1, tzinfo=UTC)
    ms = int(jan.timestamp() * 1000)
    store.publish({"stream": "clicks", "lower_ms": ms + 12 * 3_600_000, "upper_ms": ms + 12 * 3_600_000,
                   "computed_at_ms": ms + 12 * 3_600_000, "controller": "marks"})  # fmt: skip
    with fresh_dag("sessions") as dag:
        StreamWatermarkSensor(
            task_id="wait_for_clicks", stream="clicks", store_path=store.base_path, threshold=ms + 13 * 3_600_000,
            poke_interval=0.2, timeout=1, mode="poke", soft_fail=True,
        )  # fmt: skip
    store.publish({"stream": "sessions", "lower_ms": ms + 9 * 3_600_000, "upper_ms": ms + 9 * 3_600_000,
                   "computed_at_ms": ms + 9 * 3_600_000, "pipeline": "sessions", "upstream": "clicks",
                   "dag_id": dag.dag_id})  # fmt: skip
    _, states = run_dag(dag, jan + timedelta(hours=13))
    assert states == {"wait_for_clicks": "skipped"}

    rows = {
        row["stream"]: row
        for row in client.get("/wm/api/overview", headers={"Authorization": f"Bearer {token}"}).json()["streams"]
    }
    reason = rows["sessions"]["behind_reason"]
    assert reason.startswith(f"3h behind clicks: sensor wait_for_clicks of DAG {dag.dag_id} was skipped at "), reason
    assert reason.endswith("in the run of the interval ending 2026-01-01T13:00:00.000Z"), reason
    assert rows["clicks"]["behind_reason"] is None


def test_rows_of_dags_the_user_may_not_read_are_left_out_and_rows_naming_no_dag_stay():
    from airflow_provider_wm.plugins.watermarks import readable_rows

    data = {
        "streams": [{"stream": "a", "dag_id": "ingest"}, {"stream": "b", "dag_id": "secret"}, {"stream": "c"}],
        "partition_pipelines": [{"pipeline": "p", "dag_id": "secret"}],
        "windowed_pipelines": [{"pipeline": "w", "dag_id": None}],
        "now_ms": 5,
    }
    shown = readable_rows(data, {"ingest"})
    assert [r["stream"] for r in shown["streams"]] == ["a", "c"]
    assert shown["partition_pipelines"] == [] and shown["windowed_pipelines"] == [{"pipeline": "w", "dag_id": None}]
    assert shown["now_ms"] == 5
