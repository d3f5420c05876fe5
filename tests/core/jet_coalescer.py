"""Hazelcast Jet's coalescing processor, one message at a time: a test harness over core's rule.

The product coalesces snapshots (:func:`airflow_provider_wm.core.coalescing.coalesce`: what a sensor or a merge
reads from the store in one go); per-stream monotonicity is the store's (a lower watermark is never published).
Jet's own test vectors are sequences of messages (watermark, event, idle, done) to one processor, so this
harness keeps that processor's state (each input's watermark per key, idle and done inputs, the last output per
key) and applies core's rule after every message: Jet's vectors check our rule, not a second copy of it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from airflow_provider_wm.core.coalescing import CoalesceResult, coalesce

DEFAULT_KEY = ""
"""The key of an unkeyed watermark."""
SNAPSHOT_VERSION = 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
