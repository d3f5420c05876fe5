"""Example: join two streams once both are complete for the hour, without letting a quiet one stall it.

Every hour, a sensor waits in the triggerer until the coalesced watermark of ``orders`` and ``refunds``
(the minimum over the streams that are not idle, Jet's rule) passes the run's ``data_interval_end``. A
stream whose watermark has not advanced for 45 minutes (by the run's logical time and the store's record
of when it last advanced) is idle and excluded; if both are idle the sensor waits (``when_all_idle="wait"``,
the safe default). The downstream task sees, in the sensor's XCom, which streams were idle and what each
one's watermark was.

The watermarks come from ``dags/example_stream_watermark.py``'s controller (same ``$WM_EXAMPLE_BASE``).
``python -m airflow_provider_wm.demo`` runs both: ``refunds`` goes quiet after 01:10 and holds the join back
while it lags; once it has not advanced for 45 minutes it is excluded and the join keeps up with ``orders``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable, task

from airflow_provider_wm.demo.schedule import demo_schedule
from airflow_provider_wm.sensors.stream_watermark import StreamWatermarkSensor

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
START = datetime(2026, 1, 5, tzinfo=UTC)

with DAG(
    dag_id="example_joined_streams",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    **demo_schedule(START, timedelta(hours=1), last=START + timedelta(hours=3), end=START + timedelta(hours=4)),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=5)},  # e.g. a lost worker, a conflict
    tags=["example", "watermark"],
    doc_md=__doc__,
) as dag:
    # --8<-- [start:sensor]
    both_complete = StreamWatermarkSensor(
        task_id="orders_and_refunds_complete",
        streams=["orders", "refunds"],
        # the streams come from another DAG's controller, which may not have run yet on a new deployment
        fail_on_unknown_stream=False,
        store_path=f"{BASE}/store",
        idle_timeout=timedelta(minutes=45),
        when_all_idle="wait",
        deferrable=True,
        poke_interval=2,
        timeout=int(os.environ.get("WM_EXAMPLE_SENSOR_TIMEOUT", "600")),
        soft_fail=True,
    )
    # --8<-- [end:sensor]

    # --8<-- [start:downstream]
    @task
    def join_orders_and_refunds(progress: dict[str, Any]) -> str:
        """Downstream work over the interval; here it reports what the sensor decided and why."""
        idle = ", ".join(progress["idle"]) or "none"
        upto = datetime.fromtimestamp(progress["watermark_ms"] / 1000, tz=UTC).isoformat()
        message = f"joining up to {upto}; idle streams excluded: {idle}"
        print(message)
        return message

    join_orders_and_refunds(both_complete.output)
    # --8<-- [end:downstream]
