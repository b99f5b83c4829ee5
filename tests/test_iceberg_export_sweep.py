"""`toIceberg` over the Delta conformance tables: each table is copied, converted, and read back as
Iceberg by pyiceberg (an independent reader: its row count) and by deltaspark's Iceberg reader (its
rows, against the Delta rows). Tables with deletion vectors get row tracking enabled on the copy and
go to format 3; what Iceberg cannot express must be refused by name.

CI converts the subset below (one table per feature the conversion treats specially);
`DELTASPARK_EXPORT_ALL_TABLES=1` converts every table (each agrees or is refused as listed)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable
from deltaspark.errors import DeltaSparkError, UnsupportedFeatureError
from deltaspark.iceberg import IcebergTable
from tests.conftest import conformance_root
from tests.suites import SPARK_35_ICEBERG, skip_unless_iceberg_swept

SUBSET = {
    "basic-dv-with-checkpoint",  # deletion vectors written by delta-spark: format 3, Puffin blobs
    "cdf-column-mapping-name-mode",  # column mapping (name): ids from the mapping
    "data-reader-partition-values-column-mapping-name",  # partition values of every type, mapped
    "stats-writing-all-types",  # bounds of every type from Delta stats
    "v2-checkpoints-parquet-with-sidecars",  # a V2 checkpoint with sidecars
    "mixed-nulls",  # null partition values and null counts
    "cdf-table-backtick-column-names",  # names with dots and backticks
    "void-column",  # refused: void
    "type-widening",  # refused: a promotion Iceberg cannot read
    "spark-variant-checkpoint",  # refused in format 2: variant
    "with-short-dv",  # pyiceberg cannot apply deletes to INT96 timestamps (below)
}
ALL = os.environ.get("DELTASPARK_EXPORT_ALL_TABLES", "") == "1"

VARIANT = r"variant.*(formatVersion=3|Spark 4)"  # format 2 has none; Spark 3.5's reader has none
# What the conversion refuses, by name (the message must say why).
REFUSED = {
    "void-column": r"void_col has type void",
    "type-widening": r"widened from byte to double",
    "spark-variant-checkpoint": VARIANT,
    "spark-variant-stable-feature-checkpoint": VARIANT,
    "spark-shredded-variant-preview-delta": VARIANT,
    "unshredded-variant": VARIANT,
    "catalog-owned-preview": r"catalogManaged",  # the reader's refusal
    "table-with-geo": r"geospatial",  # the reader's refusal
}
# Not readable as Delta tables at all: the fixture lacks files the log names, or holds no commits.
NOT_DELTA_READABLE = {
    "app-txn-with-last-updated": "the fixture omits data files its log names",
    "with_checkpoint_no_last_checkpoint": "the fixture omits data files its log names",
    "crc-malformed": "the fixture has no commit files",
    "partition_cm": "no _delta_log",
}
# Tables whose earlier version cannot be restored (the message must say why).
RESTORE_GAPS = {
    # a writer feature deltaspark does not know: no commit (RESTORE included) may be written
    "partitioned_with_materialize_feature": r"materializePartitionColumns",
}
# pyiceberg 0.12 reads INT96 timestamps (Spark's default), but not when it applies deletes to them;
# these tables are checked with deltaspark's Iceberg reader only.
PYICEBERG_GAPS = {"with-short-dv": "INT96 timestamps in a data file with deletes"}


def _names() -> list[str]:
    root = conformance_root()
    if root is None:
        return ["<conformance folder>"]
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("300k"))


def _rows(df) -> list[str]:  # noqa: ANN001
    return sorted(r[0] for r in df.select(F.to_json(F.struct("*"))).collect())


@pytest.mark.parametrize("name", _names())
def test_converted_table_reads_the_same_as_iceberg(spark, conformance, tmp_path, name) -> None:  # noqa: ANN001
    if name not in SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_EXPORT_ALL_TABLES=1 converts every table")
    skip_unless_iceberg_swept(name)
    if name in NOT_DELTA_READABLE:
        pytest.skip(f"not a readable Delta table: {NOT_DELTA_READABLE[name]}")
    source = conformance / name / "delta" if (conformance / name / "delta").is_dir() else conformance / name
    path = tmp_path / name
    shutil.copytree(source, path)
    if name in REFUSED:
        with pytest.raises(UnsupportedFeatureError, match=REFUSED[name]):
            DeltaTable.forPath(spark, str(path)).toIceberg()
        return
    table = DeltaTable.forPath(spark, str(path))
    with_vectors = table.snapshot().files().where(F.col("deletionVector").isNotNull()).limit(1).count() > 0
    if with_vectors:
        table.setProperties({"delta.enableRowTracking": "true"})  # format 3 needs row lineage
    done = table.toIceberg(formatVersion=3 if with_vectors else 2)
    assert done.written and done.data_files == table.snapshot().files().count()

    delta = table.toDF()
    iceberg = IcebergTable.forPath(spark, str(path))
    quoted = ["`" + f.name.replace("`", "``") + "`" for f in delta.schema.fields]  # names with dots
    ours = iceberg.toDF().select(
        [F.col(q).cast(f.dataType).alias(f.name) for q, f in zip(quoted, delta.schema.fields, strict=True)]
    )
    assert _rows(ours) == _rows(delta)
    expected = delta.count()
    assert iceberg.count() == expected
    if name not in PYICEBERG_GAPS:
        from pyiceberg.table import StaticTable

        scanned = StaticTable.from_metadata(done.metadata_location).scan().to_arrow()
        assert scanned.num_rows == expected
        assert set(scanned.column_names) == {f.name for f in delta.schema.fields}
    _restore_and_convert_again(spark, table, path, name, done, expected)


def _restore_and_convert_again(
    spark, table: DeltaTable, path: Path, name: str, done, before_rows: int
) -> None:  # noqa: ANN001
    """A second version of the table: restore to the middle of the commits the log holds, convert
    again (incremental or full, as the change needs), and read both Iceberg snapshots back."""
    versions = sorted(r.version for r in table.history().select("version").collect())
    latest = table.snapshot().version
    candidates = [v for v in versions if v < latest]
    if not candidates:
        assert len(versions) == 1 or name in RESTORE_GAPS, versions  # one commit: one version only
        return
    earlier = candidates[(len(candidates) - 1) // 2]
    if name in RESTORE_GAPS:
        with pytest.raises(DeltaSparkError, match=RESTORE_GAPS[name]):
            table.restoreToVersion(earlier)
        return
    table.restoreToVersion(earlier)
    restored = table.snapshot()
    format_version = IcebergTable.forPath(spark, str(path)).metadata.format_version  # kept
    if format_version == 3 and restored.metadata.configuration.get("delta.enableRowTracking") != "true":
        table.setProperties({"delta.enableRowTracking": "true"})  # the restore took it away
    again = table.toIceberg(formatVersion=format_version)
    assert again.written and again.delta_version == table.snapshot().version
    assert again.snapshot_id != done.snapshot_id
    delta = table.toDF()
    iceberg = IcebergTable.forPath(spark, str(path))
    quoted = ["`" + f.name.replace("`", "``") + "`" for f in delta.schema.fields]
    ours = iceberg.toDF().select(
        [F.col(q).cast(f.dataType).alias(f.name) for q, f in zip(quoted, delta.schema.fields, strict=True)]
    )
    assert _rows(ours) == _rows(delta)
    if name not in PYICEBERG_GAPS:
        from pyiceberg.table import StaticTable

        static = StaticTable.from_metadata(again.metadata_location)
        assert static.scan().to_arrow().num_rows == delta.count()
        if again.incremental:  # the earlier snapshot is kept: time travel reads the earlier version
            assert static.scan(snapshot_id=done.snapshot_id).to_arrow().num_rows == before_rows


def test_the_lists_name_real_tables(conformance) -> None:  # noqa: ANN001
    """A renamed fixture must not turn an expectation into a silent no-op."""
    names = {p.name for p in Path(conformance).iterdir()}
    for listed in (SUBSET, REFUSED, NOT_DELTA_READABLE, PYICEBERG_GAPS, RESTORE_GAPS):
        assert set(listed) <= names
    assert all(re.compile(pattern) for pattern in REFUSED.values())


def test_the_3_5_iceberg_tables_are_in_the_sweeps() -> None:
    """A table named for the 3.5 suite's Iceberg sweeps must be in one, or 3.5 sweeps less than it says."""
    from tests import test_iceberg_count, test_iceberg_import, test_iceberg_read

    swept = SUBSET | test_iceberg_import.SUBSET | test_iceberg_count.SUBSET
    swept |= {case[0] for case in test_iceberg_read.LITERAL}
    assert swept >= SPARK_35_ICEBERG, SPARK_35_ICEBERG - swept
