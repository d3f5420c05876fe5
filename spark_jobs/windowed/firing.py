"""Steps 4-5 of a run (rules 4-7 of ``core.windowing``): merge the new partials with the stored windows,
decide each window's firing, and build the panes (with retractions) and the next state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from airflow_provider_wm.core.windowing import (
    Accumulation,
    Timing,
)
from airflow_provider_wm.documents import read_document, write_document
from spark_jobs.common import path_exists
from spark_jobs.windowed.base import STATE_FLAGS, carried, is_open
from spark_jobs.windowed.rollup import Rollup

STATE_SCHEMA = "_wm_schema.json"
"""Beside a state's Parquet files: their schema (Spark's listing skips names starting with ``_``)."""


def state_schema_url(state: str) -> str:
    return f"{state.rstrip('/')}/{STATE_SCHEMA}"


def write_state(state: DataFrame, path: str) -> None:
    """Write the next state (replacing ``path``), then its schema beside it: the next run reads the state without
    a Spark job to infer the schema. Written as a read of the files infers it (every field nullable), so both
    reads see one schema."""
    state.write.mode("overwrite").parquet(path)
    write_document(state_schema_url(path), _nullable(state.schema).jsonValue())


def _nullable(data_type: DataType) -> Any:
    """``data_type`` with every field, element and value nullable (what Spark reads back from Parquet)."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


