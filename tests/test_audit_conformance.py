"""Audits of real tables written by other engines: silent on healthy ones, and on the fixtures whose
logs really are inconsistent, exactly the findings their own files show.

CI audits six tables (`SUBSET`, ~2 minutes); `DELTASPARK_AUDIT_ALL_TABLES=1` audits every
table of the folder with the same expectations (~13 minutes, run at each stop, see README).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from deltaspark import DeltaTable, TableNotFoundError
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.conftest import CONNECT, conformance_root
from tests.suites import skip_unless_swept

pytestmark = pytest.mark.skipif(CONNECT, reason="audits list tables through Hadoop and pyarrow")

# Tables whose own files disagree; each entry: the level to audit at and the (check, severity) pairs
# expected, with what in the table makes them right.
EXPECTED: dict[str, tuple[str, set[tuple[str, str]]]] = {
    # The .crc says 10 files, 2 transactions and 3 domains; commit 0 holds no add, txn or domain.
    "crc-full": ("quick", {("log.checksum", "error")}),
    # The multi-part checkpoint at 1 carries another table's metaData (id d896..., not fd39...).
    "parquet_row_group_skipping": ("full", {("log.checkpoint", "error")}),
    # A cdc action points at `fake/path/2`, which the fixture does not ship.
    "table-with-cdf": ("full", {("files.change_data", "error")}),
    # _last_checkpoint names the UUID-named V2 file; the table holds it under the classic name.
    "v2-classic-checkpoint-json": ("full", {("log.last_checkpoint", "warning")}),
    "v2-classic-checkpoint-parquet": ("full", {("log.last_checkpoint", "warning")}),
    # Fixtures that ship only their log (or data files under other names than the log's):
    "app-txn-with-last-updated": ("full", {("files.exist", "error")}),
    "with_checkpoint_no_last_checkpoint": ("full", {("files.exist", "error")}),
    "spark-variant-stable-feature-checkpoint": ("full", {("files.exist", "error")}),
    # Features deltaspark refuses to read: the snapshot does not load, said by log.snapshot.
    "catalog-owned-preview": ("quick", {("log.snapshot", "error")}),
    "table-with-geo": ("quick", {("log.snapshot", "error")}),
    # 300k adds and no data files: its log is audited (quick), clean.
    "300k-add-files-100-col-partitioned": ("quick", set()),
}
# Variant columns need Spark 4: on 3.5 the snapshot (and each checkpoint's) does not load.
VARIANT = {
    "spark-variant-checkpoint",
    "spark-variant-stable-feature-checkpoint",
    "spark-shredded-variant-preview-delta",
    "unshredded-variant",
}
NOT_TABLES = {"crc-malformed", "partition_cm", "stats-writing-all-types"}  # no commit in _delta_log

SUBSET = [  # one table per checkpoint kind and the fixtures with expected findings
    "basic-dv-with-checkpoint",
    "v2-checkpoints-parquet-with-sidecars",
    "type-widening",
    "crc-full",
    "parquet_row_group_skipping",
    "v2-classic-checkpoint-json",
]
ALL = os.environ.get("DELTASPARK_AUDIT_ALL_TABLES", "") == "1"


def _tables() -> list[str]:
    root = conformance_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root else SUBSET


@pytest.mark.parametrize("name", _tables())
def test_conformance_table_audits_as_its_files_say(spark, conformance, name):
    if name not in SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_AUDIT_ALL_TABLES=1 audits every table")
    skip_unless_swept(name)
    if name in NOT_TABLES:
        with pytest.raises(TableNotFoundError):
            DeltaTable.forPath(spark, str(conformance / name)).audit("quick")
        return
    level, expected = EXPECTED.get(name, ("full", set()))
    if name in VARIANT and PYSPARK_VERSION < (4, 0):
        checkpointed = any(".checkpoint." in p.name for p in (conformance / name / "_delta_log").iterdir())
        level, expected = (
            "quick",
            {("log.snapshot", "error")} | ({("log.checkpoint", "error")} if checkpointed else set()),
        )
    report = DeltaTable.forPath(spark, str(conformance / name)).audit(level)
    found = {(r["check"], r["severity"]) for r in report.findings.where("severity != 'info'").collect()}
    assert found == expected
    assert report.passed == (not any(severity == "error" for _, severity in expected))
    report.unpersist()


def _copy(conformance: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(conformance / name, target)
    return target


def _non_info(report) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in report.findings.where("severity != 'info'").collect():
        out.setdefault(r["check"], []).append((r["severity"], r["version"], r["path"], r["detail"]))
    return out


# The replay's base is chosen on the driver and the checks' plans are the same on every Spark.
@pytest.mark.one_suite("4.x")
def test_a_gap_before_a_checkpoint_is_reported_once_and_the_replaying_checks_run(
    spark, conformance, tmp_path
):
    """Commit 3 of a real table is gone; its checkpoint at 10 gives the latest version. The gap is
    `log.versions`' finding alone; the checks that replay the log run on what the checkpoint and
    the commits after it reconstruct (no "could not run"), and the orphan found is the only one."""
    table = _copy(conformance, "basic-with-checkpoint", tmp_path)
    os.remove(table / "_delta_log" / f"{3:020d}.json")
    (table / "stray.parquet").write_bytes(b"x" * 5)
    # The checks that replay the log (each said "could not run" before); files.* are tested elsewhere.
    report = DeltaTable.forPath(spark, str(table)).audit(
        checks=["log.", "files.change_data", "hygiene.orphans"]
    )
    assert report.version == 14
    assert _non_info(report) == {"log.versions": [("error", 3, None, "commit 3 is missing between 0 and 14")]}
    status = {c["check"]: c["status"] for c in report.checks}
    assert {c for c, s in status.items() if s != "ok"} == {"log.versions"}
    replaying = {"log.checkpoint", "log.compaction", "log.checksum", "files.change_data", "hygiene.orphans"}
    assert replaying <= set(status)
    orphans = report.findings.where("check = 'hygiene.orphans'").collect()
    assert [r["path"] for r in orphans] == [f"file:{table}/stray.parquet"]
    assert report.metrics["numFiles"] == 30
    report.unpersist()


@pytest.mark.one_suite("4.x")  # read on the driver: no Spark-version-dependent path
def test_a_hint_naming_a_missing_checkpoint_is_an_error_as_delta_rs_cannot_open_the_table(
    spark, conformance, tmp_path
):
    """`_last_checkpoint` names version 10, whose checkpoint is gone, and no checkpoint follows it:
    delta-rs (delta-kernel-rs) lists from 10, finds no checkpoint and refuses the table; writing a
    checkpoint rewrites the hint. A hint naming a version before an existing checkpoint is only
    stale (delta-rs takes the newer checkpoint): a warning."""
    from deltalake import DeltaTable as RsTable

    table = _copy(conformance, "basic-with-checkpoint", tmp_path)
    log = table / "_delta_log"
    dt = DeltaTable.forPath(spark, str(table))

    def hint_findings(version: int) -> list[tuple]:
        hint = json.loads((log / "_last_checkpoint").read_text())
        hint["version"] = version
        hint.pop("checksum", None)
        (log / "_last_checkpoint").write_text(json.dumps(hint))
        return _non_info(dt.audit("quick", checks=["log.last_checkpoint"])).get("log.last_checkpoint", [])

    # Stale: version 5 has no checkpoint, but the one at 10 follows it (delta-rs takes that one).
    assert [(s, v) for s, v, _, _ in hint_findings(5)] == [("warning", 5)]
    assert RsTable(str(table)).version() == 14
    os.remove(log / f"{10:020d}.checkpoint.parquet")
    [(severity, version, path, detail)] = hint_findings(10)
    assert (severity, version, path) == ("error", 10, f"file:{log}/_last_checkpoint")
    assert "delta-rs and the other readers built on delta-kernel-rs cannot open the table" in detail
    assert "write a checkpoint (DeltaTable.checkpoint(), which rewrites the hint)" in detail
    with pytest.raises(Exception, match="_last_checkpoint hint but didn't find any checkpoints"):
        RsTable(str(table))
    dt.checkpoint()  # the remedy the finding names
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 14
    assert RsTable(str(table)).version() == 14


def _readd_without_its_dv(table: Path) -> str:
    """Commit 2: the version-1 add of the DV'd file again, without its DV, and no remove."""
    commit = (table / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    (add,) = [json.loads(line)["add"] for line in commit if line.startswith('{"add"')]
    readded = {k: v for k, v in add.items() if k != "deletionVector"}
    (table / "_delta_log" / f"{2:020d}.json").write_text(json.dumps({"add": readded}) + "\n")
    return add["path"]


@pytest.mark.one_suite("4.x")  # the replay's plans are the same on every Spark
def test_a_file_added_again_without_its_deletion_vector_is_named_and_the_other_checks_run(
    spark, conformance, tmp_path
):
    """The protocol keys files by (path, DV id): the file re-added without its DV and never removed
    is two live logical files, its rows read twice and the DV's deleted rows back (deltaspark
    refuses the version). `log.reconciliation` names the path and both versions; the other checks
    run on the state as the protocol keys it. Also when the older add comes from a checkpoint
    (the commits before it cleaned up)."""
    table = _copy(conformance, "table-with-dv-small", tmp_path)
    data_file = _readd_without_its_dv(table)
    report = DeltaTable.forPath(spark, str(table)).audit("quick")
    found = _non_info(report)
    assert list(found) == ["log.reconciliation"]
    [(severity, version, path, detail)] = found["log.reconciliation"]
    assert (severity, version, path) == ("error", 2, f"file:{table}/{data_file}")
    assert detail.startswith(
        "the data file is added at version 2 (no deletion vector) while its add at version 1 "
        "(deletion vector uvBn[lx{q8@P<9BNH/isA@1) was never removed: two live logical files of one "
        "data file from version 2 on."
    )
    status = {c["check"]: c["status"] for c in report.checks}
    assert {c for c, s in status.items() if s != "ok"} == {"log.reconciliation"}
    assert {"files.statistics", "hygiene.deletion_vectors", "hygiene.log"} <= set(status)
    # The state as the protocol keys it: both logical files, 10 rows each, 2 deleted by the DV.
    metrics = report.metrics
    assert (metrics["numFiles"], metrics["numRecords"], metrics["deletedRecords"]) == (2, 20, 2)
    report.unpersist()

    after = _copy(conformance, "table-with-dv-small", tmp_path / "after-checkpoint")
    DeltaTable.forPath(spark, str(after)).checkpoint()
    _readd_without_its_dv(after)
    for version in (0, 1):  # cleaned up: the older add is the checkpoint's
        os.remove(after / "_delta_log" / f"{version:020d}.json")
    report = DeltaTable.forPath(spark, str(after)).audit("quick", checks=["log."])
    found = _non_info(report)
    assert [(s, v, p) for s, v, p, _ in found.pop("log.reconciliation")] == [
        ("error", 2, f"file:{after}/{data_file}")
    ]
    assert found == {}
    report.unpersist()
