"""IncrementalPartitionsOperator: plan work units (DIL), run them on Spark, commit high watermarks on success."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, Context
from airflow.sdk.exceptions import AirflowException

from airflow_provider_wm.arguments import emit_partition_keys_argument, events_format_argument, require_bool
from airflow_provider_wm.contracts import PartitionsManifest, PartitionsRequest, WatermarkRecord, WorkUnitRequest
from airflow_provider_wm.core.asset_partitions import partition_event_key
from airflow_provider_wm.core.names import column_name
from airflow_provider_wm.core.partitions import (
    PartitionSpec,
    PartitionState,
    Plan,
    PlannedUnit,
    QuarantineReason,
    UnitResult,
    UnitStatus,
    complete_until,
    format_day,
    plan,
    zone_info,
)
from airflow_provider_wm.documents import read_document
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook, validate_name
from airflow_provider_wm.lineage import RunLineage
from airflow_provider_wm.operators.base import JobRound, Outcome, StatefulSparkOperator, template_fields_of
from airflow_provider_wm.operators.partitions_arguments import (
    backfill_argument,
    source_and_target,
    transform_arguments,
    units_argument,
)
from airflow_provider_wm.state import PIPELINE_STATE, PipelineState, covered_run
from airflow_provider_wm.timeutil import duration_ms, format_ms

__all__ = ["IncrementalPartitionsOperator"]

PLAN_ROWS_IN_XCOM = 200
"""The plan summary in XCom and the store is cut to this many rows (a very fragmented plan stays small)."""


def _work_unit_request(unit: PlannedUnit) -> WorkUnitRequest:
    """An executing work unit of the plan as the job's request has it (executing units always have a range)."""
    if unit.range_start is None or unit.range_end is None:
        raise ValueError(f"work unit {unit} executes but has no range")
    return WorkUnitRequest(
        unit.partition_start, unit.partition_end, unit.unit, unit.range_start, unit.range_end, unit.reason.value
    )


