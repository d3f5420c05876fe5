"""The one skeleton of the stateful Spark operators (controller watermark, windowed aggregate, incremental
partitions)::

    read the committed state -> covered by a later run? -> build the request -> run the job (connect or
    submit) -> read its manifest -> publish the outputs -> XCom and asset event -> commit the state, last

Each operator only builds its request and interprets its manifest (:meth:`StatefulSparkOperator.compute`);
reading, the covered-run rule, the mirrors and the checked commit (to the asset state store, primary, and the
Variable, see :class:`~airflow_provider_wm.state.CommittedState`) are here once. A failure anywhere before
the commit leaves the committed state as it was: the retry starts from the same state and replaces its own
outputs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from airflow.sdk import Asset, BaseOperator, Context

from airflow_provider_wm.arguments import (
    add_asset_outlet,
    asset_argument,
    one_task_at_a_time,
    require_paths,
    spark_conf_argument,
)
from airflow_provider_wm.contracts import JobManifest, JobRequest
from airflow_provider_wm.documents import exists, read_document, write_document
from airflow_provider_wm.hooks.spark_job import SparkJobHook
from airflow_provider_wm.hooks.watermark_store import WatermarkStoreHook
from airflow_provider_wm.lineage import RunLineage, operator_lineage
from airflow_provider_wm.links import WatermarksLink
from airflow_provider_wm.mapped import ChecksMappedArguments
from airflow_provider_wm.state import AssetStateAccessor, CommittedState, StateDamaged, StateKind
from airflow_provider_wm.timeutil import format_ms, is_templated, to_epoch_ms

__all__ = ["JobRound", "Outcome", "StatefulSparkOperator", "run_interval"]


class VersionedState(Protocol):
    """A committed state document: ``version`` counts commits, ``run_id`` names the run that made it."""

    @property
    def version(self) -> int: ...

    @property
    def run_id(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


StateT = TypeVar("StateT", bound=VersionedState)
ManifestT = TypeVar("ManifestT", bound=JobManifest)


@dataclass(frozen=True)
class JobRound(Generic[StateT]):
    """What one run of a stateful operator starts from."""

    context: Context
    store: WatermarkStoreHook
    committed: StateT | None
    now_ms: int
    run_id: str

    @property
    def version(self) -> int:
        """The version this run commits: one above the committed one."""
        return (self.committed.version if self.committed is not None else 0) + 1

    @property
    def run_folder(self) -> str:
        """``<logical ms>-<run id>``: a retry of the same run writes to the same folder."""
        return f"{self.now_ms}-{re.sub(r'[^A-Za-z0-9._-]', '_', self.run_id)}"


@dataclass
class Outcome(Generic[StateT]):
    """What a run computed: the document to commit (None: nothing to commit, e.g. a dry run), the XCom
    summary, the asset event's ``extra`` and its partition keys (one asset event per key; none: one event
    without a key)."""

    document: StateT | None
    summary: dict[str, Any]
    asset_extra: dict[str, Any] = field(default_factory=dict)
    partition_keys: list[str] = field(default_factory=list)


class StatefulSparkOperator(ChecksMappedArguments, BaseOperator, Generic[StateT]):
    """Base of the operators that run a Spark job and carry a committed state between runs.

    :param store_path: the watermark store (requests, manifests, published watermarks): an absolute path or
        a URL. Templated.
    :param logical_time: the run's clock, default ``data_interval_end`` (``run_after`` in a run without a data
        interval); never later than now. Templated.
    :param spark_conn_id: a ``spark_connect`` connection (the job runs in the task as a Spark Connect client),
        a ``spark`` connection (``spark-submit``), or ``None``: the embedded Spark Connect server on loopback.
    :param spark_conf: Spark options for the job, ``{"spark.executor.memory": "2g"}`` (``--conf`` in submit
        mode; runtime SQL options of the task's session in connect mode).
    :param asset: the Asset this operator produces: an outlet, an asset event per run, and the committed state
        in its asset state store (the primary copy; the Variable mirrors it).
    """

    operator_extra_links = (WatermarksLink(),)
    state_xcom_key: ClassVar[str] = "state"
    state_kind: ClassVar[StateKind[Any]]

    def __init__(
        self,
        *,
        store_path: str,
        logical_time: str | None = None,
        spark_conn_id: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        asset: Asset | None = None,
        max_active_tis_per_dag: int = 1,
        **kwargs: Any,
    ) -> None:
        add_asset_outlet(asset_argument(asset), kwargs)
        super().__init__(max_active_tis_per_dag=one_task_at_a_time(max_active_tis_per_dag), **kwargs)
        require_paths(store_path=store_path)
        if logical_time is not None and not is_templated(logical_time):
            to_epoch_ms(logical_time, "logical_time")
        if spark_conn_id is not None and (not isinstance(spark_conn_id, str) or not spark_conn_id.strip()):
            raise ValueError(f"spark_conn_id={spark_conn_id!r} must be a connection id or None (embedded)")
        self.store_path = store_path
        self.logical_time = logical_time
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf_argument(spark_conf)
        self.asset = asset
        self.run_lineage: RunLineage | None = None  # set by execute() for get_openlineage_facets_on_complete

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """A mapped task (``.partial(...).expand(...)``) as :meth:`__init__` makes a task: the scheduler, which
        never builds the instances, sees ``asset`` as an outlet and runs its instances one at a time (across map
        indexes too: each may be a pipeline of its own, and they run one after another). ``asset`` is given to
        ``partial``; in ``expand`` the scheduler could not know it (see :meth:`committed_state`). The arguments are
        checked when the DAG is parsed (:class:`~airflow_provider_wm.mapped.ChecksMappedArguments`)."""
        add_asset_outlet(asset_argument(kwargs.get("asset")), kwargs)
        kwargs["max_active_tis_per_dag"] = one_task_at_a_time(kwargs.get("max_active_tis_per_dag", 1))
        return super().partial(**kwargs)

    # ------------------------------------------------------------------------------- what subclasses give

    def state_name(self) -> str:
        """The controller's or pipeline's name: its Variable is ``<state_kind.variable_prefix><name>``."""
        raise NotImplementedError

    def committed_state(self, context: Context) -> CommittedState[Any]:
        """Where the committed state is kept: the asset state store (with an ``asset``) and the Variable."""
        asset_state: AssetStateAccessor | None = None
        if self.asset is not None:
            if "asset_state_store" not in context:
                raise ValueError(
                    f"asset={self.asset!r} is not an outlet of the task as the scheduler knows it: give a mapped "
                    "task's asset to partial(), not expand()"
                )
            asset_state = context["asset_state_store"][self.asset]
        return CommittedState(self.state_kind, self.state_name(), asset_state, self.log)

    def read_committed(self, context: Context) -> StateT | None:
        return self.committed_state(context).read()

    def covered_until(self, committed: StateT) -> int | None:
        """The committed cut-off: a run at or before it has nothing to do."""
        raise NotImplementedError

    def is_covered(self, context: Context, committed: StateT, now_ms: int) -> bool:
        """Whether the run's work is done (by a later run, or by an earlier attempt of this one): its logical time
        is at or before the committed cut-off (:meth:`covered_until`)."""
        until = self.covered_until(committed)
        return until is not None and now_ms <= until

    def covered(self, context: Context, committed: StateT, until_ms: int | None, now_ms: int) -> dict[str, Any]:
        """The XCom of a run covered by a later one; it changes nothing."""
        raise NotImplementedError

    def state_folder(self) -> str:
        """The store's folder of the operator's states (``pipelines``: ``<store>/pipelines/<name>/``)."""
        return "pipelines"

    def check_rendered(self) -> None:
        """Checks of the arguments as rendered that :meth:`__init__` makes of literal ones (a template is checked
        only now), beyond :meth:`locations`'."""

    def locations(self) -> dict[str, str]:
        """The paths and URLs the operator reads and writes, by argument name (the store's too), as rendered:
        :meth:`execute` checks them again (:func:`~airflow_provider_wm.arguments.require_paths`), as a templated
        one is checked only once rendered."""
        return {"store_path": self.store_path}

    def snapshot_paths(self, committed: StateT) -> dict[str, str | None]:
        """The files the committed state points to, by the name of their field: each must exist."""
        return {}

    def compute(self, run: JobRound[StateT]) -> Outcome[StateT]:
        """Build the request, :meth:`run_job` it, and read the manifest into the next state and the summary."""
        raise NotImplementedError

    def publish_outputs(self, run: JobRound[StateT], outcome: Outcome[StateT]) -> None:
        """Output watermarks, written before the commit (idempotent and monotone: a run whose commit is refused
        cannot move them back, and a reader of a watermark never sees data that is not committed yet)."""

    def mirror_document(self, document: StateT, summary: dict[str, Any] | None) -> dict[str, Any] | None:
        """The store's copy of a committed state (``pipelines/<name>/state.json``: what sensors and the UI read),
        with the run's ``summary`` (None: a covered run repairing it); None: the operator keeps no copy. Written
        right after the commit (a run whose commit is refused never writes it) and repaired by a covered run."""
        return None

    def lineage(self, document: StateT, summary: dict[str, Any] | None) -> RunLineage | None:
        """What the run read, wrote and committed, for OpenLineage (``summary`` None: a covered run)."""
        return None

    def commit(self, context: Context, document: StateT, committed: StateT | None) -> None:
        """The checked write of the next state (asset state store, then Variable): the very last step."""
        self.committed_state(context).commit(document, committed)

    # ------------------------------------------------------------------------------------------ skeleton

    def round_time_ms(self, context: Context) -> int:
        """The run's logical time in epoch ms: ``logical_time``, by default the run's ``data_interval_end``, or
        when the run has no data interval (an asset-triggered run, a manual one without a logical date) the time
        it was due to run (``run_after``). A time ahead of the wall clock is refused: input that arrives between
        now and then would be skipped by every later run."""
        moment: Any = self.logical_time
        if moment is None:
            moment = context.get("data_interval_end") or context["dag_run"].run_after
        now_ms = to_epoch_ms(moment, "logical_time")
        if now_ms > time.time() * 1000:
            raise ValueError(
                f"logical_time={self.logical_time!r} ({format_ms(now_ms)}) is later than the current time: data "
                "arriving between now and then would be skipped by every later run"
            )
        return now_ms

    def execute(self, context: Context) -> dict[str, Any]:
        require_paths(**self.locations())  # once more as rendered: a template is checked only now
        self.check_rendered()
        now_ms = self.round_time_ms(context)
        committed = self.read_committed(context)
        if committed is not None and self.is_covered(context, committed, now_ms):
            return self._covered_run(context, committed, now_ms)
        if committed is not None:
            self.verify_snapshots(committed)
        run = JobRound(context, WatermarkStoreHook(self.store_path), committed, now_ms, str(context["run_id"]))
        try:
            outcome = self.compute(run)
        except Exception as failure:
            self._raise_if_snapshot_unreadable(committed, failure)
            raise
        if outcome.document is None:
            return outcome.summary
        self.publish_outputs(run, outcome)
        self._emit_asset_event(context, outcome)
        self.run_lineage = self.lineage(outcome.document, outcome.summary)  # before the commit: it may fail
        # before the commit: a retry after a failure past the commit publishes this outcome again
        write_document(self._outcome_url(), self._outcome_record(outcome))
        self.commit(context, outcome.document, committed)
        # the document committed, never one whose commit was refused (a covered retry pushes no state XCom)
        context["ti"].xcom_push(key=self.state_xcom_key, value=outcome.document.to_json())
        mirror = self.mirror_document(outcome.document, outcome.summary)
        if mirror is not None:  # a failure fails the task: its retry is covered and repairs the copy
            run.store.write_pipeline_state(self.state_name(), mirror, restart=committed is None)
        return outcome.summary

    def _covered_run(self, context: Context, committed: StateT, now_ms: int) -> dict[str, Any]:
        """A run whose work is done. Done by an earlier attempt of this very run (it committed, then failed before
        the task succeeded: the store's copy, a lost worker): its outcome is published again, the XCom, the asset
        event and its partition keys as that attempt made them. Done by another run: nothing changes."""
        earlier = self._earlier_attempt(context, committed)
        if earlier is not None:
            self.log.info(
                "An earlier attempt of this run committed version %s: publishing its outcome again", committed.version
            )
            self._repair_mirror(committed, earlier.summary)
            self._emit_asset_event(context, earlier)
            self.run_lineage = self.lineage(committed, earlier.summary)
            context["ti"].xcom_push(key=self.state_xcom_key, value=committed.to_json())
            return earlier.summary
        self._repair_mirror(committed, None)
        covered = self.covered(context, committed, self.covered_until(committed), now_ms)
        self.run_lineage = self._with_covered_by(self.lineage(committed, None), committed.run_id)
        return covered

    def _emit_asset_event(self, context: Context, outcome: Outcome[Any]) -> None:
        if self.asset is not None:
            context["outlet_events"][self.asset].extra = outcome.asset_extra
            if outcome.partition_keys:
                context["outlet_events"][self.asset].add_partitions(outcome.partition_keys)

    def _outcome_url(self) -> str:
        """The outcome of the last run that went as far as its commit (:meth:`_outcome_record`)."""
        return WatermarkStoreHook(self.store_path).url(self.state_folder(), self.state_name(), "outcome.json")

    @staticmethod
    def _outcome_record(outcome: Outcome[Any]) -> dict[str, Any]:
        assert outcome.document is not None
        return {
            "version": outcome.document.version,
            "run_id": outcome.document.run_id,
            "summary": outcome.summary,
            "asset_extra": outcome.asset_extra,
            "partition_keys": outcome.partition_keys,
        }

    def _earlier_attempt(self, context: Context, committed: StateT) -> Outcome[StateT] | None:
        """The outcome this run committed in an earlier attempt: the committed version is this run's, and the
        outcome recorded before that commit is of that version (None otherwise)."""
        if committed.run_id != str(context["run_id"]):
            return None
        try:
            record = read_document(self._outcome_url())
        except ValueError as damaged:
            self.log.warning("Cannot publish the earlier attempt's outcome again: %s", damaged)
            return None
        if not isinstance(record, dict) or (record.get("version"), record.get("run_id")) != (
            committed.version,
            committed.run_id,
        ):
            return None
        return Outcome(
            committed,
            dict(record.get("summary") or {}),
            dict(record.get("asset_extra") or {}),
            [str(key) for key in record.get("partition_keys") or []],
        )

    def _repair_mirror(self, committed: StateT, summary: dict[str, Any] | None) -> None:
        """A covered run rewrites the store's copy when it is missing or behind the committed version (its run was
        killed, or its write failed, between the commit and the copy)."""
        mirror = self.mirror_document(committed, summary)
        if mirror is None:
            return
        store = WatermarkStoreHook(self.store_path)
        copy = store.read_pipeline_state(self.state_name())
        version = None if copy is None else copy.get("version")
        if not isinstance(version, int) or version < committed.version:
            self.log.info("Rewriting the store's copy of version %s (it held %s)", committed.version, version)
            store.write_pipeline_state(self.state_name(), mirror)

    @staticmethod
    def _with_covered_by(lineage: RunLineage | None, run_id: str) -> RunLineage | None:
        return None if lineage is None else replace(lineage, covered_by=run_id)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage's hook (called by its listener when the task succeeded): the input and output datasets and
        the ``watermark`` run facet of this run (see :mod:`airflow_provider_wm.lineage`); None without the
        OpenLineage provider."""
        return operator_lineage(self.run_lineage)

    def verify_snapshots(self, committed: StateT) -> None:
        """A state whose snapshot is gone is damaged: starting from nothing would let a watermark move back or
        a window never fire, so the run fails and names the missing path."""
        for field_name, path in self.snapshot_paths(committed).items():
            if path and not exists(path):
                raise StateDamaged(self._damaged(committed, field_name, path, "which does not exist"))

    def _raise_if_snapshot_unreadable(self, committed: StateT | None, failure: Exception) -> None:
        """A job that failed reading a file of the committed snapshot: the state is damaged, and the error says so
        and what to do (Spark's error names only the file)."""
        text = str(failure)
        if committed is None or "FAILED_READ_FILE" not in text:
            return
        for field_name, path in self.snapshot_paths(committed).items():
            if path and path.rstrip("/") + "/" in text:
                raise StateDamaged(self._damaged(committed, field_name, path, "a file of which cannot be read")) from (
                    failure
                )

    @staticmethod
    def _damaged(committed: StateT, field_name: str, path: str, what: str) -> str:
        return (
            f"the committed state (version {committed.version}) points to {field_name}={path}, {what}: restore it, "
            "or delete the state (its Variable and its asset state store key) to start over from nothing"
        )

    def run_job(self, request: JobRequest, manifest_type: type[ManifestT], what: str, name: str) -> ManifestT:
        """Run the job in the connection's mode (see :class:`SparkJobHook`) and return its manifest; ``name``
        is the Spark application's (submit mode), e.g. ``wm-controller-orders``."""
        hook = SparkJobHook(self.spark_conn_id, self.spark_conf, name=name)
        self.log.info("Running %s on %s", what, hook.describe())
        manifest = hook.run(request, manifest_type, what)
        for file in manifest.unreadable_files:
            self.log.warning("Set aside input file %s (its rows were not read): %s", file.path, file.reason)
        return manifest

    def covered_asset_event(self, context: Context, extra: dict[str, Any]) -> None:
        """Airflow emits an asset event for every successful task: a covered run's says nothing changed."""
        if self.asset is not None:
            context["outlet_events"][self.asset].extra = extra


def run_interval(context: Context, now_ms: int) -> tuple[int, int]:
    """The run's data interval ``[start, end)`` in epoch ms; a run without one (asset-triggered, or a manual run
    without a logical date) is the instant ``now_ms`` (its logical time): ``(now_ms, now_ms)``."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        return now_ms, now_ms
    return to_epoch_ms(start, "data_interval_start"), to_epoch_ms(end, "data_interval_end")


def template_fields_of(*names: str) -> Sequence[str]:
    """The operator's templated arguments plus the base's (``store_path``, ``logical_time``)."""
    return (*names, "store_path", "logical_time")
