"""The Watermarks page: an Airflow plugin with a FastAPI app under ``/wm`` and an entry in the UI's navigation.

Registered through the ``airflow.plugins`` entry point of this package (a provider's own ``plugins`` key is not
loaded by default). The API server mounts the app; the UI embeds the page (``/plugin/watermarks``).

- ``GET /wm/`` the page (HTML and a small script that draws the chart as SVG);
- ``GET /wm/api/overview`` every stream's latest watermark and status, every pipeline's state, and the Airflow
  asset of each controller and pipeline that has one (``asset``: ``{"id", "name", "uri"}``, else None);
- ``GET /wm/api/streams/<stream>/history?points=400`` a stream's watermark and lag over time, downsampled on
  the server (a log of 100,000 watermarks answers with at most ``points`` points).

A damaged record in the store never takes the listing down: ``/wm/api/overview`` answers for every healthy stream
and pipeline and flags the damaged one (its row's ``error`` is ``damaged record <path>: <reason>``; the page marks
the row). A route for one stream that meets a damaged record answers 500 with that message as JSON ``detail``.

Every route needs an authenticated Airflow user (Airflow's own ``get_user`` dependency: the UI's session cookie
or a bearer token); an anonymous request gets 401. Stream and pipeline names are checked like every name of the
store, so no request reaches outside it.

The store is ``[wm] store_path`` (``AIRFLOW__WM__STORE_PATH``), else the ``wm_store_default`` connection. A
pipeline's asset is the active asset whose state store holds its committed state (the key
``controller_cutoff/<name>``, ``partition_state/<name>`` or ``windowed_state/<name>``, see
:mod:`airflow_provider_wm.state`); the page links it to the asset's page in the Airflow UI (``assets/<id>``).
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep, get_user
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from sqlalchemy import or_, select

from airflow_provider_wm.hooks.watermark_store import DamagedRecordError, WatermarkStoreHook
from airflow_provider_wm.links import PAGE_PATH
from airflow_provider_wm.plugins.views import explain_with_sensors, overview, stream_history
from airflow_provider_wm.state import CONTROLLER_STATE, PIPELINE_STATE, WINDOWED_STATE

__all__ = ["WatermarksPlugin", "create_app", "latest_sensors"]

MAX_CHART_POINTS = 2000


def configured_store() -> WatermarkStoreHook:
    """The store the page shows: ``[wm] store_path``, else the ``wm_store_default`` connection."""
    from airflow.configuration import conf

    base_path = conf.get("wm", "store_path", fallback=None)
    if base_path:
        return WatermarkStoreHook(base_path)
    try:
        return WatermarkStoreHook(wm_store_conn_id=WatermarkStoreHook.default_conn_name)
    except Exception as error:  # AirflowNotFoundException, or a connection without a path
        raise HTTPException(
            status_code=503,
            detail=f"no watermark store configured: set [wm] store_path (AIRFLOW__WM__STORE_PATH) or the "
            f"{WatermarkStoreHook.default_conn_name!r} connection ({error})",
        ) from None


Store = Annotated[WatermarkStoreHook, Depends(configured_store)]


@cache
def _page() -> str:
    return resources.files("airflow_provider_wm.plugins").joinpath("static/watermarks.html").read_text("utf-8")


def _bad_name(error: ValueError) -> HTTPException:
    return HTTPException(status_code=400, detail=str(error))


def _damaged(_: Request, error: Exception) -> JSONResponse:
    """A damaged record met by a route for one stream: a JSON 500 that names the record's path."""
    return JSONResponse(status_code=500, content={"detail": str(error)})


