"""DELETE with deletion vectors: rows marked deleted in DV files, data files left in place.

Every version written is read three ways: by deltaspark, by delta-rs's DataFusion reader (its
`to_pyarrow_table` refuses DV tables, its query engine applies them) and by the tests' own
plain-Python reader (`reference_rows`); `writer_rules` checks each DV's bytes against the protocol.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.errors import AppendOnlyTableError
from deltaspark.table import write
from tests.reference_rows import reference_rows
from tests.writer_rules import check_commit, check_table

deltalake = pytest.importorskip("deltalake")


def _delta_rs_ids(path: Path, version: int | None = None, column: str = "id") -> list:
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = deltalake.DeltaTable(str(path), version=version)
    result = QueryBuilder().register("t", table).execute(f"SELECT {column} FROM t").read_all()
    return sorted(pa.table(result).column(column).to_pylist())


def _ids(table: DeltaTable, version: int | None = None, column: str = "id") -> list:
    return sorted(r[0] for r in table.snapshot(version=version).toDF().select(column).collect())


def _commit(path: Path, version: int) -> list[dict]:
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_deletes_mark_rows_in_deletion_vectors(spark, tmp_path, replay, caplog):
    """With `replay="spark"` the DV files are staged by Spark's writers and decoded by the JVM;
    otherwise the driver writes them (one job collects them with their descriptors)."""
    caplog.set_level(logging.INFO, "deltaspark.operations.deletion_vector_writer")
    path = tmp_path / "t"
    rows = spark.range(0, 20).selectExpr("id", "cast(id % 3 as string) AS p").coalesce(1)
    write(rows, str(path), partitionBy=["p"], properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, str(path))
    paths_before = sorted(r["path"] for r in table.snapshot().files().collect())

    first = table.delete("id % 4 = 0")  # 0, 12 | 4, 16 | 8: one DV in each partition's file
    routes = [r.getMessage().endswith("from the driver") for r in caplog.records if "Wrote" in r.getMessage()]
    assert routes == [replay == "driver"]
    m = first.metrics
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsUpdated"], m["numDeletionVectorsRemoved"]) == (
        3,
        0,
        0,
    )
    assert (m["numDeletedRows"], m["numRemovedFiles"], m["numAddedFiles"], m["numCopiedRows"]) == (5, 0, 0, 0)
    files = table.snapshot().files().collect()
    assert sorted(r["path"] for r in files) == paths_before  # no data file rewritten
    assert {r["deletionVector"]["storageType"] for r in files} == {"u"}
    assert len({r["deletionVector"]["pathOrInlineDv"] for r in files}) == 1  # one DV file per task
    assert all(json.loads(r["stats"])["tightBounds"] is False for r in files)
    assert len(list(path.glob("deletion_vector_*.bin"))) == 1
    removes = [a["remove"] for a in _commit(path, 1) if "remove" in a]
    assert len(removes) == 3 and all(r["dataChange"] and "deletionVector" not in r for r in removes)

    second = table.delete("id = 5 OR id = 9")  # files that already have a DV: the old rows stay deleted
    m = second.metrics
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsUpdated"], m["numDeletionVectorsRemoved"]) == (
        2,
        2,
        2,
    )
    removes = [a["remove"] for a in _commit(path, 2) if "remove" in a]
    assert all(r["deletionVector"]["storageType"] == "u" for r in removes)  # the old DV is named

    emptied = table.delete("id IN (2, 11, 14, 17)")  # the rest of partition 2: its file goes
    assert emptied.metrics["numRemovedFiles"] == 1 and emptied.metrics["numDeletionVectorsRemoved"] == 1
    assert [a for a in _commit(path, 3) if "add" in a] == []
    assert table.delete("id = 100") is None  # statistics: no file can hold it
    assert table.delete("p = '1' AND id = 0") is None  # a candidate file, but no row matches

    expected = {
        0: list(range(20)),
        1: [i for i in range(20) if i % 4],
        2: [i for i in range(20) if i % 4 and i not in (5, 9)],
        3: [1, 3, 6, 7, 10, 13, 15, 18, 19],
    }
    for version, ids in expected.items():
        assert _ids(table, version) == ids == _delta_rs_ids(path, version), version
    assert sorted(r["id"] for r in reference_rows(str(path))) == expected[3]
    assert [r["operation"] for r in table.history().collect()][:3] == ["DELETE"] * 3
    check_table(path)


def test_a_file_whose_every_row_is_deleted_gets_no_dv_bytes(spark, tmp_path, replay):
    """A file the delete empties is removed, not given a DV: its bitmap is not written either, so
    a DV file holds exactly the DVs the log references (its size: the version byte and, per DV,
    its length, bytes and checksum), and a delete that only empties files writes no DV file."""
    path = tmp_path / "t"
    write(spark.range(0, 30, 1, 3), str(path), properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable.forPath(spark, str(path))

    mixed = table.delete("id < 12")  # the file of 0-9 emptied, two rows of the file of 10-19
    m = mixed.metrics
    assert (m["numRemovedFiles"], m["numDeletionVectorsAdded"], m["numDeletedRows"]) == (1, 1, 12)
    commit = _commit(path, 1)
    assert len([a for a in commit if "remove" in a]) == 2
    dvs = [a["add"]["deletionVector"] for a in commit if "add" in a]
    assert len(dvs) == 1 and dvs[0]["cardinality"] == 2
    (dv_file,) = path.glob("deletion_vector_*.bin")
    assert dv_file.stat().st_size == 1 + 4 + dvs[0]["sizeInBytes"] + 4

    whole = table.delete("id >= 20")  # only the file of 20-29, every row
    assert (whole.metrics["numRemovedFiles"], whole.metrics["numDeletionVectorsAdded"]) == (1, 0)
    assert [a for a in _commit(path, 2) if "add" in a] == []
    assert list(path.glob("deletion_vector_*.bin")) == [dv_file]
    assert _ids(table) == list(range(12, 20)) == _delta_rs_ids(path)
    check_table(path)


def test_a_delta_spark_table_with_deletion_vectors(spark, tmp_path, conformance):
    path = tmp_path / "t"
    shutil.copytree(conformance / "table-with-dv-small", path)
    table = DeltaTable.forPath(spark, str(path))
    before = _ids(table, column="value")
    result = table.delete("value % 2 = 0")
    assert result.metrics["numDeletionVectorsUpdated"] == 1  # the file delta-spark gave a DV
    after = [v for v in before if v % 2]
    assert _ids(table, column="value") == after == _delta_rs_ids(path, column="value")
    assert sorted(r["value"] for r in reference_rows(str(path))) == after
    assert check_commit(path, result.version) == []


def test_row_ids_survive_a_deletion_vector_delete(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.range(0, 6).coalesce(1),
        str(path),
        properties={"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"},
    )
    table = DeltaTable.forPath(spark, str(path))

    def row_ids():
        frame = table.toDF(rowTracking=True).select("id", "_metadata.row_id", "_metadata.row_commit_version")
        return {r[0]: (r[1], r[2]) for r in frame.collect()}

    before = row_ids()
    table.delete("id IN (1, 4)")
    assert row_ids() == {k: v for k, v in before.items() if k not in (1, 4)}
    assert table.snapshot().rowIdHighWaterMark == 5  # no new row ids: no rows were written
    check_table(path)


def test_change_data_feed_of_a_deletion_vector_delete(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.range(0, 5).coalesce(1),
        str(path),
        properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    )
    table = DeltaTable.forPath(spark, str(path))
    result = table.delete("id >= 3")
    assert result.metrics["numAddedChangeFiles"] == 1 and result.metrics["numDeletedRows"] == 2
    changes = table.changes(startingVersion=1).select("id", "_change_type").collect()
    assert sorted(tuple(r) for r in changes) == [(3, "delete"), (4, "delete")]
    check_table(path)


def test_append_only_tables_refuse_deletes(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.range(0, 3),
        str(path),
        properties={"delta.enableDeletionVectors": "true", "delta.appendOnly": "true"},
    )
    with pytest.raises(AppendOnlyTableError):
        DeltaTable.forPath(spark, str(path)).delete("id = 1")
    assert not list(path.glob("deletion_vector_*.bin"))  # refused before any work


def test_deletes_and_updates_through_the_distributed_reader(spark, tmp_path, spark_replay):
    """Above `spark.deltaspark.read.maxDriverFiles` files (and for type-widened tables on Spark
    3.5) rows are read by the executors: the file each row came from and its position must come
    along for deletion vectors and rewrites, as with Spark's own scan. (`spark_replay`: the DV
    files staged by the executors' writers too, as for a large change.)"""
    path = tmp_path / "t"
    properties = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    for batch in range(2):
        frame = spark.createDataFrame([(batch * 10 + i, "v") for i in range(5)], "id long, s string")
        write(frame.coalesce(1), str(path), properties=properties if batch == 0 else None)
    table = DeltaTable.forPath(spark, str(path))
    spark.conf.set("spark.deltaspark.read.maxDriverFiles", "0")
    try:
        table.delete("id IN (1, 12)")
        table.update("id = 3", {"s": "'updated'"})
        rows = sorted(tuple(r) for r in table.toDF().collect())
    finally:
        spark.conf.unset("spark.deltaspark.read.maxDriverFiles")
    expected = [(i, "updated" if i == 3 else "v") for i in (0, 2, 3, 4, 10, 11, 13, 14)]
    assert rows == expected
    assert _delta_rs_ids(path) == [r[0] for r in expected]
    check_table(path)


