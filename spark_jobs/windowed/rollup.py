"""Window propagation (Apex), as ``core.windowing.rollup``: a rollup reads the upstream's pane rows, keeps the
live pane of each upstream window, and recomputes the partials of the windows that got rows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from pyspark.errors import ArithmeticException
from pyspark.sql import Column, DataFrame, GroupedData, Row
from pyspark.sql import functions as F

from airflow_provider_wm.core.times import MAX_TIME_MS, MIN_TIME_MS
from airflow_provider_wm.core.windowing import (
    OUTPUT_COLUMNS,
    Accumulation,
    LateReason,
)
from airflow_provider_wm.core.windows import Sliding, Tumbling
from spark_jobs.common import read_dataset_and_schema, read_schema_document, read_written
from spark_jobs.sql_text import case, ident, number, string
from spark_jobs.windowed.base import (
    HORIZON,
    LIVE_META,
    NEXT_HORIZON,
    RUN_PARTITION,
    checkpoint_with_totals,
    is_open,
    with_cut_offs,
)
from spark_jobs.windowed.events import Events

log = logging.getLogger(__name__)


class LiveSnapshot(NamedTuple):
    """A rollup's live panes after a run, to write for the next: the frame, its columns and how many rows."""

    frame: DataFrame
    columns: list[str]
    rows: int


