"""Names of streams, keys, watermarks and columns: one rule each, used by every job, operator, sensor and page.

A stream name (and a ``wm_key``) is a path component of the watermark store: letters, digits, ``.``, ``_``
and ``-``, starting with a letter or digit, at most 200 characters. A watermark is named by its *label*:
the stream, or ``stream:wm_key`` for a keyed one; no name may contain ``:``, so a label is unambiguous.

>>> is_valid_stream_name("orders-eu.v1"), is_valid_stream_name("../etc"), is_valid_stream_name("")
(True, False, False)
>>> watermark_label("orders", "eu"), split_label("orders:eu"), split_label("orders")
('orders:eu', ('orders', 'eu'), ('orders', None))

A column a DAG author names (an event time, an arrival, a key, an aggregate) is an identifier: letters,
digits and ``_``, not starting with a digit (:func:`column_name`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "STREAM_NAME_PATTERN",
    "Input",
    "column_name",
    "is_valid_stream_name",
    "parse_input",
    "parse_inputs",
    "split_label",
    "stream_name",
    "watermark_label",
]

STREAM_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"
_STREAM_NAME = re.compile(STREAM_NAME_PATTERN)

_COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Input = tuple[str, str | None]
"""A watermark to read: a stream and its ``wm_key`` (``None``: the stream's unkeyed watermark)."""


def column_name(value: object, argument: str) -> str:
    """``value`` if it is a column name, else an error naming ``argument`` and the value.

    >>> column_name("event_time", "event_time")
    'event_time'
    >>> column_name("event time", "time_column")
    Traceback (most recent call last):
    ...
    ValueError: time_column='event time' must be a column name (letters, digits, _)
    """
    if not isinstance(value, str) or _COLUMN_NAME.fullmatch(value) is None:
        raise ValueError(f"{argument}={value!r} must be a column name (letters, digits, _)")
    return value


def is_valid_stream_name(name: object) -> bool:
    """``orders-eu.v1`` is valid; ``../etc``, ``a/b`` and ``""`` are not."""
    return isinstance(name, str) and _STREAM_NAME.fullmatch(name) is not None


def stream_name(value: object, argument: str) -> str:
    """``value`` if it is a valid stream (or pipeline, ``wm_key``) name, else an error naming ``argument`` and
    the value.

    >>> stream_name("orders_5m", "upstream.pipeline")
    'orders_5m'
    >>> stream_name("a/b", "watermark.stream")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: watermark.stream='a/b' is not a valid name: use letters, digits, '.', '_' or '-', starting with ...
    """
    if not is_valid_stream_name(value):
        raise ValueError(
            f"{argument}={value!r} is not a valid name: use letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (at most 200 characters)"
        )
    return str(value)


def watermark_label(stream: str, wm_key: str | None) -> str:
    """How a watermark is named in arguments, reports, manifests, XComs and logs.

    >>> watermark_label("orders", None), watermark_label("orders", "eu")
    ('orders', 'orders:eu')
    """
    return stream if wm_key is None else f"{stream}:{wm_key}"


def split_label(label: str) -> Input:
    """The inverse of :func:`watermark_label`: ``"orders:eu"`` -> ``("orders", "eu")``."""
    stream, _, wm_key = label.partition(":")
    return stream, wm_key or None


def parse_input(value: object, argument: str) -> Input:
    """A label given by a user, checked: ``"orders"`` -> ``("orders", None)``, ``"orders:eu"`` -> ``("orders",
    "eu")``; both parts must be valid names.

    >>> parse_input("orders:eu", "streams")
    ('orders', 'eu')
    >>> parse_input("../etc", "streams")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: streams entry '../etc' is not 'stream' or 'stream:key': ...
    """
    if not isinstance(value, str):
        raise ValueError(f"{argument} entry {value!r} must be a string: 'stream' or 'stream:key'")
    stream, colon, key = value.partition(":")
    if not is_valid_stream_name(stream) or (colon and not is_valid_stream_name(key)):
        raise ValueError(
            f"{argument} entry {value!r} is not 'stream' or 'stream:key': names use letters, digits, '.', "
            "'_' or '-', starting with a letter or digit (at most 200 characters)"
        )
    return stream, (key if colon else None)


def parse_inputs(values: object, argument: str, *, skip: Iterable[object] = ()) -> list[Input]:
    """The inputs named by ``values`` (a non-empty sequence of labels), each once; entries in ``skip`` (e.g.
    Jinja templates at parse time, checked once rendered) are left out.

    >>> parse_inputs(["orders", "orders:eu"], "streams")
    [('orders', None), ('orders', 'eu')]
    """
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise ValueError(f"{argument}={values!r} must be a list of stream names ('stream' or 'stream:key')")
    entries = list(values)
    if not entries:
        raise ValueError(f"{argument}={values!r} names no stream: give at least one")
    skipped = list(skip)
    inputs: list[Input] = []
    for entry in entries:
        if entry in skipped:
            continue
        parsed = parse_input(entry, argument)
        if parsed in inputs:
            raise ValueError(f"{argument}={values!r} names {watermark_label(*parsed)!r} more than once")
        inputs.append(parsed)
    return inputs
