"""spark-submit entry points, run in process on the test session."""

from __future__ import annotations

import importlib.util
import json

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