class Rollup(Events):
    """A rollup's inputs: the upstream's pane rows, the live panes, and the partials they give."""

    def read_panes(self) -> DataFrame | None:
        """The upstream's pane rows of the versions ``(arrival_from, arrival_until]``; ``None``: none written."""
        request = self.request
        # None also when the upstream has run but not fired yet (a folder with no data file)
        read = None if request.events is None else read_dataset_and_schema(self.spark, request.events, job_output=True)
        if read is None:
            return None
        panes, self._pane_schema = read
        self.note_input_types(self._pane_schema)
        needed = ["window_start", "window_end", "pane_index", "retraction", RUN_PARTITION, *self.keys]
        missing = [c for c in needed if c not in self._pane_schema.names]
        if missing:
            raise ValueError(
                f"upstream panes {request.events} lack the columns {missing}; have {self._pane_schema.names}"
            )
        condition = f"CAST({RUN_PARTITION} AS BIGINT) <= {number(request.arrival_until_ms)}"
        if request.arrival_from_ms is not None:
            condition += f" AND CAST({RUN_PARTITION} AS BIGINT) > {number(request.arrival_from_ms)}"
        return panes.where(condition)

    def target_bounds(self, fine_start: str, fine_end: str) -> tuple[str, str]:
        """:meth:`AggregationSpec.target_window` as SQL text."""
        window = self.spec.window
        if window is None:
            return fine_start, fine_end
        assert isinstance(window, Tumbling)  # validated by the spec
        start = f"{fine_start} - pmod({fine_start} - {number(window.offset_ms)}, {window.size_ms})"
        return start, f"{start} + {window.size_ms}"

    def value_columns(self, columns: Sequence[str]) -> list[str]:
        """The upstream's aggregate columns among ``columns`` (what the rollup's aggregates read)."""
        return [c for c in columns if c not in (*OUTPUT_COLUMNS, RUN_PARTITION, *self.keys)]

    def read_live(self) -> DataFrame | None:
        """The live panes stored by the previous run (``live_in``), or ``None`` (none stored: its snapshot's
        document counts none)."""
        live_in = self.request.live_in
        if not live_in or (read_schema_document(live_in) or {}).get("rows") == 0:
            return None
        return read_written(self.spark, live_in)

    def classify_panes(self, panes: DataFrame) -> DataFrame:
        """The pane rows with ``wm_reason``: ``INVALID_WINDOW`` (not
        :func:`~airflow_provider_wm.core.windowing.pane_window_is_valid`), ``TOO_LATE`` (the window they land
        in is purged: ``end <= W_prev - L``, the cut-off column :data:`~spark_jobs.windowed.base.HORIZON`) or null.
        No window arithmetic is evaluated on an invalid window."""
        fine_start, fine_end = "CAST(window_start AS BIGINT)", "CAST(window_end AS BIGINT)"
        _, target_end = self.target_bounds(fine_start, fine_end)
        branches = [(f"NOT ({self.valid_pane_window(fine_start, fine_end)})", string(LateReason.INVALID_WINDOW.value))]
        if self.horizon is not None:
            branches.append((f"NOT ({is_open(target_end, HORIZON)})", string(LateReason.TOO_LATE.value)))
            panes = with_cut_offs(panes, {HORIZON: self.horizon})
        return panes.selectExpr("*", f"{case(*branches)} AS wm_reason")

    def valid_pane_window(self, start: str, end: str) -> str:
        """:func:`~airflow_provider_wm.core.windowing.pane_window_is_valid` as SQL text, never null; each
        comparison is evaluated only when the ones before it hold (``end - size`` cannot overflow once
        ``end > MIN_TIME_MS``)."""
        assert self.spec.upstream is not None
        upstream = self.spec.upstream.window
        size = upstream.size_ms if isinstance(upstream, Tumbling | Sliding) else None
        invalid = [
            f"{start} IS NULL OR {end} IS NULL",
            f"{start} >= {end}",
            f"{start} > {MAX_TIME_MS}",
            f"{end} <= {number(MIN_TIME_MS)}",
        ]
        if size is not None:
            invalid.append(f"{start} < {end} - {size}")
        return case(*[(condition, "false") for condition in invalid], otherwise="true")

    def live_panes(
        self,
        classified: DataFrame | None,
        live: DataFrame | None,
        horizon: int | None,
        packed: bool = True,
        slots: tuple[int, int] | None = None,
    ) -> tuple[DataFrame, LiveSnapshot | None] | None:
        """The run's target windows and the live panes after it (``None``: no pane rows and no live panes), and a
        combined run's live panes (below; ``None`` otherwise); ``horizon`` is ``W - L`` of the run.

        Each upstream window's live pane is the row of highest :func:`pane_rank` (a row read now beats a stored
        live pane of the same rank); its values count when it was accepted (``wm_reason`` null) and is no
        retraction. Window rows (the columns prefixed ``wm_w_``, :meth:`fresh_windows`): one per target window
        that got pane rows, keyed by ``keys, wm_ts, wm_te`` (null for invalid windows), with the partials of its
        live panes, ``wm_events`` (the accepted rows read, null for a window whose rows are too late) and the
        counters that sum to the run's totals (:meth:`rollup_totals`). A target window's rows read in a run are
        all accepted or all too late (the reason depends on the target window only), so the partials of a window
        that got accepted rows never see a too-late row. Live rows (``wm_live`` true, :meth:`live_after`): the
        live panes of the target windows still open at ``horizon``, as the live snapshot stores them.

        The rows are hash-partitioned by ``(keys, wm_ts)`` once, and both group-bys run in the partitions of that
        exchange: per upstream window (:meth:`_upstream_windows`), then per target window. That second group-by
        gives the live rows too, so the pane rows are shuffled, read and picked once: an upstream window whose
        live pane lies in an open target window comes twice out of an ``explode`` (``wm_live_row``), the second
        time in a group of its own. Worked example: the 5-minute pane ``[0, 5m)`` of key ``a``, EARLY (index 0)
        in a previous run and ON_TIME (index 1) now, gives the window row ``[0, 1h)`` of ``a`` with its values
        (``wm_events`` 1) and, while ``[0, 1h)`` is open, the live row of the ON_TIME pane.

        ``slots`` (:meth:`combine_slots`, for a run with no live panes stored before it): each row read is taken
        as its upstream window's live pane, with no pick and no shuffle of the pane rows. The frame holds the
        window rows only, :meth:`combined_windows` (aggregated per target window, partially before their shuffle),
        and the live panes are a frame of their own: the accepted rows of the open target windows that are no
        retraction, as read (its ``rows`` are counted with the window rows, :meth:`rollup_totals`). :meth:`roll`
        starts over with the pick when an upstream window was read twice.

        ``packed``: the rank as one long (each group-by is a hash aggregate); the job falls back to a struct
        (``packed=False``, a sort-based aggregate) when a rank does not fit (``wm_inexact`` rows, never for the
        runs and pane indexes an upstream job writes)."""
        assert self.spec.upstream is not None
        keys = [ident(k) for k in self.keys]
        frames: list[DataFrame] = []
        values: list[str] = []  # the upstream's value columns, the live snapshot's first
        if live is not None:
            values = [c for c in live.columns if c not in (*self.keys, "window_start", "window_end", *LIVE_META)]
        if classified is not None:
            schema = self._pane_schema
            values += [c for c in self.value_columns(schema.names) if c not in values]
            typed = {"window_start": "bigint", "window_end": "bigint", "pane_index": "bigint", "retraction": "boolean"}
            frames.append(
                classified.selectExpr(
                    *keys,
                    # cast when the upstream wrote another type
                    *[
                        c if schema[c].dataType.simpleString() == t else f"CAST({c} AS {t}) AS {c}"
                        for c, t in typed.items()
                    ],
                    f"CAST({RUN_PARTITION} AS BIGINT) AS upstream_run",
                    *[ident(v) for v in values],
                    "wm_reason",
                    "true AS wm_read",
                )
            )
        if live is not None:
            frames.append(live)
        if not frames:
            return None
        if len(frames) == 1 and classified is None:  # live panes only
            candidates = frames[0].selectExpr("*", *[f"CAST(NULL AS {t}) AS {c}" for c, t in _COUNTER_TYPES])
        else:
            candidates = frames[0] if len(frames) == 1 else frames[1].unionByName(frames[0], allowMissingColumns=True)
        # the target of a valid window only: no window arithmetic on an invalid one
        target_start, target_end = self.target_bounds("window_start", "window_end")
        valid = f"wm_reason IS NULL OR wm_reason != {string(LateReason.INVALID_WINDOW.value)}"
        candidates = candidates.selectExpr(
            "*",
            f"CASE WHEN {valid} THEN {target_start} END AS wm_ts",
            f"CASE WHEN {valid} THEN {target_end} END AS wm_te",
        )
        if slots is not None and classified is not None and live is None:
            # each row is its upstream window's live pane, unless the slots say otherwise (then roll() starts over)
            rows, open_after = _with_horizon(candidates, horizon)
            is_live = f"wm_reason IS NULL AND NOT retraction AND {is_open('wm_te', open_after)}"
            columns = [*self.keys, "window_start", "window_end", *LIVE_META, *values]
            live_rows = rows.where(is_live).selectExpr(*[ident(c) for c in columns])
            return self.combined_windows(candidates, values, *slots, horizon), LiveSnapshot(live_rows, columns, 0)
        candidates = candidates.repartition(*self.keys, "wm_ts")
        rank = pane_rank("upstream_run", "pane_index", "retraction", "wm_read IS NOT NULL", packed)
        panes = self._upstream_windows(candidates, rank, values)
        # every upstream window counts in its target window's row; the live pane of an open one is a live row too
        panes, open_after = _with_horizon(panes, horizon)
        live_row = f"wm_live AND {is_open('wm_te', open_after)}"
        copies = panes.selectExpr(
            "*", f"explode(CASE WHEN {live_row} THEN array(false, true) ELSE array(false) END) AS wm_live_row"
        )
        # a live row's own group: its upstream window (and pane, DISCARDING), null for the target window's row
        upstream = ["window_start", "window_end"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            upstream.append("pane_index")
        as_live = [F.expr(f"CASE WHEN wm_live_row THEN {c} END").alias(c) for c in upstream]
        carried = [c for c in (*LIVE_META, *values) if c not in upstream]
        reason = "wm_reason"
        grouped = _aggregate(
            copies.groupBy(*self.keys, "wm_ts", "wm_te", "wm_live_row", *as_live),
            *self.partial_exprs("wm_live"),
            f"sum(CASE WHEN {reason} IS NULL THEN wm_rows END) AS wm_events",
            "sum(wm_rows) AS wm_rows",
            *[
                f"sum(CASE WHEN {reason} = {string(r.value)} THEN wm_rows END) AS {ident(r.value)}"
                for r in ROLLUP_LATE_REASONS
            ],
            "max(wm_max_t) AS wm_max_t",
            "sum(wm_inexact) AS wm_inexact",
            # a live row's group is one upstream window: its own values
            *[f"first(CASE WHEN wm_live_row THEN {ident(c)} END) AS {ident(c)}" for c in carried],
        )
        # not the windows of stored live panes only, unless one's rank does not fit: its count starts the rerun
        picked = grouped.where("wm_live_row OR wm_rows > 0 OR wm_inexact > 0").selectExpr(
            *keys,
            "CASE WHEN NOT wm_live_row THEN wm_ts END AS wm_ts",
            "CASE WHEN NOT wm_live_row THEN wm_te END AS wm_te",
            *[f"CASE WHEN NOT wm_live_row THEN {ident(c)} END AS {ident(_WINDOW + c)}" for c in self._window_columns()],
            *[ident(c) for c in ("window_start", "window_end", *LIVE_META, *values)],
            "CASE WHEN wm_live_row THEN true END AS wm_live",
        )
        return picked, None

    def combine_slots(self) -> tuple[int, int] | None:
        """The slots of a target window for :meth:`combined_windows` (their width and count), or ``None`` when it
        cannot tell the upstream windows of a target window apart: an upstream that retracts (it writes a pane and
        its retraction in one run), a global upstream window, more than ``64 *`` :data:`_SLOT_MASKS` slots.

        Worked example: an hourly rollup of 5-minute panes has 12 slots of 5 minutes; of a sliding upstream of 10
        minutes every 5, 12 slots of 5 minutes (one per start)."""
        assert self.spec.upstream is not None
        upstream = self.spec.upstream
        if upstream.accumulation is Accumulation.ACCUMULATING_AND_RETRACTING:
            return None
        if isinstance(upstream.window, Tumbling):
            width = upstream.window.size_ms
        elif isinstance(upstream.window, Sliding):
            width = upstream.window.slide_ms
        else:
            return None
        window = self.spec.window
        assert window is None or isinstance(window, Tumbling)  # validated by the spec
        slots = 1 if window is None else -(-window.size_ms // width)
        return None if slots > 64 * _SLOT_MASKS else (width, slots)

    def combined_windows(
        self, rows: DataFrame, values: list[str], width: int, slots: int, horizon: int | None
    ) -> DataFrame:
        """The window rows (as :meth:`live_panes` gives them) of ``rows``, aggregated per target window without
        picking each upstream window's live pane: each row is taken as its upstream window's live pane, which it is
        when no other row of that window was read. ``wm_collided`` counts the accepted rows that break this (one
        slot of the target window read twice: the slot of an upstream window is ``(window_start - wm_ts) div
        width``, of ``slots``), and the job then rolls the run up again through the pick (:meth:`roll`).
        ``wm_live_rows`` counts the rows that are live panes after the run (accepted and no retraction, in a window
        still open at ``horizon``).

        Worked example: the accepted 5-minute panes ``[0, 5m)`` and ``[5m, 10m)`` of key ``a`` set slots 0 and 1
        of the hour ``[0, 1h)``: two rows, two bits, ``wm_collided`` 0. An EARLY and an ON_TIME pane of ``[0, 5m)``
        would set slot 0 twice: two rows, one bit, ``wm_collided`` 1."""
        keys = [ident(k) for k in self.keys]
        slot = f"(window_start - wm_ts) DIV {width}"
        if slots <= 64:
            masks = [f"shiftleft(1L, CAST({slot} AS INT))"]
        else:
            masks = [
                f"CASE WHEN {slot} DIV 64 = {i} THEN shiftleft(1L, CAST({slot} % 64 AS INT)) END"
                for i in range(-(-slots // 64))
            ]
        # a target window's rows share its reason: grouped by it too, each counter is the group's row count; as in
        # the pick, only an accepted row that is no retraction can be a live pane (the others' values are not read)
        live = "wm_reason IS NULL AND NOT retraction"
        per_row = rows.selectExpr(
            *keys,
            "wm_ts",
            "wm_te",
            "wm_reason",
            "window_end",
            *[f"CASE WHEN {live} THEN {ident(v)} END AS {ident(v)}" for v in values],
            f"{live} AS wm_live",
            *[f"{mask} AS wm_slots_{i}" for i, mask in enumerate(masks)],  # null for an invalid window
        )
        grouped = _aggregate(
            per_row.groupBy(*self.keys, "wm_ts", "wm_te", "wm_reason"),
            *self.partial_exprs("wm_live"),
            "count(1) AS wm_rows",
            "count(CASE WHEN wm_live THEN 1 END) AS wm_kept",
            "max(window_end) AS wm_end",
            *[f"bit_or(wm_slots_{i}) AS wm_slots_{i}" for i in range(len(masks))],
        )
        distinct = " + ".join(f"coalesce(bit_count(wm_slots_{i}), 0)" for i in range(len(masks)))
        grouped, open_after = _with_horizon(grouped, horizon)
        return grouped.selectExpr(
            *keys,
            "wm_ts",
            "wm_te",
            *[f"{ident(c)} AS {ident(_WINDOW + c)}" for c in self.partial_columns()],
            f"CASE WHEN wm_reason IS NULL THEN wm_rows END AS {_WINDOW}wm_events",
            f"wm_rows AS {_WINDOW}wm_rows",
            *[
                f"CASE WHEN wm_reason = {string(r.value)} THEN wm_rows END AS {ident(_WINDOW + r.value)}"
                for r in ROLLUP_LATE_REASONS
            ],
            f"CASE WHEN wm_ts IS NOT NULL THEN wm_end - 1 END AS {_WINDOW}wm_max_t",
            f"0L AS {_WINDOW}wm_inexact",  # no rank: nothing to pack
            f"CASE WHEN wm_reason IS NULL THEN wm_rows - ({distinct}) ELSE 0 END AS {_WINDOW}wm_collided",
            f"CASE WHEN wm_reason IS NULL AND {is_open('wm_te', open_after)} THEN wm_kept ELSE 0 END AS "
            f"{_WINDOW}wm_live_rows",
        )

    def _upstream_windows(self, candidates: DataFrame, rank: str, values: list[str]) -> DataFrame:
        """Per upstream window (and ``wm_reason``) of ``candidates``: its live pane's columns (each a ``max_by``
        over ``rank``: every column takes the same row, the last of the highest rank, as they share its ordering
        buffer), the values null unless ``wm_live`` (accepted and no retraction), and the counters: ``wm_rows``
        read, ``wm_max_t``, ``wm_inexact`` (rows whose packed rank does not fit)."""
        assert self.spec.upstream is not None
        identity = [*self.keys, "window_start", "window_end", "wm_reason", "wm_ts", "wm_te"]
        if self.spec.upstream.accumulation is Accumulation.DISCARDING:
            identity.append("pane_index")
        others = [c for c in (*LIVE_META, *values) if c not in identity]
        grouped = _aggregate(
            candidates.selectExpr("*", f"{rank} AS wm_rank").groupBy(*identity),
            *[f"max_by({ident(c)}, wm_rank) AS {ident(c)}" for c in others],
            "count(wm_read) AS wm_rows",
            "count(CASE WHEN wm_rank IS NULL THEN 1 END) AS wm_inexact",
        )
        is_live = "wm_reason IS NULL AND NOT retraction"
        # the last time of the window, when a row of it was read (all of its rows have its window and reason)
        read_valid = f"wm_rows > 0 AND (wm_reason IS NULL OR wm_reason != {string(LateReason.INVALID_WINDOW.value)})"
        return grouped.selectExpr(
            *[ident(k) for k in self.keys],
            "window_start",
            "window_end",
            *LIVE_META,
            *[f"CASE WHEN {is_live} THEN {ident(c)} END AS {ident(c)}" for c in values],  # no arithmetic on the others
            "wm_reason",
            "wm_ts",
            "wm_te",
            "wm_rows",
            f"CASE WHEN {read_valid} THEN window_end - 1 END AS wm_max_t",
            "wm_inexact",
            f"{is_live} AS wm_live",
        )

    def _window_columns(self) -> list[str]:
        return [*self.partial_columns(), "wm_events", "wm_rows", *[r.value for r in ROLLUP_LATE_REASONS], "wm_max_t",
                "wm_inexact"]  # fmt: skip

    def roll(
        self, classified: DataFrame | None, live: DataFrame | None, horizon: int | None
    ) -> tuple[DataFrame, Row, LiveSnapshot] | None:
        """:meth:`live_panes` materialised once (``localCheckpoint``: the panes and the state are projections of
        it, and the live snapshot too unless the run combined its rows), the run's totals (:meth:`rollup_totals`)
        and the live snapshot after the run; ``None`` when there is nothing to roll up. A combined run
        (:meth:`live_panes`) that read an upstream window twice starts over with the pick (:meth:`combined_windows`),
        and a run with a rank that does not fit a long with the struct rank; a combined run that overflows (its
        partials take every pane of an upstream window read twice) starts over with the pick too."""
        packed = True
        slots = self.combine_slots() if classified is not None and live is None else None
        while True:
            planned = self.live_panes(classified, live, horizon, packed, slots)
            if planned is None:
                return None
            frame, read_live = planned
            try:
                rolled, totals = checkpoint_with_totals(frame, *self.rollup_totals(combined=read_live is not None))
            except ArithmeticException:
                if read_live is None:
                    raise
                # combined, the partials also take the other panes of an upstream window read twice, which the
                # pick leaves out: their sum may overflow where the live panes' does not
                log.info("%s: the combined roll-up overflowed: rolling up again through the pick", self.run_id)
                slots = None
                continue
            if read_live is not None and totals["collided"]:
                log.info("%s: %d pane rows repeat an upstream window: rolling up again through the pick",
                         self.run_id, totals["collided"])  # fmt: skip
                slots = None
            elif totals["inexact"] and packed:  # a struct rank always fits
                packed = False
            else:
                break
        rows = int(totals["live"])
        if read_live is None:
            log.info("%s: %d pane rows rolled up through the pick of each upstream window's live pane", self.run_id,
                     totals["rows"])  # fmt: skip
            return rolled, totals, self.live_after(rolled, rows)
        log.info("%s: %d pane rows rolled up per target window, each its upstream window's live pane", self.run_id,
                 totals["rows"])  # fmt: skip
        frame = read_live.frame if rows else read_live.frame.where("false")  # none: a frame that reads nothing
        return rolled, totals, read_live._replace(frame=frame, rows=rows)

    def rollup_totals(self, combined: bool) -> list[Column]:
        """The run's totals from :meth:`live_panes` (a ``combined`` run's or a picked one's): ``rows`` read, one
        count per reason of :data:`ROLLUP_LATE_REASONS`, ``max_t``, ``inexact`` (rows whose packed rank does not
        fit), the ``live`` panes after the run, the rows ``projected`` (what the outputs are projected from: the
        target windows and the live panes), the ``fresh`` windows (those that got accepted pane rows:
        :meth:`fresh_windows`) and, of a combined run, ``collided`` (rows that repeat an upstream window,
        :meth:`combined_windows`)."""
        live = f"coalesce(sum({_WINDOW}wm_live_rows), 0)" if combined else "count(CASE WHEN wm_live THEN 1 END)"
        return [
            F.expr(total)
            for total in (
                f"coalesce(sum({_WINDOW}wm_rows), 0) AS rows",
                *[f"sum({ident(_WINDOW + r.value)}) AS {ident(r.value)}" for r in ROLLUP_LATE_REASONS],
                f"max({_WINDOW}wm_max_t) AS max_t",  # null on invalid windows
                f"coalesce(sum({_WINDOW}wm_inexact), 0) AS inexact",
                f"{live} AS live",
                f"count(1) + {live} AS projected" if combined else "count(1) AS projected",
                f"count(CASE WHEN {_WINDOW}wm_events > 0 THEN 1 END) AS fresh",
                *([f"coalesce(sum({_WINDOW}wm_collided), 0) AS collided"] if combined else []),
            )
        ]

    def fresh_windows(self, rolled: DataFrame) -> DataFrame:
        """The target windows that got accepted pane rows (from :meth:`live_panes`): the partials of their live
        panes and ``wm_events``, the pane rows that landed in them (as :meth:`with_fresh_flags` takes them)."""
        return rolled.where(f"{_WINDOW}wm_events > 0").selectExpr(
            *[ident(k) for k in self.keys],
            "wm_ts AS window_start",
            "wm_te AS window_end",
            *[f"{ident(_WINDOW + c)} AS {ident(c)}" for c in (*self.partial_columns(), "wm_events")],
        )

    def live_after(self, rolled: DataFrame, rows: int) -> LiveSnapshot:
        """The live snapshot after the run (from :meth:`live_panes`, whose totals counted its ``rows``): the live
        panes of the target windows still open at the run's horizon."""
        fixed = (*self.keys, "window_start", "window_end", *LIVE_META, "wm_ts", "wm_te", "wm_live")
        values = [c for c in rolled.columns if c not in fixed and not c.startswith(_WINDOW)]
        columns = [*self.keys, "window_start", "window_end", *LIVE_META, *values]
        return LiveSnapshot(rolled.where("wm_live").selectExpr(*[ident(c) for c in columns]), columns, rows)


def pane_rank(run: str, index: str, retraction: str, read: str, packed: bool = True) -> str:
    """:meth:`~airflow_provider_wm.core.windowing.UpstreamPane.rank` ``(run, pane_index, not retraction)``, then
    ``read`` (a row read now beats a stored live pane), as one ordered value (SQL text). ``packed``: a long, null
    when a part does not fit (a run outside ``[-2**30, 2**30)``, an index outside ``[0, 2**30)``, a null
    retraction); otherwise a struct (never null: Spark orders a struct's null fields first). Worked example: run
    3, index 1, no retraction, read now is ``3 * 2**32 + 1 * 4 + 2 + 1`` = 12884901895, above every rank of run
    2."""
    if not packed:
        return f"named_struct('run', {run}, 'index', {index}, 'kept', NOT {retraction}, 'read', {read})"
    fits = (
        f"{run} BETWEEN {number(-_RANK_LIMIT)} AND {_RANK_LIMIT - 1} AND {index} BETWEEN 0 AND {_RANK_LIMIT - 1} "
        f"AND {retraction} IS NOT NULL"
    )
    flags = f"CASE WHEN {retraction} THEN 0 ELSE 2 END + CASE WHEN {read} THEN 1 ELSE 0 END"
    return f"CASE WHEN {fits} THEN {run} * {2**32} + {index} * 4 + {flags} END"


def _with_horizon(frame: DataFrame, horizon: int | None) -> tuple[DataFrame, str | None]:
    """``frame`` with the run's horizon ``W - L`` as the cut-off column
    :data:`~spark_jobs.windowed.base.NEXT_HORIZON`, and that column's name for :func:`is_open`; before the first
    watermark (``horizon`` ``None``), ``frame`` as it is and ``None`` (every window is open)."""
    if horizon is None:
        return frame, None
    return with_cut_offs(frame, {NEXT_HORIZON: horizon}), NEXT_HORIZON


def _aggregate(grouped: GroupedData, *expressions: str) -> DataFrame:
    """``grouped.agg`` of aggregate expressions given as SQL text."""
    return grouped.agg(*[F.expr(e) for e in expressions])


_SLOT_MASKS = 4
"""A combined target window has at most ``64 *`` this many slots (a long of bits each): 256, an hour of 15 seconds or
a week of 40 minutes; a rollup of finer upstream windows picks every row."""
_RANK_LIMIT = 2**30
"""A packed rank holds a run in ``[-2**30, 2**30)`` and a pane index in ``[0, 2**30)``: 63 bits with the flags."""
ROLLUP_LATE_REASONS = (LateReason.INVALID_WINDOW, LateReason.TOO_LATE)
"""The reasons a rollup's pane rows are quarantined for (:meth:`Rollup.classify_panes`)."""
_COUNTER_TYPES = (("wm_reason", "string"), ("wm_read", "boolean"))
"""What a pane row read carries and a live pane does not (the union gives a live pane nulls)."""
_COUNTERS = tuple(c for c, _ in _COUNTER_TYPES)
_WINDOW = "wm_w_"
"""The prefix of a target window's columns in :meth:`Rollup.live_panes` (the live rows' values keep their names)."""
