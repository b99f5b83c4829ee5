"""Audits of real tables written by other engines: silent on healthy ones, and on the fixtures whose
logs really are inconsistent, exactly the findings their own files show.

CI audits six tables (`SUBSET`, ~2 minutes); `DELTASPARK_AUDIT_ALL_TABLES=1` audits every
table of the folder with the same expectations (~13 minutes, run at each stop, see README).
"""

from __future__ import annotations

import os

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
