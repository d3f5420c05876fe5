"""The Watermarks page at a glance, in headless Chromium against the plugin's app (uvicorn, real auth): lag
against expected progress, a derived stream behind its upstream flagged with why, time ticks, a long cut that
wraps, the most-lagging stream charted by default; screenshots in the light and the dark theme are saved to
``$WM_TEST_ARTIFACTS`` (default ``.artifacts/``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook

ARTIFACTS = Path(os.environ.get("WM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts"))
JAN = 1_767_225_600_000  # 2026-01-01T00:00:00Z, data months behind the wall clock
MIN, HOUR = 60_000, 3_600_000


@pytest.fixture
def january(tmp_path, monkeypatch):
    """A controller's ``clicks`` (a watermark per 15-minute round up to 12:00, a long stream cut) and the
    derived ``sessions``, whose pipeline last ran at 09:00."""
    monkeypatch.setenv("AIRFLOW__WM__STORE_PATH", str(tmp_path / "store"))
    store = WatermarkStoreHook(str(tmp_path / "store"))
    cut = {f"segment-{n:03d}": 1_000_000 + n for n in range(40)}
    for n in range(1, 49):
        round_ms = JAN + n * 15 * MIN
        store.publish({"stream": "clicks", "lower_ms": round_ms - 5 * MIN, "upper_ms": round_ms,
                       "computed_at_ms": round_ms, "controller": "marks", "stream_cut": cut})  # fmt: skip
    store.write_stream_status("clicks", {"stream": "clicks", "controller": "marks", "status": "EMITTED",
                                         "active_writers": 2, "checked_at_ms": JAN + 12 * HOUR})  # fmt: skip
    store.publish({"stream": "sessions", "lower_ms": JAN + 9 * HOUR, "upper_ms": JAN + 9 * HOUR,
                   "computed_at_ms": JAN + 9 * HOUR, "pipeline": "sessions", "upstream": "clicks"})  # fmt: skip
    return store


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_page_flags_a_derived_stream_behind_its_upstream_and_measures_lag_against_expected_progress(
    served, browser, january, token, theme
):
    context = browser.new_context(color_scheme=theme, viewport={"width": 1400, "height": 900})
    context.add_cookies([{"name": "_token", "value": token, "url": served}])
    page = context.new_page()
    page.goto(f"{served}/wm/")
    page.wait_for_selector("body[data-loaded]", timeout=30_000)
    assert page.locator("body").get_attribute("data-loaded") == "true", page.locator("#error").inner_text()

    clicks = page.locator("#streams tbody tr[data-stream=clicks]")
    assert clicks.locator("td.lag").inner_text().split("d ")[0].isdigit()  # wall-clock: months, in days
    assert clicks.locator("td.behind-expected").inner_text() == "5m"  # 12:00 round, watermark 11:55
    assert clicks.locator(".behind-flag").count() == 0 and clicks.get_attribute("data-behind") is None

    sessions = page.locator("#streams tbody tr[data-stream=sessions]")
    assert sessions.get_attribute("data-behind") == "true"
    badge = sessions.locator(".behind-flag")
    assert badge.is_visible() and badge.inner_text().lower() == "behind upstream"
    reason = "2h 55m behind clicks: pipeline sessions last ran at 2026-01-01T09:00:00.000Z; clicks has been " \
        "computed up to 2026-01-01T12:00:00.000Z since"  # fmt: skip
    assert badge.get_attribute("title") == reason
    assert sessions.locator(".behind-reason").inner_text() == reason

    # no ?stream=: the chart shows the most-lagging stream, the derived one behind its upstream
    assert page.locator("#chart-title").inner_text() == "Watermark and lag: sessions"
    assert sessions.get_attribute("class").split().count("selected") == 1
    clicks.locator("a").first.click()
    page.wait_for_function("document.querySelector('#chart-title').textContent.endsWith('clicks')")
    assert page.locator("#chart path[data-series=watermark]").get_attribute("data-points") == "48"
    ticks = page.locator("#chart text.axis-time").all_text_contents()  # 00:15 .. 12:00: every 3 hours
    assert ticks == ["03:00", "06:00", "09:00", "12:00"], ticks
    assert page.locator("#chart text.axis-wm").count() == 3 and page.locator("#chart text.axis-lag").count() == 3

    cut = clicks.locator("td.cut")
    box, width = cut.bounding_box(), page.evaluate("document.documentElement.clientWidth")
    assert box is not None and box["x"] + box["width"] <= width and 40 < box["height"] < 150, (box, width)
    assert "segment-039" in cut.text_content()  # all of it, a scroll away
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")

    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == ("rgb(255, 255, 255)" if theme == "light" else "rgb(23, 25, 35)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"watermarks-page-glance-{theme}.png"), full_page=True)
    context.close()
