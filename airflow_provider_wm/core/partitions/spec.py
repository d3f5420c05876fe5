"""What a pipeline partitions (:class:`PartitionSpec`): its pieces of time, granularity, grace and abstinent
periods and units; validated at construction."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_wm.core.partitions.timebounds import (
    Granularity,
    Partition,
    TimeBound,
    format_day,
    never_before,
    partition_boundaries,
    zone_info,
)

__all__ = ["DEFAULT_UNIT", "PartitionSpec", "Piece"]


DEFAULT_UNIT = ""
"""The unit key of a pipeline without unit watermarks (one unit)."""


@dataclass(frozen=True)
class Piece:
    granularity: Granularity
    from_: TimeBound
    to: TimeBound


@dataclass(frozen=True)
class PartitionSpec:
    """How a pipeline's time range is cut into partitions. Built and validated by :meth:`build`.

    >>> from airflow_provider_wm.core.partitions import iso_ms
    >>> spec = PartitionSpec.build({"from": "2019-01-01", "to": "-"}, "monthly")
    >>> parts = spec.partitions(iso_ms("2020-02-21"))
    >>> len(parts), format_day(parts[-1].start), format_day(parts[-1].end)
    (14, '2020-02-01', '2020-02-21')
    """

    pieces: tuple[Piece, ...]
    timezone: str = "UTC"
    partial_partition: bool = True

    @classmethod
    def build(
        cls,
        watermark: Mapping[str, Any] | Sequence[Any] | None,
        partition: str | Mapping[str, Sequence[Any]] = "none",
        timezone: str = "UTC",
        partial_partition: bool = True,
    ) -> PartitionSpec:
        """``watermark={"from": ..., "to": ...}`` (or a pair) with ``partition`` a granularity name, or
        ``watermark=None`` with a composite ``partition={"monthly": [from, to], "daily": [from, to]}``."""
        zone_info(timezone, "timezone")
        if not isinstance(partial_partition, bool):
            raise ValueError(f"partial_partition={partial_partition!r} must be True or False")
        if isinstance(partition, Mapping):
            if watermark is not None:
                raise ValueError(
                    f"watermark={watermark!r}: a composite partition={dict(partition)!r} carries its own "
                    "[from, to] per piece; pass watermark=None"
                )
            if not partition:
                raise ValueError("partition={} names no piece")
            pieces = [
                cls._piece(Granularity.parse(name, "partition"), bounds, f"partition[{name!r}]")
                for name, bounds in partition.items()
            ]
        else:
            if watermark is None:
                raise ValueError(f"watermark=None: partition={partition!r} needs a watermark with 'from' and 'to'")
            pieces = [cls._piece(Granularity.parse(partition, "partition"), watermark, "watermark")]
        _require_fixed_grid(pieces, dict(partition) if isinstance(partition, Mapping) else watermark)
        spec = cls(tuple(pieces), timezone, partial_partition)
        static = [(p.from_, p.to) for p in pieces if p.from_.is_static and p.to.is_static]
        ranges = sorted((a.resolve(0, timezone), b.resolve(0, timezone), a.text, b.text) for a, b in static)
        for start, end, from_text, to_text in ranges:
            if start >= end:
                raise ValueError(f"watermark from={from_text!r} is not before to={to_text!r}")
        for (_, end, _, to_text), (start, _, from_text, _) in itertools.pairwise(ranges):
            if start < end:
                raise ValueError(f"partition pieces overlap: one ends at {to_text!r}, the next starts at {from_text!r}")
        return spec

    @staticmethod
    def _piece(granularity: Granularity, bounds: Mapping[str, Any] | Sequence[Any], argument: str) -> Piece:
        if isinstance(bounds, Mapping):
            unknown = set(bounds) - {"from", "to"}
            if unknown or "from" not in bounds:
                raise ValueError(f"{argument}={dict(bounds)!r} must have 'from' and optionally 'to' (default '-')")
            piece = Piece(
                granularity,
                TimeBound.parse(bounds["from"], f"{argument}['from']"),
                TimeBound.parse(bounds.get("to", "-"), f"{argument}['to']"),
            )
            shown: Any = dict(bounds)
        elif isinstance(bounds, (list, tuple)) and len(bounds) == 2:
            piece = Piece(
                granularity, TimeBound.parse(bounds[0], f"{argument}[0]"), TimeBound.parse(bounds[1], f"{argument}[1]")
            )
            shown = bounds
        else:
            raise ValueError(f"{argument}={bounds!r} must be {{'from': ..., 'to': ...}} or a [from, to] pair")
        if never_before(piece.from_, piece.to):
            raise ValueError(
                f"{argument}={shown!r}: from={piece.from_.text!r} is at or after to={piece.to.text!r} at every time "
                "of day, so no partition would ever be planned; 'from' must lie further back than 'to' (for "
                "example from='P5D', to='P1D')"
            )
        return piece

    def partitions(self, now_ms: int, open_end_ms: int | None = None) -> list[Partition]:
        """The partitions at ``now_ms``, sorted by start, tiling each piece's ``[from, to)`` exactly.

        With ``open_end_ms`` the last piece ignores its ``to`` and continues with whole partitions until one
        ends at or after ``open_end_ms`` (what a sensor waiting for a future range needs).
        """
        starts, ends = self.bounds(now_ms, open_end_ms)
        return list(map(Partition._make, zip(starts, ends, strict=True)))

    def bounds(self, now_ms: int, open_end_ms: int | None = None) -> tuple[list[int], list[int]]:
        """:meth:`partitions` as two sorted lists, starts and ends (cheap for 100,000 partitions)."""
        zone = zone_info(self.timezone, "timezone")
        pieces: list[list[int]] = []
        for index, piece in enumerate(self.pieces):
            start = piece.from_.resolve(now_ms, self.timezone)
            if open_end_ms is not None and index == len(self.pieces) - 1:
                pieces.append(partition_boundaries(piece.granularity, start, max(open_end_ms, start + 1), zone))
                continue
            end = piece.to.resolve(now_ms, self.timezone)
            if start >= end:
                continue
            bounds = partition_boundaries(piece.granularity, start, end, zone)
            if bounds[-1] > end:  # the last partition is partial: cut at `to`, or drop it
                if self.partial_partition:
                    bounds[-1] = end
                else:
                    bounds.pop()
            pieces.append(bounds)
        pieces.sort()
        starts: list[int] = []
        ends: list[int] = []
        for bounds in pieces:
            if starts and bounds[0] < ends[-1]:
                raise ValueError(
                    f"partition pieces overlap at {format_day(bounds[0])}: check the [from, to] of each piece"
                )
            starts.extend(bounds[:-1])
            ends.extend(bounds[1:])
        return starts, ends

    def to_json(self) -> dict[str, Any]:
        return {
            "pieces": [[p.granularity.value, p.from_.text, p.to.text] for p in self.pieces],
            "timezone": self.timezone,
            "partial_partition": self.partial_partition,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionSpec:
        pieces = tuple(
            Piece(Granularity(g), TimeBound.parse(f, "from"), TimeBound.parse(t, "to")) for g, f, t in data["pieces"]
        )
        return cls(pieces, str(data["timezone"]), bool(data["partial_partition"]))


def _require_fixed_grid(pieces: Sequence[Piece], given: Any) -> None:
    """The partitions of every run must be the same ones (DIL: "the effective cut off date has no role in defining
    the partitions; this keeps partitions consistent"): the target and the state are keyed by partition start, so a
    partition that moves between runs would leave its old one's rows in the target beside the new one's, twice.

    So a relative ``from`` (which moves with the run's "now") is taken only where it moves the partitions by whole
    partitions: hourly partitions from ``PnD`` or ``PnDTmH`` (whole hours), daily ones from ``PnD`` (local
    midnights). And in a composite partition every piece's ``from`` is a date, and so is every ``to`` but the last
    piece's: a moving bound between two pieces would move days from one piece's partitions into the other's.

    >>> _require_fixed_grid([Piece(Granularity.MONTHLY, TimeBound.parse("P90D", "from"), TimeBound.parse("-", "to"))],
    ...                     {"from": "P90D", "to": "-"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: watermark={'from': 'P90D', 'to': '-'}: from='P90D' moves with every run, and monthly partitions ...
    """
    steps = {Granularity.HOURLY: ("days", "hours"), Granularity.DAILY: ("days",)}
    argument = "partition" if len(pieces) > 1 else "watermark"
    for piece in pieces:
        bound = piece.from_
        if bound.is_static:
            continue
        step = "hours" if bound.hours is not None else "days" if bound.days is not None else "minutes"
        if len(pieces) > 1 or step not in steps.get(piece.granularity, ()):
            raise ValueError(
                f"{argument}={given!r}: from={bound.text!r} moves with every run, and {piece.granularity.value} "
                f"partitions from a moving start would not be the same from run to run (the rows of the old ones "
                "would stay in the target beside the new ones'): give a date"
                + (" (in a composite partition, every from is a date)" if len(pieces) > 1 else "")
            )
    if len(pieces) > 1:
        last = max(pieces, key=lambda piece: piece.from_.resolve(0, "UTC"))
        for piece in pieces:
            if piece is not last and not piece.to.is_static:
                raise ValueError(
                    f"partition={given!r}: to={piece.to.text!r} of the {piece.granularity.value} piece moves with "
                    "every run, and would move days from the next piece's partitions into its own (their rows would "
                    "be written twice): where two pieces meet, give a date"
                )
