"""`toDF`: a table's rows, for every reader feature, against independent derivations."""

from __future__ import annotations

import datetime
import urllib.parse
import uuid

import pyarrow as pa
import pytest

from deltaspark import (
    DeletionVectorError,
    DeltaTable,
    InvalidArgumentError,
    MissingDataFileError,
    UnsupportedFeatureError,
)
from deltaspark.features import dv_codec
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.log_builder import metadata, protocol, remove, write_parquet
from tests.reference_rows import normalized_rows, reference_rows
from tests.suites import skip_unless_swept
from tests.test_conformance import REFUSED, TABLES

# Log-only tables: their data files are not part of the conformance copy.
WITHOUT_DATA = {
    "app-txn-with-last-updated",
    "spark-variant-stable-feature-checkpoint",
    "with_checkpoint_no_last_checkpoint",
}
DATA_TABLES = [t for t in TABLES if t not in REFUSED and t not in WITHOUT_DATA and not t.startswith("300k")]
# One table per feature, also read through the distributed (executor-side pyarrow) path.
DISTRIBUTED_SUBSET = [
    "basic-dv-with-checkpoint",
    "cdf-table-with-dv",
    "column-mapping-id",
    "data-reader-partition-values-column-mapping-name",
    "data-reader-primitives-column-mapping-name",
    "type-widening",
    "parquet_row_group_skipping",
    "spark-variant-checkpoint",
    "timestamp-partitioned-table",
    "v2-checkpoints-parquet-with-sidecars",
    "with-short-dv",
    "void-column",
]
DISTRIBUTED_SUBSET = [t for t in DISTRIBUTED_SUBSET if t not in REFUSED]  # (variant: Spark 4 only)


def rows_of(df) -> list[tuple]:
    return normalized_rows([r.asDict(recursive=True) for r in df.collect()])


def deltalake_rows(path: str, snapshot) -> list[dict] | None:
    """delta-rs's rows where it reads the table correctly; None where it cannot."""
    if snapshot.columnMappingMode != "none":
        return None  # delta-rs 1.6 returns nulls for column-mapped columns (checked: reference above)
    from deltalake import DeltaTable as RsTable

    try:
        rows = RsTable(path).to_pyarrow_table().to_pylist()
    except Exception as exc:  # noqa: BLE001 - e.g. deletion vectors, v2 checkpoints: "not yet supported"
        assert "not yet supported" in str(exc) or "not supported" in str(exc), exc
        return None
    kept = set(snapshot.toDF().columns)  # deltaspark drops `void` columns, as the protocol recommends
    return [{k: v for k, v in row.items() if k in kept} for row in rows]


@pytest.mark.parametrize("name", DATA_TABLES)
def test_rows_equal_an_independent_derivation(spark, conformance, name):
    skip_unless_swept(name)
    path = str(conformance / name)
    snapshot = DeltaTable.forPath(spark, path).snapshot()
    ours = rows_of(snapshot.toDF())
    assert ours == normalized_rows(reference_rows(path))
    theirs = deltalake_rows(path, snapshot)
    if theirs is not None:
        assert ours == normalized_rows(theirs)


@pytest.mark.parametrize("name", sorted(WITHOUT_DATA - set(REFUSED)))
def test_missing_data_files_are_named(spark, conformance, name):
    with pytest.raises(MissingDataFileError, match=r"does not exist: .*\.parquet"):
        DeltaTable.forPath(spark, str(conformance / name)).toDF().collect()


@pytest.mark.parametrize("name", DISTRIBUTED_SUBSET)
def test_distributed_read_gives_the_same_rows(spark, conformance, name):
    path = str(conformance / name)
    spark.conf.set("spark.deltaspark.read.maxDriverFiles", "0")  # every table counts as "large"
    try:
        df = DeltaTable.forPath(spark, path).toDF()
        assert "MapInArrow" in df._jdf.queryExecution().executedPlan().toString()
        ours = rows_of(df)
    finally:
        spark.conf.unset("spark.deltaspark.read.maxDriverFiles")
    assert ours == normalized_rows(reference_rows(path))


