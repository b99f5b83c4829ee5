"""Iceberg reading beyond row counts: the literal rows the source projects expect (equality
deletes, time travel, row lineage), finding the metadata file, snapshots / refs / history, planned
files against pyiceberg, deletion-vector blobs, and damaged or unsupported input refused by name."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable
from deltaspark.errors import (
    CorruptIcebergMetadataError,
    DeletionVectorError,
    IcebergTableNotFoundError,
    InvalidArgumentError,
    SnapshotNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
)
from deltaspark.iceberg import IcebergTable, puffin, table_metadata
from tests import iceberg_conformance as ic
from tests import iceberg_copy
from tests.suites import skip_unless_iceberg_swept


def _info(name: str) -> ic.Table:
    return next(t for t in ic.tables() if t.name == name)


def _open(spark, name: str, **kwargs) -> IcebergTable:  # noqa: ANN001, ANN003
    info = _info(name)
    return IcebergTable.forPath(spark, str(info.path), info.entry_metadata, info.relocate(), **kwargs)


def _rows(df, *columns: str) -> list[tuple]:  # noqa: ANN001
    return sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)


# ---- the source projects' literal results ------------------------------------------------------
LITERAL = [
    (
        "duckdb-equality_delete_cross_partition",
        None,
        ("part", "key", "val"),
        [(0, 999, "p0-k999"), (1, 100, "p1-k100"), (1, 888, "p1-k888")],
    ),
    ("duckdb-equality_delete_extra_column", None, ("id", "val"), [(1, "a"), (3, "c")]),
    ("impala-iceberg_v2_delete_equality", None, ("id", "data"), [(1, "test_1_base"), (2, "test_2_updated")]),
    (
        "impala-iceberg_v2_delete_equality",
        3207673167795000154,
        ("id", "data"),
        [(1, "test_1_base"), (2, "test_2_base")],
    ),
    (
        "impala-iceberg_v2_delete_equality_multi_eq_ids",
        None,
        ("i", "s"),
        [(1, "str1"), (2222, "str2"), (33, "str3_updated_twice"), (4, "str4_updated"), (5, "str5")],
    ),
    (
        "impala-iceberg_v2_delete_equality_multi_eq_ids",
        8127619959873391049,
        ("i", "s"),
        [(1, "str1"), (2, "str2"), (3, "str3_updated")],
    ),
    ("impala-iceberg_v2_delete_equality_nulls", None, ("i", "s"), [(1, "str1"), (4, "str4"), (None, "str5")]),
    (
        "impala-iceberg_v2_delete_equality_nulls",
        4346796256488077976,
        ("i", "s"),
        [(1, "str1"), (3, "str3"), (None, "str2")],
    ),
    (
        "impala-iceberg_v2_delete_both_eq_and_pos",
        None,
        ("i", "s", "d"),
        [(2, "str2_updated", dt.date(2023, 12, 13)), (3, "str3", dt.date(2023, 12, 23))],
    ),
    (
        "impala-iceberg_v2_delete_equality_partitioned",
        None,
        ("i", "s", "d"),
        [
            (1, "str1", dt.date(2023, 12, 24)),
            (1, "str1", dt.date(2023, 12, 25)),
            (2, "str2", dt.date(2023, 12, 24)),
            (4, "str4", dt.date(2023, 12, 24)),
            (222, "str2", dt.date(2023, 12, 25)),
            (333333, "str3", dt.date(2023, 12, 24)),
        ],
    ),
    ("impala-iceberg_v3_deletion_vectors", None, ("i",), [(1,), (3,), (5,)]),
    ("impala-iceberg_v2_delete_positional", None, ("id", "data"), [(1, "a"), (3, "c")]),
]


@pytest.mark.parametrize(("name", "snapshot_id", "columns", "expected"), LITERAL)
def test_rows_the_source_project_expects(spark, name, snapshot_id, columns, expected) -> None:  # noqa: ANN001
    skip_unless_iceberg_swept(name)
    table = _open(spark, name)
    df = table.snapshot(snapshot_id).toDF()
    assert _rows(df, *columns) == sorted(expected, key=repr)


@pytest.mark.one_suite(
    "4.x"
)  # CI time: the same joins and reads run in the 3.5 suite via the literal-row cases
def test_equality_deletes_on_an_evolved_schema(spark) -> None:  # noqa: ANN001
    table = _open(spark, "impala-iceberg_v2_equality_delete_schema_evolution")
    current = table.toDF()
    assert len(current.columns) == 4
    assert sorted(tuple(r) for r in current.select(current.columns[0], current.columns[2]).collect()) == [
        (1, "str1"),
        (5, "str5"),
        (44, "str4"),
    ]
    old = table.snapshot(3986738438831924669).toDF()
    assert sorted(r[0] for r in old.collect()) == [1, 4, 5]


def test_row_lineage_inherited_and_materialized(spark) -> None:  # noqa: ANN001
    table = _open(spark, "impala-iceberg_v3_row_lineage")
    expected = [(1, 0, 1), (2, 1, 2), (3, 2, 3)]
    for snapshot_id in (None, 2872597867664652808):  # materialised after the replace; inherited before it
        df = table.snapshot(snapshot_id).toDF(rowLineage=True)
        assert _rows(df, "i", "_row_id", "_last_updated_sequence_number") == expected
    with pytest.raises(InvalidArgumentError, match="v3"):
        _open(spark, "impala-iceberg_v2_delete_positional").toDF(rowLineage=True)


@pytest.mark.one_suite(
    "4.x"
)  # CI time: the same joins and reads run in the 3.5 suite via the literal-row cases
def test_filter_is_applied(spark) -> None:  # noqa: ANN001
    table = _open(spark, "impala-iceberg_v2_positional_not_all_data_files_have_delete_files")
    assert table.toDF("i < 4").count() == 3
    assert table.toDF(F.col("i") < 4).count() == 3


# ---- metadata files, snapshots, refs ---------------------------------------------------------------
def test_current_metadata_file_is_found_like_hadoop_tables(spark) -> None:  # noqa: ANN001
    checked = 0
    for info in ic.tables():
        hint = info.path / "metadata" / "version-hint.text"
        named = hint.is_file() and not hint.read_text().strip().isdigit() and hint.read_text().strip()
        if not table_metadata._version_of(info.entry_metadata) and not named:
            continue  # hand-made variants (vfinal, v3.1) are only read when named
        names = sorted(p.name for p in (info.path / "metadata").iterdir())
        found = table_metadata.find_metadata_file(str(info.path)).rsplit("/", 1)[-1]
        if info.name == "duckdb-iceberg_v1_upgraded_to_v3":
            continue  # holds a hand-made `00004-v3-upgraded` file beside the v1 history
        assert found == info.entry_metadata, (info.name, names)
        checked += 1
    assert checked >= 45
    # dremio-partitionednation: the hint says 2, v3 and v4 exist: walk forward to v4
    assert table_metadata.find_metadata_file(str(_info("dremio-partitionednation").path)).endswith(
        "v4.metadata.json"
    )


def test_version_hint_kinds(tmp_path) -> None:  # noqa: ANN001
    meta = tmp_path / "t" / "metadata"
    meta.mkdir(parents=True)
    for n in (1, 2, 3):
        (meta / f"v{n}.metadata.json").write_text("{}")
    (meta / "version-hint.text").write_text("1\n")
    assert table_metadata.find_metadata_file(str(tmp_path / "t")).endswith("v3.metadata.json")
    (meta / "version-hint.text").write_text("")  # empty: newest file
    assert table_metadata.find_metadata_file(str(tmp_path / "t")).endswith("v3.metadata.json")
    (meta / "version-hint.text").unlink()
    (meta / "00007-8c3e0b5e-0d64-4c2a-9a5b-1f0e3c3c7a11.metadata.json").write_text("{}")
    assert "00007-" in table_metadata.find_metadata_file(str(tmp_path / "t"))
    with pytest.raises(IcebergTableNotFoundError):
        table_metadata.find_metadata_file(str(tmp_path / "nothing"))


def test_version_hint_naming_a_file_or_a_missing_one(tmp_path, caplog) -> None:  # noqa: ANN001
    """A hint holding a name reads that file (as pyiceberg and DuckDB do); a hint that names no file
    fails by name instead of reading another snapshot; a stale version walks forward, saying so."""
    meta = tmp_path / "t" / "metadata"
    meta.mkdir(parents=True)
    uuid_name = "00007-8c3e0b5e-0d64-4c2a-9a5b-1f0e3c3c7a11"
    for name in ("v1", "v2", "v3.1", uuid_name, "00006-legacy", "00005-zipped.gz"):
        (meta / f"{name}.metadata.json").write_text("{}")
    hint = meta / "version-hint.text"

    def found() -> str:
        return table_metadata.find_metadata_file(str(tmp_path / "t")).rsplit("/", 1)[-1]

    for text, expected in [
        ("00006-legacy\n", "00006-legacy.metadata.json"),  # older than the newest NNNNN-uuid file
        ("00006-legacy.metadata.json", "00006-legacy.metadata.json"),
        ("00005-zipped", "00005-zipped.gz.metadata.json"),
        ("3.1", "v3.1.metadata.json"),
        (uuid_name, f"{uuid_name}.metadata.json"),
    ]:
        hint.write_text(text)
        assert found() == expected, text
    hint.write_text("1")
    with caplog.at_level("WARNING", logger="deltaspark.iceberg.table_metadata"):
        assert found() == "v2.metadata.json"
    assert "version-hint.text says version 1" in caplog.text and "stale" in caplog.text
    for text in ("4", "00008-gone", "00006-legacy.metadata.json.bak"):
        hint.write_text(text)
        with pytest.raises(CorruptIcebergMetadataError, match=r"version-hint\.text.*" + re.escape(text)):
            found()
    (meta / "v00006-legacy.metadata.json").write_text("{}")  # both `<hint>` and `v<hint>` exist
    hint.write_text("00006-legacy")
    with pytest.raises(CorruptIcebergMetadataError, match="v00006-legacy.metadata.json"):
        found()


@pytest.mark.one_suite("4.x")  # the metadata file is chosen by driver code, alike on both versions
def test_version_hint_naming_a_metadata_file_chooses_the_snapshot(spark, tmp_path) -> None:  # noqa: ANN001
    copy, info = _copy("duckdb-legacy_bare_deletion_vector", tmp_path)
    meta = copy / "metadata"
    # its hint names `00002-legacy-bare-dv`, which no NNNNN-uuid pattern matches: the current
    # snapshot, whose deletion vector removes a row (the newest `00001-<uuid>` file has 3 rows)
    table = IcebergTable.forPath(spark, str(copy))
    assert _rows(table.toDF(), "id", "source") == [(1, "legacy"), (3, "legacy")]
    assert table.metadata.metadata_file == str(meta / info.entry_metadata)
    # the hint names the older file while a newer NNNNN-uuid file exists: the hint wins
    (meta / info.entry_metadata).rename(meta / "00002-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.metadata.json")
    older = "00001-844030fa-6b44-406b-ac35-494fe3c8e4a2"
    (meta / "version-hint.text").write_text(older)
    table = IcebergTable.forPath(spark, str(copy))
    assert table.count() == 3
    assert table.metadata.metadata_file == str(meta / f"{older}.metadata.json")
    # a hint naming a file that is not there: refused, never another snapshot
    (meta / "version-hint.text").write_text("00003-legacy-bare-dv")
    with pytest.raises(CorruptIcebergMetadataError, match="version-hint.text.*00003-legacy-bare-dv"):
        IcebergTable.forPath(spark, str(copy))


def test_snapshots_refs_history_and_time_travel(spark) -> None:  # noqa: ANN001
    table = _open(spark, "duckdb-struct_filter_issue")
    refs = {r["name"]: r for r in table.refs().collect()}
    assert refs["redpanda.tag"]["type"] == "TAG"
    tagged = table.snapshot(ref="redpanda.tag")
    assert tagged.snapshotId == refs["redpanda.tag"]["snapshot_id"]
    assert tagged.toDF().count() == _info("duckdb-struct_filter_issue").rows[tagged.snapshotId]

    table = _open(spark, "impala-iceberg_v2_positional_not_all_data_files_have_delete_files")
    snaps = table.snapshots().orderBy("sequence_number").collect()
    assert len(snaps) == len(table.metadata.snapshots) == 6
    history = table.history().collect()
    assert [h["snapshot_id"] for h in history] == [s for _, s in table.metadata.snapshot_log]
    second = snaps[1]
    at = second["committed_at"].replace(tzinfo=dt.timezone.utc)
    assert table.snapshot(asOfTimestamp=at).snapshotId == second["snapshot_id"]
    assert table.snapshot(asOfTimestamp=int(at.timestamp() * 1000) + 1).snapshotId == second["snapshot_id"]
    with pytest.raises(TimestampOutOfRangeError):
        table.snapshot(asOfTimestamp=0)
    with pytest.raises(SnapshotNotFoundError):
        table.snapshot(snapshotId=42)
    with pytest.raises(SnapshotNotFoundError):
        table.snapshot(ref="nope")
    with pytest.raises(InvalidArgumentError):
        table.snapshot(snapshotId=second["snapshot_id"], ref="main")


def test_empty_table_has_schema_and_no_rows(spark) -> None:  # noqa: ANN001
    table = _open(spark, "duckdb-timestamptz_ns")
    assert table.snapshot().snapshotId is None
    assert table.files().count() == 0
    with pytest.raises(UnsupportedFeatureError, match="timestamp"):
        table.toDF()  # nanosecond timestamps have no lossless Spark type


@pytest.mark.one_suite("4.x")  # manifest decoding is Python executor code, the same on both
def test_planned_files_match_pyiceberg(spark, tmp_path) -> None:  # noqa: ANN001
    from pyiceberg.table import StaticTable

    for name in (
        "impala-iceberg_v2_positional_not_all_data_files_have_delete_files",
        "icebird-spark_bunnies",
        "duckdb-hive_partitioned_table",
    ):
        info = _info(name)
        copy = iceberg_copy.relocated_copy(info.path, list(info.prefixes), tmp_path / name)
        theirs = StaticTable.from_metadata(str(copy / "metadata" / info.entry_metadata))
        ours = _open(spark, name)
        for snapshot_id in info.rows:
            tasks = list(theirs.scan(snapshot_id=snapshot_id).plan_files())
            data = {Path(t.file.file_path).relative_to(copy) for t in tasks}
            deletes = {Path(d.file_path).relative_to(copy) for t in tasks for d in t.delete_files}
            files = ours.snapshot(snapshot_id).files().collect()
            assert {Path(f["file_path"]).relative_to(info.path) for f in files if f["content"] == 0} == data
            assert {
                Path(f["file_path"]).relative_to(info.path) for f in files if f["content"] == 1
            } >= deletes


def test_inherited_sequence_numbers_and_snapshot_ids(spark) -> None:  # noqa: ANN001
    table = _open(spark, "impala-iceberg_v2_positional_not_all_data_files_have_delete_files")
    entries = table.snapshot().entries().collect()
    by_id = table.metadata.snapshots
    for e in entries:
        assert e["snapshot_id"] in by_id
        if e["status"] == 1:  # ADDED: inherited from the manifest list = the adding snapshot's number
            assert e["sequence_number"] == by_id[e["snapshot_id"]].sequence_number
        assert e["sequence_number"] is not None and e["file_sequence_number"] is not None


# ---- deletion-vector blobs -------------------------------------------------------------------------
def _fixtures() -> Path:
    return ic.root() / "_fixtures" / "dv-blobs"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("empty-position-index.bin", []),
        ("small-alternating-values-position-index.bin", [1, 3, 5, 7, 9]),
        ("small-and-large-values-position-index.bin", [100, 101, 2147483747, 2147483748]),
    ],
)
def test_java_written_dv_blobs(name, expected) -> None:  # noqa: ANN001
    assert list(puffin.deletion_vector((_fixtures() / name).read_bytes(), name)) == expected


def test_puffin_files_from_java_and_go() -> None:
    expected = {
        "single-blob-dv.puffin": {"s3://warehouse/db/table/data/00000-0-abc.parquet": [1, 3, 5, 7, 9]},
        "multi-blob-dv.puffin": {
            "s3://warehouse/db/table/data/file-001.parquet": [0, 100, 200],
            "s3://warehouse/db/table/data/file-002.parquet": [50, 150],
        },
        "deletion-vector-v1.puffin": {"data/test.parquet": [1, 3, 5, 7, 9]},
    }
    for name, vectors in expected.items():
        data = (_fixtures() / name).read_bytes()
        found = {}
        for blob in puffin.blobs(name, data):
            assert blob["type"] == "deletion-vector-v1"
            positions = puffin.deletion_vector(data[blob["offset"] : blob["offset"] + blob["length"]], name)
            assert len(positions) == int(blob["properties"]["cardinality"])
            found[blob["properties"]["referenced-data-file"]] = list(positions)
        assert found == vectors
    with pytest.raises(CorruptIcebergMetadataError):
        puffin.blobs("x", b"PFA1" + b"\0" * 20)


def test_damaged_dv_blob_is_refused() -> None:
    blob = bytearray((_fixtures() / "small-alternating-values-position-index.bin").read_bytes())
    blob[10] ^= 0xFF
    with pytest.raises(DeletionVectorError, match="CRC"):
        puffin.deletion_vector(bytes(blob), "damaged")


# ---- damaged and unsupported input -----------------------------------------------------------------
def _copy(name: str, tmp_path: Path) -> tuple[Path, ic.Table]:
    info = _info(name)
    return iceberg_copy.relocated_copy(info.path, list(info.prefixes), tmp_path / name), info


@pytest.mark.connect  # metadata through pyarrow.fs on the client, manifests and rows in Connect tasks
def test_relocated_copy_reads_without_a_map(spark, tmp_path) -> None:  # noqa: ANN001
    copy, info = _copy("impala-iceberg_v3_deletion_vectors", tmp_path)
    assert IcebergTable.forPath(spark, str(copy)).toDF().count() == info.rows[info.current]


def test_not_an_iceberg_table_and_corrupt_metadata(spark, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(IcebergTableNotFoundError):
        IcebergTable.forPath(spark, str(tmp_path))
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "v1.metadata.json").write_text("{not json")
    with pytest.raises(CorruptIcebergMetadataError, match="v1.metadata.json"):
        IcebergTable.forPath(spark, str(tmp_path))
    (tmp_path / "metadata" / "v1.metadata.json").write_text(
        json.dumps({"format-version": 4, "location": "x"})
    )
    with pytest.raises(UnsupportedFeatureError, match="format version 4"):
        IcebergTable.forPath(spark, str(tmp_path))


def _fails_naming(df, *fragments: str) -> None:  # noqa: ANN001
    with pytest.raises(Exception) as caught:  # noqa: B017 - a Spark job failure, checked by message
        df.count()
    text = str(caught.value)
    assert "deltaspark:" in text
    for fragment in fragments:
        assert fragment in text


@pytest.mark.one_suite("4.x")  # damage is found by Python executor code, the same on both Spark versions
def test_damaged_files_fail_naming_the_file(spark, tmp_path) -> None:  # noqa: ANN001
    copy, info = _copy("impala-iceberg_v3_deletion_vectors", tmp_path)
    table = IcebergTable.forPath(spark, str(copy))
    manifest = sorted((copy / "metadata").glob("*-m0.avro"))[0]
    data = manifest.read_bytes()
    manifest.write_bytes(data[: len(data) // 2])
    _fails_naming(table.toDF(), manifest.name)
    manifest.write_bytes(data)

    puffin_file = next(copy.rglob("*.puffin"))
    damaged = bytearray(puffin_file.read_bytes())
    damaged[10] ^= 0xFF  # inside the first vector
    puffin_file.write_bytes(bytes(damaged))
    _fails_naming(table.toDF(), puffin_file.name)
    puffin_file.unlink()
    _fails_naming(table.toDF(), puffin_file.name)

    copy, info = _copy("impala-iceberg_v2_delete_positional", tmp_path)
    table = IcebergTable.forPath(spark, str(copy))
    import pyarrow.parquet as pq

    parquet = sorted(p for p in copy.rglob("*.parq*") if not p.name.endswith(".crc"))
    deletes = [p for p in parquet if "pos" in pq.read_schema(p).names]
    data_file = next(p for p in parquet if p not in deletes)
    data_file.unlink()
    _fails_naming(table.toDF(), data_file.name)
    shutil.copy(deletes[0], data_file)  # another file where the data file was: its row count differs
    _fails_naming(table.toDF(), data_file.name)


def _manifest(table: IcebergTable, content: int) -> Path:
    """The first data (0) or delete (1) manifest of the current snapshot."""
    import fastavro

    snapshot = table.metadata.snapshots[table.metadata.current_snapshot_id]
    with open(snapshot.manifest_list, "rb") as handle:
        listed = [m["manifest_path"] for m in fastavro.reader(handle) if (m.get("content") or 0) == content]
    return Path(listed[0])


@pytest.mark.one_suite("4.x")  # damage is found by Python executor code, the same on both Spark versions
def test_a_missing_manifest_fails_eager_calls_with_a_named_error(spark, tmp_path, capsys) -> None:  # noqa: ANN001
    """count(), toDF()'s planning, a conversion and the command line run Spark jobs; a manifest they
    cannot read is a `CorruptIcebergMetadataError` naming it, not Spark's PythonException."""
    from deltaspark.cli import main

    copy, _ = _copy("impala-iceberg_v2_delete_positional", tmp_path)
    table = IcebergTable.forPath(spark, str(copy))
    data, deletes = _manifest(table, 0), _manifest(table, 1)
    kept = data.read_bytes()
    data.unlink()
    with pytest.raises(CorruptIcebergMetadataError, match=re.escape(data.name)):
        table.count()
    _fails_naming(table.toDF(), data.name)  # toDF() plans the deletes; data manifests are read lazily
    with pytest.raises(CorruptIcebergMetadataError, match=re.escape(data.name)):
        DeltaTable.convertToDelta(spark, f"iceberg.`{copy}`")
    assert not list(copy.glob("_delta_log/*.json"))
    assert main(["iceberg", "describe", str(copy)]) == 1  # the command line prints it, no traceback
    err = capsys.readouterr().err
    assert "deltaspark: CorruptIcebergMetadataError: " in err and data.name in err and "Traceback" not in err
    data.write_bytes(kept)
    deletes.unlink()
    for call in (table.count, table.toDF):
        with pytest.raises(CorruptIcebergMetadataError, match=re.escape(deletes.name)):
            call()
    assert main(["iceberg", "files", str(copy)]) == 1
    assert deletes.name in capsys.readouterr().err


