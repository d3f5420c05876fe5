"""Merging streams (Apex MergeWindowedOperator): the events of several inputs in the same windows, each input's
columns under its own name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from airflow_provider_wm.core.windowing.state import Event

__all__ = ["ROW_COLUMN", "input_column", "merge_inputs"]

ROW_COLUMN = "wm_row"


def input_column(input_name: str, column: str) -> str:
    """The name of an input's column after the merge: ``input_column("orders", "amount") == "orders__amount"``;
    ``input_column(name, ROW_COLUMN)`` is 1 on the input's rows (``count(orders.*)`` counts it)."""
    return f"{input_name}__{column}"


def merge_inputs(inputs: Mapping[str, Iterable[Event]]) -> list[Event]:
    """The events of every input, each with its columns prefixed by its input's name and its row marker.

    >>> merge_inputs({"orders": [Event(5, ("eu",), {"amount": 3})], "deliveries": [Event(7, ("eu",), {})]})
    ... # doctest: +NORMALIZE_WHITESPACE
    [Event(time_ms=5, key=('eu',), values={'orders__amount': 3, 'orders__wm_row': 1}),
     Event(time_ms=7, key=('eu',), values={'deliveries__wm_row': 1})]
    """
    return [
        Event(
            event.time_ms,
            event.key,
            {input_column(name, c): v for c, v in event.values.items()} | {input_column(name, ROW_COLUMN): 1},
        )
        for name, events in inputs.items()
        for event in events
    ]
