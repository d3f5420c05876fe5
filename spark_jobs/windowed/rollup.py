"""Window propagation (Apex), as ``core.windowing.rollup``: a rollup reads the upstream's pane rows, keeps the
live pane of each upstream window, and recomputes the partials of the windows that got rows."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    OUTPUT_COLUMNS,
    Accumulation,
    Aggregate,
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
        panes = None if request.events is None else read_dataset(self.spark, request.events, job_output=True)
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
        in is purged: ``end <= W_prev - L``) or null. No window arithmetic is evaluated on an invalid window."""
        fine_start, fine_end = F.col("window_start").cast("long"), F.col("window_end").cast("long")
        _, target_end = self.target_bounds(fine_start, fine_end)
        reason = F.when(~self.valid_pane_window(fine_start, fine_end), LateReason.INVALID_WINDOW.value)
        if self.previous_watermark is not None:
            reason = reason.when(~is_open(target_end, self.horizon), LateReason.TOO_LATE.value)
        return panes.withColumn("wm_reason", reason)

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

    def live_panes(
        self, classified: DataFrame | None, live: DataFrame | None, horizon: int | None, packed: bool = True
    ) -> DataFrame | None:
        """The run's target windows and the live panes after it, from one shuffle of the pane rows (``None``: no
        pane rows and no live panes); ``horizon`` is ``W - L`` of the run.

        Each upstream window's live pane is the row of highest :func:`pane_rank` (a row read now beats a stored
        live pane of the same rank); its values count when it was accepted (``wm_reason`` null) and is no
        retraction. Window rows (the columns prefixed ``wm_w_``, :meth:`fresh_windows`): one per target window
        that got pane rows, keyed by ``keys, wm_ts, wm_te`` (null for invalid windows), with the partials of its
        live panes, ``wm_events`` (the accepted rows read, null for a window whose rows are too late) and the
        counters that sum to the run's totals (:meth:`rollup_totals`). A target window's rows read in a run are
        all accepted or all too late (the reason depends on the target window only), so the partials of a window
        that got accepted rows never see a too-late row. Live rows (``wm_live`` true, :meth:`live_after`): the
        live panes of the target windows still open at ``horizon``, as the live snapshot stores them.

        The rows are hash-partitioned by ``(keys, wm_ts)`` once: the window rows' group-bys (per upstream window,
        then per target window) run in the partitions of that exchange. The live rows' filter on the target
        window applies after the same exchange when the aggregates read every upstream value column (both
        branches then keep the same columns), else below an exchange of their own (the rows of open windows only:
        none when the run closes every window it reads). Worked example: the 5-minute pane ``[0, 5m)`` of key
        ``a``, EARLY (index 0) in a previous run and ON_TIME (index 1) now, gives the window row ``[0, 1h)`` of
        ``a`` with its values (``wm_events`` 1) and, while ``[0, 1h)`` is open, the live row of the ON_TIME pane.

        ``packed``: the rank as one long (each group-by is a hash aggregate); the job falls back to a struct
        (``packed=False``, a sort-based aggregate) when a rank does not fit (``wm_inexact`` rows, never for the
        runs and pane indexes an upstream job writes)."""
        assert self.spec.upstream is not None
        keys = self.keys
        frames: list[DataFrame] = []
        if classified is not None:
            schema = classified.schema
            values = [c for c in self.value_columns(classified) if c != "wm_reason"]
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
                    F.lit(True).alias("wm_read"),
                )
            )
        if live is not None:
            frames.append(live)
        if not frames:
            return None
        candidates = frames[0] if len(frames) == 1 else frames[1].unionByName(frames[0], allowMissingColumns=True)
        fixed = (*keys, "window_start", "window_end", *LIVE_META, *_COUNTERS)
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
        run, read = F.col("upstream_run"), F.col("wm_read").isNotNull()
        rank = pane_rank(run, F.col("pane_index"), F.col("retraction"), read, packed)
        panes = self._upstream_windows(candidates, rank, values)
        windows = (
            panes.groupBy(*keys, "wm_ts", "wm_te")
            .agg(
                *self.partial_exprs(F.col("wm_live")),
                F.sum(F.when(reason.isNull(), F.col("wm_rows"))).alias("wm_events"),
                F.sum("wm_rows").alias("wm_rows"),
                *[F.sum(F.when(reason == r.value, F.col("wm_rows"))).alias(r.value) for r in ROLLUP_LATE_REASONS],
                F.max("wm_max_t").alias("wm_max_t"),
                F.sum("wm_inexact").alias("wm_inexact"),
            )
            # not the windows of stored live panes only, unless one's rank does not fit: its count starts the rerun
            .where((F.col("wm_rows") > 0) | (F.col("wm_inexact") > 0))
            .select(*keys, "wm_ts", "wm_te", *[F.col(c).alias(_WINDOW + c) for c in self._window_columns()])
        )
        open_rows = is_open(F.col("wm_te"), horizon)
        if self._reads_every_value(values):
            # both branches' rows then keep the same columns, so their exchanges are one (reused); a condition that
            # is not deterministic stays above it (Spark pushes only deterministic filters through an exchange)
            open_rows = F.when(F.spark_partition_id() >= 0, open_rows)
        # else Spark pushes the filter below this branch's own exchange: it shuffles the open windows' rows only
        still_open = self._upstream_windows(candidates.where(open_rows), rank, values)
        live_rows = still_open.where("wm_live").select(*keys, "window_start", "window_end", *LIVE_META, *values)
        return windows.unionByName(live_rows.withColumn("wm_live", F.lit(True)), allowMissingColumns=True)

    def _upstream_windows(self, candidates: DataFrame, rank: Column, values: list[str]) -> DataFrame:
        """Per upstream window (and ``wm_reason``) of ``candidates``: its live pane's columns (each a ``max_by``
        over ``rank``: every column takes the same row, the last of the highest rank, as they share its ordering
        buffer), the values null unless ``wm_live`` (accepted and no retraction), and the counters: ``wm_rows``
        read, ``wm_max_t``, ``wm_inexact`` (rows whose packed rank does not fit)."""
        assert self.spec.upstream is not None
        identity = [*self.keys, "window_start", "window_end", "wm_reason", "wm_ts", "wm_te"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            identity.append("pane_index")
        others = [c for c in (*LIVE_META, *values) if c not in identity]
        ranked = F.col("wm_rank")
        grouped = (
            candidates.select("*", rank.alias("wm_rank"))
            .groupBy(*identity)
            .agg(
                *[F.max_by(c, ranked).alias(c) for c in others],
                F.count("wm_read").alias("wm_rows"),
                F.count(F.when(ranked.isNull(), 1)).alias("wm_inexact"),
            )
        )
        reason = F.col("wm_reason")
        is_live = reason.isNull() & ~F.col("retraction")
        # the last time of the window, when a row of it was read (all of its rows have its window and reason)
        read_valid = (F.col("wm_rows") > 0) & (reason.isNull() | (reason != LateReason.INVALID_WINDOW.value))
        return grouped.select(
            *self.keys,
            "window_start",
            "window_end",
            *LIVE_META,
            *[F.when(is_live, F.col(c)).alias(c) for c in values],  # no arithmetic on the others
            "wm_reason",
            "wm_ts",
            "wm_te",
            "wm_rows",
            F.when(read_valid, F.col("window_end") - 1).alias("wm_max_t"),
            "wm_inexact",
            is_live.alias("wm_live"),
        )

    def _reads_every_value(self, values: list[str]) -> bool:
        """Whether the spec's aggregates read every upstream value column (unknown for a SQL aggregate)."""
        read = {a.column for a in self.spec.aggregates if isinstance(a, Aggregate)}
        return not any(isinstance(a, SqlAggregate) for a in self.spec.aggregates) and read.issuperset(values)

    def _window_columns(self) -> list[str]:
        return [*self.partial_columns(), "wm_events", "wm_rows", *[r.value for r in ROLLUP_LATE_REASONS], "wm_max_t",
                "wm_inexact"]  # fmt: skip

    def write_live(
        self, classified: DataFrame | None, live: DataFrame | None, horizon: int | None
    ) -> tuple[DataFrame, dict[str, Any]] | None:
        """:meth:`live_panes` materialised once (``localCheckpoint``: the live snapshot, the panes and the state
        read it) and the live snapshot written, the run's totals (:meth:`rollup_totals`) observed while it is;
        ``None`` when there is nothing to roll up. A run with a rank that does not fit a long starts over with the
        struct rank (the snapshot is overwritten)."""
        live_out = self.request.live_out
        packed = True
        while True:
            planned = self.live_panes(classified, live, horizon, packed)
            if planned is None:
                return None
            if live_out is None:
                raise ValueError("a rollup's request needs live_out")
            rolled = planned.localCheckpoint()  # one row per target window or live pane: read by three writes
            totals = Observation("rollup")
            self.live_after(rolled.observe(totals, *self.rollup_totals())).write.mode("overwrite").parquet(live_out)
            row = totals.get
            if not row["inexact"] or not packed:  # a struct rank always fits
                return rolled, row
            packed = False

    def rollup_totals(self) -> list[Column]:
        """The run's totals from :meth:`live_panes`: ``rows`` read, one count per reason of
        :data:`ROLLUP_LATE_REASONS`, ``max_t``, and ``inexact`` (rows whose packed rank does not fit)."""
        return [
            F.coalesce(F.sum(_WINDOW + "wm_rows"), F.lit(0)).alias("rows"),
            *[F.sum(_WINDOW + r.value).alias(r.value) for r in ROLLUP_LATE_REASONS],
            F.max(_WINDOW + "wm_max_t").alias("max_t"),  # null on invalid windows
            F.coalesce(F.sum(_WINDOW + "wm_inexact"), F.lit(0)).alias("inexact"),
        ]

    def fresh_windows(self, rolled: DataFrame) -> DataFrame:
        """The target windows that got accepted pane rows (from :meth:`live_panes`): the partials of their live
        panes and ``wm_events``, the pane rows that landed in them (as :meth:`with_fresh_flags` takes them)."""
        return rolled.where(F.col(f"{_WINDOW}wm_events") > 0).select(
            *self.keys,
            F.col("wm_ts").alias("window_start"),
            F.col("wm_te").alias("window_end"),
            *[F.col(_WINDOW + c).alias(c) for c in (*self.partial_columns(), "wm_events")],
        )

    def live_after(self, rolled: DataFrame) -> DataFrame:
        """The live snapshot after the run (from :meth:`live_panes`): the live panes of the target windows still
        open at the run's horizon."""
        fixed = (*self.keys, "window_start", "window_end", *LIVE_META, "wm_ts", "wm_te", "wm_live")
        values = [c for c in rolled.columns if c not in fixed and not c.startswith(_WINDOW)]
        return rolled.where(F.col("wm_live")).select(*self.keys, "window_start", "window_end", *LIVE_META, *values)


def pane_rank(run: Column, index: Column, retraction: Column, read: Column, packed: bool = True) -> Column:
    """:meth:`~airflow_provider_wm.core.windowing.UpstreamPane.rank` ``(run, pane_index, not retraction)``, then
    ``read`` (a row read now beats a stored live pane), as one ordered value. ``packed``: a long, null when a part
    does not fit (a run outside ``[-2**30, 2**30)``, an index outside ``[0, 2**30)``, a null retraction);
    otherwise a struct (never null: Spark orders a struct's null fields first). Worked example: run 3, index 1,
    no retraction, read now is ``3 * 2**32 + 1 * 4 + 2 + 1`` = 12884901895, above every rank of run 2."""
    if not packed:
        return F.struct(run.alias("run"), index.alias("index"), (~retraction).alias("kept"), read.alias("read"))
    fits = run.between(-_RANK_LIMIT, _RANK_LIMIT - 1) & index.between(0, _RANK_LIMIT - 1) & retraction.isNotNull()
    flags = F.when(retraction, 0).otherwise(2) + F.when(read, 1).otherwise(0)
    return F.when(fits, run * F.lit(2**32) + index * F.lit(4) + flags)


_RANK_LIMIT = 2**30
"""A packed rank holds a run in ``[-2**30, 2**30)`` and a pane index in ``[0, 2**30)``: 63 bits with the flags."""
ROLLUP_LATE_REASONS = (LateReason.INVALID_WINDOW, LateReason.TOO_LATE)
"""The reasons a rollup's pane rows are quarantined for (:meth:`Rollup.classify_panes`)."""
_COUNTER_TYPES = (("wm_reason", "string"), ("wm_read", "boolean"))
"""What a pane row read carries and a live pane does not (the union gives a live pane nulls)."""
_COUNTERS = tuple(c for c, _ in _COUNTER_TYPES)
_WINDOW = "wm_w_"
"""The prefix of a target window's columns in :meth:`Rollup.live_panes` (the live rows' values keep their names)."""