@pytest.mark.connect
@pytest.mark.parametrize(
    "name", ["basic-dv-with-checkpoint", "data-reader-partition-values-column-mapping-name"]
)
def test_rows_on_spark_connect(spark, conformance, name):
    path = str(conformance / name)
    assert rows_of(DeltaTable.forPath(spark, path).toDF()) == normalized_rows(reference_rows(path))


def test_time_travel_reads_old_rows(spark, conformance):
    table = DeltaTable.forPath(spark, str(conformance / "cdf-table-with-dv"))
    counts = [table.snapshot(version=v).toDF().count() for v in range(7)]
    assert counts == [10, 8, 10, 6, 8, 9, 10]  # DVs added and removed, version by version


# ---- deletion vectors, hand built --------------------------------------------------------------

DV_PROTOCOL = protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
IDS = pa.table({"id": pa.array(range(10), pa.int64()), "part": pa.array(["x"] * 10)})


def _dv_file(root, rows: list[int], prefix: str = "ab") -> tuple[dict, object]:
    identifier = uuid.uuid4()
    data = dv_codec.encode_bitmap(rows)
    target = root / prefix / f"deletion_vector_{identifier}.bin"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\x01" + dv_codec.frame(data))
    descriptor = {
        "storageType": "u",
        "pathOrInlineDv": prefix + dv_codec.z85_encode(identifier.bytes),
        "offset": 1,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }
    return descriptor, target


def _ids(df) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


def test_deletion_vectors_inline_relative_and_absolute(spark, log, replay):
    first = write_parquet(log.root, "a.parquet", IDS)
    second = write_parquet(log.root, "b.parquet", IDS)
    third = write_parquet(log.root, "c.parquet", IDS)
    raw = dv_codec.encode_bitmap([0, 9])
    inline = {
        "storageType": "i",
        "pathOrInlineDv": dv_codec.z85_encode(raw + b"\0" * (-len(raw) % 4)),
        "sizeInBytes": len(raw),
        "cardinality": 2,
    }
    relative, _ = _dv_file(log.root, [1, 2, 3])
    absolute_dv, target = _dv_file(log.root, [4], prefix="")
    absolute = {**absolute_dv, "storageType": "p", "pathOrInlineDv": target.as_uri()}
    log.commit(
        0,
        DV_PROTOCOL,
        metadata(),
        {"add": {**first["add"], "deletionVector": inline}},
        {"add": {**second["add"], "deletionVector": relative}},
        {"add": {**third["add"], "deletionVector": absolute}},
    )
    ids = _ids(DeltaTable.forPath(spark, log.path).toDF())
    expected = [i for i in range(10) if i not in (0, 9)] + [i for i in range(10) if i not in (1, 2, 3)]
    expected += [i for i in range(10) if i != 4]
    assert ids == sorted(expected)


def test_deletion_vector_checksum_is_verified(spark, log, replay):
    data_file = write_parquet(log.root, "a.parquet", IDS)
    descriptor, target = _dv_file(log.root, [1, 2])
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data_file["add"], "deletionVector": descriptor}})
    assert _ids(DeltaTable.forPath(spark, log.path).toDF()) == [0, 3, 4, 5, 6, 7, 8, 9]
    blob = bytearray(target.read_bytes())
    blob[-1] ^= 0xFF  # corrupt the stored CRC-32
    target.write_bytes(bytes(blob))
    with pytest.raises(Exception, match="CRC-32 mismatch"):
        DeltaTable.forPath(spark, log.path).toDF().collect()
    target.unlink()
    with pytest.raises(DeletionVectorError, match="does not exist"):
        DeltaTable.forPath(spark, log.path).toDF()


