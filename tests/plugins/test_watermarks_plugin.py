"""The plugin's app under Airflow's real authentication (SimpleAuthManager JWTs), on a store written by the hook."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook

ROUTES = ["/wm/", "/wm/api/overview", "/wm/api/streams/orders/history"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__WM__STORE_PATH", str(tmp_path / "store"))
    hook = WatermarkStoreHook(str(tmp_path / "store"))
    for i in range(1, 6):
        hook.publish({"stream": "orders", "lower_ms": i * 1000, "upper_ms": i * 1000, "computed_at_ms": i * 1000 + 500})
    hook.write_stream_status("orders", {"stream": "orders", "status": "EMITTED", "active_writers": 3, "idle": False})
    return hook


@pytest.fixture
def client(airflow_db):
    from airflow.api_fastapi.app import init_auth_manager
    from fastapi import FastAPI

    from airflow_provider_wm.plugins.watermarks import WatermarksPlugin

    root = FastAPI()
    init_auth_manager(root)
    [entry] = WatermarksPlugin.fastapi_apps
    root.mount(entry["url_prefix"], entry["app"])
    return TestClient(root)


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
    assert (orders["stream"], orders["lower_ms"], orders["writers"], orders["idle"]) == ("orders", 5000, 3, False)
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
