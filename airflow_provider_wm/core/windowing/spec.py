"""What a windowed aggregate computes and when it fires (:class:`AggregationSpec`), validated at construction and
carried to the Spark job as JSON; a rollup's upstream (:class:`UpstreamPanes`) is part of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_wm.core.names import column_name, stream_name
from airflow_provider_wm.core.windowing.aggregates import OUTPUT_COLUMNS, Aggregate, SqlAggregate
from airflow_provider_wm.core.windowing.lateness import LateData
from airflow_provider_wm.core.windowing.modes import Accumulation, enum_member
from airflow_provider_wm.core.windowing.watermark import (
    BoundedOutOfOrderness,
    MergedWatermark,
    StoreWatermark,
    WatermarkPolicy,
)
from airflow_provider_wm.core.windows import Session, Tumbling, Window, WindowFn, window_from_json

__all__ = ["CARRIED_OVER", "AggregationSpec", "UpstreamPanes"]

CARRIED_OVER = ("window", "keys", "aggregates", "accumulation", "upstream")
"""The spec fields a pipeline's stored open windows depend on: none may change between its runs."""


@dataclass(frozen=True)
class UpstreamPanes:
    """The windowed aggregate whose panes a rollup reads (window propagation): its pipeline, its window and
    its accumulation mode (which panes are live, see the module docstring), an :class:`Accumulation` or its
    value in any case.

    >>> UpstreamPanes("orders_5m", Tumbling(300_000), "accumulating").accumulation
    <Accumulation.ACCUMULATING: 'ACCUMULATING'>
    >>> UpstreamPanes("orders_5m", Session(60_000), Accumulation.ACCUMULATING)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: upstream window Session(gap_ms=60000) merges windows: a rollup needs fixed windows (...)
    """

    pipeline: str
    window: WindowFn
    accumulation: Accumulation = Accumulation.ACCUMULATING

    def __post_init__(self) -> None:
        stream_name(self.pipeline, "upstream.pipeline")
        if not isinstance(self.window, WindowFn):
            raise ValueError(f"upstream window={self.window!r} must be a Tumbling, Sliding or Global window")
        if self.window.merging:
            raise ValueError(
                f"upstream window {self.window!r} merges windows: a rollup needs fixed windows (tumbling, sliding or "
                "global)"
            )
        object.__setattr__(self, "accumulation", enum_member(self.accumulation, Accumulation, "upstream.accumulation"))

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "window": self.window.to_json(), "accumulation": self.accumulation.value}

    def differs_from(self, committed_spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """A rollup reads the upstream's panes as declared: ``(declared, actual)`` window and accumulation when
        the upstream's committed spec (JSON) says otherwise, else ``None``.

        >>> panes = UpstreamPanes("orders_5m", Tumbling(300_000))
        >>> panes.differs_from({"window": Tumbling(300_000).to_json(), "accumulation": "ACCUMULATING"}) is None
        True
        >>> panes.differs_from({"window": Tumbling(60_000).to_json(), "accumulation": "ACCUMULATING"})[1]["window"]
        {'kind': 'tumbling', 'size_ms': 60000, 'offset_ms': 0}
        """
        declared = {"window": self.window.to_json(), "accumulation": self.accumulation.value}
        actual = {name: committed_spec.get(name) for name in declared}
        return None if actual == declared else (declared, actual)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpstreamPanes:
        return cls(data["pipeline"], window_from_json(data["window"]), Accumulation(data["accumulation"]))


@dataclass(frozen=True)
class AggregationSpec:
    """What to aggregate and when to fire; validated at construction.

    >>> AggregationSpec(Session(2000), (Aggregate("n", "count"),), keys=(), watermark=BoundedOutOfOrderness(0))
    Traceback (most recent call last):
    ...
    ValueError: window=Session(gap_ms=2000) is keyed only: give keys
    >>> AggregationSpec(Session(2000), (Aggregate("n", "count"),), keys=("k",), watermark=BoundedOutOfOrderness(0),
    ...                 accumulation=Accumulation.DISCARDING, fire_only_updated_panes=True)
    Traceback (most recent call last):
    ...
    ValueError: fire_only_updated_panes=True is invalid with accumulation=DISCARDING: every pane holds new data
    """

    window: WindowFn | None
    aggregates: tuple[Aggregate | SqlAggregate, ...]
    keys: tuple[str, ...]
    watermark: WatermarkPolicy
    allowed_lateness_ms: int = 0
    accumulation: Accumulation = Accumulation.ACCUMULATING
    early_firing: bool = False
    late_firing: bool = True
    fire_only_updated_panes: bool = False
    early_firing_count: int | None = None
    late_firing_count: int | None = None
    upstream: UpstreamPanes | None = None
    late_data: LateData = LateData.EVENT_TIME

    def __post_init__(self) -> None:
        if self.late_data not in tuple(LateData):
            raise ValueError(f"late_data={self.late_data!r} must be one of {[p.value for p in LateData]}")
        object.__setattr__(self, "late_data", LateData(self.late_data))
        object.__setattr__(self, "accumulation", enum_member(self.accumulation, Accumulation, "accumulation"))
        if self.upstream is not None:
            self._check_rollup(self.upstream)
        elif not isinstance(self.window, WindowFn):
            raise ValueError(f"window={self.window!r} must be a Tumbling, Sliding, Session or Global window")
        if not self.aggregates:
            raise ValueError("aggregates=() must name at least one aggregate")
        for aggregate in self.aggregates:
            if not isinstance(aggregate, Aggregate | SqlAggregate):
                raise ValueError(f"aggregates: {aggregate!r} is not an Aggregate or SqlAggregate")
        keys = [column_name(k, "keys[]") for k in self.keys]
        names = [a.name for a in self.aggregates] + keys
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"aggregates and keys: the names {duplicates} are used twice")
        reserved = sorted(set(names) & set(OUTPUT_COLUMNS))
        if reserved:
            raise ValueError(f"aggregates and keys: {reserved} are output columns of every pane; rename them")
        if isinstance(self.window, Session) and not self.keys:
            raise ValueError(f"window={self.window!r} is keyed only: give keys")
        if not isinstance(self.watermark, StoreWatermark | BoundedOutOfOrderness | MergedWatermark):
            raise ValueError(f"watermark={self.watermark!r} must be StoreWatermark or BoundedOutOfOrderness")
        lateness = self.allowed_lateness_ms
        if isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0:
            raise ValueError(f"allowed_lateness_ms={lateness!r} must be milliseconds >= 0")
        if self.fire_only_updated_panes and self.accumulation is Accumulation.DISCARDING:
            raise ValueError(
                "fire_only_updated_panes=True is invalid with accumulation=DISCARDING: every pane holds new data"
            )
        for name in ("early_firing_count", "late_firing_count"):
            count = getattr(self, name)
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
                raise ValueError(f"{name}={count!r} must be a number of events >= 1 (or None)")
        if self.early_firing and self.early_firing_count is not None:
            raise ValueError(
                f"early_firing=True fires every run with new data, early_firing_count={self.early_firing_count} "
                "once that many events are pending: pass one of them"
            )
        if not self.late_firing and self.late_firing_count is not None:
            raise ValueError(
                f"late_firing=False fires late data only when the window is purged, late_firing_count="
                f"{self.late_firing_count} once that many events are pending: pass one of them"
            )

    def _check_rollup(self, upstream: UpstreamPanes) -> None:
        """A rollup keeps the upstream's windows (``None``) or tumbles over a whole number of them."""
        if not isinstance(upstream, UpstreamPanes):
            raise ValueError(f"upstream={upstream!r} must be UpstreamPanes(pipeline, window, accumulation)")
        fine, coarse = upstream.window, self.window
        if coarse is not None:
            if not isinstance(coarse, Tumbling) or not isinstance(fine, Tumbling):
                raise ValueError(
                    f"window={coarse!r} over upstream window {fine!r}: a coarser window must be tumbling over tumbling "
                    "panes (or window=None to keep the upstream's windows)"
                )
            if coarse.size_ms % fine.size_ms or (coarse.offset_ms - fine.offset_ms) % fine.size_ms:
                raise ValueError(
                    f"window={coarse!r} must be a multiple of the upstream window {fine!r} (size and offset), so that "
                    "every upstream window lies in one coarse window"
                )
        if self.accumulation is Accumulation.DISCARDING:
            raise ValueError(
                "accumulation=DISCARDING: a rollup recomputes its windows from the upstream's live panes; use "
                "ACCUMULATING or ACCUMULATING_AND_RETRACTING"
            )
        if not isinstance(self.watermark, StoreWatermark):
            raise ValueError(
                f"watermark={self.watermark!r}: a rollup's watermark is its upstream's output stream "
                "({'stream': <upstream output stream>})"
            )

    @property
    def output_window(self) -> WindowFn:
        """The windows the panes carry: the rollup's own, else its upstream's."""
        if self.window is not None:
            return self.window
        assert self.upstream is not None  # validated
        return self.upstream.window

    def target_window(self, upstream_window: Window) -> Window:
        """A rollup: the window an upstream pane lands in (its own, or the coarse one containing it).

        >>> spec = AggregationSpec(Tumbling(3_600_000), (Aggregate("n", "sum", "n"),), (), StoreWatermark("up"),
        ...                        upstream=UpstreamPanes("up", Tumbling(300_000)))
        >>> spec.target_window(Window(3_900_000, 4_200_000))
        Window(start=3600000, end=7200000)
        """
        return upstream_window if self.window is None else self.window.assign(upstream_window.start)[0]

    @property
    def retracting(self) -> bool:
        return self.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING

    def changes_since(self, committed_spec: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """The fields that open windows depend on (:data:`CARRIED_OVER`) and that differ between a pipeline's
        committed spec (JSON) and this one, as ``{field: (committed, now)}``: the stored open windows can be
        carried over only when this is empty. Lateness, triggers and the watermark may change between runs.

        >>> five = AggregationSpec(Tumbling(300_000), (Aggregate("n", "count"),), (), BoundedOutOfOrderness(0))
        >>> ten = AggregationSpec(Tumbling(600_000), (Aggregate("n", "count"),), (), BoundedOutOfOrderness(60_000))
        >>> list(ten.changes_since(five.to_json())), five.changes_since(five.to_json())
        (['window'], {})
        """
        current = self.to_json()
        return {
            name: (committed_spec.get(name), current.get(name))
            for name in CARRIED_OVER
            if committed_spec.get(name) != current.get(name)
        }

    def to_json(self) -> dict[str, Any]:
        """What the operator hands the Spark job (:meth:`from_json` reads it back, validating again)."""
        policy: dict[str, Any]
        if isinstance(self.watermark, BoundedOutOfOrderness):
            policy = {"max_delay_ms": self.watermark.max_delay_ms}
        elif isinstance(self.watermark, MergedWatermark):
            policy = {
                "inputs": {name: {"stream": w.stream, "wm_key": w.wm_key} for name, w in self.watermark.inputs},
                "idle_timeout_ms": self.watermark.idle_timeout_ms,
                "when_all_idle": self.watermark.when_all_idle,
            }
        else:
            policy = {"stream": self.watermark.stream, "wm_key": self.watermark.wm_key}
        return {
            "window": None if self.window is None else self.window.to_json(),
            "aggregates": [asdict(a) for a in self.aggregates],
            "keys": list(self.keys),
            "watermark": policy,
            "allowed_lateness_ms": self.allowed_lateness_ms,
            "accumulation": self.accumulation.value,
            "early_firing": self.early_firing,
            "late_firing": self.late_firing,
            "fire_only_updated_panes": self.fire_only_updated_panes,
            "early_firing_count": self.early_firing_count,
            "late_firing_count": self.late_firing_count,
            **({"upstream": self.upstream.to_json()} if self.upstream else {}),
            # only when not the default, so the JSON of every existing pipeline's spec stays the same
            **({"late_data": self.late_data.value} if self.late_data is not LateData.EVENT_TIME else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AggregationSpec:
        """
        >>> spec = AggregationSpec(Session(5), (Aggregate("n", "count"),), ("k",), BoundedOutOfOrderness(3))
        >>> AggregationSpec.from_json(spec.to_json()) == spec
        True
        """
        policy = data["watermark"]
        watermark: WatermarkPolicy
        if "max_delay_ms" in policy:
            watermark = BoundedOutOfOrderness(policy["max_delay_ms"])
        elif "inputs" in policy:
            inputs = tuple((name, StoreWatermark(w["stream"], w.get("wm_key"))) for name, w in policy["inputs"].items())
            watermark = MergedWatermark(inputs, policy.get("idle_timeout_ms"), policy.get("when_all_idle", "wait"))
        else:
            watermark = StoreWatermark(policy["stream"], policy.get("wm_key"))
        return cls(
            window=None if data["window"] is None else window_from_json(data["window"]),
            aggregates=tuple(SqlAggregate(**a) if "partial" in a else Aggregate(**a) for a in data["aggregates"]),
            keys=tuple(data["keys"]),
            watermark=watermark,
            allowed_lateness_ms=data["allowed_lateness_ms"],
            accumulation=Accumulation(data["accumulation"]),
            early_firing=data["early_firing"],
            late_firing=data["late_firing"],
            fire_only_updated_panes=data["fire_only_updated_panes"],
            early_firing_count=data.get("early_firing_count"),
            late_firing_count=data.get("late_firing_count"),
            upstream=UpstreamPanes.from_json(data["upstream"]) if data.get("upstream") else None,
            late_data=LateData(data.get("late_data", LateData.EVENT_TIME.value)),
        )

    def builtin_aggregates(self) -> tuple[Aggregate, ...]:
        if any(isinstance(a, SqlAggregate) for a in self.aggregates):
            raise NotImplementedError("SQL aggregates are evaluated by Spark only")
        return tuple(a for a in self.aggregates if isinstance(a, Aggregate))
