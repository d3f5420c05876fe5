"""The controller-watermark job's spark-submit entry point: ``controller_watermark.py <request.json URL>``.

The job itself is the package :mod:`spark_jobs.controller` (``run(spark, request) -> manifest``).
"""

from __future__ import annotations

import sys

from spark_jobs.controller import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    sys.exit(main())
