"""spark-submit entry points, run in process on the test session."""

from __future__ import annotations

import importlib.util
import json
import os

from tests.conftest import REPO


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_describe_tables_job_audits_each_table_and_reports_failures(spark, conformance, tmp_path, capsys):
    job = _load("describe_tables")
    listing = tmp_path / "tables.txt"
    listing.write_text(f"{conformance / 'basic-with-checkpoint'}\n# a comment\n{tmp_path / 'missing'}\n")
    output = tmp_path / "audit.json"
    code = job.main(
        [
            str(conformance / "v2-checkpoints-parquet-with-sidecars"),
            "--paths-file",
            str(listing),
            "--output",
            str(output),
        ],
        spark=spark,
    )
    assert code == 1  # one table is missing
    tables = {t["path"].rsplit("/", 1)[-1]: t for t in json.loads(output.read_text())["tables"]}
    assert tables["v2-checkpoints-parquet-with-sidecars"]["numFiles"] == 101
    assert (
        tables["basic-with-checkpoint"]["version"] == 14
        and tables["basic-with-checkpoint"]["checkpointVersion"] == 10
    )
    assert tables["missing"]["status"] == "failed" and "TableNotFoundError" in tables["missing"]["error"]
    out = capsys.readouterr().out
    assert "FAILED" in out and "v2Checkpoint" in out


def test_the_audit_job_leaves_nothing_cached_table_after_table(spark, tmp_path):
    """A long audit job over many tables must not keep each table's cached frames (they filled a
    1 GiB driver's heap after 67 tables of a 200-table run), with `--findings` too: each table's
    findings are appended when its audit is done (one commit per table that has any)."""
    import glob

    from deltaspark import DeltaTable, write
    from deltaspark.audit.job import main as audit_job

    healthy, damaged = str(tmp_path / "healthy"), str(tmp_path / "damaged")
    for path in (healthy, damaged):
        write(spark.range(0, 40).selectExpr("id", "id % 2 AS p"), path, partitionBy=["p"])
    os.remove(sorted(glob.glob(f"{damaged}/**/p=0/*.parquet", recursive=True))[0])  # a live file gone
    cached = spark.sparkContext._jsc.sc().getRDDStorageInfo
    before = len(cached())
    assert audit_job([healthy, "--level", "full"], spark=spark) == 0
    assert len(cached()) == before
    findings = str(tmp_path / "findings")
    for _ in range(2):
        assert audit_job([healthy, damaged, "--level", "full", "--findings", findings], spark=spark) == 1
    assert len(cached()) == before
    saved = DeltaTable.forPath(spark, findings)
    rows = saved.toDF()
    assert rows.where("severity = 'error'").select("table").distinct().collect()[0]["table"] == damaged
    runs_and_tables = rows.select("runId", "table").distinct().count()
    assert rows.select("runId").distinct().count() == 2
    assert saved.history().count() == runs_and_tables  # a commit per audited table with findings
