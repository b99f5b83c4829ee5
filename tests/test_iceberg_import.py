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
    "duckdb-hive_partitioned_table",  # files without their identity partition columns: Delta partitions
    "duckdb-name_mapping",  # refused: files without field ids
    "duckdb-equality_deletes_partitioned",  # refused: equality deletes
    "impala-iceberg_v2_partitioned_position_deletes_orc",  # refused: ORC data files
}
ALL = os.environ.get("DELTASPARK_ICEBERG_ALL_TABLES", "") == "1"


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
    rows = files.where("content = 0").select("file_path", "spec_id").collect()
    lacking = False
    for row in rows:
        schema = pq.read_schema(row[0].removeprefix("file:"))
        if any(not f.metadata or b"PARQUET:field_id" not in f.metadata for f in schema):
            return "field ids"  # a file Iceberg reads through its name mapping
        held = {int(f.metadata[b"PARQUET:field_id"]) for f in schema}
        lacking |= any(f.transform == "identity" and f.source_id not in held for f in specs[row[1]])
    if lacking and not _identity_partition_columns(table, {row[1] for row in rows}):
        return "identity partition"  # Iceberg readers fill it from the partition value
    return None


def _identity_partition_columns(table: IcebergTable, live_specs: set[int]) -> list[str]:
    """The Delta partition columns a conversion must choose: the identity partition columns, when
    every live spec has the same ones, each a top-level column of a type Delta partitions by."""
    identity = {
        frozenset(f.source_id for f in table.metadata.specs[s] if f.transform == "identity")
        for s in live_specs
    }
    if len(identity) != 1:
        return []
    schema = table.metadata.schema_for(table.metadata.snapshots.get(table.metadata.current_snapshot_id or -1))
    top = {f["id"]: f for f in schema["fields"]}
    sources = next(iter(identity))
    simple = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string")
    if any(
        s not in top or not (top[s]["type"] in simple or str(top[s]["type"]).startswith("decimal("))
        for s in sources
    ):
        return []
    default = (
        table.metadata.default_spec_id if table.metadata.default_spec_id in live_specs else min(live_specs)
    )
    return [top[f.source_id]["name"] for f in table.metadata.specs[default] if f.transform == "identity"]


@pytest.mark.parametrize("name", ic.table_names())
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
    live_specs = {
        r[0] for r in iceberg.snapshot().files().where("content = 0").select("spec_id").distinct().collect()
    }
    if live_specs:  # empty-string values would leave it unpartitioned; no conformance table has one
        assert list(table.snapshot().metadata.partitionColumns) == _identity_partition_columns(
            iceberg, live_specs
        )
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
    if not _renamed(iceberg):  # delta-rs resolves columns by physical name (the current name)
        assert _delta_rs_rows(spark, copy, delta.schema, tmp_path) == expected_rows


def _file_names(arrow_type, prefix: str = "") -> dict[int, str]:  # noqa: ANN001
    """Field id -> dotted name of every struct field in a Parquet file's Arrow schema (the
    elements of lists and maps are `[]`, whatever the writer named them)."""
    import pyarrow as pa

    out: dict[int, str] = {}
    if isinstance(arrow_type, pa.Schema) or pa.types.is_struct(arrow_type):
        children = [(c, c.name) for c in arrow_type]
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        children = [(arrow_type.value_field, "[]")]
    elif pa.types.is_map(arrow_type):
        children = [(arrow_type.key_field, "[k]"), (arrow_type.item_field, "[v]")]
    else:
        children = []
    for child, label in children:
        name = f"{prefix}{label}"
        if child.metadata and b"PARQUET:field_id" in child.metadata:
            out[int(child.metadata[b"PARQUET:field_id"])] = name
        out.update(_file_names(child.type, name + "."))
    return out


def _schema_names(iceberg_type, prefix: str = "") -> dict[int, str]:  # noqa: ANN001
    """The same for an Iceberg schema (JSON)."""
    out: dict[int, str] = {}
    if not isinstance(iceberg_type, dict):
        return out
    kind = iceberg_type.get("type")
    if kind == "struct":
        children = [(f["id"], f["name"], f["type"]) for f in iceberg_type["fields"]]
    elif kind == "list":
        children = [(iceberg_type["element-id"], "[]", iceberg_type["element"])]
    elif kind == "map":
        children = [
            (iceberg_type["key-id"], "[k]", iceberg_type["key"]),
            (iceberg_type["value-id"], "[v]", iceberg_type["value"]),
        ]
    else:
        children = []
    for field_id, label, child in children:
        out[int(field_id)] = f"{prefix}{label}"
        out.update(_schema_names(child, f"{prefix}{label}."))
    return out


