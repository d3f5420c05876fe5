"""JSON for the contracts: every dataclass that crosses a process or run boundary derives from :class:`Contract`.

``to_json`` gives plain JSON types; ``from_json`` checks every field against its type hint and names the
field and the value it refuses, so a damaged document fails where it is read, never later::

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Span(Contract):
    ...     start_ms: int
    ...     end_ms: int | None = None
    >>> Span.from_json({"start_ms": 5}).to_json()
    {'start_ms': 5, 'end_ms': None}
    >>> Span.from_json({"start_ms": "5"})  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ContractError: Span.start_ms: expected int, got '5' (str)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Self

__all__ = ["Contract", "ContractError"]


class ContractError(ValueError):
    """A document does not have the shape of its contract; the message names the field and the value."""


class Contract:
    """Base of the contract dataclasses: JSON in and out, checked against the type hints."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        return _load_contract(cls, data, cls.__name__)

    @classmethod
    def loads(cls, text: str | bytes) -> Self:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ContractError(f"{cls.__name__}: not JSON ({exc})") from None
        return cls.from_json(data)


def _dump(value: Any) -> Any:
    if isinstance(value, Contract):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _load_contract(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ContractError(f"{where}: expected an object, got {_show(data)}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _load(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ContractError(f"{where}.{f.name}: missing")
    return cls(**values)


def _load(hint: Any, value: Any, where: str) -> Any:
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _load(option, value, where)
            except ContractError as exc:
                errors.append(str(exc))
        raise ContractError(errors[0] if len(errors) == 1 else f"{where}: {_show(value)} matches no type of {hint}")
    if origin is typing.Literal:
        if value not in args:
            raise ContractError(f"{where}: expected one of {list(args)}, got {_show(value)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ContractError(f"{where}: expected a list, got {_show(value)}")
        item = args[0] if args else Any
        loaded = [_load(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return loaded if origin is list else tuple(loaded)
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise ContractError(f"{where}: expected an object, got {_show(value)}")
        item = args[1] if args else Any
        return {str(k): _load(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Contract):
        return _load_contract(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ContractError(f"{where}: expected one of {[m.value for m in hint]}, got {_show(value)}") from None
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(hint, type) and isinstance(value, hint):
        return value
    raise ContractError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {_show(value)}")


def _show(value: Any) -> str:
    text = repr(value)
    return f"{text[:80]}{'...' if len(text) > 80 else ''} ({type(value).__name__})"
