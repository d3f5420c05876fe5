"""What our store-reading sensors share: poke first, then defer to a trigger that keeps its own deadline."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, NoReturn

from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException
from airflow.triggers.base import BaseTrigger

from airflow_provider_wm.arguments import require_bool, store_path_argument, wait_seconds_argument

__all__ = ["DeferrableStoreSensor"]


class DeferrableStoreSensor(BaseSensorOperator):
    """A sensor whose ``poke`` reads one small document from the watermark store.

    Without ``deferrable`` it is a normal sensor (``poke`` or ``reschedule`` mode). With it, ``execute``
    pokes once, then hands the waiting to :meth:`trigger`, whose absolute deadline is ``now + timeout``; the
    deferral gets the same timeout (Airflow does not pass the sensor's own). A trigger's ``timeout`` event
    ends in :meth:`timed_out`: a skip with ``soft_fail``, else a sensor timeout. ``timeout`` and
    ``poke_interval`` are seconds or a timedelta, not negative; ``soft_fail`` and ``never_fail`` are ``True`` or
    ``False`` (``soft_fail="no"`` fails at parse time instead of skipping on every failure).
    """

    deferrable: bool
    store_path: str

    def __init__(self, **kwargs: Any) -> None:
        # before BaseSensorOperator's own checks, whose messages name neither the argument's value nor the task
        for argument in ("timeout", "poke_interval"):
            if kwargs.get(argument) is not None:
                wait_seconds_argument(kwargs[argument], argument)
        super().__init__(**kwargs)
        # as set, from the task's arguments or the DAG's default_args: BaseSensorOperator takes any value, and
        # soft_fail="no" is truthy: every failure would be a skip
        require_bool(soft_fail=self.soft_fail, never_fail=self.never_fail)

    def trigger(self, context: Context, timeout_at_ms: int) -> BaseTrigger:
        raise NotImplementedError

    def execute(self, context: Context) -> Any:
        store_path_argument(self.store_path)  # once more as rendered: a template is checked only now
        if not self.deferrable:
            return super().execute(context)
        try:
            first = self.poke(context)
        except AirflowFailException as failure:  # as a poke-mode sensor does: soft_fail skips on any failure
            self.failed(str(failure))
        if first.is_done:  # type: ignore[union-attr]
            return first.xcom_value  # type: ignore[union-attr]
        self.defer(
            trigger=self.trigger(context, int((time.time() + self.timeout) * 1000)),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=self.timeout),
        )

    def failed(self, message: str) -> NoReturn:
        """A failure that no retry can fix (a stream or pipeline the store has never seen): a skip with
        ``soft_fail``, else :class:`AirflowFailException`, which fails the task without using its retries."""
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowFailException(message)

    def timed_out(self, message: str) -> NoReturn:
        if self.soft_fail:
            raise AirflowSkipException(message)
        raise AirflowSensorTimeout(message)
