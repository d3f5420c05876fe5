"""Steps 4-5 of a run (rules 4-7 of ``core.windowing``): merge the new partials with the stored windows,
decide each window's firing, and build the panes (with retractions) and the next state."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from airflow_provider_wm.core.windowing import (
    Accumulation,
    Timing,
)
from spark_jobs.common import path_exists
from spark_jobs.sql_text import case, ident, string
from spark_jobs.windowed.base import (
    NEXT_HORIZON,
    OUT_OF_RANGE,
    STATE_FLAGS,
    WATERMARK,
    carried,
    is_open,
    with_cut_offs,
)
from spark_jobs.windowed.rollup import Rollup


def write_state(state: DataFrame, path: str) -> None:
    """Write the next state (replacing ``path``) with Spark; :func:`~spark_jobs.common.write_schema_document`
    follows once its rows are counted."""
    state.write.mode("overwrite").parquet(path)


class Firing(Rollup):
    """Combining, firing and purging windows."""

    def stored_windows(self) -> int | None:
        """How many windows ``state_in`` holds (``None``: no state, or not recorded beside it)."""
        document = self._state_document
        return None if document is None else document.get("rows")

    def read_state(self) -> DataFrame | None:
        """The stored windows of ``state_in``, or ``None``. Read with the schema stored beside them
        (:func:`~spark_jobs.common.write_schema_document`), so no Spark job infers it from a file footer and
        its columns are known without asking Spark; a state written before that is inferred (and one written before
        count triggers has ``dirty`` for ``pending``)."""
        state_in = self.request.state_in
        if not state_in:
            return None
        stored = self._state_document
        if stored is not None:
            schema = StructType.fromJson(stored)
            state, columns = self.spark.read.schema(schema).parquet(state_in), schema.fieldNames()
        elif not path_exists(self.spark, state_in):
            return None
        else:
            state = self.spark.read.parquet(state_in)
            if "dirty" in state.columns and "pending" not in state.columns:  # written before count triggers
                state = state.withColumn("dirty", F.col("dirty").cast("long")).withColumnRenamed("dirty", "pending")
                state = state.select(*[c for c in state.columns if c not in STATE_FLAGS], *STATE_FLAGS)
            columns = state.columns
        expected = self.state_columns()
        if columns != expected:
            raise ValueError(
                f"state {state_in} has columns {columns}, expected {expected}: the aggregate's spec changed; "
                "start a new pipeline name (or delete its state) to change keys or aggregates"
            )
        return state

    def state_columns(self) -> list[str]:
        """A stored window's columns: keys, bounds, partials, then :data:`STATE_FLAGS`."""
        return [*self.keys, "window_start", "window_end", *self.partial_columns(), *STATE_FLAGS]

    def pane_template(self) -> str:
        """A window's pane as a struct of its bounds, a timing, an index and its values (SQL text over a frame
        with the partial columns): :meth:`typed_null` and :meth:`no_panes` take its type from it."""
        return (
            "named_struct('window_start', window_start, 'window_end', window_end, 'timing', CAST(NULL AS STRING), "
            f"'pane_index', CAST(NULL AS BIGINT), 'values', {self.final_values()})"
        )

    def typed_null(self) -> str:
        """A null pane of :meth:`pane_template`'s type, without asking Spark for it (the optimizer folds it)."""
        return f"IF(false, {self.pane_template()}, NULL)"

    def no_panes(self) -> str:
        """An empty array of panes (:meth:`typed_null`'s type)."""
        return f"array_repeat({self.typed_null()}, 0)"

    def with_fresh_flags(self, partials: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        """The run's partials as windows of the state's columns (then the columns ``carry``)."""
        return partials.selectExpr(
            *self._window_and_partials(),
            "CAST(wm_events AS BIGINT) AS pending",
            "false AS on_time_fired",
            f"{self.typed_null()} AS last_pane",
            f"{self.no_panes()} AS owed",
            *carry,
        )

    def _window_and_partials(self) -> list[str]:
        """A window's keys, bounds and partials (quoted)."""
        return [ident(c) for c in (*self.keys, "window_start", "window_end", *self.partial_columns())]

    def combine(self, fresh: DataFrame, state: DataFrame | None, carry: Sequence[str] = ()) -> DataFrame:
        """Stored windows plus the run's partials: one row per window (rule 4). ``carry``: columns of ``fresh``
        (:data:`~spark_jobs.windowed.base.RUN_COUNTERS`) kept per window, aggregated by
        :func:`~spark_jobs.windowed.base.carried` (null for a window with stored rows only); a fresh row without
        a window (too-late or invalid rows, counted there) stays a row without a window."""
        if state is None:
            return fresh
        window = [*self.keys, "window_start", "window_end"]
        if not self.spec.output_window.merging and self.spec.upstream is None:  # whose row it was does not matter
            both = state.unionByName(fresh, allowMissingColumns=bool(carry))
        else:
            both = state.selectExpr("*", "true AS wm_old").unionByName(
                fresh.selectExpr("*", "false AS wm_old"), allowMissingColumns=bool(carry)
            )
        flags = ["sum(pending) AS pending", "bool_or(on_time_fired) AS on_time_fired"]
        last_pane = "first(last_pane, true) AS last_pane"
        # only merged sessions owe retractions (core.windowing.run): any other window's are always none, so they
        # are not aggregated (collect_list made the group-by an object aggregate that sorts past 128 windows)
        no_owed = f"{self.no_panes()} AS owed"
        if self.spec.upstream is not None:  # a rollup's fresh partials are recomputed from the live panes
            assert not carry, "a rollup's totals come from its pane rows"
            fields = ", ".join(f"{string(c)}, {ident(c)}" for c in self.partial_columns())
            partials = f"max_by(named_struct({fields}), NOT wm_old) AS wm_partials"
            return _aggregate(both.groupBy(*window), partials, *flags, last_pane).selectExpr(
                *[ident(c) for c in window],
                *[f"wm_partials.{ident(c)} AS {ident(c)}" for c in self.partial_columns()],
                "pending", "on_time_fired", "last_pane", no_owed,
            )  # fmt: skip
        counters = [carried(c) for c in carry]
        if not self.spec.output_window.merging:
            merged = _aggregate(both.groupBy(*window), *self.merge_exprs(), *flags, last_pane, *counters)
            return merged.selectExpr(*self._window_and_partials(), *STATE_FLAGS[:3], no_owed, *carry)
        # sessions: a row starts a new group unless it starts at or before the end so far of the key's rows
        keys = ", ".join(ident(k) for k in self.keys)
        order = f"{f'PARTITION BY {keys} ' if keys else ''}ORDER BY window_start, window_end"
        end_so_far = f"max(window_end) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
        grouped = both.selectExpr(
            "*", f"CASE WHEN coalesce(window_start <= {end_so_far}, false) THEN 0 ELSE 1 END AS wm_starts"
        ).selectExpr("*", f"sum(wm_starts) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS wm_group")
        member = (
            "named_struct('window_start', window_start, 'window_end', window_end, 'on_time_fired', on_time_fired, "
            "'last_pane', last_pane, 'owed', owed)"
        )
        merged = _aggregate(
            grouped.groupBy(*self.keys, "wm_group"),
            "min(window_start) AS window_start",
            "max(window_end) AS window_end",
            *self.merge_exprs(),
            "sum(pending) AS pending",  # a session's own pending events, its members' and the new ones
            f"collect_list(CASE WHEN wm_old THEN {member} END) AS wm_members",
            *counters,
        )
        only = "get(wm_members, 0)"
        same = f"size(wm_members) = 1 AND {only}.window_start = window_start AND {only}.window_end = window_end"
        owed_by_members = self.no_panes()
        if self.spec.retracting:  # a merged session owes every member's retractions and last pane
            owed_by_members = (
                "flatten(transform(wm_members, m -> concat(m.owed, filter(array(m.last_pane), p -> p IS NOT NULL))))"
            )
        return merged.selectExpr(
            *self._window_and_partials(),
            "pending",
            f"CASE WHEN {same} THEN {only}.on_time_fired ELSE false END AS on_time_fired",
            f"CASE WHEN {same} THEN {only}.last_pane END AS last_pane",
            f"CASE WHEN {same} THEN {only}.owed ELSE {owed_by_members} END AS owed",
            *carry,
        )

    def decide(self, windows: DataFrame, watermark: int | None) -> DataFrame:
        """Rules 5-7 row by row: ``wm_timing`` (null: no firing), ``wm_fires``, ``wm_purged``, ``wm_values``; the
        watermark and the run's horizon are cut-off columns (:func:`~spark_jobs.windowed.base.with_cut_offs`)."""
        spec = self.spec
        if watermark is None:
            complete, purged = "false", "false"
        else:
            complete = f"{WATERMARK} >= window_end"
            purged = f"NOT ({is_open('window_end', NEXT_HORIZON)})"
            cut_offs = {WATERMARK: watermark, NEXT_HORIZON: watermark - spec.allowed_lateness_ms}
            windows = with_cut_offs(windows, cut_offs)
        dirty = "pending > 0"
        early = str(spec.early_firing) if spec.early_firing_count is None else f"pending >= {spec.early_firing_count}"
        late = str(spec.late_firing) if spec.late_firing_count is None else f"pending >= {spec.late_firing_count}"
        timing = case(
            (f"{complete} AND NOT on_time_fired", string(Timing.ON_TIME.value)),
            (f"{complete} AND {dirty} AND ({late} OR {purged})", string(Timing.LATE.value)),
            (f"NOT ({complete}) AND {dirty} AND {early}", string(Timing.EARLY.value)),
        )
        values = self.final_values()
        skip = "false"
        if spec.fire_only_updated_panes:
            skip = f"size(owed) = 0 AND last_pane IS NOT NULL AND last_pane.values <=> {values}"
        return windows.selectExpr(
            "*",
            f"{timing} AS wm_timing",
            f"({timing}) IS NOT NULL AND NOT ({skip}) AS wm_fires",
            f"{purged} AS wm_purged",
            f"{values} AS wm_values",
        )

    _PANE_INDEX = "CAST(CASE WHEN last_pane IS NULL THEN 0 ELSE last_pane.pane_index + 1 END AS BIGINT)"
    """The index of the pane a deciding window fires: 0, or one after its last."""

    def _new_pane(self) -> str:
        """The pane a deciding window fires (over :meth:`decide`'s columns), as a struct."""
        return (
            "named_struct('window_start', window_start, 'window_end', window_end, 'timing', wm_timing, "
            f"'pane_index', {self._PANE_INDEX}, 'values', wm_values)"
        )

    def panes(self, decided: DataFrame, watermark: int | None, flagged: bool = False) -> DataFrame:
        """The pane rows (:meth:`pane_columns`) of :meth:`decide`'s windows: the new panes of the windows that fire
        and, in retracting mode, a retraction row before each for every pane it replaces; ``flagged``: then
        :data:`~spark_jobs.windowed.base.OUT_OF_RANGE` (a new pane's sum past a long)."""
        fired = decided.where("wm_fires")
        keys = [ident(k) for k in self.keys]
        names = [ident(a.name) for a in self.spec.aggregates]
        watermark_column = "CAST(NULL AS BIGINT)" if watermark is None else WATERMARK
        run = [f"{watermark_column} AS watermark_ms", f"{string(self.run_id)} AS run_id"]
        flag = [f"{self.out_of_range()} AS {OUT_OF_RANGE}"] if flagged else []
        if not self.spec.retracting:
            return fired.selectExpr(
                "window_start", "window_end", *keys, *[f"wm_values.{n} AS {n}" for n in names], "wm_timing AS pane",
                f"{self._PANE_INDEX} AS pane_index", "false AS retraction", *run, *flag,
            )  # fmt: skip
        retracted = "concat(owed, filter(array(last_pane), p -> p IS NOT NULL))"
        carry = [f"{watermark_column} AS {WATERMARK}"]  # the cut-off column, through the union
        unflagged = [f"false AS {OUT_OF_RANGE}"] if flagged else []
        retractions = fired.selectExpr(*keys, "true AS retraction", f"explode({retracted}) AS pane", *carry, *unflagged)
        new = fired.selectExpr(*keys, "false AS retraction", f"{self._new_pane()} AS pane", *carry, *flag)
        return retractions.unionByName(new).selectExpr(
            "pane.window_start AS window_start", "pane.window_end AS window_end", *keys,
            *[f"pane.values.{n} AS {n}" for n in names], "pane.timing AS pane", "pane.pane_index AS pane_index",
            "retraction", f"{WATERMARK} AS watermark_ms", run[1], *([OUT_OF_RANGE] if flagged else []),
        )  # fmt: skip

    def pane_columns(self) -> list[str]:
        """A pane row's columns (:meth:`panes`): the window, keys, aggregates, then the pane's metadata."""
        names = [a.name for a in self.spec.aggregates]
        return ["window_start", "window_end", *self.keys, *names, "pane", "pane_index", "retraction", "watermark_ms",
                "run_id"]  # fmt: skip

    def next_state(self, decided: DataFrame) -> DataFrame:
        """The windows kept (not purged) after firing: a fired window has no pending events, its new pane as its
        last and no retractions owed; DISCARDING resets its partials (a count to 0, anything else to null)."""
        partials = [ident(c) for c in self.partial_columns()]
        if self.spec.accumulation is Accumulation.DISCARDING:
            counting = self.counting_partials()
            partials = [
                f"CASE WHEN wm_fires THEN {'0' if c in counting else 'NULL'} ELSE {ident(c)} END AS {ident(c)}"
                for c in self.partial_columns()
            ]
        return decided.where("NOT wm_purged").selectExpr(
            *[ident(c) for c in (*self.keys, "window_start", "window_end")],
            *partials,
            "CASE WHEN wm_timing IS NOT NULL THEN CAST(0 AS BIGINT) ELSE pending END AS pending",
            f"on_time_fired OR coalesce(wm_timing = {string(Timing.ON_TIME.value)}, false) AS on_time_fired",
            f"CASE WHEN wm_fires THEN {self._new_pane()} ELSE last_pane END AS last_pane",
            "CASE WHEN wm_fires THEN slice(owed, 1, 0) ELSE owed END AS owed",  # never null: empty, of its own type
        )


def _aggregate(grouped: GroupedData, *expressions: str) -> DataFrame:
    """``grouped.agg`` of aggregate expressions given as SQL text."""
    return grouped.agg(*[F.expr(e) for e in expressions])