def test_deletion_vector_cardinality_is_verified(spark, log, replay):
    data_file = write_parquet(log.root, "a.parquet", IDS)
    descriptor, _ = _dv_file(log.root, [1, 2])
    wrong = {**descriptor, "cardinality": 3}
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data_file["add"], "deletionVector": wrong}})
    with pytest.raises(Exception, match="cardinality"):
        DeltaTable.forPath(spark, log.path).toDF().collect()


def test_dv_rows_are_removed_by_position_not_value(spark, log, replay):
    duplicates = pa.table({"id": pa.array([7, 7, 7, 7], pa.int64()), "part": pa.array(["x"] * 4)})
    data_file = write_parquet(log.root, "a.parquet", duplicates)
    descriptor, _ = _dv_file(log.root, [1, 3])
    log.commit(0, DV_PROTOCOL, metadata(), {"add": {**data_file["add"], "deletionVector": descriptor}})
    assert _ids(DeltaTable.forPath(spark, log.path).toDF()) == [7, 7]


# ---- column mapping, hand built ----------------------------------------------------------------


def _mapped_field(name, typ, fid, phys):
    return {
        "name": name,
        "type": typ,
        "nullable": True,
        "metadata": {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": phys},
    }


NESTED_SCHEMA = {
    "type": "struct",
    "fields": [
        _mapped_field("id", "long", 1, "col-1"),
        _mapped_field(
            "info",
            {
                "type": "struct",
                "fields": [
                    _mapped_field("city", "string", 3, "col-3"),
                    _mapped_field("zip", "integer", 4, "col-4"),
                ],
            },
            2,
            "col-2",
        ),
        _mapped_field("region", "string", 5, "col-5"),
    ],
}


def _with_id(name, typ, fid):
    return pa.field(name, typ, metadata={b"PARQUET:field_id": str(fid).encode()})


@pytest.mark.parametrize("mode", ["name", "id"])
def test_nested_column_mapping(spark, log, mode):
    # In name mode files use the physical names; in id mode their names are irrelevant, ids decide.
    names = {"id": "col-1", "info": "col-2", "city": "col-3", "zip": "col-4"}
    if mode == "id":
        names = {"id": "x", "info": "y", "city": "anything", "zip": "else"}
    info = pa.struct([_with_id(names["city"], pa.string(), 3), _with_id(names["zip"], pa.int32(), 4)])
    schema = pa.schema([_with_id(names["id"], pa.int64(), 1), _with_id(names["info"], info, 2)])
    cities = pa.array([{names["city"]: "Oslo", names["zip"]: 150}, None], info)
    f1 = write_parquet(log.root, "col-5=eu/f1.parquet", pa.table([pa.array([1, 2]), cities], schema=schema))
    older = pa.table([pa.array([3], pa.int64())], schema=pa.schema([_with_id(names["id"], pa.int64(), 1)]))
    f2 = write_parquet(log.root, "col-5=us/f2.parquet", older)
    conf = {"delta.columnMapping.mode": mode, "delta.columnMapping.maxColumnId": "5"}
    log.commit(
        0,
        protocol(2, 5),
        metadata(NESTED_SCHEMA, ["region"], conf),
        {"add": {**f1["add"], "partitionValues": {"col-5": "eu"}, "stats": None}},
        {"add": {**f2["add"], "partitionValues": {"col-5": "us"}, "stats": None}},
    )
    rows = DeltaTable.forPath(spark, log.path).toDF().collect()
    assert sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["id"]) == [
        {"id": 1, "info": {"city": "Oslo", "zip": 150}, "region": "eu"},
        {"id": 2, "info": None, "region": "eu"},
        {"id": 3, "info": None, "region": "us"},  # a column missing from a file reads as null
    ]


# ---- type widening, row tracking, refusals -------------------------------------------------------


def test_unsupported_type_change_is_refused(spark, log):
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "v",
                "type": "integer",
                "nullable": True,
                "metadata": {"delta.typeChanges": [{"fromType": "string", "toType": "integer"}]},
            }
        ],
    }
    log.commit(0, protocol(3, 7, ["typeWidening"], ["typeWidening"]), metadata(schema))
    with pytest.raises(UnsupportedFeatureError, match=r"v: string -> integer"):
        DeltaTable.forPath(spark, log.path).toDF()


