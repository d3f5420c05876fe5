"""What every step of a windowed-aggregate run shares: the request's spec and cut-offs (:class:`JobBase`),
the partial-aggregate columns of the spec's aggregates, and the job's column names."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession
from pyspark.sql import functions as F

from airflow_provider_wm.contracts import WindowedRequest
from airflow_provider_wm.core.windowing import (
    Aggregate,
    AggregationSpec,
    SqlAggregate,
)

RUN_PARTITION = "wm_run"
_SESSION_PARKING_MS = -(2**45)
"""Where too-late and invalid events sit in the session scan: about 1,100 years before any valid time."""
INVALID_ARRIVAL_FLAG = "wm_invalid_arrival"
"""Per row read: whether its arrival is null, unparseable or out of range (rule 0: read by every run)."""
INVALID_VALUE_FLAG = "wm_invalid_value"
"""Per row read: whether a floating column an aggregate reads holds NaN or +/-infinity (:func:`unusable_value`)."""
STATE_FLAGS = ("pending", "on_time_fired", "last_pane", "owed")
"""Per window, after its keys, bounds and partials: events since its last firing, whether it fired ON_TIME, its
last pane and the panes it owes retractions for (rule 4)."""
RUN_COUNTERS = ("wm_rows", "wm_too_late", "wm_invalid", "wm_invalid_value", "wm_invalid_arrival", "wm_max_t")
"""Per group of :meth:`Events.new_partials`: rows read, too-late and invalid rows, the highest time; summed (the
highest time: its maximum) over a run's partials, they are the run's totals."""
JOB_COLUMNS = ("wm_t", INVALID_ARRIVAL_FLAG, INVALID_VALUE_FLAG)
"""What :meth:`Job.read_events` adds to the events' own columns (not written to the late output)."""
LIVE_META = ("pane_index", "retraction", "upstream_run")
"""Per live upstream pane of a rollup, after its keys and window: what ranks it against newer rows."""


def is_open(window_end: Column, horizon: int | None) -> Column:
    """``core.windowing.is_open``: a window still takes data while it ends after the horizon ``W - L``."""
    return F.lit(True) if horizon is None else window_end > F.lit(horizon)


def unusable_value(columns: Sequence[str]) -> Column:
    """``not core.windowing.values_are_usable`` over ``columns``, the floating (float or double) columns that
    aggregates read (a decimal or an integer cannot be NaN or infinite): one of them is NaN or +/-infinity. A
    null is usable (false, not null)."""
    infinity = F.lit(float("inf"))
    unusable: Column = F.lit(False)
    for name in columns:
        unusable = unusable | F.isnan(name) | F.abs(name).eqNullSafe(infinity)
    return unusable


def carried(column: str) -> Column:
    """The aggregate that carries a :data:`RUN_COUNTERS` column through a group-by (state rows have none)."""
    return (F.max if column == "wm_max_t" else F.sum)(column).alias(column)


def run_totals() -> list[Column]:
    """The run's totals from its partials (:data:`RUN_COUNTERS`), for :func:`checkpoint_with_totals`."""
    return [
        F.sum("wm_rows").alias("events"),
        F.sum("wm_too_late").alias("too_late"),
        F.sum("wm_invalid").alias("invalid"),
        F.sum("wm_invalid_value").alias("invalid_value"),
        F.sum("wm_invalid_arrival").alias("invalid_arrival"),
        F.max("wm_max_t").alias("max_t"),
    ]


def checkpoint_with_totals(frame: DataFrame, *totals: Column) -> tuple[DataFrame, Row]:
    """``frame`` materialised once (``localCheckpoint``) and its totals.

    In a classic session the totals are observed (``observe``) while the checkpoint is written: no Spark job of
    their own. Over Spark Connect a checkpoint does not report observed metrics (pyspark 4.2), so they are
    aggregated from the checkpoint in one Spark job, which reads its blocks, not the input again: coalesced into
    one task first, the partial and final aggregation run without a shuffle (the checkpoint holds the small
    frame after the run's group-by, not the input).
    """
    if not type(frame).__module__.startswith("pyspark.sql.connect"):
        observation = Observation("totals")
        checkpoint = frame.observe(observation, *totals).localCheckpoint()
        return checkpoint, Row(**observation.get)
    checkpoint = frame.localCheckpoint()
    row = checkpoint.coalesce(1).agg(*totals).first()  # small: one row of totals
    assert row is not None  # an aggregation without grouping has one row
    return checkpoint, row


