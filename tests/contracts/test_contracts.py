"""The job contracts: JSON round trips, clear errors on damaged documents, and jobs that can run over Spark
Connect (no classic-only API anywhere in ``spark_jobs/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_wm.contracts import (
    ContractError,
    ControllerManifest,
    ControllerRequest,
    ControllerTotals,
    InputWatermark,
    JobFailure,
    PartitionsManifest,
    PartitionsRequest,
    RoundWatermark,
    StreamEntry,
    WatermarkReached,
    WindowedInput,
    WindowedManifest,
    WindowedRequest,
    WindowedTotals,
    WorkUnitOutcome,
    WorkUnitRequest,
    parse_manifest,
)
from airflow_provider_wm.core.coalescing import check_watermarks

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"

EXAMPLES = [
    ControllerRequest(
        controller="c", run_id="r", marks_path="/m", segments_path="/s", state_out="/o", round_out="/x",
        now_ms=10, writer_timeout_ms=5, initial_delay_ms=0, state_in="/i", processed_until_ms=3, processed_marks=2,
    ),
    ControllerManifest(
        controller="c", processed_from_ms=None, processed_until_ms=10, processed_marks=4, state_path="/o",
        quarantine_path=None, totals=ControllerTotals(rejected={"INVALID_TIME": 1}),
        streams={"s:eu": StreamEntry("s", "eu", "EMITTED", watermark=RoundWatermark("s", "eu", 1, 2, {"0": 3}, 10))},
    ),
    WindowedRequest(
        pipeline="p", run_id="r", version=2, spec={"window": {"kind": "tumbling"}}, output="/o", late_output="/l",
        state_out="/s", round_out="/x", arrival_until_ms=9,
        inputs=[WindowedInput("orders", "/e", "t"), WindowedInput("deliveries", "/d", "t", "arrived")],
    ),
    WindowedManifest(
        pipeline="p", run_id="r", version=2, watermark_ms=5, previous_watermark_ms=None, max_event_time_ms=7,
        arrival_from_ms=None, arrival_until_ms=9, totals=WindowedTotals(events_read=3), output="/o",
    ),
    PartitionsRequest(
        pipeline="p", run_id="r", work_units=[WorkUnitRequest(0, 10, "eu", 5, 10, "grace")], source="/s",
        time_column="t", target="/t", round_out="/x",
    ),
    PartitionsManifest(
        pipeline="p", run_id="r", work_units=[WorkUnitOutcome(0, 10, "eu", 5, 10, "grace", "p0", "succeeded", 2, 2)]
    ),
]  # fmt: skip


@pytest.mark.parametrize("document", EXAMPLES, ids=lambda d: type(d).__name__)
def test_every_contract_round_trips_through_json_text(document):
    assert type(document).loads(document.dumps()) == document


def test_a_request_names_its_manifest_beside_it():
    request = EXAMPLES[0]
    assert (request.request_url, request.manifest_url) == ("/x/request.json", "/x/manifest.json")


def test_a_damaged_document_fails_naming_the_field_and_the_value():
    document = EXAMPLES[1].to_json()
    document["streams"]["s:eu"]["watermark"]["lower_ms"] = "soon"
    with pytest.raises(ContractError, match=r"streams\['s:eu'\]\.watermark\.lower_ms: expected int, got 'soon'"):
        ControllerManifest.from_json(document)
    with pytest.raises(ContractError, match=r"WindowedManifest\.totals: missing"):
        WindowedManifest.from_json({k: v for k, v in EXAMPLES[3].to_json().items() if k != "totals"})
    with pytest.raises(ContractError, match="not JSON"):
        PartitionsManifest.loads('{"pipeline": ')


def test_a_failed_job_reads_as_its_failure_not_as_a_manifest():
    failure = parse_manifest(WindowedManifest, JobFailure("windowed_aggregate", "ValueError: boom").to_json())
    assert isinstance(failure, JobFailure) and failure.error == "ValueError: boom"


def test_the_contracts_import_neither_airflow_nor_pyspark():
    import subprocess
    import sys

    code = (
        "import sys, airflow_provider_wm.contracts, airflow_provider_wm.documents\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


CLASSIC_ONLY = re.compile(r"\.sparkContext\b|\b_jvm\b|\b_jsc\b|\._jdf\b|\.rdd\b")


@pytest.mark.parametrize("path", sorted(SPARK_JOBS.rglob("*.py")), ids=lambda p: str(p.relative_to(SPARK_JOBS)))
def test_spark_jobs_use_no_api_that_spark_connect_lacks(path):
    offending = [
        f"{path.relative_to(SPARK_JOBS)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CLASSIC_ONLY.search(line)
    ]
    assert offending == []


def test_the_docs_table_of_contracts_is_rendered_from_the_classes():
    from airflow_provider_wm.contracts.docs import END, PAGE, START, render

    assert Path(__file__).resolve().parents[2] / "docs" / "contracts.md" == PAGE
    page = PAGE.read_text()
    assert page.count(START) == page.count(END) == 1
    assert page.split(START)[1].split(END)[0].strip() == render()


def test_a_sensors_result_carries_each_inputs_upper_bound_and_cut_from_its_record():
    records = {
        "orders": {"lower_ms": 30, "upper_ms": 35, "stream_cut": {"0": 7}, "computed_at_ms": 30},
        "refunds": None,
    }
    reached = WatermarkReached.of(check_watermarks(records, 25), records)
    assert reached.streams == {
        "orders": InputWatermark(30, 30, False, 35, {"0": 7}),
        "refunds": InputWatermark(None, None, False),
    }
    assert (reached.watermark_ms, reached.waiting, reached.passed) == (None, ["refunds"], False)
    assert WatermarkReached.loads(reached.dumps()) == reached