def test_row_tracking_ids_and_commit_versions(spark, log, replay):
    conf = {
        "delta.enableRowTracking": "true",
        "delta.rowTracking.materializedRowIdColumnName": "_row_id_x",
        "delta.rowTracking.materializedRowCommitVersionColumnName": "_row_cv_x",
    }
    plain = write_parquet(log.root, "a.parquet", pa.table({"id": pa.array([0, 1, 2], pa.int64())}))
    materialized = write_parquet(
        log.root,
        "b.parquet",
        pa.table(
            {
                "id": pa.array([3, 4, 5], pa.int64()),
                "_row_id_x": pa.array([7, None, 9], pa.int64()),
                "_row_cv_x": pa.array([None, 1, None], pa.int64()),
            }
        ),
    )
    descriptor, _ = _dv_file(log.root, [2])
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    rt = protocol(3, 7, ["deletionVectors"], ["deletionVectors", "rowTracking", "domainMetadata"])
    log.commit(
        0,
        rt,
        metadata(schema, configuration=conf),
        {"add": {**plain["add"], "baseRowId": 100, "defaultRowCommitVersion": 0}},
        {
            "add": {
                **materialized["add"],
                "baseRowId": 200,
                "defaultRowCommitVersion": 3,
                "deletionVector": descriptor,
            }
        },
    )
    rows = DeltaTable.forPath(spark, log.path).toDF(rowTracking=True).select("id", "_metadata.*").collect()
    assert sorted(tuple(r) for r in rows) == [
        (0, 100, 0),
        (1, 101, 0),
        (2, 102, 0),
        (3, 7, 3),  # materialized id; materialized commit version is null: the default applies
        (4, 201, 1),  # null materialized id: baseRowId + row index
    ]  # row 5 (index 2 of b.parquet) is deleted by the DV
    log.commit(1, metadata(schema))  # row tracking no longer enabled
    with pytest.raises(InvalidArgumentError, match="not enabled"):
        DeltaTable.forPath(spark, log.path).toDF(rowTracking=True)


def test_empty_table_has_the_logical_schema(spark, log):
    log.commit(0, protocol(), metadata(partition_columns=["part"]))
    df = DeltaTable.forPath(spark, log.path).toDF()
    assert df.count() == 0 and df.columns == ["id", "part"]


def test_removed_files_are_not_read(spark, log):
    a = write_parquet(log.root, "a.parquet", IDS)
    b = write_parquet(log.root, "b.parquet", IDS.slice(0, 3))
    log.commit(0, protocol(), metadata(), a, b)
    log.commit(1, remove("a.parquet", 1))
    assert _ids(DeltaTable.forPath(spark, log.path).toDF()) == [0, 1, 2]
    assert len(_ids(DeltaTable.forPath(spark, log.path).snapshot(version=0).toDF())) == 13


def test_partition_values_come_from_the_log_not_directories(spark, log, replay):
    f = write_parquet(log.root, "part=wrong/a.parquet", IDS.select(["id"]))
    log.commit(
        0,
        protocol(),
        metadata(partition_columns=["part"]),
        {"add": {**f["add"], "partitionValues": {"part": "right"}}},
    )
    assert {r["part"] for r in DeltaTable.forPath(spark, log.path).toDF().collect()} == {"right"}