@pytest.mark.one_suite("3.5")  # which route a file takes is decided in Python, the same on every Spark
def test_files_without_a_row_count_are_rewritten_not_given_deletion_vectors(spark, tmp_path):
    """A DV needs its file's `numRecords`: a file logged without statistics is rewritten by
    DELETE and UPDATE alike (copy-on-write), and the table reads as if DVs had been written."""
    path = tmp_path / "t"
    write(spark.range(0, 10, 1, 2), str(path), properties={"delta.enableDeletionVectors": "true"})  # 0-4, 5-9
    first = path / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in first.read_text().splitlines()]
    for action in actions:
        action.get("add", {}).pop("stats", None)
    first.write_text("".join(json.dumps(a) + "\n" for a in actions))
    for crc in path.glob("_delta_log/*.crc"):
        crc.unlink()  # the checksum lists the files as first written
    table = DeltaTable.forPath(spark, str(path))
    deleted = table.delete("id = 3")
    updated = table.update("id = 5", {"id": "id * 10"})
    for result in (deleted, updated):
        m = result.metrics
        assert (m["numRemovedFiles"], m["numAddedFiles"], m["numDeletionVectorsAdded"]) == (1, 1, 0), m
    assert _ids(table) == [0, 1, 2, 4, 6, 7, 8, 9, 50] == _delta_rs_ids(path)
    assert not list(path.glob("deletion_vector_*.bin"))


@pytest.mark.parametrize(
    "records, deleted",
    [
        (1, [0]),
        (70_000, range(70_000)),  # every row: full containers, then a partial one
        (200_000, range(0, 200_000, 2)),  # every other row: bitmap containers
        (1_000_000, range(0, 1_000_000, 65_536)),  # one row in each of 16 containers
        (131_073, [0, 65_536, 131_072]),
    ],
)
def test_the_driver_route_bounds_the_bytes_of_a_deletion_vector(records, deleted):
    """The driver writes DV files only when `dv_bytes_bound` of the candidates is small: the bound
    must hold for any rows a DV can delete (one bit a row, plus a container's 8 KiB a file)."""
    from deltaspark.features.dv_codec import encode_bitmap, frame
    from deltaspark.operations.deletion_vector_writer import dv_bytes_bound

    framed = len(frame(encode_bitmap(list(deleted))))
    assert framed <= dv_bytes_bound(1, records), (framed, dv_bytes_bound(1, records))
