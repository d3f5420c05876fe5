"""Example: a report per written partition of the incremental-partitions pipeline, on its partitioned asset.

``example_incremental_partitions`` produces the asset ``orders_daily`` with ``emit_partition_keys=True``: each
successful run emits one asset event per work unit (day x region) it wrote, keyed ``<region>|<day start>``,
e.g. ``eu|2026-01-05T00:00:00``: the new days, and the days it re-read within its grace period for late
orders. This DAG is scheduled by ``PartitionedAssetTimetable``: Airflow maps each key with
``ProductMapper(IdentityMapper(), StartOfDayMapper())`` to ``eu|2026-01-05`` and starts one run per key, so a
day rewritten with late orders gets its report again. A run covered by a later one writes nothing and emits
no key. Each run reads its region's day from the target and reports its orders and revenue.

Data: ``$WM_EXAMPLE_BASE`` (default ``/tmp/airflow-provider-wm-example``), as in the partitions example.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

# --8<-- [start:report]
from airflow.sdk import DAG, Asset, IdentityMapper, PartitionedAssetTimetable, ProductMapper, StartOfDayMapper, task

BASE = os.environ.get("WM_EXAMPLE_BASE", "/tmp/airflow-provider-wm-example")
TARGET = f"{BASE}/orders_daily"

with DAG(
    dag_id="example_partition_report",
    schedule=PartitionedAssetTimetable(
        assets=Asset.ref(name="orders_daily"),
        # "eu|2026-01-05T00:00:00" -> "eu|2026-01-05": the region as it is, the time as its day
        default_partition_mapper=ProductMapper(IdentityMapper(), StartOfDayMapper()),
    ),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["example", "partitions", "assets"],
    doc_md=__doc__,
) as dag:
    # the next producer run may be rewriting this partition (a grace day) while it is read: try again
    @task(retries=2, retry_delay=timedelta(seconds=5))
    def report_partition(dag_run: Any = None) -> dict[str, Any]:
        """Orders and revenue of the run's region and day, read from that partition of the target."""
        import pyarrow.dataset as ds

        region, day = dag_run.partition_key.split("|")
        folder = datetime.strptime(day, "%Y-%m-%d").strftime("%Y%m%dT%H%M%SZ")  # the target's wm_partition
        table = ds.dataset(TARGET, format="parquet", partitioning="hive").to_table(
            filter=(ds.field("wm_partition") == folder) & (ds.field("wm_unit") == region), columns=["amount_eur"]
        )
        amounts = table.column("amount_eur").to_pylist()
        report = {"region": region, "day": day, "orders": len(amounts), "revenue_eur": round(sum(amounts), 2)}
        print(f"report of {dag_run.partition_key}: {report}")
        return report

    report_partition()
# --8<-- [end:report]
