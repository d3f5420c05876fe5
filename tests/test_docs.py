"""The README and the documentation site stay small, true and linked: the README's example DAG is the one in
dags/, its links resolve, every snippet the site includes exists, and the benchmark tables are the results files'."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
EXAMPLE = ROOT / "dags" / "example_stream_watermark.py"
MARKER = re.compile(r"^\s*# --8<-- \[(start|end):([\w-]+)\]\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SNIPPET_BLOCK = re.compile(r"^--8<--\n(.*?)^--8<--$", re.M | re.S)


def section(path: Path, name: str) -> str:
    """The lines between ``# --8<-- [start:name]`` and ``# --8<-- [end:name]``, other markers left out (as
    pymdownx.snippets includes them, before dedenting)."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if (m := MARKER.match(line)) and m.groups() == ("start", name)]
    ends = [i for i, line in enumerate(lines) if (m := MARKER.match(line)) and m.groups() == ("end", name)]
    assert len(starts) == len(ends) == 1, f"{path.name}: section {name!r} must be marked once"
    return "\n".join(line for line in lines[starts[0] + 1 : ends[0]] if not MARKER.match(line))


def test_the_readme_is_short_and_keeps_the_test_command():
    text = README.read_text()
    assert len(text.encode()) <= 10 * 1024
    assert "make test" in text and "make demo" in text


def test_the_readme_example_dag_is_the_one_in_dags():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1
    assert blocks[0].rstrip("\n") == section(EXAMPLE, "dag")


def test_every_relative_link_of_the_readme_resolves_to_a_file():
    links = [link.split("#")[0] for link in LINK.findall(README.read_text()) if "://" not in link]
    assert any(link.startswith("docs/") for link in links)
    assert [link for link in links if not (ROOT / link).is_file()] == []


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_snippet_the_site_includes_exists(page):
    for block in SNIPPET_BLOCK.findall(page.read_text()):
        for reference in block.split():
            file, _, name = reference.partition(":")
            assert (ROOT / file).is_file(), f"{page.name}: {file}"
            if name:
                assert section(ROOT / file, name).strip(), f"{page.name}: {reference} is empty"


def test_the_benchmark_tables_are_rendered_from_the_results_files():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_report", report)
    spec.loader.exec_module(report)
    page = (DOCS / "benchmarks.md").read_text()
    for name in report.RENDERERS:
        start, end = report.markers(name)
        assert page.count(start) == page.count(end) == 1, name
        assert page.split(start)[1].split(end)[0].strip() == report.render(name), name
    for result in (ROOT / "bench" / "results").glob("*.json"):
        assert result.stem in report.RENDERERS, f"{result.name} is not rendered on docs/benchmarks.md"
