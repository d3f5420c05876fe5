"""What our store-reading sensors share: poke first, then defer to a trigger that keeps its own deadline."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, NoReturn

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
)
from airflow.triggers.base import BaseTrigger

from airflow_provider_wm.arguments import location_argument, require_bool, wait_seconds_argument
from airflow_provider_wm.mapped import ChecksMappedArguments

__all__ = ["DEFERRAL_MARGIN", "DeferrableStoreSensor", "StoreReadError"]

DEFERRAL_MARGIN = 60.0
"""Seconds that Airflow's deferral timeout allows beyond the trigger's own deadline plus one poll interval: the
trigger's timeout event, which says what it last saw, then arrives first, and Airflow's bare ``TRIGGER_TIMEOUT``
only ends a trigger that got stuck."""


class StoreReadError(RuntimeError):
    """The trigger could not read the store for a reason that polling does not fix (a damaged record): the task
    fails with the trigger's message, as a poke-mode sensor whose ``poke`` raised would (retries apply)."""


class DeferrableStoreSensor(ChecksMappedArguments, BaseSensorOperator):
    """A sensor whose ``poke`` reads one small document from the watermark store.

    Without ``deferrable`` it is a normal sensor (``poke`` or ``reschedule`` mode). With it, ``execute``
    pokes once, then hands the waiting to :meth:`trigger`, whose absolute deadline is ``now + timeout``; the
    deferral gets that timeout plus one ``poke_interval`` and :data:`DEFERRAL_MARGIN` (Airflow does not pass
    the sensor's own), so that the trigger's informative ``timeout`` event comes first. That event ends in
    :meth:`timed_out`: a skip with ``soft_fail``, else a sensor timeout. The first poke is handled as
    Airflow's own sensors handle every poke: a failure (:class:`AirflowFailException`, a timeout) is a skip
    with ``soft_fail`` or ``never_fail``; any other error is logged and the sensor defers anyway with
    ``silent_fail``, is a skip with ``never_fail``, else fails the task. A read of the store that fails for a
    transient reason (:meth:`store_unavailable`) is not an error: the poke says "not yet". A trigger's
    ``error`` event ends in :meth:`store_error`. ``timeout`` and
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
        location_argument(self.store_path)  # once more as rendered: a template is checked only now
        if not self.deferrable:
            return super().execute(context)
        # the first poke, handled as BaseSensorOperator.execute handles each of its pokes
        try:
            first = self.poke(context)
        except (AirflowSensorTimeout, AirflowTaskTimeout, AirflowFailException) as failure:
            if self.soft_fail or self.never_fail:
                raise AirflowSkipException(
                    f"Skipping due to {'soft_fail' if self.soft_fail else 'never_fail'} is set to True: {failure}"
                ) from failure
            raise
        except AirflowSkipException:
            raise
        except Exception as error:
            if not self.silent_fail:
                if self.never_fail:
                    raise AirflowSkipException(f"Skipping due to never_fail is set to True: {error}") from error
                raise
            self.log.exception("Sensor poke failed (silent_fail: deferring anyway)")
            first = None
        if first:  # done (a PokeReturnValue is true when done)
            return first.xcom_value if isinstance(first, PokeReturnValue) else None
        self.defer(
            trigger=self.trigger(context, int((time.time() + self.timeout) * 1000)),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=self.timeout + self.poke_interval + DEFERRAL_MARGIN),
        )

    def interval_bound(self, context: Context, key: str, arguments: str) -> Any:
        """The run's ``key`` (``data_interval_start`` or ``data_interval_end``): the default of a sensor's time
        ``arguments``. A run without a data interval (an asset-triggered run, a manual run without a logical
        date) has none: a ``ValueError`` then says to pass the arguments."""
        value = context.get(key)
        if value is None:
            raise ValueError(
                f"task {self.task_id!r}: this run ({context.get('run_id')}) has no data interval ({key} is not set: "
                f"an asset-triggered run, or a manual run without a logical date), so there is no default for "
                f"{arguments}: pass {arguments} to the sensor"
            )
        return value

    def store_unavailable(self, error: BaseException) -> None:
        """Log a read of the store that failed for a transient reason (a network blip, a timeout, an unmounted
        store: :func:`~airflow_provider_wm.hooks.watermark_store.is_transient`) as a warning: the poke says "not
        yet", and the sensor reads again at the next poke, until its timeout."""
        self.log.warning(
            "Reading the store at %s failed (%s: %s); reading again at the next poke",
            self.store_path,
            type(error).__name__,
            error,
        )

    def store_error(self, event: dict[str, Any]) -> NoReturn:
        """A trigger's ``error`` event: a failure polling cannot fix. With ``no_retry`` (a wrong name or kind)
        it is :meth:`failed`; else :class:`StoreReadError` (a skip with ``never_fail``), as a poke that raised."""
        message = str(event.get("message"))
        if event.get("no_retry"):
            self.failed(message)
        if self.never_fail:
            raise AirflowSkipException(f"Skipping due to never_fail is set to True: {message}")
        raise StoreReadError(message)

    @staticmethod
    def last_error_note(event: dict[str, Any]) -> str:
        """What a timeout message adds when the trigger's last read failed: ``; the last read of the store failed:
        ConnectionError: ...`` (empty otherwise)."""
        last_error = event.get("last_error")
        return f"; the last read of the store failed: {last_error}" if last_error else ""

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
