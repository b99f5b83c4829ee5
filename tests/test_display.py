"""In a notebook, tables, snapshots, audits and commits render as small HTML tables of their key
facts: cheap (at most one aggregate, kept) and with every value escaped."""

from __future__ import annotations

from deltaspark import display
from deltaspark.audit.findings import FINDINGS_SCHEMA
from deltaspark.audit.report import AuditReport
from deltaspark.table import DeltaTable
from deltaspark.transaction.transaction import CommitResult
from tests.log_builder import add, commit_info, metadata, protocol

HOSTILE = "<script>alert('x')</script>"


def test_a_snapshot_renders_its_facts_escaped_with_one_aggregate_kept(spark, log, monkeypatch):
    log.commit(
        0,
        protocol(),
        metadata(partition_columns=["part"], configuration={"note": HOSTILE}),
        add("part=x/a", size=2048, partition_values={"part": "x"}),
        add("part=y/b", size=1024, partition_values={"part": "y"}),
        commit_info(operation="WRITE"),
    )
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    calls = []
    summary = snap.summary
    monkeypatch.setattr(snap, "summary", lambda: calls.append(1) or summary())
    page = snap._repr_html_()
    assert page == snap._repr_html_() and calls == [1]  # the aggregate runs once, then is kept
    for fact in ("<th>version</th><td>0</td>", "reader 1, writer 2", "2 file(s), 3.0 KiB", ">part<"):
        assert fact in page
    assert HOSTILE not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    table = DeltaTable.forPath(spark, log.path)._repr_html_()  # the latest snapshot's facts
    assert "<th>path</th>" in table and "2 file(s)" in table


def test_a_commit_renders_version_operation_and_metrics():
    result = CommitResult(
        version=7,
        commitInfo={"operation": "DELETE", "operationParameters": {"predicate": f"x = '{HOSTILE}'"}},
        attempts=1,
        metrics={"numDeletedRows": 3, "numRemovedFiles": 1},
    )
    page = result._repr_html_()
    assert "Committed version 7" in page and "<td>DELETE</td>" in page
    assert "<td>numDeletedRows</td><td>3</td>" in page and HOSTILE not in page


def test_an_audit_renders_its_verdict_and_findings_by_severity(spark):
    findings = spark.createDataFrame(
        [("files.exist", "error", 2, HOSTILE, "data file does not exist", None)], FINDINGS_SCHEMA
    ).cache()
    checks = [
        {"check": "files.exist", "status": "failed", "errors": 1, "warnings": 0, "infos": 0},
        {"check": "log.contiguous", "status": "passed", "errors": 0, "warnings": 0, "infos": 0},
    ]
    report = AuditReport(
        "/t", 2, "full", findings, checks, metrics={"numFiles": 4}, seconds=1.25, _persisted=[findings]
    )
    page = report._repr_html_()
    assert "FAILED" in page and "1 error(s), 0 warning(s), 0 info(s)" in page
    assert "<td>files.exist</td><td>failed</td><td>1</td>" in page and "data file does not exist" in page
    assert HOSTILE not in page and "&lt;script&gt;" in page and "<td>numFiles</td><td>4</td>" in page
    findings.unpersist()


def test_helpers_escape_and_size():
    assert display.human_bytes(3 * 1024**3) == "3.0 GiB" and display.human_bytes(12) == "12 B"
    assert display.text({"a": [1, "<b>"]}) == "a=[1, &quot;&lt;b&gt;&quot;]"
    assert display.text(None) == "-" and display.text(["x", "y"]) == "x, y"
