"""Transformations used by the incremental-partitions example (imported by the Spark job, on the driver).

``daily_orders`` is what a DAG author would write: a ``DataFrame -> DataFrame`` function that keeps the
work-unit columns. For the demo and the tests it can fail once, for one work unit, on purpose: when the
environment variable ``WM_FAIL_ONCE`` names a marker file holding ``<wm_partition> <unit>``, the first
job that sees the marker claims it (renames it) and fails that unit's rows with ``raise_error`` every time
it transforms them; the next attempt, a new job, finds no marker and succeeds. A job is a Spark application
in submit mode and a Spark Connect session in connect mode (each task attempt opens its own).
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

FAIL_ONCE_ENV = "WM_FAIL_ONCE"
_claims: dict[str, tuple[str, str]] = {}


def _failing_unit(frame: DataFrame) -> tuple[str, str] | None:
    """The (partition, unit) this job fails, claimed from the marker once per job."""
    job = str(getattr(frame.sparkSession, "session_id", None) or os.getpid())
    if job not in _claims:
        marker = os.environ.get(FAIL_ONCE_ENV)
        if not marker:
            return None
        claimed = Path(f"{marker}.claimed-{os.getpid()}-{len(_claims)}")
        try:
            Path(marker).rename(claimed)
        except FileNotFoundError:
            return None
        partition, unit = claimed.read_text().split()
        _claims[job] = (partition, unit)
    return _claims[job]


def daily_orders(frame: DataFrame) -> DataFrame:
    """Orders with their amount in EUR (2 decimals); keeps ``event_time`` and the work-unit columns."""
    out = frame.select(
        "order_id",
        "region",
        "event_time",
        F.round(F.col("amount") * F.lit(0.92), 2).alias("amount_eur"),
        "wm_partition",
        "wm_unit",
    )
    failing = _failing_unit(frame)
    if failing is not None:
        hit = (F.col("wm_partition") == failing[0]) & (F.col("wm_unit") == failing[1])
        out = out.withColumn(
            "amount_eur",
            F.when(hit, F.raise_error(F.lit("demo: upstream sent a broken file"))).otherwise(F.col("amount_eur")),
        )
    return out
