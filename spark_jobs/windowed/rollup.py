"""Window propagation (Apex), as ``core.windowing.rollup``: a rollup reads the upstream's pane rows, keeps the
live pane of each upstream window, and recomputes the partials of the windows that got rows."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    OUTPUT_COLUMNS,
    Accumulation,
    LateReason,
    SqlAggregate,
)
from airflow_provider_wm.core.windows import Sliding, Tumbling
from spark_jobs.common import path_exists, read_dataset
from spark_jobs.windowed.base import LIVE_META, RUN_PARTITION, is_open
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

    def live_panes(self, classified: DataFrame | None, live: DataFrame | None) -> DataFrame | None:
        """Each upstream window's live pane after the run, and the target windows' partials, from one shuffle
        (``None``: no pane rows and no live panes).

        Pane rows: one per upstream window and ``wm_reason``: the pane's keys, window, :data:`LIVE_META` and
        values (as the live snapshot stores them; values null unless ``wm_live``: the window's newest pane was
        accepted and is no retraction), its target window ``[wm_ts, wm_te)`` (null for an invalid window),
        ``wm_rows`` (the pane rows of it read) and ``wm_max_t`` (the last time of the window); summed over the
        frame, they are the run's totals (:meth:`rollup_totals`). Window rows (the columns prefixed ``wm_w_``,
        :meth:`fresh_windows`): one per target window that got pane rows, the partials of its live panes and
        ``wm_events``. The rows are hash-partitioned by ``(keys, wm_ts)`` once: both group-bys run in the
        partitions of that exchange. Worked example: the 5-minute pane ``[0, 5m)`` of key ``a``, EARLY
        (index 0) in a previous run and ON_TIME (index 1) now, gives one pane row (the ON_TIME pane, target
        ``[0, 1h)``, ``wm_rows`` 1) and the window row ``[0, 1h)`` of ``a`` sums its values."""
        assert self.spec.upstream is not None
        keys = self.keys
        frames: list[DataFrame] = []
        if classified is not None:
            schema = classified.schema
            values = self.value_columns(classified.drop("wm_reason", "wm_t"))
            typed = {"window_start": "bigint", "window_end": "bigint", "pane_index": "bigint", "retraction": "boolean"}
            frames.append(
                classified.select(
                    *keys,
                    # cast only when needed: a no-op alias would differ between the branches' exchanges
                    *[
                        c if schema[c].dataType.simpleString() == t else F.col(c).cast(t).alias(c)
                        for c, t in typed.items()
                    ],
                    F.col(RUN_PARTITION).cast("long").alias("upstream_run"),
                    *values,
                    "wm_reason",
                    "wm_t",
                    F.lit(True).alias("wm_read"),
                )
            )
        if live is not None:
            frames.append(live)
        if not frames:
            return None
        candidates = frames[0] if len(frames) == 1 else frames[1].unionByName(frames[0], allowMissingColumns=True)
        counters = ("wm_reason", "wm_t", "wm_read")
        fixed = (*keys, "window_start", "window_end", *LIVE_META, *counters)
        values = [c for c in candidates.columns if c not in fixed]
        reason = F.col("wm_reason")
        if "wm_reason" not in candidates.columns:  # live panes only
            candidates = candidates.select("*", *[F.lit(None).cast(t).alias(c) for c, t in _COUNTER_TYPES])
        # the target of a valid window only: no window arithmetic on an invalid one
        target_start, target_end = self.target_bounds(F.col("window_start"), F.col("window_end"))
        valid = reason.isNull() | (reason != LateReason.INVALID_WINDOW.value)
        candidates = candidates.select(
            "*", F.when(valid, target_start).alias("wm_ts"), F.when(valid, target_end).alias("wm_te")
        ).repartition(*keys, "wm_ts")
        identity = [*keys, "window_start", "window_end", "wm_reason", "wm_ts", "wm_te"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            identity.append("pane_index")
        others = [c for c in candidates.columns if c not in (*identity, *counters)]
        # a row read now wins a tie with the stored live one: both branches below pick the same winner
        rank = F.struct("upstream_run", "pane_index", ~F.col("retraction"), F.col("wm_read").isNotNull())
        grouped = candidates.groupBy(*identity).agg(
            F.max_by(F.struct(*others), rank).alias("wm_winner"),
            F.count("wm_read").alias("wm_rows"),
            F.max("wm_t").alias("wm_max_t"),
        )
        is_live = reason.isNull() & ~F.col("wm_winner.retraction")
        panes = grouped.select(
            *keys,
            "window_start",
            "window_end",
            *[F.col(c if c in identity else f"wm_winner.{c}").alias(c) for c in LIVE_META],
            *[F.when(is_live, F.col(f"wm_winner.{c}")).alias(c) for c in values],  # no arithmetic on the others
            *[is_live.alias(c) if c == "wm_live" else c for c in _PANE_COUNTERS],
        )
        # the target windows' group-by reads the same exchange (a second branch, the shuffle reused): no shuffle
        # no filter on the reason (it would be pushed below this branch's exchange, making it another one): the
        # rows of a reason add nothing (values null, not live, rows not counted); an invalid window has no target
        if any(isinstance(agg, SqlAggregate) for agg in self.spec.aggregates):
            # a SQL partial may count null values (count(1), collect_list): only the accepted panes reach it, at the
            # price of an exchange of its own
            panes_read = panes.where(reason.isNull())
        else:
            panes_read = panes
        windows = (
            panes_read.groupBy(*keys, "wm_ts", "wm_te")
            .agg(
                *self.partial_exprs(F.col("wm_live")),
                F.sum(F.when(reason.isNull(), F.col("wm_rows"))).alias("wm_events"),
                # unused, but it keeps the same columns below both branches' exchanges
                F.max("wm_max_t").alias("wm_max_t"),
            )
            .where(F.col("wm_events") > 0)
            .select(
                *keys,
                "wm_ts",
                "wm_te",
                *[F.col(c).alias(_WINDOW + c) for c in (*self.partial_columns(), "wm_events", "wm_max_t")],
            )
        )
        return panes.unionByName(windows, allowMissingColumns=True)

    def rollup_totals(self) -> list[Column]:
        """The run's totals from :meth:`live_panes`: ``rows`` read, one count per ``LateReason``, ``max_t``."""
        reason = F.col("wm_reason")
        return [
            F.coalesce(F.sum("wm_rows"), F.lit(0)).alias("rows"),
            *[F.sum(F.when(reason == r.value, F.col("wm_rows"))).alias(r.value) for r in LateReason],
            F.max("wm_max_t").alias("max_t"),  # null on invalid windows
        ]

    def fresh_windows(self, rolled: DataFrame) -> DataFrame:
        """The target windows that got pane rows (from :meth:`live_panes`): the partials of their live panes and
        ``wm_events``, the pane rows that landed in them (as :meth:`with_fresh_flags` takes them)."""
        return rolled.where(F.col(f"{_WINDOW}wm_events").isNotNull()).select(
            *self.keys,
            F.col("wm_ts").alias("window_start"),
            F.col("wm_te").alias("window_end"),
            *[F.col(_WINDOW + c).alias(c) for c in (*self.partial_columns(), "wm_events")],
        )

    def live_after(self, rolled: DataFrame, horizon: int | None) -> DataFrame:
        """The live snapshot after the run (from :meth:`live_panes`): the live panes of the target windows still
        open at ``horizon`` (``W - L``)."""
        fixed = (*self.keys, "window_start", "window_end", *LIVE_META, *_PANE_COUNTERS)
        values = [c for c in rolled.columns if c not in fixed and not c.startswith(_WINDOW)]
        kept = rolled.where(F.col("wm_live") & is_open(F.col("wm_te"), horizon))
        return kept.select(*self.keys, "window_start", "window_end", *LIVE_META, *values)


_COUNTER_TYPES = (("wm_reason", "string"), ("wm_t", "long"), ("wm_read", "boolean"))
"""What a pane row read carries and a live pane does not (the union gives a live pane nulls)."""
_PANE_COUNTERS = ("wm_reason", "wm_ts", "wm_te", "wm_rows", "wm_max_t", "wm_live")
"""Per pane row of :meth:`Rollup.live_panes`, after the live pane's columns."""
_WINDOW = "wm_w_"
"""The prefix of a target window's columns in :meth:`Rollup.live_panes` (apart from the panes' values)."""