class Firing(Rollup):
    """Combining, firing and purging windows."""

    def read_state(self) -> DataFrame | None:
        """The stored windows of ``state_in``, or ``None``. Read with the schema stored beside them
        (:func:`write_state`), so no Spark job infers it from a file footer; a state written before that is
        inferred (and one written before count triggers has ``dirty`` for ``pending``)."""
        state_in = self.request.state_in
        if not state_in:
            return None
        stored = read_document(state_schema_url(state_in))
        if stored is not None:
            state = self.spark.read.schema(StructType.fromJson(stored)).parquet(state_in)
        elif not path_exists(self.spark, state_in):
            return None
        else:
            state = self.spark.read.parquet(state_in)
            if "dirty" in state.columns and "pending" not in state.columns:  # written before count triggers
                state = state.withColumn("dirty", F.col("dirty").cast("long")).withColumnRenamed("dirty", "pending")
                state = state.select(*[c for c in state.columns if c not in STATE_FLAGS], *STATE_FLAGS)
        expected = [*self.keys, "window_start", "window_end", *self.partial_columns(), *STATE_FLAGS]
        if state.columns != expected:
            raise ValueError(
                f"state {state_in} has columns {state.columns}, expected {expected}: the aggregate's spec changed; "
                "start a new pipeline name (or delete its state) to change keys or aggregates"
            )
        return state

    def with_fresh_flags(self, partials: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        """The run's partials as windows of the state's columns (then the columns ``carry``)."""
        pane = self._pane_type(partials)
        return partials.select(
            *self.keys,
            "window_start",
            "window_end",
            *self.partial_columns(),
            F.col("wm_events").cast("long").alias("pending"),
            F.lit(False).alias("on_time_fired"),
            F.lit(None).cast(pane).alias("last_pane"),
            F.array().cast(self.owed_type(partials)).alias("owed"),
            *carry,
        )

    def _pane_type(self, partials: DataFrame) -> StructType:
        """The type of a window's pane (:meth:`pane_struct_type`), from the partials' columns: one schema
        round trip per run (the partials' types are the same for the rest of it)."""
        cached: StructType | None = getattr(self, "_pane", None)
        if cached is None:
            values = partials.select(self.final_values().alias("v")).schema["v"].dataType
            assert isinstance(values, StructType)
            cached = self._pane = self.pane_struct_type(values)
        return cached

    def owed_type(self, partials: DataFrame) -> str:
        """The type of ``owed``, the panes a window owes retractions for."""
        return f"array<{self._pane_type(partials).simpleString()}>"

    @staticmethod
    def pane_struct_type(values: StructType) -> StructType:
        return StructType.fromJson(
            {
                "type": "struct",
                "fields": [
                    {"name": "window_start", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "window_end", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "timing", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "pane_index", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "values", "type": values.jsonValue(), "nullable": True, "metadata": {}},
                ],
            }
        )

    def combine(self, fresh: DataFrame, state: DataFrame | None, carry: Sequence[str] = ()) -> DataFrame:
        """Stored windows plus the run's partials: one row per window (rule 4). ``carry``: columns of ``fresh``
        (:data:`~spark_jobs.windowed.base.RUN_COUNTERS`) kept per window, aggregated by
        :func:`~spark_jobs.windowed.base.carried` (null for a window with stored rows only); a fresh row without
        a window (too-late or invalid rows, counted there) stays a row without a window."""
        if state is None:
            return fresh
        both = state.withColumn("wm_old", F.lit(True)).unionByName(
            fresh.withColumn("wm_old", F.lit(False)), allowMissingColumns=bool(carry)
        )
        counters = [carried(c) for c in carry]
        if self.spec.upstream is not None:  # a rollup's fresh partials are recomputed from the live panes
            assert not carry, "a rollup's totals come from its pane rows"
            partials = F.max_by(F.struct(*self.partial_columns()), ~F.col("wm_old")).alias("wm_partials")
            return both.groupBy(*self.keys, "window_start", "window_end").agg(
                partials,
                F.sum("pending").alias("pending"),
                F.bool_or("on_time_fired").alias("on_time_fired"),
                F.first("last_pane", ignorenulls=True).alias("last_pane"),
                F.flatten(F.collect_list("owed")).alias("owed"),
            ).select(
                *self.keys, "window_start", "window_end",
                *[F.col(f"wm_partials.{c}").alias(c) for c in self.partial_columns()],
                *STATE_FLAGS,
            )  # fmt: skip
        if not self.spec.output_window.merging:
            return both.groupBy(*self.keys, "window_start", "window_end").agg(
                *self.merge_exprs(),
                F.sum("pending").alias("pending"),
                F.bool_or("on_time_fired").alias("on_time_fired"),
                F.first("last_pane", ignorenulls=True).alias("last_pane"),
                F.flatten(F.collect_list("owed")).alias("owed"),
                *counters,
            )
        # sessions: a row starts a new group unless it starts at or before the end so far of the key's rows
        ordered = Window.partitionBy(*self.keys).orderBy("window_start", "window_end")
        end_so_far = F.max("window_end").over(ordered.rowsBetween(Window.unboundedPreceding, -1))
        starts_group = F.when(end_so_far.isNull() | (F.col("window_start") > end_so_far), 1).otherwise(0)
        grouped = both.withColumn("wm_starts", starts_group).withColumn(
            "wm_group", F.sum("wm_starts").over(ordered.rowsBetween(Window.unboundedPreceding, 0))
        )
        old = F.col("wm_old")
        member = F.struct("window_start", "window_end", "on_time_fired", "last_pane", "owed")
        merged = grouped.groupBy(*self.keys, "wm_group").agg(
            F.min("window_start").alias("window_start"),
            F.max("window_end").alias("window_end"),
            *self.merge_exprs(),
            F.sum("pending").alias("pending"),  # a session's own pending events, its members' and the new ones
            F.collect_list(F.when(old, member)).alias("wm_members"),
            *counters,
        )
        only = F.get(F.col("wm_members"), 0)
        same = (F.size("wm_members") == 1) & (only["window_start"] == F.col("window_start"))
        same = same & (only["window_end"] == F.col("window_end"))
        owed_by_members: Column = F.array().cast(self.owed_type(fresh))
        if self.spec.retracting:  # a merged session owes every member's retractions and last pane
            owed_by_members = F.flatten(
                F.transform(
                    "wm_members",
                    lambda m: F.concat(m["owed"], F.filter(F.array(m["last_pane"]), lambda p: p.isNotNull())),
                )
            )
        return merged.select(
            *self.keys,
            "window_start",
            "window_end",
            *self.partial_columns(),
            "pending",
            F.when(same, only["on_time_fired"]).otherwise(False).alias("on_time_fired"),
            F.when(same, only["last_pane"]).alias("last_pane"),
            F.when(same, only["owed"]).otherwise(owed_by_members).alias("owed"),
            *carry,
        )

    def decide(self, windows: DataFrame, watermark: int | None) -> DataFrame:
        """Rules 5-7 row by row: ``wm_timing`` (null: no firing), ``wm_fires``, ``wm_purged``, ``wm_values``."""
        spec = self.spec
        end = F.col("window_end")
        if watermark is None:
            complete, purged = F.lit(False), F.lit(False)
        else:
            complete = F.lit(watermark) >= end
            purged = ~is_open(end, watermark - spec.allowed_lateness_ms)
        pending = F.col("pending")
        dirty = pending > 0
        early = F.lit(spec.early_firing) if spec.early_firing_count is None else pending >= spec.early_firing_count
        late = F.lit(spec.late_firing) if spec.late_firing_count is None else pending >= spec.late_firing_count
        timing = (
            F.when(complete & ~F.col("on_time_fired"), Timing.ON_TIME.value)
            .when(complete & dirty & (late | purged), Timing.LATE.value)
            .when(~complete & dirty & early, Timing.EARLY.value)
        )
        values = self.final_values()
        skip = F.lit(False)
        if spec.fire_only_updated_panes:
            skip = (F.size("owed") == 0) & F.col("last_pane").isNotNull() & F.col("last_pane.values").eqNullSafe(values)
        return windows.select(
            "*",
            timing.alias("wm_timing"),
            (timing.isNotNull() & ~skip).alias("wm_fires"),
            purged.alias("wm_purged"),
            values.alias("wm_values"),
        )

    def panes(self, decided: DataFrame, watermark: int | None) -> DataFrame:
        """The pane rows: retractions (retracting mode) and the new panes of the windows that fire."""
        fired = decided.where("wm_fires")
        index = F.when(F.col("last_pane").isNull(), F.lit(0)).otherwise(F.col("last_pane.pane_index") + 1)
        new_pane = F.struct(
            "window_start",
            "window_end",
            F.col("wm_timing").alias("timing"),
            index.cast("long").alias("pane_index"),
            F.col("wm_values").alias("values"),
        )
        rows = fired.select(*self.keys, F.lit(False).alias("retraction"), new_pane.alias("pane"))
        if self.spec.retracting:
            retracted = F.concat("owed", F.filter(F.array("last_pane"), lambda p: p.isNotNull()))
            rows = fired.select(
                *self.keys, F.lit(True).alias("retraction"), F.explode(retracted).alias("pane")
            ).unionByName(rows)
        names = [a.name for a in self.spec.aggregates]
        return rows.select(
            F.col("pane.window_start").alias("window_start"),
            F.col("pane.window_end").alias("window_end"),
            *self.keys,
            *[F.col(f"pane.values.{n}").alias(n) for n in names],
            F.col("pane.timing").alias("pane"),
            F.col("pane.pane_index").alias("pane_index"),
            "retraction",
            F.lit(watermark).cast("long").alias("watermark_ms"),
            F.lit(self.run_id).alias("run_id"),
        )

    def next_state(self, decided: DataFrame) -> DataFrame:
        fires, timing = F.col("wm_fires"), F.col("wm_timing")
        index = F.when(F.col("last_pane").isNull(), F.lit(0)).otherwise(F.col("last_pane.pane_index") + 1)
        new_pane = F.struct(
            "window_start", "window_end", timing.alias("timing"), index.cast("long").alias("pane_index"),
            F.col("wm_values").alias("values"),
        )  # fmt: skip
        partials: list[Column] = [F.col(c) for c in self.partial_columns()]
        if self.spec.accumulation is Accumulation.DISCARDING:
            partials = [
                F.when(fires, empty).otherwise(F.col(c)).alias(c)
                for c, empty in zip(self.partial_columns(), self.empty_partials(decided), strict=True)
            ]
        return decided.where(~F.col("wm_purged")).select(
            *self.keys,
            "window_start",
            "window_end",
            *partials,
            F.when(timing.isNotNull(), F.lit(0).cast("long")).otherwise(F.col("pending")).alias("pending"),
            (F.col("on_time_fired") | F.coalesce(timing == Timing.ON_TIME.value, F.lit(False))).alias("on_time_fired"),
            F.when(fires, new_pane).otherwise(F.col("last_pane")).alias("last_pane"),
            # never null: empty, of the column's own type
            F.when(fires, F.slice("owed", 1, 0)).otherwise(F.col("owed")).alias("owed"),
        )
