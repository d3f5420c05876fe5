"""What the polling triggers share: their deadline arithmetic and how they report a failed read of the store.

A transient failure (:func:`~airflow_provider_wm.hooks.watermark_store.is_transient`) is a warning and the
trigger polls again; any other failure ends the wait with an ``error`` event that the sensor fails on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_wm.hooks.watermark_store import PipelineKindError, UnknownNameError

__all__ = ["error_event", "poll_delay", "seconds_left", "transient_warning"]


def seconds_left(timeout_at_ms: int | None, now_ms: float | None = None) -> float | None:
    """Seconds until the absolute deadline ``timeout_at_ms`` (negative once past it); ``None`` without one.

    >>> seconds_left(10_000, now_ms=7_500), seconds_left(None)
    (2.5, None)
    """
    if timeout_at_ms is None:
        return None
    return (timeout_at_ms - (time.time() * 1000 if now_ms is None else now_ms)) / 1000


def poll_delay(poll_interval: float, left: float | None) -> float:
    """How long to sleep before the next poll: ``poll_interval``, but never past the deadline, so the last poll
    (and the trigger's own timeout event) comes at the deadline rather than up to a poll interval after it.

    >>> poll_delay(60.0, 2.5), poll_delay(60.0, None), poll_delay(1.0, 30.0)
    (2.5, 60.0, 1.0)
    """
    return poll_interval if left is None else max(0.0, min(poll_interval, left))


def transient_warning(log: logging.Logger | Any, what: str, store_path: str, error: BaseException) -> str:
    """Log a read that failed for a transient reason as a warning; returns the error as the timeout event's
    ``last_error`` shows it: ``ConnectionError: connection reset by peer``."""
    shown = f"{type(error).__name__}: {error}"
    log.warning("%s: reading the store at %s failed (%s); reading again at the next poll", what, store_path, shown)
    return shown


def error_event(what: str, store_path: str, error: BaseException) -> TriggerEvent:
    """The event that ends a wait on a failure that polling cannot fix (a damaged record, a pipeline of the
    wrong kind): ``{"status": "error", "message", "no_retry"}``. ``no_retry`` is true when no retry of the task
    can fix it either (a wrong name or kind: the DAG must change), so the sensor fails without its retries."""
    no_retry = isinstance(error, PipelineKindError | UnknownNameError)
    message = f"{what}: reading the store at {store_path} failed: {type(error).__name__}: {error}"
    return TriggerEvent({"status": "error", "message": message, "no_retry": no_retry})
