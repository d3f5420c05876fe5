"""The page's fixtures (an authenticated app, uvicorn on a loopback port, headless Chromium), shared by the
plugin's test modules; they are defined beside the tests that first needed them."""

from tests.plugins.test_watermarks_plugin import app, browser, client, served, token  # noqa: F401