def test_typed_partition_values_and_row_ids_of_each_file(spark, log, replay):
    """Each file's rows get that file's typed partition values (an empty or missing value is null)
    and row ids from its own baseRowId, whichever way the log is replayed."""
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "d", "type": "date", "nullable": True, "metadata": {}},
            {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
    files = [
        (write_parquet(log.root, f"x/{i}.parquet", pa.table({"id": pa.array([i * 10, i * 10 + 1])})), values)
        for i, values in enumerate([{"d": "2024-02-29", "n": "7"}, {"d": "", "n": "-1"}, {"n": "3"}])
    ]
    log.commit(
        0,
        protocol(3, 7, [], ["rowTracking", "domainMetadata"]),
        metadata(schema, ["d", "n"], configuration={"delta.enableRowTracking": "true"}),
        *[
            {
                "add": {
                    **f["add"],
                    "partitionValues": values,
                    "baseRowId": 100 * i,
                    "defaultRowCommitVersion": 0,
                }
            }
            for i, (f, values) in enumerate(files)
        ],
    )
    rows = (
        DeltaTable.forPath(spark, log.path).toDF(rowTracking=True).select("id", "d", "n", "_metadata.row_id")
    )
    assert sorted(tuple(r) for r in rows.collect()) == [
        (0, datetime.date(2024, 2, 29), 7, 0),
        (1, datetime.date(2024, 2, 29), 7, 1),
        (10, None, -1, 100),
        (11, None, -1, 101),
        (20, None, 3, 200),
        (21, None, 3, 201),
    ]


@pytest.mark.connect
def test_detail_on_any_session(spark, log):
    table_metadata = metadata(partition_columns=["part"])
    table_metadata["metaData"]["name"] = "orders"
    log.commit(0, protocol(), table_metadata)
    detail = DeltaTable.forPath(spark, log.path).detail().first().asDict()
    assert detail["name"] == "orders" and detail["numFiles"] == 0 and detail["version"] == 0
    assert detail["partitionColumns"] == ["part"]


def test_detail_describes_the_table(spark, tmp_path):
    from deltaspark.demo import build_demo_table

    table = DeltaTable.forPath(spark, build_demo_table(tmp_path / "orders"))
    detail = table.detail().first().asDict()
    assert detail["format"] == "delta" and detail["name"] is None
    assert detail["location"].endswith("/orders") and detail["partitionColumns"] == ["region"]
    assert (detail["numFiles"], detail["version"]) == (5, 3)
    assert detail["sizeInBytes"] == table.snapshot().files().agg({"size": "sum"}).first()[0]
    assert detail["properties"]["delta.enableChangeDataFeed"] == "true"
    assert (detail["minReaderVersion"], detail["minWriterVersion"]) == (1, 7)
    assert "changeDataFeed" in detail["tableFeatures"] and detail["createdAt"] <= detail["lastModified"]
    assert table.detail().columns[:5] == ["format", "id", "name", "description", "location"]


@pytest.mark.skipif(PYSPARK_VERSION < (4, 0), reason="variant is Spark 4 only (refusal: test_variant_...)")
def test_shredded_variant_files_are_read(spark, log):
    """Spark 4 writes (and reads) shredded variants; a table supporting variantShredding may hold them."""
    import glob
    import os

    from pyspark.sql import functions as F

    settings = {
        "spark.sql.variant.writeShredding.enabled": "true",
        "spark.sql.variant.forceShreddingSchemaForTest": "a int, b string",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        json_text = F.format_string('{"a": %d, "b": "x%d", "c": [1, 2]}', "id", "id")
        rows = spark.range(3).select("id", F.parse_json(json_text).alias("v"))
        rows.coalesce(1).write.parquet(str(log.root / "staged"))
    finally:
        for key in settings:
            spark.conf.unset(key)
    written = glob.glob(str(log.root / "staged" / "*.parquet"))[0]
    import pyarrow.parquet as pq

    assert "typed_value" in str(pq.read_schema(written))  # really shredded
    os.rename(written, log.root / "shredded.parquet")
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
        ],
    }
    features = ["variantType", "variantShredding"]
    size = (log.root / "shredded.parquet").stat().st_size
    log.commit(
        0,
        protocol(3, 7, features, features),
        metadata(schema, configuration={"delta.enableVariantShredding": "true"}),
        {
            "add": {
                "path": "shredded.parquet",
                "partitionValues": {},
                "size": size,
                "modificationTime": 0,
                "dataChange": True,
            }
        },
    )
    got = (
        DeltaTable.forPath(spark, log.path)
        .toDF()
        .select("id", F.to_json("v").alias("v"))
        .orderBy("id")
        .collect()
    )
    assert [(r["id"], r["v"]) for r in got] == [(i, f'{{"a":{i},"b":"x{i}","c":[1,2]}}') for i in range(3)]


