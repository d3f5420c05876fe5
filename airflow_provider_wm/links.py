"""The "Watermarks" extra link of every operator and sensor of this provider: to its place on the Watermarks page.

Airflow 3 evaluates a task's extra links on the worker when the task finishes and stores each in XCom; the UI
shows the stored URL. Each of our operators says where it belongs with ``watermarks_page_query``:

- a stream's sensor or reader: ``?stream=<stream>`` (its row and its chart);
- a controller: ``?controller=<controller>`` (its streams);
- a pipeline (windowed aggregate, incremental partitions, partition sensor): ``?pipeline=<pipeline>``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink, conf

__all__ = ["PAGE_PATH", "WatermarksLink", "watermarks_page_url"]

PAGE_PATH = "/wm/"
"""Where the plugin's FastAPI app serves the page, under the API server's base URL."""


def watermarks_page_url(query: dict[str, str], base_url: str = "") -> str:
    """``base_url`` + the page + ``query``.

    >>> watermarks_page_url({"stream": "orders"}, "http://localhost:8080/")
    'http://localhost:8080/wm/?stream=orders'
    """
    url = base_url.rstrip("/") + PAGE_PATH
    return f"{url}?{urlencode(query)}" if query else url


class WatermarksLink(BaseOperatorLink):
    """Links a task of ours to the stream or pipeline it waits for or produces on the Watermarks page."""

    name = "Watermarks"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        query = getattr(operator, "watermarks_page_query", None)
        params = dict(query()) if callable(query) else {}
        return watermarks_page_url(params, conf.get("api", "base_url", fallback="") or "")
