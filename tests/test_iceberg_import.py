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
from deltaspark.errors import CorruptDataFileError, DeltaSparkError, UnsupportedFeatureError
from deltaspark.iceberg import IcebergTable
from tests import iceberg_conformance as ic
from tests import iceberg_copy
from tests.suites import skip_unless_iceberg_swept

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
    skip_unless_iceberg_swept(name)
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
    if not _stored_under_several_names(iceberg):  # delta-rs resolves columns by physical name
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


def _stored_under_several_names(iceberg: IcebergTable) -> bool:
    """Whether two live data files store a column under different names (a column renamed between
    them): the converted table's physical name is then the name of one of them only."""
    seen: dict[int, str] = {}
    paths = iceberg.snapshot().files().where("content = 0").select("file_path").collect()
    for (path,) in paths:
        for field_id, name in _file_names(pq.read_schema(path.removeprefix("file:"))).items():
            if seen.setdefault(field_id, name) != name:
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


@pytest.mark.one_suite("4.x")  # names are chosen by Python code (driver and executors), alike on both
def test_physical_names_are_the_names_the_data_files_store(spark, tmp_path) -> None:  # noqa: ANN001
    """pyiceberg (as Iceberg's Java writer) stores names that are not Avro names sanitised: `a.b` as
    `a_x2Eb`. Those are the physical names, so delta-rs, which resolves columns by name, reads every
    column; statistics and partition values are keyed by them, so data skipping still prunes."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, StructType

    from tests.iceberg_written import create_table

    inner = StructType(NestedField(8, "x y", IntegerType()), NestedField(9, "z", StringType()))
    schema = Schema(
        NestedField(1, "Breed Name", StringType()),
        NestedField(2, "a.b", LongType()),
        NestedField(3, "naïve", StringType()),  # a letter: pyiceberg keeps it
        NestedField(4, "prix €", DoubleType()),
        NestedField(5, "1st", IntegerType()),
        NestedField(6, "info rec", inner),
        NestedField(7, "my part", StringType()),
    )
    spec = PartitionSpec(PartitionField(source_id=7, field_id=1000, transform=IdentityTransform(), name="p"))
    path = tmp_path / "named"
    written = create_table(path, schema, spec)
    rows = {
        "Breed Name": ["Lop", "Rex", None],
        "a.b": [1, 2, 3],
        "naïve": ["é", "ü", "ß"],
        "prix €": [1.5, 2.5, None],
        "1st": [10, 20, 30],
        "info rec": [{"x y": 1, "z": "a"}, {"x y": 2, "z": "b"}, None],
        "my part": ["p 1", "p 2", "p 1"],
    }
    written.append(pa.table(rows, schema=written.schema().as_arrow()))
    expected = _json_rows(IcebergTable.forPath(spark, str(path)).toDF())
    table = _convert(spark, path)
    delta = table.toDF()
    assert _json_rows(delta) == expected
    assert _delta_rs_rows(spark, path, delta.schema, tmp_path) == expected
    stored = {"Breed Name": "Breed_x20Name", "a.b": "a_x2Eb", "naïve": "naïve", "prix €": "prix_x20_x20AC"}
    stored.update({"1st": "_1st", "info rec": "info_x20rec", "my part": "my_x20part"})
    fields = table.snapshot().metadata.schema().fields
    assert {f.name: f.metadata["delta.columnMapping.physicalName"] for f in fields} == stored
    nested = next(f for f in fields if f.name == "info rec").dataType.fields
    assert [f.metadata["delta.columnMapping.physicalName"] for f in nested] == ["x_x20y", "z"]
    assert table.snapshot().files("`Breed Name` = 'Rex'").count() == 1  # statistics by physical name
    files = table.snapshot().files().select("partitionValues", "stats_parsed.minValues.`a.b`").collect()
    by_value = sorted((sorted(dict(r[0]).items()), r[1]) for r in files)
    assert by_value == [([("my_x20part", "p 1")], 1), ([("my_x20part", "p 2")], 2)]


def test_physical_names_when_data_files_disagree() -> None:
    """A column renamed between files: the name holding the most rows wins (files disagreeing are
    named in a warning); a field no file holds keeps its Iceberg name; sibling names that would
    collide keep their Iceberg names."""
    from deltaspark.iceberg import stored_names

    record = {"type": "struct", "fields": [{"id": 5, "name": "y z", "type": "int"}]}
    schema = {
        "fields": [
            {"id": 1, "name": "event_date", "type": "date"},
            {"id": 2, "name": "added later", "type": "int"},
            {"id": 3, "name": "rec", "type": {"type": "list", "element-id": 4, "element": record}},
        ]
    }
    stored = [
        ('{"1":"date","3":"rec","4":"element","5":"y_x20z"}', 900, 3),  # written before the rename
        ('{"1":"event_date","3":"rec","4":"element","5":"y_x20z"}', 100, 5),
    ]
    physical, notes = stored_names.choose(schema, stored)
    assert physical == {1: "date", 2: "added later", 3: "rec", 5: "y_x20z"}  # a list's struct too
    assert (
        len(notes) == 1
        and "`event_date` (field id 1)" in notes[0]
        and "`date` (900 rows in 3 files)" in notes[0]
    )
    tree = stored_names.rename_tree(schema, physical)
    assert tree == {"event_date": ("date", {})}  # statistics cover struct fields only
    stats = '{"numRecords":3,"minValues":{"event_date":"2024-01-01"},"nullCount":{"event_date":0,"rec":1}}'
    assert stored_names.renamed_stats(stats, tree) == stats.replace("event_date", "date")
    collide = [('{"1":"x","2":"X"}', 10, 1)]
    physical, notes = stored_names.choose(schema, collide)
    assert physical[1] == "event_date" and physical[2] == "added later" and "collide" in notes[0]


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
    with pytest.raises(CorruptDataFileError, match=f"{victim.name}.*rows"):
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
    from deltaspark.conversion.file_describer import delta_partition_value

    assert delta_partition_value(value, kind) == text


def test_an_empty_string_partition_value_is_not_written() -> None:
    from deltaspark.conversion.file_describer import delta_partition_value

    with pytest.raises(ValueError, match="null"):
        delta_partition_value("", "string")  # Delta reads an empty partition value as null


def test_partitioning_needs_one_set_of_identity_columns() -> None:
    """Identity columns become partition columns only when every live spec has the same ones; a
    file lacking one is refused otherwise, by name."""
    from types import SimpleNamespace

    from deltaspark.conversion.from_iceberg import _partitioning

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
