"""Bench: the Watermarks page's history route on a stream with a 100,000-entry watermark log.

Publishes the first watermark through the store's ``publish`` and copies its log file under the names of
99,999 later ones (``publish`` fsyncs two files per watermark: minutes for 100,000), then times
``stream_history`` (list the log, parse the names, downsample to 400 points) against the native
baseline of listing the directory with ``os.listdir``, in the same run. Prints both and their ratio.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.plugins.views import stream_history

ENTRIES = 100_000
POINTS = 400
MINUTE = 60_000


def timed(function, repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as base:
        store = WatermarkStoreHook(base)
        start = 1_767_571_200_000
        store.publish({"stream": "orders", "lower_ms": start, "upper_ms": start, "computed_at_ms": start})
        log_dir = os.path.join(base, "streams", "orders", "log")
        [first] = os.listdir(log_dir)
        with open(os.path.join(log_dir, first), "rb") as handle:
            content = handle.read()
        for i in range(1, ENTRIES):
            t = start + i * MINUTE
            with open(os.path.join(log_dir, f"{t:015d}-{t - (i % 50) * 1000:015d}.json"), "wb") as handle:
                handle.write(content)
        history = stream_history(store, "orders", POINTS)
        assert history["entries"] == ENTRIES and len(history["points"]) <= POINTS
        route = timed(lambda: stream_history(store, "orders", POINTS))
        listing = timed(lambda: os.listdir(log_dir))
        print(
            f"history route, {ENTRIES} entries -> {len(history['points'])} points: {route * 1000:.0f} ms (median of 5)"
        )
        print(f"baseline os.listdir of the log:            {listing * 1000:.0f} ms")
        print(f"ratio route / listing: {route / listing:.1f}")


if __name__ == "__main__":
    main()
