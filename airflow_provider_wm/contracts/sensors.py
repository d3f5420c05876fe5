"""What a stream-watermark sensor returns (its XCom), the same shape for one stream or several."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_wm.contracts.codec import Contract
from airflow_provider_wm.core.coalescing import WatermarkCheck
from airflow_provider_wm.core.times import format_ms

__all__ = ["InputWatermark", "WatermarkReached", "describe_reached"]


@dataclass(frozen=True)
class InputWatermark(Contract):
    """One input (``"orders"`` or ``"orders:eu"``) as the sensor last read it from the store.

    :param lower_ms: its watermark (``None``: no record yet, which holds the coalesced watermark back).
    :param last_advanced_ms: when that watermark was computed (the record's ``computed_at_ms``).
    :param idle: not advanced for ``idle_timeout`` before the threshold: left out of the minimum.
    :param upper_ms: the highest time its writers reported; ``stream_cut``: segment -> offset of a
        controller's watermark (empty for a derived stream's).
    """

    lower_ms: int | None
    last_advanced_ms: int | None
    idle: bool
    upper_ms: int | None = None
    stream_cut: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WatermarkReached(Contract):
    """The sensor's result: the coalesced watermark (for one stream, that stream's) against the threshold,
    and why, per input.

    >>> reached = WatermarkReached(7_200_000, 7_200_000, False, [], [], {"orders": InputWatermark(7_200_000,
    ...     7_100_000, False, 7_250_000, {"0": 42})})
    >>> reached.passed, reached.streams["orders"].stream_cut
    (True, {'0': 42})
    """

    watermark_ms: int | None
    threshold_ms: int
    all_idle: bool
    idle: list[str]
    waiting: list[str]
    streams: dict[str, InputWatermark]

    @property
    def passed(self) -> bool:
        return self.watermark_ms is not None and self.watermark_ms >= self.threshold_ms

    @classmethod
    def of(cls, check: WatermarkCheck, records: Mapping[str, Mapping[str, Any] | None]) -> WatermarkReached:
        """A sensor's decision (:func:`~airflow_provider_wm.core.coalescing.check_watermarks`) with each input's
        upper bound and stream cut from the records it was made from."""
        streams = {}
        for label, seen in check.inputs.items():
            record = records.get(label) or {}
            upper = record.get("upper_ms")
            cut = record.get("stream_cut") or {}
            streams[label] = InputWatermark(
                seen.lower_ms,
                seen.last_advanced_ms,
                seen.idle,
                None if upper is None else int(upper),
                {str(segment): int(offset) for segment, offset in cut.items()},
            )
        return cls(
            check.watermark_ms, check.threshold_ms, check.all_idle, list(check.idle), list(check.waiting), streams
        )


def describe_reached(payload: Mapping[str, Any], when_all_idle: str | None = None) -> str:
    """One line from a :class:`~airflow_provider_wm.contracts.WatermarkReached` as JSON (or an event carrying
    its fields): the coalesced watermark against the threshold, then each input's watermark, when it last
    advanced and whether idle."""
    parts = []
    for label, state in dict(payload.get("streams") or {}).items():
        if state.get("lower_ms") is None:
            parts.append(f"{label}: no watermark yet")
            continue
        idle = "idle, " if state.get("idle") else ""
        parts.append(
            f"{label}: {idle}{format_ms(state['lower_ms'])} (advanced {format_ms(state.get('last_advanced_ms'))})"
        )
    line = (
        f"coalesced watermark {format_ms(payload.get('watermark_ms'))}, "
        f"threshold {format_ms(payload.get('threshold_ms'))}; {'; '.join(parts)}"
    )
    if payload.get("all_idle"):
        line += " - all streams idle" + (f" (when_all_idle={when_all_idle!r})" if when_all_idle else "")
    return line