def _renamed(iceberg: IcebergTable) -> bool:
    """Whether a live data file names a column otherwise than the current schema does."""
    metadata = iceberg.metadata
    current = _schema_names(metadata.schema_for(metadata.snapshots.get(metadata.current_snapshot_id or -1)))
    paths = iceberg.snapshot().files().where("content = 0").select("file_path").collect()
    for (path,) in paths:
        held = _file_names(pq.read_schema(path.removeprefix("file:")))
        if any(current.get(field_id, name) != name for field_id, name in held.items()):
            return True
    return False


def _delta_rs_rows(spark, path: Path, schema, tmp_path: Path) -> list[str]:  # noqa: ANN001
    """delta-rs's rows of the table, through Parquet into Spark, cast to the table's schema."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    result = pa.table(QueryBuilder().register("t", RsTable(str(path))).execute("SELECT * FROM t").read_all())
    out = tmp_path / "delta-rs-rows.parquet"
    pq.write_table(result, out)
    rows = spark.read.parquet(str(out))
    return _json_rows(
        rows.select([F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema.fields])
    )


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
    assert _delta_rs_rows(spark, path, table.toDF().schema, tmp_path) == iceberg_rows
    # the identity partition column is a Delta partition column, its values from the partition tuples
    assert list(snapshot.metadata.partitionColumns) == ["part"]
    parts = snapshot.files().select(F.col("partitionValues")["part"].alias("p")).distinct().collect()
    assert sorted(r.p for r in parts) == [str(p) for p in range(4)]
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


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        ("2024-03-01T10:11:12.000345+00:00", "timestamptz", "2024-03-01T10:11:12.000345Z"),
        ("2024-03-01T10:11:12.5", "timestamp", "2024-03-01 10:11:12.500000"),
        ("2024-02-29", "date", "2024-02-29"),
        ("0099-12-31T23:59:59", "timestamp", "0099-12-31 23:59:59.000000"),
        ("0.0000012", "decimal(9, 7)", "0.0000012"),
        (1.5, "double", "1.5"),
        ("NaN", "float", "NaN"),
        (-1e300 * 1e300, "double", "-Infinity"),
        (True, "boolean", "true"),
        (-7, "long", "-7"),
        ("é/ x", "string", "é/ x"),
        (None, "string", None),
    ],
)
def test_partition_values_serialize_as_delta_reads_them(value, kind, text) -> None:  # noqa: ANN001
    from deltaspark.operations.iceberg_file_describer import delta_partition_value

    assert delta_partition_value(value, kind) == text


def test_an_empty_string_partition_value_is_not_written() -> None:
    from deltaspark.operations.iceberg_file_describer import delta_partition_value

    with pytest.raises(ValueError, match="null"):
        delta_partition_value("", "string")  # Delta reads an empty partition value as null


def test_partitioning_needs_one_set_of_identity_columns() -> None:
    """Identity columns become partition columns only when every live spec has the same ones; a
    file lacking one is refused otherwise, by name."""
    from types import SimpleNamespace

    from deltaspark.operations.iceberg_import import _partitioning

    meta = SimpleNamespace(default_spec_id=1)
    identity = {0: {2: "part"}, 1: {2: "part"}, 2: {2: "part", 3: "day"}, 3: {4: "raw"}}
    fields = {
        0: [(1000, "part", "int")],
        1: [(1001, "part", "int")],
        2: [(1000, "part", "int"), (1001, "day", "date")],
        3: [],
    }

    def counts(specs: list[int], lacking: str | None = None, problem: str | None = None) -> dict:
        return {"specs": specs, "lacking": lacking, "problem": problem}

    assert _partitioning(meta, counts([0, 1]), identity, fields) == ["part"]
    assert _partitioning(meta, counts([2]), identity, fields) == ["part", "day"]
    assert _partitioning(meta, counts([0, 2]), identity, fields) == []  # specs differ, files hold them
    with pytest.raises(UnsupportedFeatureError, match="f.parquet.*identity partition.*different identity"):
        _partitioning(meta, counts([0, 2], lacking="f.parquet"), identity, fields)
    with pytest.raises(UnsupportedFeatureError, match="f.parquet.*cannot partition by raw"):
        _partitioning(meta, counts([3], lacking="f.parquet"), identity, fields)  # e.g. binary
    assert _partitioning(meta, counts([0], problem="an empty string"), identity, fields) == []
    with pytest.raises(UnsupportedFeatureError, match="an empty string"):
        _partitioning(meta, counts([0], lacking="f.parquet", problem="an empty string"), identity, fields)
