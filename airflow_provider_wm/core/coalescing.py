"""Keyed, idle-aware watermark coalescing over N inputs (Hazelcast Jet).

A watermark ``M`` on a stream says that events with a time below ``M`` are late. When N input streams merge
into one, the output watermark is *coalesced* from the inputs, for each key separately:

1. **Monotonicity.** Per input and key, watermarks are strictly increasing: one that is not higher than the
   input's previous watermark for that key raises :class:`NonIncreasingWatermark` and changes nothing.
2. **Minimum.** The output is the minimum of the current watermarks of the inputs that are neither idle nor
   done. It is emitted only when it is higher than the last output, so the output is strictly increasing.
3. **No watermark yet.** An input that has never produced a watermark for a key, and is neither idle nor
   done, holds that key back: no output for the key until it does.
4. **Idle.** An idle input is excluded from the minimum until it produces an event or a watermark (of any
   key). It then re-enters the minimum with its last watermark (or none: rule 3), which holds the output
   back until the minimum passes the last output again; the output never goes back.
5. **All idle.** When every input that is not done is idle, the output is the highest watermark observed on
   any input, if that is higher than the last output, and the state reports ``all_idle`` (Jet's behaviour,
   policy ``"highest"``). The one-shot :func:`coalesce` also offers policy ``"wait"``: emit nothing until
   an input recovers.
6. **Done.** A done input counts as +infinity: it never holds anything back again and takes no more
   watermarks, events or idle messages. When every input is done, nothing more is emitted.
7. **Keys.** Each key is coalesced independently, as if it were a separate stream. Idleness, events and
   done belong to an input and apply to all of its keys.

The rule is :func:`coalesce`, a pure function over a snapshot of N inputs (what a sensor sees in one poke;
:func:`check_watermarks` is that poke's whole decision, with :func:`is_idle` deciding idleness across DAG
runs); :class:`Coalescer` is the state machine a stream applies it with, one message at a time (Jet's own
test vectors run through it), and its :meth:`~Coalescer.snapshot` carries the state between runs.

Worked examples, two inputs. ``0:wm10 -> none; 1:wm11 -> 10; 1:idle -> none; 0:idle -> 11 (all idle)``:

>>> c = Coalescer(2)
>>> c.watermark(0, 10), c.watermark(1, 11), c.idle(1), c.idle(0), c.all_idle
(None, 10, {}, {'': 11}, True)

``0:idle; 1:wm11 -> 11; event on 0; 1:wm12 -> none (0 has no watermark); 0:wm13 -> 12``:

>>> c = Coalescer(2)
>>> c.idle(0), c.watermark(1, 11), c.event(0), c.watermark(1, 12), c.watermark(0, 13)
({}, 11, None, None, 12)

Jet's own example, ``wm(0, 10), wm(1, 12) -> 10; wm(0, 11) -> 11; wm(1, 13) -> none; wm(0, 14) -> 13``:

>>> c = Coalescer(2)
>>> [c.watermark(i, v) for i, v in [(0, 10), (1, 12), (0, 11), (1, 13), (0, 14)]]
[None, 10, 11, None, 13]

A done input stops holding the output back; keys are coalesced independently:

>>> c.done(0)
{}
>>> c.watermark(1, 20), c.watermark(1, 5, key="b"), c.output("b")
(20, 5, 5)

The same rule over a snapshot of named inputs (``None``: no watermark yet):

>>> coalesce({"orders": 10, "deliveries": None}, idle={"deliveries"}, last_output=None)
CoalesceResult(value=10, emitted=True, all_idle=False, excluded=['deliveries'], waiting=[])
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = [
    "ALL_IDLE_POLICIES",
    "DEFAULT_KEY",
    "SNAPSHOT_VERSION",
    "AllIdlePolicy",
    "CoalesceResult",
    "Coalescer",
    "InputDone",
    "InputSeen",
    "NonIncreasingWatermark",
    "WatermarkCheck",
    "check_policy",
    "check_watermarks",
    "coalesce",
    "is_idle",
    "last_advanced_ms",
]

DEFAULT_KEY = ""
"""The key of an unkeyed watermark."""

AllIdlePolicy = Literal["wait", "highest"]
ALL_IDLE_POLICIES: tuple[str, ...] = ("wait", "highest")
SNAPSHOT_VERSION = 1

N = TypeVar("N", bound=Hashable)


class NonIncreasingWatermark(ValueError):
    """A watermark not higher than the previous one of the same input and key (rule 1).

    >>> c = Coalescer(1)
    >>> c.watermark(0, 10, key="k")
    10
    >>> try:
    ...     c.watermark(0, 10, key="k")
    ... except NonIncreasingWatermark as err:
    ...     print(err)  # doctest: +NORMALIZE_WHITESPACE
    input 0, key 'k': watermark 10 is not higher than the previous 10;
    watermarks must be strictly increasing per input and key
    """

    def __init__(self, input: Hashable, key: str, value: int, previous: int) -> None:
        super().__init__(
            f"input {input!r}, key {key!r}: watermark {value} is not higher than the previous {previous}; "
            "watermarks must be strictly increasing per input and key"
        )
        self.input = input
        self.key = key
        self.value = value
        self.previous = previous

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.input, self.key, self.value, self.previous)


class InputDone(ValueError):
    """A watermark, event, idle message or second done on an input that is done (rule 6)."""

    def __init__(self, input: int) -> None:
        super().__init__(f"input {input} is done: it takes no more watermarks, events or idle messages")
        self.input = input

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.input,)


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


def _check_policy(policy: object) -> None:
    if policy not in ALL_IDLE_POLICIES:
        raise ValueError(f"all_idle_policy={policy!r} must be one of {', '.join(map(repr, ALL_IDLE_POLICIES))}")


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
    _check_policy(all_idle_policy)
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


class Coalescer:
    """Keyed watermark coalescing over ``inputs`` inputs (numbered ``0..inputs-1``), one message at a time.

    Every message returns what it emitted: :meth:`watermark` the new output of its key (or ``None``),
    :meth:`idle` and :meth:`done` the new outputs per key; :meth:`event` never emits. An input re-entering
    the minimum can only lower it, and when it ends an all-idle state the output already is the highest
    watermark observed (policy ``"highest"``, the only one a stream can use: with ``"wait"`` an event
    would have to emit). After every message the state is settled: applying the rule again
    (:meth:`status`) emits nothing.
    """

    def __init__(self, inputs: int) -> None:
        if not _is_int(inputs) or inputs < 1:
            raise ValueError(f"inputs={inputs!r} must be a positive int (the number of inputs)")
        self._inputs = inputs
        self._idle: set[int] = set()
        self._done: set[int] = set()
        self._watermarks: dict[str, list[int | None]] = {}
        self._outputs: dict[str, int] = {}

    # --- messages ---------------------------------------------------------------------------------------

    def watermark(self, input: int, value: int, key: str = DEFAULT_KEY) -> int | None:
        """A watermark ``value`` for ``key`` from ``input``; clears the input's idleness (all keys).

        Returns the new output of ``key``, or ``None``. Other keys cannot emit: an input re-entering the
        minimum can only lower it.
        """
        self._check_live(input)
        if not isinstance(key, str):
            raise ValueError(f"key={key!r} must be a str (the default key is {DEFAULT_KEY!r})")
        if not _is_int(value):
            raise ValueError(f"value={value!r} must be an int")
        current = self._watermarks.get(key)
        previous = None if current is None else current[input]
        if previous is not None and value <= previous:
            raise NonIncreasingWatermark(input, key, value, previous)
        if current is None:
            current = self._watermarks[key] = [None] * self._inputs
        current[input] = value
        self._idle.discard(input)
        return self._step(key)

    def event(self, input: int) -> None:
        """An event from ``input``: clears its idleness. Emits nothing; it can only hold outputs back."""
        self._check_live(input)
        self._idle.discard(input)

    def idle(self, input: int) -> dict[str, int]:
        """``input`` is idle until its next event or watermark. Returns the outputs this emits, per key."""
        self._check_live(input)
        self._idle.add(input)
        return self._step_all()

    def done(self, input: int) -> dict[str, int]:
        """``input`` is done (+infinity from now on). Returns the outputs this emits, per key."""
        self._check_live(input)
        self._idle.discard(input)
        self._done.add(input)
        return self._step_all()

    # --- inspection -------------------------------------------------------------------------------------

    @property
    def inputs(self) -> int:
        return self._inputs

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys observed so far, in order of their first watermark."""
        return tuple(self._watermarks)

    @property
    def all_idle(self) -> bool:
        """Every input that is not done is idle (and at least one is)."""
        return bool(self._idle) and len(self._idle) + len(self._done) == self._inputs

    @property
    def all_done(self) -> bool:
        return len(self._done) == self._inputs

    def is_idle(self, input: int) -> bool:
        self._check_index(input)
        return input in self._idle

    def is_done(self, input: int) -> bool:
        self._check_index(input)
        return input in self._done

    def output(self, key: str = DEFAULT_KEY) -> int | None:
        """The last output emitted for ``key`` (``None``: none yet)."""
        return self._outputs.get(key)

    def current(self, input: int, key: str = DEFAULT_KEY) -> int | None:
        """The last watermark ``input`` produced for ``key`` (``None``: none yet)."""
        self._check_index(input)
        watermarks = self._watermarks.get(key)
        return None if watermarks is None else watermarks[input]

    def status(self, key: str = DEFAULT_KEY) -> CoalesceResult[int]:
        """The rule applied to ``key``'s current state: who is excluded or waiting, and whether all are idle."""
        return coalesce(
            dict(enumerate(self._watermarks.get(key, [None] * self._inputs))),
            self._idle,
            self._outputs.get(key),
            "highest",
            done=self._done,
        )

    # --- state between runs -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The state as a JSON-serialisable dict; :meth:`from_snapshot` restores it."""
        return {
            "version": SNAPSHOT_VERSION,
            "inputs": self._inputs,
            "idle": sorted(self._idle),
            "done": sorted(self._done),
            "keys": {
                key: {"watermarks": list(watermarks), "output": self._outputs.get(key)}
                for key, watermarks in self._watermarks.items()
            },
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> Coalescer:
        """A coalescer in the state :meth:`snapshot` saved (also after a JSON round trip)."""
        if not isinstance(data, Mapping) or data.get("version") != SNAPSHOT_VERSION:
            version = data.get("version") if isinstance(data, Mapping) else None
            raise ValueError(f"snapshot version {version!r} is not {SNAPSHOT_VERSION}: not a Coalescer snapshot")
        count: Any = data.get("inputs")
        coalescer = cls(count)
        inputs = coalescer._inputs
        for field in ("idle", "done"):
            members = data.get(field)
            if not isinstance(members, list) or not all(_is_int(i) and 0 <= i < inputs for i in members):
                raise ValueError(f"snapshot {field}={members!r} must be a list of input indices in 0..{inputs - 1}")
        coalescer._idle, coalescer._done = set(data["idle"]), set(data["done"])
        if coalescer._idle & coalescer._done:
            raise ValueError(f"snapshot inputs {sorted(coalescer._idle & coalescer._done)} are both idle and done")
        keys = data.get("keys")
        if not isinstance(keys, Mapping):
            raise ValueError(f"snapshot keys={keys!r} must map each key to its watermarks and output")
        for key, entry in keys.items():
            watermarks = entry.get("watermarks") if isinstance(entry, Mapping) else None
            output = entry.get("output") if isinstance(entry, Mapping) else None
            if (
                not isinstance(key, str)
                or not isinstance(watermarks, list)
                or len(watermarks) != inputs
                or not all(w is None or _is_int(w) for w in watermarks)
                or not (output is None or _is_int(output))
            ):
                raise ValueError(
                    f"snapshot key {key!r}: {entry!r} must be {{'watermarks': [{inputs} ints or None], "
                    "'output': int or None}"
                )
            coalescer._watermarks[key] = list(watermarks)
            if output is not None:
                coalescer._outputs[key] = output
        return coalescer

    # --- internals --------------------------------------------------------------------------------------

    def _check_index(self, input: int) -> None:
        if not _is_int(input) or not 0 <= input < self._inputs:
            raise ValueError(f"input={input!r} is not an input index in 0..{self._inputs - 1}")

    def _check_live(self, input: int) -> None:
        self._check_index(input)
        if input in self._done:
            raise InputDone(input)

    def _step(self, key: str) -> int | None:
        result = self.status(key)
        if not result.emitted:
            return None
        assert result.value is not None
        self._outputs[key] = result.value
        return result.value

    def _step_all(self) -> dict[str, int]:
        emitted = {key: self._step(key) for key in self._watermarks}
        return {key: value for key, value in emitted.items() if value is not None}


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
