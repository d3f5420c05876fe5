"""The windowed-aggregate job's spark-submit entry point: ``windowed_aggregate.py <request.json URL>``.

The job itself is the package :mod:`spark_jobs.windowed` (``run(spark, request) -> manifest``).
"""

from __future__ import annotations

import sys

from spark_jobs.windowed import main, run, run_request

__all__ = ["main", "run", "run_request"]

if __name__ == "__main__":
    sys.exit(main())
