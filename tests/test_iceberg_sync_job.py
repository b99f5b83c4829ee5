"""The Iceberg sync job (`jobs/sync_iceberg.py`): converts each table as needed (full, incremental,
or nothing when current), picks the format, reports failures without stopping, and writes a summary."""

from __future__ import annotations

import importlib.util
import json

import deltaspark
from deltaspark import DeltaTable
from deltaspark.iceberg import IcebergTable
from tests.conftest import REPO


def _job():
    spec = importlib.util.spec_from_file_location("sync_iceberg", REPO / "jobs" / "sync_iceberg.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_job_converts_incrementally_and_reports_each_table(spark, tmp_path, capsys) -> None:  # noqa: ANN001
    plain, tracked = str(tmp_path / "plain"), str(tmp_path / "tracked")
    deltaspark.write(spark.range(10).selectExpr("id", "id % 3 as k"), plain, partitionBy=["k"])
    deltaspark.write(spark.range(5).selectExpr("id"), tracked, properties={"delta.enableRowTracking": "true"})
    missing = str(tmp_path / "missing")
    summary = tmp_path / "sync.json"
    job = _job()

    assert job.main([plain, tracked, missing, "--output", str(summary)], spark=spark) == 1
    first = {t["path"]: t for t in json.loads(summary.read_text())["tables"]}
    assert first[plain]["mode"] == "full" and first[plain]["formatVersion"] == 2
    assert first[plain]["dataFiles"] == DeltaTable.forPath(spark, plain).snapshot().files().count()
    assert first[tracked]["mode"] == "full" and first[tracked]["formatVersion"] == 3  # row tracking
    assert first[missing]["status"] == "failed" and "TableNotFoundError" in first[missing]["error"]
    assert "3 table(s): 2 ok, 1 failed" in capsys.readouterr().out

    deltaspark.write(spark.range(10, 12).selectExpr("id", "id % 3 as k"), plain)
    assert job.main([plain, tracked, "--output", str(summary)], spark=spark) == 0
    second = {t["path"]: t for t in json.loads(summary.read_text())["tables"]}
    assert second[plain]["mode"] == "incremental" and second[plain]["deltaVersion"] == 1
    assert second[tracked]["mode"] == "current"
    assert second[tracked]["icebergSnapshotId"] == first[tracked]["icebergSnapshotId"]
    assert IcebergTable.forPath(spark, plain).count() == 12
    assert IcebergTable.forPath(spark, tracked).formatVersion == 3
