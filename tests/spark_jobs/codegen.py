"""The Java code Spark generates for a frame: the tests that a run's changing values (cut-offs, work units) are
data, not literals in it, compare it between runs."""

from __future__ import annotations


def generated_code(frame) -> str:
    """The Java code Spark generates for ``frame``'s stages, which it compiles once per distinct text: the numbered
    lines of ``explain`` in its ``codegen`` mode (over Spark Connect too), without the plans printed above them.
    Planned without adaptive execution, which generates a stage's code only once the stages before it ran."""
    conf = frame.sparkSession.conf
    adaptive = conf.get("spark.sql.adaptive.enabled")
    conf.set("spark.sql.adaptive.enabled", "false")
    try:
        explained = frame._explain_string(mode="codegen")
    finally:
        conf.set("spark.sql.adaptive.enabled", adaptive)
    code = [line for line in explained.splitlines() if line.startswith("/* ")]
    assert code, explained  # some stage is generated
    return "\n".join(code)
