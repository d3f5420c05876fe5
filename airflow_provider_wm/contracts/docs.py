"""The table of the job contracts in ``docs/contracts.md``, rendered from the dataclasses so that it cannot drift.

``python -m airflow_provider_wm.contracts.docs`` prints it (``--write`` puts it into ``docs/contracts.md``); a
test checks that the page holds exactly this text between ``<!-- contracts:start -->`` and
``<!-- contracts:end -->``.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path
from typing import Any

from airflow_provider_wm.contracts import (
    ControllerManifest,
    ControllerRequest,
    ControllerTotals,
    InputWatermark,
    PartitionsManifest,
    PartitionsRequest,
    StreamEntry,
    UnreadableFile,
    WatermarkReached,
    WatermarkRecord,
    WindowedInput,
    WindowedManifest,
    WindowedRequest,
    WindowedTotals,
    WorkUnitOutcome,
    WorkUnitRequest,
)

__all__ = ["DOCUMENTED", "END", "PAGE", "START", "render", "write_page"]

START, END = "<!-- contracts:start -->", "<!-- contracts:end -->"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"
"""The documentation page that holds the table (in a source checkout)."""
DOCUMENTED: tuple[type, ...] = (
    ControllerRequest,
    ControllerManifest,
    ControllerTotals,
    StreamEntry,
    WindowedRequest,
    WindowedInput,
    WindowedManifest,
    WindowedTotals,
    PartitionsRequest,
    WorkUnitRequest,
    PartitionsManifest,
    WorkUnitOutcome,
    UnreadableFile,
    WatermarkRecord,
    WatermarkReached,
    InputWatermark,
)


def _type_name(hint: Any) -> str:
    """``int | None`` -> ``int or None`` (a ``|`` would split the Markdown table), without module prefixes."""
    text = str(hint) if typing.get_origin(hint) else getattr(hint, "__name__", str(hint))
    text = re.sub(r"\b[a-z_]+\.(?=[A-Za-z])", "", text.replace("NoneType", "None"))
    return text.replace(" | ", " or ")


def render() -> str:
    """One row per contract: its fields with their types, required fields first (``=`` marks a default)."""
    lines = ["| contract | fields |", "|---|---|"]
    for cls in DOCUMENTED:
        hints = typing.get_type_hints(cls)
        fields = []
        for f in dataclasses.fields(cls):
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            fields.append(f"`{f.name}: {_type_name(hints[f.name])}{' =' if has_default else ''}`")
        lines.append(f"| `{cls.__name__}` | {', '.join(fields)} |")
    return "\n".join(lines)


def write_page(path: Path = PAGE) -> None:
    """Replace the table between the page's markers with :func:`render`'s."""
    text = path.read_text()
    head, rest = text.split(START, 1)
    path.write_text(f"{head}{START}\n{render()}\n{END}{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_page()
    else:
        print(render())
