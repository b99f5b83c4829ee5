"""`DeltaTable.convertToDelta(spark, "iceberg.`path`")`: a Delta log over an Iceberg table's data
files. The converted table must read the rows deltaspark's Iceberg reader reads (every delete
applied), delta-rs must read them too where it resolves the columns, and what Delta cannot express
must be refused by name, with nothing committed.

CI converts the subset below (one table per kind of delete, writer and schema feature);
`DELTASPARK_ICEBERG_ALL_TABLES=1` converts every conformance table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from benchmarks.iceberg_generate import IcebergSpec, generate_iceberg
from deltaspark import DeltaTable
from deltaspark.errors import DeltaSparkError, UnsupportedFeatureError
from deltaspark.iceberg import IcebergTable
from tests import iceberg_conformance as ic
from tests import iceberg_copy

SUBSET = {
    "dremio-table_with_delete",  # v2 position deletes
    "impala-iceberg_v3_deletion_vectors",  # v3 deletion vectors replacing older ones
    "impala-iceberg_spark_compaction_with_dangling_delete",  # a delete older than the data it names
    "impala-iceberg_v2_positional_update_all_rows",  # every row deleted, then re-added
    "duckdb-iceberg_v1_deprecated",  # format 1
    "duckdb-struct_filter_issue",  # NOT NULL fields nested in a struct, read through column mapping
    "duckdb-name_mapping",  # refused: files without field ids
    "duckdb-equality_deletes_partitioned",  # refused: equality deletes
    "impala-iceberg_v2_partitioned_position_deletes_orc",  # refused: ORC data files
}
ALL = os.environ.get("DELTASPARK_ICEBERG_ALL_TABLES", "") == "1"


def _names() -> list[str]:
    try:
        return [t.name for t in ic.tables()]
    except BaseException:  # folder absent: one test reports the skip (or the CI failure)
        return ["<conformance folder>"]


def _json_rows(df) -> list[str]:  # noqa: ANN001
    return sorted(r[0] for r in df.select(F.to_json(F.struct("*"))).collect())


def _convert(spark, copy: Path, metadata: str | None = None) -> DeltaTable:  # noqa: ANN001
    return DeltaTable.convertToDelta(spark, f"iceberg.`{copy}`", metadataLocation=metadata)


def _refusal(spark, copy: Path, metadata: str) -> str | None:  # noqa: ANN001
    """Why the table cannot be converted, from what the Iceberg metadata says (None: it can)."""
    table = IcebergTable.forPath(spark, str(copy), metadata)
    files = table.snapshot().files()
    if files.where(F.col("content") == 2).limit(1).count():
        return "equality deletes"
    if files.where((F.col("content") == 0) & (F.upper("file_format") != "PARQUET")).limit(1).count():
        return "Parquet"
    specs = table.metadata.specs
    for row in files.where("content = 0").select("file_path", "spec_id").collect():
        schema = pq.read_schema(row[0].removeprefix("file:"))
        if any(not f.metadata or b"PARQUET:field_id" not in f.metadata for f in schema):
            return "field ids"  # a file Iceberg reads through its name mapping
        held = {int(f.metadata[b"PARQUET:field_id"]) for f in schema}
        if any(f.transform == "identity" and f.source_id not in held for f in specs[row[1]]):
            return "identity partition"  # Iceberg readers fill it from the partition value
    return None


@pytest.mark.parametrize("name", _names())
def test_converted_table_reads_the_iceberg_rows(spark, tmp_path, name) -> None:  # noqa: ANN001
    if name not in SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_ICEBERG_ALL_TABLES=1 converts every table")
    info = next(t for t in ic.tables() if t.name == name)
    copy = iceberg_copy.relocated_copy(info.path, list(info.prefixes), tmp_path / name)
    iceberg = IcebergTable.forPath(spark, str(copy), info.entry_metadata)
    refusal = _refusal(spark, copy, info.entry_metadata)
    if refusal is not None:
        with pytest.raises(DeltaSparkError, match=refusal):
            _convert(spark, copy, info.entry_metadata)
        assert not list(copy.glob("_delta_log/*.json"))
        return
    try:
        table = _convert(spark, copy, info.entry_metadata)
    except UnsupportedFeatureError as exc:  # types Delta cannot hold, initial defaults: by name
        assert any(f.startswith("iceberg-") for f in exc.features), exc
        assert not list(copy.glob("_delta_log/*.json"))
        return
    expected = iceberg.toDF()
    expected_rows = _json_rows(expected)
    delta = table.toDF()
    assert delta.columns == expected.columns
    assert _json_rows(delta) == expected_rows
    assert table.snapshot().files().count() == iceberg.snapshot().files().where("content = 0").count()
    snapshot_id = iceberg.snapshot().snapshotId
    if snapshot_id in info.rows:  # the count the source project's README publishes
        assert delta.count() == info.rows[snapshot_id]
    assert _delta_rs_count(copy) == len(expected_rows)  # an independent Delta reader


def _delta_rs_count(path: Path) -> int:
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", RsTable(str(path))).execute("SELECT count(*) AS n FROM t")
    return pa.table(result.read_all()).column("n")[0].as_py()


def _generated(tmp_path: Path, version: int, files: int = 60):  # noqa: ANN202
    spec = IcebergSpec(
        files=files,
        rows_per_file=20,
        partitions=4,
        per_manifest=25,
        delete_every=4,
        deleted_per_file=3,
        files_per_delete=2,
        vectors_per_puffin=3,
        format_version=version,
        quirks=True,  # positions listed twice and beyond the file's record count
        write_all_data=True,
    )
    return generate_iceberg(tmp_path / f"v{version}", spec)


@pytest.mark.parametrize("version", [2, 3], ids=["v2-position-deletes", "v3-deletion-vectors"])
def test_deletes_become_deletion_vectors_that_delta_rs_reads(spark, tmp_path, version) -> None:  # noqa: ANN001
    """Generated tables whose deletes list positions twice and past the file's end: the converted
    table against the generator's count, deltaspark's Iceberg reader and delta-rs."""
    generated = _generated(tmp_path, version)
    path = Path(generated.path)
    iceberg_rows = _json_rows(IcebergTable.forPath(spark, str(path)).toDF())
    table = _convert(spark, path)
    assert table.toDF().count() == generated.rows == len(iceberg_rows) < generated.rows_before_deletes
    assert _json_rows(table.toDF()) == iceberg_rows
    snapshot = table.snapshot()
    assert "deletionVectors" in snapshot.tableFeatures and "columnMapping" in snapshot.tableFeatures
    assert snapshot.files().count() == generated.files
    with_dv = snapshot.files().where(F.col("deletionVector").isNotNull())
    assert 0 < with_dv.count() < generated.files
    # every file's statistics: the row count, and bounds that hold its rows
    stats = (
        snapshot.files()
        .select("stats_parsed.*")
        .agg(F.sum("numRecords"), F.min("minValues.id"), F.max("maxValues.id"))
        .first()
    )
    assert (
        stats[0] == generated.rows_before_deletes
        and stats[1] == 0
        and stats[2] == generated.rows_before_deletes - 1
    )
    assert _delta_rs_count(path) == generated.rows
    commit = (path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    info = next(json.loads(line)["commitInfo"] for line in commit if '"commitInfo"' in line)
    assert info["operation"] == "CONVERT" and info["operationParameters"]["sourceFormat"] == "iceberg"
    assert int(info["operationMetrics"]["numOutputRows"]) == generated.rows
    assert DeltaTable.convertToDelta(spark, f"iceberg.`{path}`").snapshot().version == 0  # already Delta


def test_foreign_or_damaged_data_files(spark, tmp_path) -> None:  # noqa: ANN001
    generated = _generated(tmp_path, 2, files=8)
    path = Path(generated.path)
    victim = sorted(path.glob("data/part=*/*.parquet"))[0]  # a data file, not a delete file
    original = pq.read_table(victim)
    # a file without Iceberg field ids (as files added without Iceberg's writer are)
    pq.write_table(original.cast(pa_schema_without_ids(original.schema)), victim)
    with pytest.raises(DeltaSparkError, match=f"{victim.name}.*field ids"):
        _convert(spark, path)
    assert not list(path.glob("_delta_log/*.json"))
    # a file whose row count differs from its manifest entry
    pq.write_table(original.slice(0, original.num_rows - 1), victim)
    with pytest.raises(DeltaSparkError, match=f"{victim.name}.*rows"):
        _convert(spark, path)
    assert not list(path.glob("_delta_log/*.json"))
    # the same rows and ids in other bytes than the manifest says (DuckDB records such sizes):
    # Delta readers fetch the footer by the add's size, so the add gives the real one
    pq.write_table(original, victim, compression="none")
    table = _convert(spark, path)
    sizes = {r["path"]: r["size"] for r in table.snapshot().files().collect()}
    assert sizes[str(victim.relative_to(path))] == victim.stat().st_size
    assert table.toDF().count() == generated.rows


def pa_schema_without_ids(schema):  # noqa: ANN001, ANN201
    import pyarrow as pa

    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])