class JobBase:
    """A run over a request: the spec, the keys and the cut-offs; the partial aggregates of the spec."""

    def __init__(self, spark: SparkSession, request: WindowedRequest) -> None:
        self.spark = spark
        self.request = request
        self.spec = AggregationSpec.from_json(request.spec)
        self.keys = list(self.spec.keys)
        self.run_id = request.run_id
        self.version = request.version
        self.previous_watermark: int | None = request.previous_watermark_ms
        self.previous_max_event: int | None = request.previous_max_event_time_ms
        self.source_watermark: int | None = request.source_watermark_ms

    def partial_columns(self) -> list[str]:
        names: list[str] = []
        for agg in self.spec.aggregates:
            if isinstance(agg, Aggregate) and agg.function == "avg":
                names += [f"p_{agg.name}_sum", f"p_{agg.name}_count"]
            else:
                names.append(f"p_{agg.name}")
        return names

    def partial_exprs(self, counted: Column | None = None) -> list[Column]:
        """Aggregates over accepted events: one partial column (two for avg) per aggregate. ``count(*)``
        counts the rows where ``counted`` holds (default: all)."""
        exprs: list[Column] = []
        for agg in self.spec.aggregates:
            if isinstance(agg, SqlAggregate):
                exprs.append(F.expr(agg.partial).alias(f"p_{agg.name}"))
            elif agg.function == "count":
                row = F.lit(1) if counted is None else F.when(counted, 1)
                exprs.append(F.count(F.col(agg.column) if agg.column else row).alias(f"p_{agg.name}"))
            elif agg.function == "avg":
                exprs += [
                    F.sum(str(agg.column)).alias(f"p_{agg.name}_sum"),
                    F.count(str(agg.column)).alias(f"p_{agg.name}_count"),
                ]
            else:
                function = {"sum": F.sum, "min": F.min, "max": F.max}[agg.function]
                exprs.append(function(str(agg.column)).alias(f"p_{agg.name}"))
        return exprs

    def merge_exprs(self) -> list[Column]:
        """Aggregates over partials (stored and new) into one partial per window."""
        exprs: list[Column] = []
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                exprs.append(F.expr(agg.merge.format(partial=f"`{name}`")).alias(name))
            elif agg.function == "avg":
                exprs += [F.sum(f"{name}_sum").alias(f"{name}_sum"), F.sum(f"{name}_count").alias(f"{name}_count")]
            else:
                function = {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max}[agg.function]
                exprs.append(function(name).alias(name))
        return exprs

    def empty_partials(self, like: DataFrame) -> list[Column]:
        """DISCARDING resets a fired window to these: count 0, everything else null."""
        columns: list[Column] = []
        for name in self.partial_columns():
            counting = name.endswith("_count") or any(
                isinstance(a, Aggregate) and a.function == "count" and name == f"p_{a.name}"
                for a in self.spec.aggregates
            )
            value = F.lit(0) if counting else F.lit(None)
            columns.append(value.cast(like.schema[name].dataType).alias(name))
        return columns

    def final_values(self) -> Column:
        """The pane's values, as a struct named after the aggregates."""
        fields: list[Column] = []
        for agg in self.spec.aggregates:
            name = f"p_{agg.name}"
            if isinstance(agg, SqlAggregate):
                value = F.expr(agg.final.format(partial=f"`{name}`"))
            elif agg.function == "avg":
                count = F.col(f"{name}_count")
                value = F.when(count > 0, F.col(f"{name}_sum").cast("double") / count)
            else:
                value = F.col(name)
            fields.append(value.alias(agg.name))
        return F.struct(*fields)