@pytest.mark.skipif(PYSPARK_VERSION >= (4, 0), reason="Spark 4 reads variant (test_shredded_variant_...)")
def test_variant_tables_are_refused_naming_the_spark_version(spark, log):
    schema = {
        "type": "struct",
        "fields": [{"name": "v", "type": "variant", "nullable": True, "metadata": {}}],
    }
    log.commit(0, protocol(3, 7, ["variantType"], ["variantType"]), metadata(schema))
    with pytest.raises(
        UnsupportedFeatureError, match=r"variant columns, which Spark 3\.5 cannot read"
    ) as caught:
        DeltaTable.forPath(spark, log.path).snapshot()
    assert caught.value.features == ["variantType"]


def test_many_files_cross_to_the_jvm_in_one_call(spark, log):
    """Above 64 paths the paths reach Spark's reader as one string split in the JVM: every file,
    including names with spaces, `%`, non-ASCII and glob characters, is read exactly once, and
    the listing-parallelism setting is put back afterwards."""
    names = [f"p{i:03d}.parquet" for i in range(80)] + ["a b.parquet", "ü%41.parquet", "x[1].parquet"]
    actions = []
    for i, name in enumerate(names):
        entry = write_parquet(log.root, name, pa.table({"id": pa.array([i], pa.int64()), "part": ["x"]}))
        entry["add"]["path"] = urllib.parse.quote(name)
        actions.append(entry)
    log.commit(0, protocol(), metadata(), *actions)
    key = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    before = spark.conf.get(key, None)
    assert _ids(DeltaTable.forPath(spark, log.path).toDF()) == list(range(len(names)))
    assert spark.conf.get(key, None) == before


def test_a_small_read_with_deletion_vectors_replays_the_log_once(spark, log):
    """The file list collected for Spark's scan carries the DV descriptors: the deleted rows are
    found from them, so the query neither replays the log again nor shuffles descriptors."""
    first = write_parquet(log.root, "a.parquet", IDS)
    second = write_parquet(log.root, "b.parquet", IDS)
    descriptor, _ = _dv_file(log.root, [1, 2])
    log.commit(
        0,
        DV_PROTOCOL,
        metadata(),
        {"add": {**first["add"], "deletionVector": descriptor}},
        {"add": {**second["add"], "deletionVector": descriptor}},  # one DV file, read once
    )
    frame = DeltaTable.forPath(spark, log.path).toDF()
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "json" not in plan.lower() and "hashpartitioning" not in plan.lower(), plan
    assert _ids(frame) == sorted([i for i in range(10) if i not in (1, 2)] * 2)


def _plan(df) -> str:  # noqa: ANN001
    return df._jdf.queryExecution().executedPlan().toString()


