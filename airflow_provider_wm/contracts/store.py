"""Records of the watermark store (``streams/<stream>/latest.json`` and its log)."""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider_wm.contracts.codec import Contract

__all__ = ["RoundWatermark", "WatermarkRecord"]


@dataclass(frozen=True)
class RoundWatermark(Contract):
    """A stream's watermark as a controller round computed it: every event of ``(stream, wm_key)`` with a time
    below ``lower_ms`` has been written; ``stream_cut`` maps segment id (a JSON string) -> offset.

    >>> RoundWatermark("orders", None, 1_000, 1_500, {"0": 42}, 2_000).to_json()["stream_cut"]
    {'0': 42}
    """

    stream: str
    wm_key: str | None
    lower_ms: int
    upper_ms: int
    stream_cut: dict[str, int] = field(default_factory=dict)
    computed_at_ms: int = 0


@dataclass(frozen=True)
class WatermarkRecord(Contract):
    """One record of the store: a watermark and who published it. A controller's records carry
    ``controller`` and a ``stream_cut``; a derived stream's (an operator's output watermark) carry ``pipeline``
    and ``upstream`` and no cut. ``dag_id`` names the DAG whose task published it (the Watermarks page reads that
    DAG's sensors to say why a derived stream trails its upstream). ``published_at_ms`` is set by the store when
    it writes the record."""

    stream: str
    wm_key: str | None
    lower_ms: int
    upper_ms: int
    computed_at_ms: int
    run_id: str
    stream_cut: dict[str, int] | None = None
    controller: str | None = None
    pipeline: str | None = None
    upstream: str | None = None
    dag_id: str | None = None
    published_at_ms: int | None = None

    @classmethod
    def derived(
        cls, stream: str, watermark_ms: int, *, computed_at_ms: int, run_id: str, pipeline: str, dag_id: str | None,
        upstream: str | None = None,
    ) -> WatermarkRecord:  # fmt: skip
        """The record an operator publishes for its output stream: one time for both bounds, no cut."""
        return cls(stream=stream, wm_key=None, lower_ms=watermark_ms, upper_ms=watermark_ms,
                   computed_at_ms=computed_at_ms, run_id=run_id, pipeline=pipeline, upstream=upstream,
                   dag_id=dag_id)  # fmt: skip

    @classmethod
    def of(
        cls, watermark: RoundWatermark, *, run_id: str, controller: str, dag_id: str | None = None
    ) -> WatermarkRecord:
        """The record a controller publishes for a watermark of its round."""
        return cls(
            stream=watermark.stream,
            wm_key=watermark.wm_key,
            lower_ms=watermark.lower_ms,
            upper_ms=watermark.upper_ms,
            computed_at_ms=watermark.computed_at_ms,
            run_id=run_id,
            stream_cut=dict(watermark.stream_cut),
            controller=controller,
            dag_id=dag_id,
        )
