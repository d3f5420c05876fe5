"""OpenLineage for the stateful operators: input and output datasets and a ``watermark`` run facet.

The OpenLineage Spark listener does not support Spark Connect, so the operators report their lineage themselves:
:meth:`StatefulSparkOperator.get_openlineage_facets_on_complete` returns what :func:`operator_lineage` builds from
the run's :class:`RunLineage`. The OpenLineage provider (the ``openlineage`` extra) is imported only here, only
when the listener asks; without it the method returns None and nothing else changes.

A path becomes a dataset by OpenLineage's naming rules (:func:`dataset_name`): a local path is namespace
``file``, name the absolute path; ``s3://bucket/a/b`` is namespace ``s3://bucket``, name ``a/b``.

The run facet (``watermark``), for example after a windowed aggregate's run::

    {"kind": "windowed_aggregate", "name": "orders_15m", "version": 4,
     "watermark_ms": 1767229200000, "watermark": "2026-01-01T01:00:00.000Z",
     "cutoff_ms": 1767232800000, "cutoff": "2026-01-01T02:00:00.000Z",
     "stream_watermarks_ms": {"orders_15m": 1767229200000}, "late": 3, "quarantined": 1}

``cutoff`` is what the next run starts after (the controller's and partitions' ``processed_until``, the windowed
aggregate's ``arrival_until``); ``late`` counts input that came too late to be applied (too-late events, late
marks), ``quarantined`` the rows or marks set aside as invalid. A run covered by a later one reports the
committed state and ``covered_by``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_wm.timeutil import format_ms

__all__ = ["FACET_NAME", "RunLineage", "dataset_name", "operator_lineage"]

FACET_NAME = "watermark"
FACET_SCHEMA_URL = "urn:airflow-provider-wm:openlineage:WatermarkRunFacet:1"  # no published JSON schema (yet)


@dataclass(frozen=True)
class RunLineage:
    """What one run read, wrote and committed, as the operator reports it to OpenLineage."""

    kind: str
    name: str
    inputs: Sequence[str | None]
    outputs: Sequence[str | None]
    version: int | None
    cutoff_ms: int | None
    watermark_ms: int | None = None
    stream_watermarks_ms: dict[str, int] = field(default_factory=dict)
    late: int | None = None
    quarantined: int | None = None
    covered_by: str | None = None

    def facet_fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "covered_by": self.covered_by,
            "watermark_ms": self.watermark_ms,
            "watermark": format_ms(self.watermark_ms) if self.watermark_ms is not None else None,
            "cutoff_ms": self.cutoff_ms,
            "cutoff": format_ms(self.cutoff_ms) if self.cutoff_ms is not None else None,
            "stream_watermarks_ms": dict(self.stream_watermarks_ms),
            "late": self.late,
            "quarantined": self.quarantined,
        }


def dataset_name(path: str) -> tuple[str, str]:
    """(namespace, name) of a path or URL by OpenLineage's naming rules.

    >>> dataset_name("/data/orders/")
    ('file', '/data/orders')
    >>> dataset_name("file:///data/orders")
    ('file', '/data/orders')
    >>> dataset_name("s3://lake/orders/daily")
    ('s3://lake', 'orders/daily')
    """
    parts = urlsplit(path)
    if parts.scheme in ("", "file"):
        local = parts.path if parts.scheme else path
        return "file", os.path.abspath(local).rstrip("/") or "/"
    return f"{parts.scheme}://{parts.netloc}", parts.path.strip("/")


def operator_lineage(run: RunLineage | None) -> Any:
    """The provider's ``OperatorLineage`` for ``run``; None without the OpenLineage provider or before a run."""
    if run is None:
        return None
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
    except ImportError:
        return None

    def datasets(paths: Sequence[str | None]) -> list[Any]:
        unique = dict.fromkeys(dataset_name(p) for p in paths if p)
        return [Dataset(namespace=namespace, name=name) for namespace, name in unique]

    facet = _watermark_facet_class()(**run.facet_fields())
    return OperatorLineage(inputs=datasets(run.inputs), outputs=datasets(run.outputs), run_facets={FACET_NAME: facet})


@functools.cache
def _watermark_facet_class() -> type:
    """The ``watermark`` run facet class, defined on first use (it subclasses the OpenLineage client's RunFacet)."""
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class WatermarkRunFacet(RunFacet):  # type: ignore[misc]
        """The committed state of a watermark-driven pipeline after a run (airflow-provider-wm)."""

        kind: str
        name: str
        version: int | None
        covered_by: str | None
        watermark_ms: int | None
        watermark: str | None
        cutoff_ms: int | None
        cutoff: str | None
        stream_watermarks_ms: dict[str, int]
        late: int | None
        quarantined: int | None

        @staticmethod
        def _get_schema() -> str:
            return FACET_SCHEMA_URL

    return WatermarkRunFacet