def create_app() -> FastAPI:
    """The plugin's app: every route behind Airflow's authentication."""
    # no /docs, /redoc or /openapi.json: FastAPI serves them outside the app's auth dependency
    app = FastAPI(title="Watermarks", dependencies=[Depends(get_user)], docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(DamagedRecordError, _damaged)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return _page()

    @app.get("/api/overview")
    def api_overview(store: Store, user: GetUserDep) -> dict[str, Any]:
        data = overview(store, int(time.time() * 1000))
        named = {str(row["dag_id"]) for table in ROW_TABLES for row in data[table] if row.get("dag_id")}
        readable = get_auth_manager().filter_authorized_dag_ids(dag_ids=named, user=user) if named else set()
        data = readable_rows(data, readable)
        behind = {str(row["dag_id"]) for row in data["streams"] if row["behind_upstream_ms"] and row.get("dag_id")}
        explain_with_sensors(data["streams"], latest_sensors(behind))
        return with_assets(data, readable_assets(state_assets(), user))

    @app.get("/api/streams/{stream}/history")
    def api_stream_history(
        store: Store, stream: str, user: GetUserDep, points: Annotated[int, Query(ge=1, le=MAX_CHART_POINTS)] = 400
    ) -> dict[str, Any]:
        try:
            history = stream_history(store, stream, points)
            dag_id = history.get("dag_id")
            if dag_id and not get_auth_manager().filter_authorized_dag_ids(dag_ids={dag_id}, user=user):
                raise HTTPException(status_code=404, detail=f"stream={stream!r}: no such stream")
            return history
        except DamagedRecordError:
            raise  # the store's damage, not a bad name: answered by _damaged
        except ValueError as error:
            raise _bad_name(error) from None

    return app


ROW_TABLES = ("streams", "partition_pipelines", "windowed_pipelines")
"""The overview's tables whose rows may name the DAG that wrote them (``dag_id``)."""


def readable_rows(data: dict[str, Any], readable_dag_ids: set[str]) -> dict[str, Any]:
    """``data`` (the overview) without the rows whose DAG the user may not read, as Airflow's own pages hide
    them; a row that names no DAG (a stream of producers outside Airflow, a state written by an older version)
    stays.

    >>> readable_rows({"streams": [{"dag_id": "a"}, {"dag_id": "b"}, {"dag_id": None}], "partition_pipelines": [],
    ...                "windowed_pipelines": []}, {"a"})["streams"]
    [{'dag_id': 'a'}, {'dag_id': None}]
    """
    return {
        **data,
        **{
            table: [row for row in data[table] if not row.get("dag_id") or row["dag_id"] in readable_dag_ids]
            for table in ROW_TABLES
        },
    }


def latest_sensors(dag_ids: set[str], runs: int = 5) -> dict[str, dict[str, Any]]:
    """The latest sensor task instance that has a state (an operator whose class name ends in ``Sensor``) of
    each DAG, among its ``runs`` latest runs (newest first: ``run_after``, then the run's id), as
    :func:`~airflow_provider_wm.plugins.views.sensor_cause` reads it. Asked only for the DAGs of streams flagged
    behind their upstream that the user may read; two small indexed queries per DAG, whatever its history."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    def ms(moment: Any) -> int | None:
        return None if moment is None else int(moment.timestamp() * 1000)

    found: dict[str, dict[str, Any]] = {}
    with create_session() as session:
        for dag_id in sorted(dag_ids):
            latest_runs = session.scalars(  # a list, not a subquery: MySQL has no LIMIT inside IN (...)
                select(DagRun.run_id)
                .where(DagRun.dag_id == dag_id)
                .order_by(DagRun.run_after.desc(), DagRun.id.desc())
                .limit(runs)
            ).all()
            row = session.execute(
                select(TaskInstance.task_id, TaskInstance.state, TaskInstance.start_date, TaskInstance.end_date,
                       DagRun.data_interval_end)
                .join(DagRun, (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id))
                .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id.in_(latest_runs),
                       TaskInstance.operator.like("%Sensor"), TaskInstance.state.is_not(None))
                .order_by(DagRun.run_after.desc(), DagRun.id.desc(), TaskInstance.start_date.desc().nulls_last(),
                          TaskInstance.task_id, TaskInstance.map_index)
                .limit(1)
            ).first()  # fmt: skip
            if row is not None:
                task_id, state, start, end, interval_end = row
                found[dag_id] = {
                    "dag_id": dag_id,
                    "task_id": task_id,
                    "state": getattr(state, "value", state),  # a TaskInstanceState, or None before it is scheduled
                    "start_ms": ms(start),
                    "end_ms": ms(end),
                    "interval_end_ms": ms(interval_end),
                }
    return found


def state_assets() -> dict[tuple[str, str], dict[str, Any]]:
    """The asset of each controller and pipeline whose committed state is in an asset state store, by (state key,
    name), e.g. ``{("windowed_state", "orders_15m"): {"id": 3, "name": "orders_15m", "uri": "file:///..."}}``."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    prefixes = [kind.asset_key for kind in (CONTROLLER_STATE, PIPELINE_STATE, WINDOWED_STATE)]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    with create_session() as session:
        rows = session.execute(
            select(AssetModel.id, AssetModel.name, AssetModel.uri, AssetStateStoreModel.key)
            .join(AssetStateStoreModel, AssetStateStoreModel.asset_id == AssetModel.id)
            .where(or_(*(AssetStateStoreModel.key.startswith(f"{p}/") for p in prefixes)), AssetModel.active.has())
            .order_by(AssetModel.id)
        )
        for asset_id, name, uri, key in rows:
            prefix, owner = key.split("/", 1)  # the state key names its owner: "windowed_state/orders_15m"
            found.setdefault((prefix, owner), {"id": asset_id, "name": name, "uri": uri})
    return found


def readable_assets(assets: dict[tuple[str, str], dict[str, Any]], user: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """``assets`` without those the user may not read (the auth manager's ``is_authorized_asset``, as Airflow's
    own asset pages ask it): a user without access to an asset sees no link to it, nor its name and URI."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails

    auth = get_auth_manager()
    allowed: dict[int, bool] = {}
    for asset in assets.values():
        if asset["id"] not in allowed:
            details = AssetDetails(id=str(asset["id"]))
            allowed[asset["id"]] = auth.is_authorized_asset(method="GET", user=user, details=details)
    return {owner: asset for owner, asset in assets.items() if allowed[asset["id"]]}


def with_assets(data: dict[str, Any], assets: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """``data`` (the overview) with ``asset`` on every row: a stream's is its controller's or its pipeline's."""
    for row in data["streams"]:  # a controller's stream, or a pipeline's output stream
        owners = [(CONTROLLER_STATE.asset_key, row.get("controller"))]
        owners += [(kind.asset_key, row.get("pipeline")) for kind in (PIPELINE_STATE, WINDOWED_STATE)]
        row["asset"] = next((assets[owner] for owner in owners if owner in assets), None)
    for row in data["partition_pipelines"]:
        row["asset"] = assets.get((PIPELINE_STATE.asset_key, row["pipeline"]))
    for row in data["windowed_pipelines"]:
        row["asset"] = assets.get((WINDOWED_STATE.asset_key, row["pipeline"]))
    return data


class WatermarksPlugin(AirflowPlugin):
    name = "watermarks"
    fastapi_apps = [{"app": create_app(), "url_prefix": PAGE_PATH.rstrip("/"), "name": "Watermarks"}]
    external_views = [
        {
            "name": "Watermarks",
            "href": PAGE_PATH.lstrip("/"),  # relative to the API server's base URL, which may have a path
            "destination": "nav",
            "url_route": "watermarks",
            "category": "browse",
        }
    ]