@pytest.mark.one_suite("4.x")  # damage is found by Python executor code, the same on both Spark versions
def test_files_without_field_ids_or_name_mapping_are_refused(spark, tmp_path) -> None:  # noqa: ANN001
    copy, info = _copy("impala-iceberg_alltypes_part", tmp_path)
    metadata_file = copy / "metadata" / info.entry_metadata
    raw = json.loads(metadata_file.read_text())
    del raw["properties"]["schema.name-mapping.default"]
    metadata_file.write_text(json.dumps(raw))
    _fails_naming(IcebergTable.forPath(spark, str(copy), info.entry_metadata).toDF(), "name-mapping")


# ---- command line ----------------------------------------------------------------------------------
@pytest.mark.one_suite("4.x")  # the command line is Python over the API both suites test
def test_cli_describe_files_history(spark, capsys) -> None:  # noqa: ANN001
    from deltaspark.cli import main

    info = _info("impala-iceberg_v2_delete_both_eq_and_pos")
    where = ["--metadata", info.entry_metadata] + [
        a for p in info.prefixes for a in ("--relocate", f"{p}={info.path}")
    ]
    assert main(["iceberg", "describe", str(info.path), *where, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["formatVersion"] == 2 and facts["snapshotId"] == info.current
    assert (facts["dataFiles"], facts["positionDeleteFiles"], facts["equalityDeleteFiles"]) == (2, 1, 2)
    assert main(["iceberg", "files", str(info.path), *where, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(line["content"] for line in lines) == [
        "DATA",
        "DATA",
        "EQUALITY_DELETES",
        "EQUALITY_DELETES",
        "POSITION_DELETES",
    ]
    assert all(Path(line["file_path"]).exists() for line in lines)
    assert main(["iceberg", "history", str(info.path), *where]) == 0
    out = capsys.readouterr().out
    assert str(info.current) in out and "overwrite" in out
    assert main(["iceberg", "describe", str(info.path / "nope")]) == 1
