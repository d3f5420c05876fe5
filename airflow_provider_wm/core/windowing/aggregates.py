"""The aggregates a window computes: built-ins evaluated by core and Spark alike, SQL ones by Spark only.
Their names and columns follow :func:`~airflow_provider_wm.core.names.column_name`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_wm.core.names import column_name

__all__ = [
    "BIGINT_MAX",
    "BIGINT_MIN",
    "BUILTIN_FUNCTIONS",
    "OUTPUT_COLUMNS",
    "Aggregate",
    "SqlAggregate",
    "aggregated_columns",
    "fits_bigint",
    "values_are_usable",
]

BUILTIN_FUNCTIONS = ("count", "sum", "min", "max", "avg")
OUTPUT_COLUMNS = ("window_start", "window_end", "pane", "pane_index", "retraction", "watermark_ms", "run_id")
"""Columns every pane row has; an aggregate or key may not use these names."""
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
"""The range of a pane's sum of integers (a 64-bit integer, as Spark's ``sum`` of an integral column)."""


@dataclass(frozen=True)
class Aggregate:
    """A built-in aggregate: ``count`` (of rows, or of non-null ``column``), ``sum``, ``min``, ``max``,
    ``avg`` of ``column``; nulls are ignored, as in SQL.

    >>> Aggregate("n", "count")
    Aggregate(name='n', function='count', column=None)
    >>> Aggregate("total", "median", "amount")
    Traceback (most recent call last):
    ...
    ValueError: aggregates['total'].function='median' must be one of count, sum, min, max, avg (or use SqlAggregate)
    >>> Aggregate("total", "sum")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: aggregates['total'].column=None must be a column: sum needs one, as in sum(amount) (...)
    """

    name: str
    function: str
    column: str | None = None

    def __post_init__(self) -> None:
        column_name(self.name, "aggregates[].name")
        if self.function not in BUILTIN_FUNCTIONS:
            raise ValueError(
                f"aggregates[{self.name!r}].function={self.function!r} must be one of {', '.join(BUILTIN_FUNCTIONS)} "
                "(or use SqlAggregate)"
            )
        if self.column is None and self.function != "count":
            raise ValueError(
                f"aggregates[{self.name!r}].column=None must be a column: {self.function} needs one, as in "
                f"{self.function}(amount) (count(*) counts rows)"
            )
        if self.column is not None:
            column_name(self.column, f"aggregates[{self.name!r}].column")

    # partial aggregates: count -> int; sum, min, max -> value or None; avg -> (sum or None, count)

    def empty(self) -> Any:
        return {"count": 0, "avg": (None, 0)}.get(self.function)

    def of(self, values: Mapping[str, Any]) -> Any:
        """The partial of one event."""
        if self.column is None:
            return 1
        value = values.get(self.column)
        if self.function == "count":
            return 0 if value is None else 1
        if self.function == "avg":
            return (value, 0 if value is None else 1)
        return value

    def merge(self, a: Any, b: Any) -> Any:
        if self.function == "count":
            return a + b
        if self.function == "avg":
            return (_merge_nullable(a[0], b[0], _add), a[1] + b[1])
        return _merge_nullable(a, b, {"sum": _add, "min": min, "max": max}[self.function])

    def finish(self, partial: Any) -> Any:
        """The pane's value of a merged partial. A sum or mean of integers is exact in the partial (however many
        runs added to it), then: a sum outside :data:`BIGINT_MIN`..:data:`BIGINT_MAX` is null in the pane (it is no
        64-bit integer; the state keeps it exactly, so a later pane of the window is exact again), and a mean is
        the sum rounded to a double divided by the count. Worked example, ``2**62`` and ``2**62`` in one window:

        >>> Aggregate("s", "sum", "v").finish(2**62 + 2**62) is None
        True
        >>> Aggregate("s", "sum", "v").finish(2**62 + 2**62 - 5)
        9223372036854775803
        >>> Aggregate("a", "avg", "v").finish((2**62 + 2**62, 2))
        4.611686018427388e+18
        """
        if self.function == "avg":
            total, count = partial
            return None if not count else float(total) / count
        if self.function == "sum" and not fits_bigint(partial):
            return None
        return partial


def fits_bigint(value: Any) -> bool:
    """Whether ``value`` is no integer or an integer of 64 bits (:data:`BIGINT_MIN`..:data:`BIGINT_MAX`).

    >>> [fits_bigint(v) for v in (None, 2.5e30, 2**63 - 1, 2**63, -(2**63))]
    [True, True, True, False, True]
    """
    return not isinstance(value, int) or BIGINT_MIN <= value <= BIGINT_MAX


def _add(a: Any, b: Any) -> Any:
    return a + b


def _merge_nullable(a: Any, b: Any, combine: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return combine(a, b)


@dataclass(frozen=True)
class SqlAggregate:
    """A user-supplied mergeable aggregate, evaluated by Spark only (the reference covers the built-ins).

    ``partial`` aggregates a run's events of a window; ``merge`` aggregates partials (``{partial}`` stands
    for the partial column); ``final`` turns the merged partial into the pane's value. Example, distinct
    users with mergeable sketches::

        SqlAggregate("users", partial="hll_sketch_agg(user_id)", merge="hll_union_agg({partial})",
                     final="hll_sketch_estimate({partial})")
    """

    name: str
    partial: str
    merge: str
    final: str = "{partial}"

    def __post_init__(self) -> None:
        column_name(self.name, "aggregates[].name")
        for argument in ("partial", "merge", "final"):
            value = getattr(self, argument)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"aggregates[{self.name!r}].{argument}={value!r} must be a Spark SQL expression")
        for argument in ("merge", "final"):
            if "{partial}" not in getattr(self, argument):
                raise ValueError(
                    f"aggregates[{self.name!r}].{argument}={getattr(self, argument)!r} must refer to {{partial}}"
                )


def aggregated_columns(aggregates: Iterable[Aggregate | SqlAggregate]) -> tuple[str, ...]:
    """The columns the built-in aggregates read, each once, in order: ``count(*)`` reads none, and a
    :class:`SqlAggregate`'s expression is the user's own (it may handle NaN itself, as ``sum(nanvl(x, 0))``).

    >>> aggregated_columns([Aggregate("n", "count"), Aggregate("s", "sum", "v"), Aggregate("a", "avg", "v")])
    ('v',)
    """
    return tuple(dict.fromkeys(a.column for a in aggregates if isinstance(a, Aggregate) and a.column))


def values_are_usable(aggregates: Iterable[Aggregate | SqlAggregate], values: Mapping[str, Any]) -> bool:
    """Whether an event's values can be aggregated: none of the :func:`aggregated_columns` holds NaN or +/-inf.
    One such value makes every sum, avg, min or max of its window NaN or infinite (as IEEE arithmetic does), and
    an accumulating window keeps it in its state for good, so the event is quarantined ``INVALID_VALUE``
    instead (rule 1). A null is usable: aggregates skip it, as in SQL. Only floats can be NaN or infinite.

    Worked example, ``sum(v)`` and ``count(*)``: ``v = 2.5``, ``v = None`` and ``w = nan`` (a column no aggregate
    reads) are aggregated; ``v = nan`` and ``v = -inf`` are not.

    >>> aggregates = (Aggregate("s", "sum", "v"), Aggregate("n", "count"))
    >>> [values_are_usable(aggregates, {"v": v}) for v in (2.5, None, 7, float("nan"), float("-inf"))]
    [True, True, True, False, False]
    >>> values_are_usable(aggregates, {"v": 1.0, "w": float("nan")})
    True
    """
    return all(_is_finite_or_null(values.get(column)) for column in aggregated_columns(aggregates))


def _is_finite_or_null(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)