def test_rows_are_tied_to_their_files_by_a_hash_only_where_it_is_exact(spark, log, monkeypatch):
    """A read that joins rows to their files' entries (partition values, row tracking, DVs) joins
    on `xxhash64` of the path Spark reports, where every location is plain (the reported path is
    the location itself) and no two locations share a hash; otherwise on each row's canonical
    path. Both routes give each row its own file's partition value: plain names, names Spark
    escapes (a space, `%`, non-ASCII), and - with every hash made equal - the per-row route."""
    plain = ["part=a/x.parquet", "part=b/y.parquet", "part=c/z.parquet"]
    escaped = ["part=d/a b.parquet", "part=e/ü%41.parquet"]
    actions = []
    for i, name in enumerate([*plain, *escaped]):
        entry = write_parquet(log.root, name, pa.table({"id": pa.array([i], pa.int64())}))
        entry["add"]["path"] = urllib.parse.quote(name)
        entry["add"]["partitionValues"] = {"part": f"v{i}"}
        actions.append(entry)
    log.commit(0, protocol(), metadata(partition_columns=["part"]), *actions[:3])
    table = DeltaTable.forPath(spark, log.path)
    hashed = table.toDF()
    assert sorted((r["id"], r["part"]) for r in hashed.collect()) == [(0, "v0"), (1, "v1"), (2, "v2")]
    assert "_file_hash" in _plan(hashed)
    # entries from the file list's frame (a read carrying a column, as DML's): hashed as well
    # once the files are large enough to repay the hashes' broadcast (here: always)
    from pyspark.sql import functions as F

    from deltaspark.read import scan

    monkeypatch.setattr(scan, "HASH_JOIN_MIN_BYTES", 0)
    snapshot = table.snapshot()
    carried = scan.read_files(snapshot, snapshot.files().withColumn("__f", F.col("path")), carry=["__f"])
    assert sorted((r["id"], r["part"], r["__f"]) for r in carried.collect()) == [
        (i, f"v{i}", actions[i]["add"]["path"]) for i in range(3)
    ]
    assert "_file_hash" in _plan(carried)

    log.commit(1, *actions[3:])
    per_row = DeltaTable.forPath(spark, log.path).toDF()
    expected = [(i, f"v{i}") for i in range(5)]
    assert sorted((r["id"], r["part"]) for r in per_row.collect()) == expected
    assert "_file_hash" not in _plan(per_row)

    # every location hashed alike: the hashes cannot tell the files apart, so the rows are tied
    # by their paths (a join on the hash would give every row every file's partition value)
    monkeypatch.setattr(F, "xxhash64", lambda *columns: F.lit(7).cast("long"))
    log.commit(2, remove(actions[3]["add"]["path"]), remove(actions[4]["add"]["path"]))
    colliding = DeltaTable.forPath(spark, log.path).toDF()
    assert sorted((r["id"], r["part"]) for r in colliding.collect()) == expected[:3]
    assert "_file_hash" not in _plan(colliding)


