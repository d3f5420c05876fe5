"""Rule 3: where a windowed aggregate's watermark comes from (the store, the events, or merged inputs) and how
a run's watermark follows from it."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_wm.core.coalescing import check_policy
from airflow_provider_wm.core.names import column_name, stream_name

__all__ = [
    "BoundedOutOfOrderness",
    "MergedWatermark",
    "StoreWatermark",
    "WatermarkPolicy",
    "next_watermark",
    "upstream_streams",
]


@dataclass(frozen=True)
class StoreWatermark:
    """The watermark is a stream's watermark in the store (the controller's lower time); the stream (and its
    ``wm_key``) must be valid names.

    >>> StoreWatermark("a/b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: watermark.stream='a/b' is not a valid name: ...
    """

    stream: str
    wm_key: str | None = None

    def __post_init__(self) -> None:
        stream_name(self.stream, "watermark.stream")
        if self.wm_key is not None:
            stream_name(self.wm_key, "watermark.wm_key")


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """The watermark is the highest event time seen so far minus ``max_delay_ms``."""

    max_delay_ms: int

    def __post_init__(self) -> None:
        if isinstance(self.max_delay_ms, bool) or not isinstance(self.max_delay_ms, int) or self.max_delay_ms < 0:
            raise ValueError(f"watermark max_delay_ms={self.max_delay_ms!r} must be milliseconds >= 0")


@dataclass(frozen=True)
class MergedWatermark:
    """The watermark of merged inputs: the minimum of their streams' watermarks over the inputs that are not
    idle (an input whose watermark has not advanced for ``idle_timeout_ms``); when all are idle,
    ``when_all_idle`` says ``"wait"`` or ``"highest"`` (:mod:`airflow_provider_wm.core.coalescing`).
    ``inputs`` maps each input's name to its stream watermark."""

    inputs: tuple[tuple[str, StoreWatermark], ...]
    idle_timeout_ms: int | None = None
    when_all_idle: str = "wait"

    def __post_init__(self) -> None:
        if len(self.inputs) < 2:
            raise ValueError(f"inputs={[name for name, _ in self.inputs]} must name at least two inputs to merge")
        for name, policy in self.inputs:
            column_name(name, "inputs[]")
            if "__" in name or not isinstance(policy, StoreWatermark):
                raise ValueError(f"inputs[{name!r}]: a name without '__' and a stream watermark are needed")
        timeout = self.idle_timeout_ms
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0):
            raise ValueError(f"idle_timeout_ms={timeout!r} must be positive milliseconds (or None)")
        check_policy(self.when_all_idle)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)


WatermarkPolicy = StoreWatermark | BoundedOutOfOrderness | MergedWatermark


def next_watermark(
    policy: WatermarkPolicy, previous_ms: int | None, max_event_time_ms: int | None, source_ms: int | None
) -> int | None:
    """Rule 3: the run's watermark, never below the previous one.

    >>> next_watermark(BoundedOutOfOrderness(60_000), 100_000, 150_000, None)
    100000
    >>> next_watermark(StoreWatermark("orders"), None, None, 5)
    5
    """
    if isinstance(policy, BoundedOutOfOrderness):
        candidate = None if max_event_time_ms is None else max_event_time_ms - policy.max_delay_ms
    else:
        candidate = source_ms
    values = [v for v in (previous_ms, candidate) if v is not None]
    return max(values) if values else None


def upstream_streams(policy: WatermarkPolicy) -> str | None:
    """The streams a watermark follows, as a derived stream's record names its ``upstream``: one stream, the
    merged ones joined by ``", "``, or None for a watermark taken from the events.

    >>> upstream_streams(StoreWatermark("orders")), upstream_streams(BoundedOutOfOrderness(0))
    ('orders', None)
    >>> upstream_streams(MergedWatermark((("o", StoreWatermark("orders")), ("r", StoreWatermark("refunds")))))
    'orders, refunds'
    """
    if isinstance(policy, StoreWatermark):
        return policy.stream
    if isinstance(policy, MergedWatermark):
        return ", ".join(watermark.stream for _, watermark in policy.inputs)
    return None
