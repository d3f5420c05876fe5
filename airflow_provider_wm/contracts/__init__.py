"""Typed contracts for everything that crosses a process or run boundary: each Spark job's request and
manifest, the records of the watermark store, and what a sensor returns. Pure Python: no airflow, no pyspark.

A job is ``run(spark, request) -> manifest``; in submit mode the request travels as ``request.json`` and the
manifest comes back as ``manifest.json`` (:data:`REQUEST_NAME`, :data:`MANIFEST_NAME`), in connect mode both
stay Python objects, and the manifest is written to the same place, so both modes leave the same files.
"""

from __future__ import annotations

from airflow_provider_wm.contracts.codec import Contract, ContractError
from airflow_provider_wm.contracts.controller import (
    ControllerManifest,
    ControllerRequest,
    ControllerTotals,
    StreamEntry,
)
from airflow_provider_wm.contracts.jobs import (
    DRIVER_OUTPUT_ROWS,
    MANIFEST_NAME,
    REQUEST_NAME,
    JobFailure,
    JobManifest,
    JobRequest,
    UnreadableFile,
    parse_manifest,
)
from airflow_provider_wm.contracts.partitions import (
    PartitionsManifest,
    PartitionsRequest,
    PartitionsTotals,
    WorkUnitOutcome,
    WorkUnitRequest,
)
from airflow_provider_wm.contracts.sensors import InputWatermark, WatermarkReached, describe_reached
from airflow_provider_wm.contracts.store import RoundWatermark, WatermarkRecord
from airflow_provider_wm.contracts.windowed import (
    PaneCounts,
    WindowedInput,
    WindowedManifest,
    WindowedRequest,
    WindowedTotals,
)

__all__ = [
    "DRIVER_OUTPUT_ROWS",
    "MANIFEST_NAME",
    "REQUEST_NAME",
    "Contract",
    "ContractError",
    "ControllerManifest",
    "ControllerRequest",
    "ControllerTotals",
    "InputWatermark",
    "JobFailure",
    "JobManifest",
    "JobRequest",
    "PaneCounts",
    "PartitionsManifest",
    "PartitionsRequest",
    "PartitionsTotals",
    "RoundWatermark",
    "StreamEntry",
    "UnreadableFile",
    "WatermarkReached",
    "WatermarkRecord",
    "WindowedInput",
    "WindowedManifest",
    "WindowedRequest",
    "WindowedTotals",
    "WorkUnitOutcome",
    "WorkUnitRequest",
    "describe_reached",
    "parse_manifest",
]
