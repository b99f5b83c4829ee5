"""`IcebergSnapshot.count()`: a row count from the metadata (record counts less deletion vectors and
position deletes), checked against the source projects' published counts, against `toDF().count()`
and pyiceberg on generated tables whose deletes list positions twice and beyond the file, and refusing
a damaged deletion vector as the row reader does."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from pyspark.sql import functions as F

from benchmarks.iceberg_generate import IcebergSpec, generate_iceberg
from deltaspark.errors import DeletionVectorError
from deltaspark.iceberg import IcebergTable, row_count
from tests import iceberg_conformance as ic
from tests.suites import skip_unless_iceberg_swept

# Every kind of delete and its scope rules; DELTASPARK_ICEBERG_ALL_TABLES=1 counts all 58 tables.
SUBSET = {
    "dremio-table_with_delete",  # v2 position deletes
    "duckdb-iceberg_v1_deprecated",  # v1, no deletes
    "duckdb-legacy_bare_deletion_vector",  # a DV without a Puffin footer
    "impala-iceberg_spark_compaction_with_dangling_delete",  # a delete older than the data it names
    "impala-iceberg_v2_delete_both_eq_and_pos",  # equality deletes: no metadata count
    "impala-iceberg_v2_partitioned_position_deletes_orc",  # ORC position delete files
    "impala-iceberg_v2_positional_update_all_rows",  # every row deleted, then re-added
    "impala-iceberg_v3_deletion_vectors",  # v3 deletion vectors replacing older ones
}
ALL = os.environ.get("DELTASPARK_ICEBERG_ALL_TABLES", "") == "1"


@pytest.mark.parametrize("name", ic.table_names())
def test_metadata_count_is_the_published_count(spark, name) -> None:  # noqa: ANN001
    if name not in SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_ICEBERG_ALL_TABLES=1 counts every table")
    skip_unless_iceberg_swept(name)
    info = next(t for t in ic.tables() if t.name == name)
    table = IcebergTable.forPath(spark, str(info.path), info.entry_metadata, info.relocate())
    for snapshot_id, expected in sorted(info.rows.items()):
        snapshot = table.snapshot(snapshot_id)
        counted = row_count.metadata_count(spark, table.metadata, table.metadata.snapshots[snapshot_id])
        equality = snapshot.files().where(F.col("content") == 2).count()
        if equality:
            assert counted is None, f"{name} @ {snapshot_id}: equality deletes need the rows"
        else:
            assert counted == expected, f"{name} @ {snapshot_id}"


def test_count_reads_rows_when_equality_deletes_exist(spark) -> None:  # noqa: ANN001
    info = next(t for t in ic.tables() if t.name == "duckdb-equality_deletes_partitioned")
    table = IcebergTable.forPath(spark, str(info.path), info.entry_metadata, info.relocate())
    with_equality = sorted(info.rows)[:2]  # both have equality deletes: each count reads the rows
    for snapshot_id in with_equality:
        assert row_count.metadata_count(spark, table.metadata, table.metadata.snapshots[snapshot_id]) is None
        assert table.snapshot(snapshot_id).count() == info.rows[snapshot_id]


@pytest.fixture(scope="module", params=[2, 3], ids=["v2-position-deletes", "v3-deletion-vectors"])
def generated(request, tmp_path_factory):  # noqa: ANN001, ANN201
    spec = IcebergSpec(
        files=400,
        rows_per_file=20,
        partitions=7,
        per_manifest=150,
        delete_every=10,
        deleted_per_file=4,
        files_per_delete=2,
        vectors_per_puffin=3,
        format_version=request.param,
        quirks=True,  # positions listed twice and beyond the file's record count
        write_all_data=True,
    )
    return generate_iceberg(tmp_path_factory.mktemp(f"iceberg-v{request.param}") / "t", spec)


def test_count_agrees_with_rows_and_pyiceberg(spark, generated) -> None:  # noqa: ANN001
    from pyiceberg.table import StaticTable

    table = IcebergTable.forPath(spark, generated.path)
    snapshot = table.snapshot()
    theirs = StaticTable.from_metadata(generated.metadata_location)
    assert snapshot.count() == snapshot.toDF().count() == theirs.scan().count() == generated.rows
    assert generated.rows < generated.rows_before_deletes
    before = table.snapshot(generated.data_snapshot)
    assert before.count() == theirs.scan(snapshot_id=generated.data_snapshot).count()
    assert before.count() == generated.rows_before_deletes
    planned = list(theirs.scan().plan_files())
    assert len(planned) == snapshot.files().where("content = 0").count() == generated.files
    assert snapshot.files().count() == generated.files + generated.delete_files


@pytest.mark.parametrize("generated", [3], indirect=True)  # deletion vectors: format 3
def test_count_refuses_a_damaged_deletion_vector(spark, generated, tmp_path) -> None:  # noqa: ANN001
    copy = tmp_path / "t"
    shutil.copytree(generated.path, copy)
    table = IcebergTable.forPath(spark, str(copy))  # the recorded location maps to the copy
    assert table.snapshot().count() == generated.rows
    puffin = sorted((copy / "data" / "deletes").glob("*.puffin"))[0]
    damaged = bytearray(puffin.read_bytes())
    damaged[12] ^= 0xFF  # inside the first vector's bitmap
    puffin.write_bytes(bytes(damaged))
    with pytest.raises(DeletionVectorError, match=re.escape(puffin.name)):  # not Spark's PythonException
        table.snapshot().count()
