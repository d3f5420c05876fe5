"""Idle-aware watermark coalescing over N inputs (Hazelcast Jet).

A watermark ``M`` on a stream says that events with a time below ``M`` are late. When N input streams merge
into one, the output watermark is *coalesced* from the inputs:

1. **Monotonicity.** An input's watermark never goes back: the store publishes a stream's watermark only when
   it is higher than the one it holds (:meth:`~airflow_provider_wm.hooks.watermark_store.WatermarkStoreHook.publish`),
   so every snapshot this module sees is already monotone per input.
2. **Minimum.** The output is the minimum of the current watermarks of the inputs that are neither idle nor
   done. It is emitted only when it is higher than the last output, so the output is strictly increasing.
3. **No watermark yet.** An input that has never produced a watermark, and is neither idle nor done, holds
   the output back: no output until it does.
4. **Idle.** An idle input is excluded from the minimum. Once it advances again it re-enters with its
   watermark, which holds the output back until the minimum passes the last output; the output never goes
   back. Across DAG runs an input is idle when its watermark has not advanced for a timeout (:func:`is_idle`).
5. **All idle.** When every input that is not done is idle, policy ``"highest"`` (Jet's) emits the highest
   watermark observed on any input, if that is higher than the last output; ``"wait"`` emits nothing until an
   input recovers.
6. **Done.** A done input counts as +infinity: it never holds anything back again.
7. **Keys.** A keyed watermark (``orders:eu``) is an input of its own, named by its label
   (:mod:`airflow_provider_wm.core.names`).

The rule is :func:`coalesce`, a pure function over a snapshot of N inputs (what a sensor or a merge reads
in one go); :func:`check_watermarks` is a sensor poke's whole decision, with :func:`is_idle` deciding idleness
across DAG runs. Jet's own message-by-message test vectors replay through :func:`coalesce` in the tests.

Jet's example as successive snapshots, ``wm(0, 10), wm(1, 12) -> 10; wm(0, 11) -> 11; wm(1, 13) -> none``:

>>> coalesce({0: 10, 1: None}).emitted
False
>>> coalesce({0: 10, 1: 12}).value, coalesce({0: 11, 1: 12}, last_output=10).value
(10, 11)
>>> coalesce({0: 11, 1: 13}, last_output=11).emitted
False

The last active input going idle emits the highest watermark and reports all idle (rule 5):

>>> coalesce({0: 10, 1: 11}, idle={0, 1}, last_output=10)
CoalesceResult(value=11, emitted=True, all_idle=True, excluded=[0, 1], waiting=[])

Named inputs (``None``: no watermark yet):

>>> coalesce({"orders": 10, "deliveries": None}, idle={"deliveries"}, last_output=None)
CoalesceResult(value=10, emitted=True, all_idle=False, excluded=['deliveries'], waiting=[])
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = [
    "ALL_IDLE_POLICIES",
    "AllIdlePolicy",
    "CoalesceResult",
    "InputSeen",
    "WatermarkCheck",
    "check_policy",
    "check_watermarks",
    "coalesce",
    "is_idle",
    "last_advanced_ms",
    "watermark_as_of",
]

AllIdlePolicy = Literal["wait", "highest"]
ALL_IDLE_POLICIES: tuple[str, ...] = ("wait", "highest")

N = TypeVar("N", bound=Hashable)


class CoalesceResult(NamedTuple, Generic[N]):
    """The rule applied to one key.

    :param value: the output after this step: the new output when ``emitted``, else the last output.
    :param emitted: whether a new, higher output is emitted.
    :param all_idle: every input that is not done is idle (and at least one is).
    :param excluded: the inputs left out of the minimum (idle or done), in input order.
    :param waiting: the inputs holding the key back because they have no watermark yet, in input order.
    """

    value: int | None
    emitted: bool
    all_idle: bool
    excluded: list[N]
    waiting: list[N]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def coalesce(
    watermarks: Mapping[N, int | None],
    idle: Collection[N] = frozenset(),
    last_output: int | None = None,
    all_idle_policy: AllIdlePolicy = "highest",
    *,
    done: Collection[N] = frozenset(),
) -> CoalesceResult[N]:
    """The coalescing rule over a snapshot of N inputs for one key (rules 2-6 of the module).

    ``watermarks`` maps every input to its current watermark (``None``: none yet), ``idle`` and ``done``
    name inputs of it, and ``last_output`` is the output emitted before (``None``: none yet).

    >>> coalesce({"a": 10, "b": 12}, last_output=10)
    CoalesceResult(value=10, emitted=False, all_idle=False, excluded=[], waiting=[])
    >>> coalesce({"a": 10, "b": 12}, idle={"a", "b"}, last_output=10)
    CoalesceResult(value=12, emitted=True, all_idle=True, excluded=['a', 'b'], waiting=[])
    >>> coalesce({"a": 10, "b": 12}, idle={"a", "b"}, last_output=10, all_idle_policy="wait").emitted
    False
    >>> coalesce({"a": None, "b": 12}, done={"a"})
    CoalesceResult(value=12, emitted=True, all_idle=False, excluded=['a'], waiting=[])
    """
    if not watermarks:
        raise ValueError("watermarks={} names no input: coalescing needs at least one")
    check_policy(all_idle_policy, "all_idle_policy")
    for argument, names in (("idle", idle), ("done", done)):
        unknown = [name for name in names if name not in watermarks]
        if unknown:
            raise ValueError(f"{argument}={unknown!r} names inputs that have no entry in watermarks")
    both = [name for name in watermarks if name in idle and name in done]
    if both:
        raise ValueError(f"inputs {both!r} are both idle and done; a done input is not idle")
    bad = {name: value for name, value in watermarks.items() if value is not None and not _is_int(value)}
    if bad:
        raise ValueError(f"watermarks {bad!r} must be ints (or None: no watermark yet)")
    if last_output is not None and not _is_int(last_output):
        raise ValueError(f"last_output={last_output!r} must be an int or None")

    excluded = [name for name in watermarks if name in idle or name in done]
    active = [name for name in watermarks if name not in idle and name not in done]
    waiting = [name for name in active if watermarks[name] is None]
    present = [value for name in active if (value := watermarks[name]) is not None]
    all_idle = not active and any(name in idle for name in watermarks)
    candidate: int | None = None
    if active:
        candidate = None if waiting else min(present)
    elif all_idle and all_idle_policy == "highest":
        candidate = max((value for value in watermarks.values() if value is not None), default=None)
    emitted = candidate is not None and (last_output is None or candidate > last_output)
    return CoalesceResult(candidate if emitted else last_output, emitted, all_idle, excluded, waiting)


# ------------------------------------------------------------------------ what a sensor checks, per poke


def check_policy(when_all_idle: object, argument: str = "when_all_idle") -> AllIdlePolicy:
    """``when_all_idle`` checked: ``"wait"`` or ``"highest"``."""
    if when_all_idle not in ALL_IDLE_POLICIES:
        raise ValueError(f"{argument}={when_all_idle!r} must be one of {', '.join(map(repr, ALL_IDLE_POLICIES))}")
    return when_all_idle  # type: ignore[return-value]


def is_idle(last_advanced_ms: int | None, reference_ms: int, idle_timeout_ms: int | None) -> bool:
    """Jet's idle rule across DAG runs: an input is idle when its watermark last advanced at least
    ``idle_timeout_ms`` before ``reference_ms`` (the run's logical time). Without a timeout nothing is idle;
    an input that never advanced (no watermark yet) is not idle: it holds the output back (rule 3).

    >>> is_idle(40, 100, 60), is_idle(41, 100, 60), is_idle(None, 100, 60), is_idle(0, 100, None)
    (True, False, False, False)
    """
    return (
        idle_timeout_ms is not None
        and last_advanced_ms is not None
        and reference_ms - last_advanced_ms >= (idle_timeout_ms)
    )


def last_advanced_ms(record: Mapping[str, Any]) -> int | None:
    """When a store record's watermark last advanced: its ``computed_at_ms`` (a record from before that
    field: ``published_at_ms``, the best known)."""
    value = record.get("computed_at_ms")
    if value is None:
        value = record.get("published_at_ms")
    return None if value is None else int(value)


def watermark_as_of(log: Iterable[tuple[int, int]], at_ms: int) -> tuple[int, int] | None:
    """The entry ``(computed_at_ms, lower_ms)`` of a watermark log that stood at ``at_ms``: the highest watermark
    computed at or before it (``None``: none yet). A run for time ``T`` that reads its input up to ``T`` must pair
    it with this one, not with a later watermark: in a catch-up, the round of ``T + 1h`` may have published
    already, and its watermark covers events that arrive after ``T``, which the next run reads too late.

    >>> watermark_as_of([(100, 10), (200, 20), (300, 30)], 250)
    (200, 20)
    >>> watermark_as_of([(100, 10)], 99) is None
    True
    """
    standing = [(lower, computed) for computed, lower in log if computed <= at_ms]
    if not standing:
        return None
    lower, computed = max(standing)
    return computed, lower


class InputSeen(NamedTuple):
    """One input as one poll saw it: its watermark (``None``: no record yet), when it last advanced, idle."""

    lower_ms: int | None
    last_advanced_ms: int | None
    idle: bool


class WatermarkCheck(NamedTuple):
    """:func:`check_watermarks` applied to one read of every input.

    :param watermark_ms: the coalesced watermark (``None``: an input without a record holds it back, or all
        inputs are idle and the policy is ``"wait"``).
    :param idle: the idle inputs (left out of the minimum), ``waiting``: those without a record, in order.
    :param inputs: each input's :class:`InputSeen`, by label, in input order.
    """

    watermark_ms: int | None
    threshold_ms: int
    all_idle: bool
    idle: list[str]
    waiting: list[str]
    inputs: dict[str, InputSeen]

    @property
    def passed(self) -> bool:
        return self.watermark_ms is not None and self.watermark_ms >= self.threshold_ms


def check_watermarks(
    records: Mapping[str, Mapping[str, Any] | None],
    threshold_ms: int,
    *,
    reference_ms: int | None = None,
    idle_timeout_ms: int | None = None,
    when_all_idle: AllIdlePolicy = "wait",
) -> WatermarkCheck:
    """What a stream sensor decides from the latest store record of every input (by label): :func:`is_idle`
    per input (``reference_ms`` defaults to ``threshold_ms``, the run's interval end), then :func:`coalesce`
    of their ``lower_ms`` without the idle ones; when all are idle, ``when_all_idle`` decides: ``"wait"``
    (nothing) or ``"highest"`` (Jet).

    >>> check = check_watermarks(
    ...     {"a": {"lower_ms": 30, "computed_at_ms": 95}, "b": {"lower_ms": 10, "computed_at_ms": 40}},
    ...     25, reference_ms=100, idle_timeout_ms=50)
    >>> check.watermark_ms, check.idle, check.passed
    (30, ['b'], True)
    """
    if not records:
        raise ValueError("records={} names no input: there is nothing to wait for")
    reference = threshold_ms if reference_ms is None else reference_ms
    inputs: dict[str, InputSeen] = {}
    for label, record in records.items():
        if record is None:
            inputs[label] = InputSeen(None, None, False)
            continue
        advanced = last_advanced_ms(record)
        inputs[label] = InputSeen(int(record["lower_ms"]), advanced, is_idle(advanced, reference, idle_timeout_ms))
    idle = [label for label, seen in inputs.items() if seen.idle]
    result = coalesce({label: seen.lower_ms for label, seen in inputs.items()}, idle, None, check_policy(when_all_idle))
    return WatermarkCheck(result.value, int(threshold_ms), result.all_idle, idle, list(result.waiting), inputs)
