"""The incremental-partitions job's spark-submit entry point: ``incremental_partitions.py <request.json URL>``.

The job itself is the package :mod:`spark_jobs.partitions` (``run(spark, request) -> manifest``).
"""

from __future__ import annotations

import sys

from spark_jobs.partitions import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    sys.exit(main())