class IncrementalPartitionsOperator(StatefulSparkOperator[PipelineState]):
    """Extract or rebuild a time-partitioned table incrementally (LinkedIn DIL's time and unit watermarks).

    Each run plans the work units (partition x unit) with :func:`airflow_provider_wm.core.partitions.plan`
    from the pipeline's committed state, logs the plan as a table, submits
    ``spark_jobs/incremental_partitions.py`` through ``SparkSubmitHook`` for the executing units, and commits
    each unit's new high watermark only after the job succeeded: to the store's state document, XCom, an
    asset event (when ``asset`` is given) and, last, the asset state store (``partition_state/<pipeline>``, with
    ``asset``) and the Variable ``wm_partitions__<pipeline>`` (checked against the version read at the start;
    one task instance at a time by default).

    A failed unit fails the task and commits nothing; the task's retry re-executes only the units that did
    not succeed in an earlier attempt of the same run (their output is already written, idempotently).
    With ``allow_partial_success=True`` the task succeeds instead, commits the succeeded units, and the failed
    ones execute in full at the next run.

    Bad rows never fail or block a run: rows whose time is null, unparseable or outside 1970..9999, and rows
    in the plan's ranges whose ``unit_column`` is null or names no configured unit, are quarantined in
    ``<store_path>/pipelines/<pipeline>/quarantine/wm_version=<version>`` with a ``reason``, each once however
    many runs re-read it: the XCom summary's ``quarantined`` counts the run's new ones,
    ``quarantined_seen_before`` those an earlier run holds (a warning names the unit column, the count and a
    few unknown values). An existing source folder without data files is a source without rows.

    Example: daily partitions from 2026-01-01 to the run's day, grace 2 days::

        IncrementalPartitionsOperator(
            task_id="orders_daily", pipeline="orders_daily",
            source="/data/orders", time_column="event_time", source_partition_column="event_date",
            watermark={"from": "2026-01-01", "to": "P0D"}, partition="daily", grace_period="P2D",
            units=["eu", "us"], unit_column="region",
            transform="SELECT order_id, region, event_time, amount, wm_partition, wm_unit FROM source",
            target="/data/orders_daily", store_path="/data/wm-store",
        )

    :param pipeline: name of the pipeline (its Variable, its folder in the store).
    :param source: dataset to read (``source_format``: ``"parquet"``, default, ``"orc"`` or ``"json"``). Templated.
    :param time_column: the source's event time (timestamp, date, epoch ms or ISO string).
    :param watermark: ``{"from": ..., "to": ...}``: ISO date/date-time, ``PnD``, ``PnDTmH`` or ``-``.
    :param partition: none|hourly|daily|weekly|monthly|yearly, or composite ``{"monthly": [from, to], ...}``
        (then ``watermark=None``).
    :param target: output dataset, partitioned by ``wm_partition, wm_unit``; neither the source nor inside or
        around it. Templated.
    :param store_path: the watermark store (plans, manifests, the state document). Templated.
    :param grace_period: re-read this far behind the high watermark for late updates (timedelta, seconds
        or ISO-8601 such as ``P3D``).
    :param abstinent_period: do not re-read what was extracted less than this long ago.
    :param units: unit values, or ``{"path": ..., "column": ...}``: the distinct values of a secondary
        Parquet dataset's column. Needs ``unit_column``.
    :param unit_column: the source column that holds the unit.
    :param transform: SQL over the view ``source``, or ``"package.module:function"`` (DataFrame ->
        DataFrame) or the function itself, from an importable module (not the DAG file). The output must keep
        ``wm_partition`` and ``wm_unit``.
    :param source_partition_column: the source's partition column derived from the time (partition pruning).
    :param source_partition_timezone: the zone in which that column's dates are the rows' dates (``"UTC"`` for
        ``to_date(time)`` in a UTC session): a run then reads exactly the dates its ranges cover, instead of a
        day of margin on each side. Needs ``source_partition_column``.
    :param timezone: the zone of zone-less bounds and of the partition steps (DST-aware).
    :param partial_partition: keep the last, incomplete partition (default) or drop it.
    :param backfill: ``(start, end)``: re-execute every work unit overlapping it, whatever its state (zone-less
        dates and date-times in ``timezone``, as the watermark's).
    :param max_work_units: cap per run: units never done first (oldest first), then re-reads of done ones; the
        rest wait for the next run.
    :param allow_partial_success: commit the units that succeeded even when some failed (see above).
    :param dry_run: plan and show, run nothing, commit nothing.
    :param logical_time: the run's "now", default ``data_interval_end``: a re-run plans the same. Templated.
    :param asset: the Asset this pipeline produces: declared as an outlet, receives an asset event and
        the state in the asset state store.
    :param output_stream: the derived stream (default: the pipeline's name) to which each successful run
        publishes the end of the partitions done for every unit together with all earlier ones
        (:func:`~airflow_provider_wm.core.partitions.complete_until`); downstream DAGs wait on it with
        ``StreamWatermarkSensor``.
    :param emit_partition_keys: the asset's events carry partition keys (Airflow's partitioned assets): one
        event per work unit the run wrote (new, re-read within the grace period, failed before, backfilled),
        keyed by the partition's start in ``timezone``, ``%Y-%m-%dT%H:%M:%S``, as ``<unit>|<start>`` with
        units (:func:`~airflow_provider_wm.core.asset_partitions.partition_event_key`). A DAG scheduled by
        ``PartitionedAssetTimetable`` on ``asset`` then runs once per key; Airflow does not start DAGs with
        a plain asset schedule on keyed events, hence off by default.
    """

    template_fields: Sequence[str] = template_fields_of("source", "target")
    state_kind = PIPELINE_STATE
    ui_color = "#eaf7ea"

    def __init__(
        self,
        *,
        pipeline: str,
        source: str,
        time_column: str,
        target: str,
        store_path: str,
        watermark: Mapping[str, Any] | Sequence[Any] | None,
        partition: str | Mapping[str, Sequence[Any]] = "daily",
        grace_period: dt.timedelta | float | str = 0,
        abstinent_period: dt.timedelta | float | str = 0,
        units: Sequence[str] | Mapping[str, Any] | None = None,
        unit_column: str | None = None,
        transform: str | Callable[..., Any] | None = None,
        source_format: str = "parquet",
        source_partition_column: str | None = None,
        source_partition_timezone: str | None = None,
        timezone: str = "UTC",
        partial_partition: bool = True,
        backfill: tuple[Any, Any] | None = None,
        max_work_units: int | None = None,
        allow_partial_success: bool = False,
        dry_run: bool = False,
        asset: Asset | None = None,
        output_stream: str | None = None,
        emit_partition_keys: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(store_path=store_path, asset=asset, **kwargs)
        self.emit_partition_keys = emit_partition_keys_argument(emit_partition_keys, asset)
        self.pipeline = validate_name(pipeline, "pipeline")
        self.output_stream = validate_name(pipeline if output_stream is None else output_stream, "output_stream")
        source_and_target(source, target)
        require_bool(allow_partial_success=allow_partial_success, dry_run=dry_run)
        column_name(time_column, "time_column")
        for argument, column in (("unit_column", unit_column), ("source_partition_column", source_partition_column)):
            if column is not None:
                column_name(column, argument)
        if source_partition_timezone is not None:
            if source_partition_column is None:
                raise ValueError(
                    f"source_partition_timezone={source_partition_timezone!r} needs source_partition_column: the "
                    "source's partition column whose dates are in that zone"
                )
            zone_info(source_partition_timezone, "source_partition_timezone")
        self.source_format: str = events_format_argument(source_format, "source_format")
        self.spec = PartitionSpec.build(watermark, partition, timezone=timezone, partial_partition=partial_partition)
        self.grace_ms = duration_ms(grace_period, "grace_period")
        self.abstinent_ms = duration_ms(abstinent_period, "abstinent_period")
        self.units = units_argument(units)
        if self.units and not unit_column:
            raise ValueError(f"units={units!r} needs unit_column: the source column that holds the unit")
        if unit_column and not self.units:
            raise ValueError(f"unit_column={unit_column!r} needs units (a list or a secondary dataset)")
        self.transform_sql, self.transform_callable = transform_arguments(transform)
        self.backfill = backfill_argument(backfill, timezone)
        if max_work_units is not None and (
            not isinstance(max_work_units, int) or isinstance(max_work_units, bool) or max_work_units < 1
        ):
            raise ValueError(f"max_work_units={max_work_units!r} must be a positive whole number")
        self.max_work_units = max_work_units
        self.source, self.target = source, target
        self.time_column: str = time_column
        self.unit_column: str | None = unit_column
        self.source_partition_column: str | None = source_partition_column
        self.source_partition_timezone: str | None = source_partition_timezone
        self.allow_partial_success = allow_partial_success
        self.plan_only = dry_run  # BaseOperator.dry_run is a method

    # ---------------------------------------------------------------------------------------------- run

    def watermarks_page_query(self) -> dict[str, str]:
        """Where this task belongs on the Watermarks page (its extra link)."""
        return {"pipeline": self.pipeline}

    def state_name(self) -> str:
        return self.pipeline

    def locations(self) -> dict[str, str]:
        return {**super().locations(), "source": self.source, "target": self.target}

    def check_rendered(self) -> None:
        source_and_target(self.source, self.target)

    def lineage(self, document: PipelineState, summary: dict[str, Any] | None) -> RunLineage:
        """Reads the source, writes the target partitions and the quarantine; the watermark is the output
        watermark (every partition before it done in every unit), quarantined: the bad rows this run set aside.
        No ``late`` count: late rows are re-extracted with their partition within the grace period."""
        until = None
        if document.processed_until_ms is not None:
            state = PartitionState.from_json(document.state)
            until = complete_until(self.spec, state, document.units, document.processed_until_ms)
        return RunLineage(
            kind="incremental_partitions",
            name=self.pipeline,
            inputs=[self.source],
            outputs=[self.target, WatermarkStoreHook(self.store_path).pipeline_url(self.pipeline, "quarantine")],
            version=document.version,
            cutoff_ms=document.processed_until_ms,
            watermark_ms=until,
            stream_watermarks_ms={} if until is None else {self.output_stream: until},
            quarantined=int(summary["quarantined"]) if summary else None,
        )

    def covered_until(self, committed: PipelineState) -> int | None:
        return committed.processed_until_ms

    def covered(self, context: Context, committed: PipelineState, until_ms: int | None, now_ms: int) -> dict[str, Any]:
        self.log.info("To re-process older partitions, give a later run backfill=(start, end)")
        covered = covered_run(
            self.log, context, self.asset, self.pipeline, committed, format_ms(until_ms), format_ms(now_ms)
        )
        return {**covered, "now": format_ms(now_ms)}

    def compute(self, run: JobRound[PipelineState]) -> Outcome[PipelineState]:
        committed, now_ms = run.committed, run.now_ms
        state = PartitionState.from_json(committed.state if committed else None)
        units = self._resolve_units()
        the_plan = plan(
            self.spec,
            state,
            now_ms,
            units=units,
            grace_ms=self.grace_ms,
            abstinent_ms=self.abstinent_ms,
            backfill=self.backfill,
            max_work_units=self.max_work_units,
        )
        self._log_plan(the_plan)
        summary: dict[str, Any] = {
            "pipeline": self.pipeline,
            "now": format_ms(now_ms),
            "cutoff": format_ms(the_plan.cutoff_ms),
            "plan": [list(row) for row in the_plan.summary()[:PLAN_ROWS_IN_XCOM]],
            "plan_units": [[u.partition_start, u.unit, u.reason.value] for u in the_plan.active[:PLAN_ROWS_IN_XCOM]],
            "dry_run": self.plan_only,
        }
        if self.plan_only:
            self.log.info("dry_run=True: nothing runs and the state is unchanged")
            return Outcome(None, summary)
        round_dir = run.store.pipeline_url(self.pipeline, "runs", run.run_folder)
        try_number = int(run.context["ti"].try_number)
        results, manifests = self._execute_plan(run, the_plan, round_dir, try_number, units)
        failed = [r for r in results if r.status is UnitStatus.FAILED]
        summary.update(
            {
                "executed": len(results),
                "failed": [[format_day(r.partition_start), r.unit] for r in failed],
                "rows_read": sum(m.totals.rows_read for m in manifests),
                "rows_written": sum(m.totals.rows_written for m in manifests),
                "quarantined": sum(m.totals.quarantined for m in manifests),
                "quarantined_seen_before": sum(m.totals.quarantined_seen_before for m in manifests),
                "run_dir": round_dir,
                "quarantine_path": run.store.pipeline_url(self.pipeline, "quarantine"),
            }
        )
        if failed and not self.allow_partial_success:
            names = ", ".join(f"{format_day(r.partition_start)}/{r.unit or '-'}" for r in failed[:10])
            raise AirflowException(
                f"pipeline {self.pipeline!r}: {len(failed)} of {len(results)} work units failed ({names}); the "
                "state is unchanged and a retry re-executes only these"
            )
        if failed:
            self.log.warning(
                "%s work units failed and will execute in full at the next run (allow_partial_success=True)",
                len(failed),
            )
        new_state = state.apply(results)
        document = PipelineState(
            pipeline=self.pipeline,
            version=run.version,
            run_id=run.run_id,
            committed_at=dt.datetime.now(dt.UTC).isoformat(),
            spec=self.spec.to_json(),
            units=list(units),
            state=new_state.to_json(),
            processed_until_ms=now_ms,
        )
        extra = {
            "pipeline": self.pipeline,
            "version": document.version,
            "high_watermark": format_ms(new_state.max_high_watermark()),
            "work_units_executed": summary["executed"],
            "failed": summary["failed"],
        }
        return Outcome(document, summary, extra, self._partition_keys(results))

    def _partition_keys(self, results: list[UnitResult]) -> list[str]:
        """One key per work unit the run wrote (an earlier attempt of the run included), when asked for."""
        if not self.emit_partition_keys:
            return []
        keys = [
            partition_event_key(r.partition_start, r.unit, self.spec.timezone)
            for r in results
            if r.status is UnitStatus.SUCCEEDED
        ]
        self.log.info("The asset event carries %s partition keys: %s", len(keys), ", ".join(keys[:50]))
        return keys

    def publish_outputs(self, run: JobRound[PipelineState], outcome: Outcome[PipelineState]) -> None:
        assert outcome.document is not None
        self._publish_output_watermark(run.store, outcome.document)

    def mirror_document(self, document: PipelineState, summary: dict[str, Any] | None) -> dict[str, Any]:
        """What the completeness sensor reads, with the last run's plan."""
        plan = None if summary is None else summary["plan"]
        return {
            **document.to_json(),
            "kind": "partitions",
            "dag_id": self.dag_id,
            "last_plan": plan,
            "last_summary": summary,
        }

    def _publish_output_watermark(self, store: WatermarkStoreHook, document: PipelineState) -> None:
        """The derived stream's watermark: the end of the partitions done for every unit, with all earlier ones
        (:func:`complete_until`); monotone, so a failure that re-opens a partition does not move it back."""
        if document.processed_until_ms is None:
            return
        until = complete_until(
            self.spec, PartitionState.from_json(document.state), document.units, document.processed_until_ms
        )
        if until is None:
            return
        record = WatermarkRecord.derived(
            self.output_stream, until, computed_at_ms=document.processed_until_ms, run_id=document.run_id,
            pipeline=self.pipeline, dag_id=self.dag_id,
        )  # fmt: skip
        store.publish(record.to_json())

    def _resolve_units(self) -> list[str]:
        if isinstance(self.units, list):
            return self.units
        import pyarrow.dataset as ds

        dataset = ds.dataset(self.units["path"], format=self.units["format"])
        column = self.units["column"]
        if column not in dataset.schema.names:
            raise ValueError(f"units: dataset {self.units['path']} has no column {column!r}")
        values = dataset.to_table(columns=[column]).column(column).unique().to_pylist()
        if any(v is None for v in values):
            self.log.warning("units: ignoring null values of %s in %s", column, self.units["path"])
        return sorted(validate_name(str(v), f"units[{column}]") for v in values if v is not None)

    def _execute_plan(
        self, run: JobRound[PipelineState], the_plan: Plan, round_dir: str, try_number: int, units: list[str]
    ) -> tuple[list[UnitResult], list[PartitionsManifest]]:
        """Run the executing units, except those an earlier attempt of this run already did. The job
        quarantines into the pipeline's quarantine under this run's version (each bad row once); ``units``
        (every configured unit) lets it quarantine rows of a null or unknown unit."""
        executing = the_plan.executing()
        done_before: set[tuple[int, str, int]] = set()
        for attempt in range(1, try_number):
            earlier = read_document(f"{round_dir}/attempt-{attempt}/manifest.json")
            if not isinstance(earlier, dict) or earlier.get("status") == "failed":
                continue
            for entry in PartitionsManifest.from_json(earlier).work_units:
                if entry.status == "succeeded":
                    done_before.add((entry.partition_start, entry.unit, entry.range_start))
        pending = [u for u in executing if (u.partition_start, u.unit, u.range_start) not in done_before]
        if done_before:
            self.log.info(
                "%s work units succeeded in an earlier attempt of this run and are not re-executed",
                len(executing) - len(pending),
            )
        manifests: list[PartitionsManifest] = []
        outcome: dict[tuple[int, str], str] = {(start, unit): "succeeded" for start, unit, _ in done_before}
        if pending:
            request = PartitionsRequest(
                pipeline=self.pipeline,
                run_id=run.run_id,
                work_units=[_work_unit_request(u) for u in pending],
                source=self.source,
                source_format=self.source_format,
                time_column=self.time_column,
                unit_column=self.unit_column,
                source_partition_column=self.source_partition_column,
                source_partition_timezone=self.source_partition_timezone,
                transform_sql=self.transform_sql,
                transform_callable=self.transform_callable,
                target=self.target,
                round_out=f"{round_dir}/attempt-{try_number}",
                units=list(units) if self.unit_column else None,
                quarantine_path=run.store.pipeline_url(self.pipeline, "quarantine"),
                version=run.version,
                timezone=self.spec.timezone,
            )
            self.log.info("%s work units of %s execute", len(pending), self.pipeline)
            manifest = self.run_job(
                request, PartitionsManifest, f"partitions job for {self.pipeline!r}", f"wm-partitions-{self.pipeline}"
            )
            manifests.append(manifest)
            for entry in manifest.work_units:
                outcome[(entry.partition_start, entry.unit)] = entry.status
            self._log_manifest(manifest)
        results = [
            UnitResult(
                u.partition_start,
                u.partition_end,
                u.unit,
                UnitStatus.SUCCEEDED if outcome.get((u.partition_start, u.unit)) == "succeeded" else UnitStatus.FAILED,
            )
            for u in executing
        ]
        return results, manifests

    # ------------------------------------------------------------------------------------------ logging

    def _log_plan(self, the_plan: Plan) -> None:
        rows = the_plan.summary()
        widths = [max(len("partitions"), *(len(r[0]) for r in rows))] if rows else [10]
        lines = [f"{'partitions':<{widths[0]}}  {'decision':<8}  {'unit':<12} {'count':>6}  reason"]
        for label, verdict, unit, count, reason in rows[:PLAN_ROWS_IN_XCOM]:
            lines.append(f"{label:<{widths[0]}}  {verdict:<8}  {unit:<12} {count:>6}  {reason}")
        if len(rows) > PLAN_ROWS_IN_XCOM:
            lines.append(f"... {len(rows) - PLAN_ROWS_IN_XCOM} more rows")
        self.log.info(
            "Plan of %s at %s (cut-off %s): %s work units execute\n%s",
            self.pipeline,
            format_ms(the_plan.now_ms),
            format_ms(the_plan.cutoff_ms),
            len(the_plan.executing()),
            "\n".join(lines),
        )

    def _log_manifest(self, manifest: PartitionsManifest) -> None:
        totals = manifest.totals
        self.log.info(
            "Job %s: %s work units, %s failed, %s rows read, %s written; bad rows: %s quarantined%s, %s already "
            "quarantined by an earlier run%s; quarantine: %s",
            manifest.status,
            totals.work_units,
            totals.failed,
            totals.rows_read,
            totals.rows_written,
            totals.quarantined,
            f" {manifest.quarantine}" if manifest.quarantine else "",
            totals.quarantined_seen_before,
            f" {manifest.quarantine_seen_before}" if manifest.quarantine_seen_before else "",
            manifest.quarantine_path,
        )
        self._warn_bad_units(manifest)
        for entry in manifest.work_units:
            if entry.status == "failed":
                self.log.error("Work unit %s/%s failed: %s", entry.wm_partition, entry.unit or "-", entry.error)

    def _warn_bad_units(self, manifest: PartitionsManifest) -> None:
        """Rows whose unit is null or names no configured unit belong to no work unit: say so, with examples.

        Example: ``3 new rows of orders have a null or unknown region (unit_column): 1 null, 2 of no configured
        unit such as ['asia']; configured units: ['eu', 'us']. They are quarantined in ..., not extracted``.
        """
        null = manifest.quarantine.get(QuarantineReason.NULL_UNIT.value, 0)
        unknown = manifest.quarantine.get(QuarantineReason.UNKNOWN_UNIT.value, 0)
        if not null and not unknown:
            return
        self.log.warning(
            "%s new rows of %s have a null or unknown %s (unit_column): %s null, %s of no configured unit such as "
            "%s; configured units: %s. They are quarantined in %s, not extracted",
            null + unknown,
            self.source,
            self.unit_column,
            null,
            unknown,
            manifest.unknown_unit_samples,
            self.units
            if isinstance(self.units, list)
            else f"the values of {self.units['column']} in {self.units['path']}",
            manifest.quarantine_path,
        )
