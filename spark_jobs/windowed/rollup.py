"""Window propagation (Apex), as ``core.windowing.rollup``: a rollup reads the upstream's pane rows, keeps the
live pane of each upstream window, and recomputes the partials of the windows that got rows."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    OUTPUT_COLUMNS,
    Accumulation,
    LateReason,
)
from airflow_provider_wm.core.windows import Sliding, Tumbling
from spark_jobs.common import path_exists, read_dataset
from spark_jobs.windowed.base import LIVE_META, RUN_PARTITION, checkpoint_with_totals, is_open
from spark_jobs.windowed.events import Events


class Rollup(Events):
    """A rollup's inputs: the upstream's pane rows, the live panes, and the partials they give."""

    def read_panes(self) -> DataFrame | None:
        """The upstream's pane rows of the versions ``(arrival_from, arrival_until]``; ``None``: none written."""
        request = self.request
        # None also when the upstream has run but not fired yet (a folder with no data file)
        panes = None if request.events is None else read_dataset(self.spark, request.events)
        if panes is None:
            return None
        needed = ["window_start", "window_end", "pane_index", "retraction", RUN_PARTITION, *self.keys]
        missing = [c for c in needed if c not in panes.columns]
        if missing:
            raise ValueError(f"upstream panes {request.events} lack the columns {missing}; have {panes.columns}")
        run = F.col(RUN_PARTITION).cast("long")
        condition = run <= F.lit(request.arrival_until_ms)
        if request.arrival_from_ms is not None:
            condition = condition & (run > F.lit(request.arrival_from_ms))
        return panes.where(condition)

    def target_bounds(self, fine_start: Column, fine_end: Column) -> tuple[Column, Column]:
        """:meth:`AggregationSpec.target_window` as columns."""
        window = self.spec.window
        if window is None:
            return fine_start, fine_end
        assert isinstance(window, Tumbling)  # validated by the spec
        start = fine_start - F.pmod(fine_start - F.lit(window.offset_ms), F.lit(window.size_ms))
        return start, start + F.lit(window.size_ms)

    def value_columns(self, panes: DataFrame) -> list[str]:
        """The upstream's aggregate columns (what the rollup's aggregates read)."""
        return [c for c in panes.columns if c not in (*OUTPUT_COLUMNS, RUN_PARTITION, *self.keys)]

    def read_live(self) -> DataFrame | None:
        live_in = self.request.live_in
        if not live_in or not path_exists(self.spark, live_in):
            return None
        return self.spark.read.parquet(live_in)

    def classify_panes(self, panes: DataFrame) -> DataFrame:
        """The pane rows with ``wm_reason``: ``INVALID_WINDOW`` (not
        :func:`~airflow_provider_wm.core.windowing.pane_window_is_valid`), ``TOO_LATE`` (the window they land
        in is purged: ``end <= W_prev - L``) or null; ``wm_t``: the last time of their window (null for an
        invalid one). No window arithmetic is evaluated on an invalid window."""
        fine_start, fine_end = F.col("window_start").cast("long"), F.col("window_end").cast("long")
        _, target_end = self.target_bounds(fine_start, fine_end)
        reason = F.when(~self.valid_pane_window(fine_start, fine_end), LateReason.INVALID_WINDOW.value)
        if self.previous_watermark is not None:
            reason = reason.when(~is_open(target_end, self.horizon), LateReason.TOO_LATE.value)
        classified = panes.withColumn("wm_reason", reason)
        valid = F.col("wm_reason").isNull() | (F.col("wm_reason") != LateReason.INVALID_WINDOW.value)
        return classified.withColumn("wm_t", F.when(valid, fine_end - 1))

    def valid_pane_window(self, start: Column, end: Column) -> Column:
        """:func:`~airflow_provider_wm.core.windowing.pane_window_is_valid` as a column, never null; each
        comparison is evaluated only when the ones before it hold (``end - size`` cannot overflow once
        ``end > MIN_TIME_MS``)."""
        assert self.spec.upstream is not None
        upstream = self.spec.upstream.window
        size = upstream.size_ms if isinstance(upstream, Tumbling | Sliding) else None
        valid = F.when(start.isNull() | end.isNull(), False).when(start >= end, False)
        valid = valid.when(start > F.lit(MAX_TIME_MS), False).when(end <= F.lit(MIN_TIME_MS), False)
        if size is not None:
            valid = valid.when(start < end - F.lit(size), False)
        return valid.otherwise(True)

    def rollup_partials(
        self, classified: DataFrame | None, live: DataFrame | None
    ) -> tuple[DataFrame | None, DataFrame | None, Row | None]:
        """Pick each upstream window's live pane and recompute the partials of the windows that got rows.

        Returns the fresh windows (partials and ``wm_events``, as :meth:`with_fresh_flags` takes them), the
        live panes after the run (``wm_target_end``: the end of the window they belong to) and, when pane rows
        were read, their totals: ``rows``, one count per ``LateReason`` and ``max_t`` (the last time of their
        windows). The rows of every reason go through the group-by that picks the live panes, apart (grouped by
        reason as well) and counted there, so the totals come from its checkpoint: the pane rows are read by
        that one pass (and by the fresh windows' group-by), not materialised first."""
        assert self.spec.upstream is not None
        keys = self.keys
        rows: DataFrame | None = None
        fresh_rows: DataFrame | None = None
        if classified is not None:
            values = self.value_columns(classified.drop("wm_reason", "wm_t"))
            columns: list[Column | str] = [
                *keys,
                F.col("window_start").cast("long").alias("window_start"),
                F.col("window_end").cast("long").alias("window_end"),
                F.col("pane_index").cast("long").alias("pane_index"),
                F.col("retraction").cast("boolean").alias("retraction"),
                F.col(RUN_PARTITION).cast("long").alias("upstream_run"),
                *values,
            ]
            fresh_rows = classified.where(F.col("wm_reason").isNull()).select(*columns)
            rows = classified.select(*columns, "wm_reason", "wm_t", F.lit(True).alias("wm_read"))
        candidates = (
            rows if live is None else live if rows is None else live.unionByName(rows, allowMissingColumns=True)
        )
        if candidates is None:
            return None, None, None
        identity = [*keys, "window_start", "window_end"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            identity.append("pane_index")
        counters = ("wm_reason", "wm_t", "wm_read")
        others = [c for c in candidates.columns if c not in (*identity, *counters)]
        rank = F.struct("upstream_run", "pane_index", ~F.col("retraction"))
        picked = F.max_by(F.struct(*others), rank).alias("wm_winner")
        totals: Row | None = None
        if rows is None:
            grouped = candidates.groupBy(*identity).agg(picked)
        else:
            reason = F.col("wm_reason")
            # the live and accepted rows of a window compete; the rows of each reason form groups of their own
            grouped, totals = checkpoint_with_totals(
                candidates.groupBy(*identity, "wm_reason").agg(
                    picked, F.count("wm_read").alias("wm_rows"), F.max("wm_t").alias("wm_max_t")
                ),
                F.coalesce(F.sum("wm_rows"), F.lit(0)).alias("rows"),
                *[F.sum(F.when(reason == r.value, F.col("wm_rows"))).alias(r.value) for r in LateReason],
                F.max("wm_max_t").alias("max_t"),  # null on invalid windows
            )  # one row per upstream window: the panes of a run
            grouped = grouped.where(reason.isNull())
        winners = (
            grouped.select(*identity, *[F.col(f"wm_winner.{c}").alias(c) for c in others])
            .where(~F.col("retraction"))
            .select(*keys, "window_start", "window_end", *LIVE_META, *[c for c in others if c not in LIVE_META])
        )
        target_start, target_end = self.target_bounds(F.col("window_start"), F.col("window_end"))
        if fresh_rows is None:
            return None, winners.withColumn("wm_target_end", target_end), None
        live_after = winners.withColumn("wm_target_end", target_end)
        arrived = fresh_rows.select(
            *keys,
            target_start.alias("wm_ts"),
            target_end.alias("wm_te"),
            F.lit(1).alias("wm_events"),
            F.lit(False).alias("wm_live"),
        )
        members = winners.select(
            *keys,
            target_start.alias("wm_ts"),
            target_end.alias("wm_te"),
            F.lit(0).alias("wm_events"),
            F.lit(True).alias("wm_live"),
            *[c for c in winners.columns if c not in (*keys, "window_start", "window_end")],
        )
        fresh = (
            members.unionByName(arrived, allowMissingColumns=True)
            .groupBy(*keys, "wm_ts", "wm_te")
            .agg(*self.partial_exprs(F.col("wm_live")), F.sum("wm_events").alias("wm_events"))
            .where(F.col("wm_events") > 0)
            .select(
                *keys,
                F.col("wm_ts").alias("window_start"),
                F.col("wm_te").alias("window_end"),
                *self.partial_columns(),
                "wm_events",
            )
        )
        return fresh, live_after, totals