def test_a_row_tied_to_no_file_fails_the_read_whatever_the_query_keeps(spark, log, monkeypatch):
    """A row the read cannot tie to its file's entry (the keys disagree) fails the read, naming
    the file, whatever the query keeps or filters: never a row without its partition values, never
    one dropped unseen (a filter on a partition column alone would let Spark make the join an
    inner one). The check stays out of the way of filters on the file's own columns: they still
    reach the parquet scan."""
    from deltaspark.read import scan

    entry = write_parquet(log.root, "part=a/x.parquet", pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    entry["add"]["partitionValues"] = {"part": "a"}
    log.commit(0, protocol(), metadata(partition_columns=["part"]), entry)
    monkeypatch.setattr(scan, "HASH_JOIN_MIN_BYTES", 0)
    table = DeltaTable.forPath(spark, log.path)
    filtered = table.toDF().where("id > 1")
    assert "GreaterThan(id,1)" in _plan(filtered)  # pushed into the scan, past the file join
    assert sorted(r["id"] for r in filtered.collect()) == [2, 3]

    real = scan._file_hashes
    monkeypatch.setattr(  # every entry's hash off by one: no row finds its file
        scan, "_file_hashes", lambda *a: {k: v + 1 for k, v in (real(*a) or {}).items()} or None
    )
    frame = table.toDF()
    assert "_file_hash" in _plan(frame)
    queries = {
        "all": frame,
        "a data column": frame.select("id"),
        "a data filter": frame.where("id > 1"),
        "a partition filter": frame.where("part = 'a'"),
        "a partition filter, a data column": frame.where("part = 'a'").select("id"),
    }
    for name, query in queries.items():
        with pytest.raises(Exception, match="deltaspark: data file not in the snapshot: .*x.parquet"):
            query.collect()
            pytest.fail(f"{name}: no error")
    with pytest.raises(Exception, match="deltaspark: data file not in the snapshot"):
        frame.count()

    # row ids come from the join too (`baseRowId`): a filter on them alone is no way around it
    from deltaspark.table import write

    tracked = str(log.root.parent / "tracked")
    write(spark.range(3).coalesce(1), tracked, properties={"delta.enableRowTracking": "true"})
    ids = DeltaTable.forPath(spark, tracked).toDF(rowTracking=True)
    with pytest.raises(Exception, match="deltaspark: data file not in the snapshot"):
        ids.where("_metadata.row_id = 1").select("id").collect()


@pytest.mark.parametrize("route", ["driver listing", "distributed"])
def test_located_rows_are_tied_to_their_logged_paths(spark, log, route):
    """`read_files(locate=True)` names each row's file as the scan does; `tie_to_files` turns that
    into the path the log gives the file - whatever its spelling there (an escape, an absolute
    `file:` URI, plain) - and fails, naming the file, for a row whose file the list does not
    hold, also where a join on the tied path would otherwise drop the row unseen."""
    from pyspark.sql import functions as F

    from deltaspark.read.scan import LOCATION, read_files, tie_to_files

    ids = {"plain.parquet": [1, 2], "a b.parquet": [3, 4], "abs.parquet": [5, 6]}
    entries = {
        name: write_parquet(log.root, name, pa.table({"id": pa.array(v, pa.int64())}))
        for name, v in ids.items()
    }
    entries["a b.parquet"]["add"]["path"] = "a%20b.parquet"
    entries["abs.parquet"]["add"]["path"] = "file://" + str(log.root / "abs.parquet")
    log.commit(0, protocol(), metadata(), *entries.values())
    logged = {name: e["add"]["path"] for name, e in entries.items()}
    if route == "distributed":
        spark.conf.set("spark.deltaspark.read.maxDriverFiles", "0")
    try:
        snapshot = DeltaTable.forPath(spark, log.path).snapshot()
        rows = read_files(snapshot, snapshot.files(), locate=True, keep_row_index=True)
        tied = tie_to_files(rows.where("id % 2 = 0"), snapshot.files(), snapshot.tableRoot, "file")
        got = sorted((r["id"], r["file"], r["_row_index"]) for r in tied.collect())
        assert got == [
            (2, logged["plain.parquet"], 1),
            (4, logged["a b.parquet"], 1),
            (6, logged["abs.parquet"], 1),
        ]
        assert LOCATION not in tied.columns

        # a file missing from the list: its rows fail, with or without a join on the path after
        fewer = snapshot.files().where(F.col("path") != logged["a b.parquet"])
        lost = tie_to_files(rows, fewer, snapshot.tableRoot, "file")
        with pytest.raises(Exception, match="deltaspark: data file not in the snapshot: .*a(%20| )b.parquet"):
            lost.collect()
        joined = fewer.join(lost.select(F.col("file").alias("path")).distinct(), "path")
        with pytest.raises(Exception, match="deltaspark: data file not in the snapshot"):
            joined.collect()

        # the locations held on the driver (a small merge's touched files): tied there, the same way
        from deltaspark.spark_compat import is_local, local_frame

        names = sorted({r[LOCATION] for r in rows.select(LOCATION).collect()})
        held = local_frame(spark, {LOCATION: names}, f"{LOCATION} string")
        assert is_local(held) and is_local(snapshot.files()) and is_local(fewer)
        tied_held = tie_to_files(held, snapshot.files(), snapshot.tableRoot, "file")
        assert is_local(tied_held)  # joined on the driver: no job
        assert sorted(r["file"] for r in tied_held.collect()) == sorted(logged.values())
        with pytest.raises(Exception, match="deltaspark: data file not in the snapshot: .*a(%20| )b.parquet"):
            tie_to_files(held, fewer, snapshot.tableRoot, "file").collect()
    finally:
        spark.conf.unset("spark.deltaspark.read.maxDriverFiles")
