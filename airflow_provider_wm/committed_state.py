"""Where a committed state document is kept, and the checked commit: the asset state store (primary, with an
``asset``) and an Airflow Variable (mirror; the only copy without an asset). The documents themselves and their
kinds are in :mod:`airflow_provider_wm.state`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from airflow.sdk import Variable

__all__ = [
    "AssetStateAccessor",
    "CommittedState",
    "CutoffConflict",
    "StateDamaged",
    "StateDocument",
    "StateKind",
    "parse_state_document",
    "read_state_variable",
]


class CutoffConflict(RuntimeError):
    """Another run committed a newer cut-off while this one was running."""


class StateDamaged(ValueError):
    """A committed state document that cannot be read: the message names the Variable (or file) and the value."""


T = TypeVar("T")


def read_state_variable(key: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """The document in the Variable ``key`` parsed by ``parse``; None when the Variable is absent or empty.

    A value that is not a state document (not JSON, ``null``, ``[]``, ``{}``, a field missing or of the wrong
    type) fails with :class:`StateDamaged` naming the Variable, never a bare ``KeyError``.
    """
    return parse_state_document(Variable.get(key, default=None), f"Variable {key!r}", parse)


def parse_state_document(raw: Any, where: str, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """``raw`` (a JSON text or an already decoded object) parsed by ``parse``; None when absent or empty.

    Example: ``parse_state_document('{"a": 1}', "Variable 'x'", parse)`` is ``parse({"a": 1})``;
    ``parse_state_document("[]", "Variable 'x'", parse)`` fails with :class:`StateDamaged` ("Variable 'x' does not
    hold a state document (it holds a JSON list, not an object)...").
    """
    if raw in (None, ""):
        return None
    try:
        data = raw if isinstance(raw, dict) else json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError(f"it holds a JSON {type(data).__name__}, not an object")
        return parse(data)
    except (ValueError, KeyError, TypeError) as exc:
        problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise StateDamaged(
            f"{where} does not hold a state document ({problem}); its value begins {str(raw)[:80]!r}. "
            "Restore it (the asset state store, the Variable and the store's state.json keep copies), or delete "
            "both the asset state store's copy and the Variable to start over."
        ) from None


class AssetStateAccessor(Protocol):
    """Airflow's ``context["asset_state_store"][asset]`` (``AssetStateStoreAccessor``): get and set by key."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


class StateDocument(Protocol):
    """A committed state document: ``version`` counts commits."""

    @property
    def version(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=StateDocument)


@dataclass(frozen=True)
class StateKind(Generic[S]):
    """One kind of state document: its Variable (``<prefix><name>``), its asset state store key, how it is
    parsed and what must not go back between two commits (``forward`` raises :class:`CutoffConflict`)."""

    what: str
    variable_prefix: str
    asset_key: str
    parse: Callable[[dict[str, Any]], S]
    forward: Callable[[str, S, S], None]
    description: str
    indent: int | None

    def variable_key(self, name: str) -> str:
        return f"{self.variable_prefix}{name}"

    def asset_state_key(self, name: str) -> str:
        """The key of ``name``'s document in its asset's state store, ``<asset_key>/<name>``: two pipelines of
        one kind that share an asset keep two documents. E.g. ``controller_cutoff/orders``."""
        return f"{self.asset_key}/{name}"


_log = logging.getLogger(__name__)


class CommittedState(Generic[S]):
    """The committed state of one controller or pipeline: in its asset's state store (the primary copy, when the
    operator has an ``asset``) and in its Variable (a mirror with the same document; the only copy without an
    asset).

    Which copy counts (:meth:`read`), when both exist and disagree: **the higher version wins** and a warning
    names both. A Variable ahead of the asset state store was committed by a version of this provider that kept
    its state only in the Variable, after the migration (a provider downgrade); a Variable behind it is a restored
    or edited mirror, or a commit interrupted between its two writes: the next commit overwrites it. Equal versions
    with different documents: the asset state store wins. Only a Variable (an older version of the provider
    committed it): it is read, and the next successful run writes the asset state store too (migration, logged).

    :meth:`commit` is a check-then-write of both: the version read at the start must still be the current one
    (by the same rule), nothing may go back (``kind.forward``), then the asset state store is written, then the
    Variable. A failure between the two writes leaves the Variable one version behind, which the rule above
    resolves in favour of the asset state store; readers of the mirror alone (a rollup reading its upstream)
    see the previous version, which is safe: they read less, never more.

    Example: the asset holds version 7, the Variable version 6 (restored from a backup): :meth:`read` returns
    version 7 and warns; the next run commits version 8 to both.
    """

    def __init__(
        self, kind: StateKind[S], name: str, asset_state: AssetStateAccessor | None = None, log: Any = None
    ) -> None:
        self.kind = kind
        self.name = name
        self.asset_state = asset_state
        self.log = log or _log

    @property
    def what(self) -> str:
        return f"{self.kind.what} {self.name!r}"

    def read(self) -> S | None:
        """The committed document by the rule above (None: nothing committed yet)."""
        return self._choose(*self._copies(), quiet=False)

    def commit(self, new: S, expected: S | None) -> None:
        """Write ``new`` to both copies if the committed state is still ``expected`` and nothing goes back."""
        primary, mirror = self._copies()
        current = self._choose(primary, mirror, quiet=True)
        current_version = current.version if current is not None else 0
        expected_version = expected.version if expected is not None else 0
        if current_version != expected_version:
            raise CutoffConflict(
                f"{self.what}: the state moved from version {expected_version} to {current_version} while this "
                "run was computing; not overwriting it. A retry starts from the new state."
            )
        if current is not None:
            self.kind.forward(self.what, current, new)
        document = new.to_json()
        if self.asset_state is not None:
            self.asset_state.set(self.asset_state_key, document)
        compact = self.kind.indent is None
        try:
            Variable.set(
                self.variable_key,
                json.dumps(
                    document, indent=self.kind.indent, separators=(",", ":") if compact else None, sort_keys=True
                ),
                description=self.kind.description.format(name=self.name),
            )
        except Exception:
            if self.asset_state is None:  # the Variable is the only copy: the commit failed
                raise
            # committed in the primary copy: failing the task now would fail a run whose state has advanced
            self.log.warning(
                "%s: committed version %s to the asset state store, but the mirror Variable %s could not be "
                "written; the next commit rewrites it",
                self.what,
                new.version,
                self.variable_key,
                exc_info=True,
            )
        if self.asset_state is not None and primary is None and mirror is not None:
            self.log.info(
                "%s: migrated from the Variable %s to the asset state store key %r (version %s; the Variable "
                "stays as a mirror)",
                self.what,
                self.variable_key,
                self.asset_state_key,
                new.version,
            )

    @property
    def variable_key(self) -> str:
        return self.kind.variable_key(self.name)

    @property
    def asset_state_key(self) -> str:
        return self.kind.asset_state_key(self.name)

    def _copies(self) -> tuple[S | None, S | None]:
        """(the asset state store's document, the Variable's); the first is None without an asset."""
        mirror = read_state_variable(self.variable_key, self.kind.parse)
        if self.asset_state is None:
            return None, mirror
        where = f"{self.what}: the asset state store key {self.asset_state_key!r}"
        return parse_state_document(self.asset_state.get(self.asset_state_key), where, self.kind.parse), mirror

    def _choose(self, primary: S | None, mirror: S | None, *, quiet: bool) -> S | None:
        if primary is None:
            if self.asset_state is not None and mirror is not None and not quiet:
                self.log.info(
                    "%s: nothing in the asset state store key %r yet; reading version %s from the Variable %s "
                    "(written by an older version of airflow-provider-wm). The next successful run migrates it.",
                    self.what,
                    self.asset_state_key,
                    mirror.version,
                    self.variable_key,
                )
            return mirror
        if mirror is None:
            return primary
        if mirror.version > primary.version:
            if not quiet:
                self.log.warning(
                    "%s: the Variable %s holds version %s, ahead of the asset state store (version %s): the higher "
                    "version wins",
                    self.what,
                    self.variable_key,
                    mirror.version,
                    primary.version,
                )
            return mirror
        if not quiet and (mirror.version < primary.version or mirror.to_json() != primary.to_json()):
            self.log.warning(
                "%s: the Variable %s (version %s) differs from the asset state store (version %s): the asset state "
                "store wins and the next commit rewrites the Variable",
                self.what,
                self.variable_key,
                mirror.version,
                primary.version,
            )
        return primary
