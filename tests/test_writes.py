"""Writing tables: create, append, overwrite, replaceWhere, properties and protocol changes.

Every table written here is checked three ways: deltaspark reads back what was written, delta-rs
(an independent reader) reads the same rows at every version, and `writer_rules` checks each
commit against the protocol's rules for writers.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from pathlib import Path

import pytest
from chispa import assert_df_equality

from deltaspark import DeltaTable
from deltaspark.errors import (
    InvalidArgumentError,
    InvariantViolationError,
    TableAlreadyExistsError,
)
from deltaspark.table import write
from tests.writer_rules import check_table

deltalake = pytest.importorskip("deltalake")


def _sorted(rows) -> list[tuple]:
    return sorted(rows, key=lambda t: tuple((v is not None, v) for v in t))


def _rows_of(df) -> list[tuple]:
    return _sorted(tuple(r) for r in df.collect())


def _delta_rs_rows(path: Path, version: int | None = None) -> list[tuple]:
    table = deltalake.DeltaTable(str(path), version=version)
    data = table.to_pyarrow_table().to_pylist()
    return _sorted(tuple(row.values()) for row in data)


def _stats(path: Path, version: int) -> list[dict]:
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(a["add"]["stats"]) for a in map(json.loads, lines) if "add" in a]


def test_append_then_overwrite_read_by_delta_rs_at_every_version(spark, tmp_path):
    path = tmp_path / "t"
    first = spark.createDataFrame([(1, "x", 1.5), (2, "y", None)], "id long, name string, score double")
    write(first, str(path))
    write(spark.createDataFrame([(3, "z", 2.5)], "id long, name string, score double"), str(path))
    write(
        spark.createDataFrame([(9, "w", 0.5)], "id long, name string, score double"),
        str(path),
        mode="overwrite",
    )
    table = DeltaTable.forPath(spark, str(path))
    assert table.snapshot().version == 2
    for version in range(3):
        ours = _rows_of(table.snapshot(version=version).toDF())
        assert ours == _delta_rs_rows(path, version), version
    assert _rows_of(table.toDF()) == [(9, "w", 0.5)]
    history = [r["operation"] for r in table.history().collect()]
    assert history == ["WRITE", "WRITE", "WRITE"]
    check_table(path)


def test_partition_values_of_every_type_round_trip(spark, tmp_path):
    path = tmp_path / "t"
    schema = "id int, i int, d date, ts timestamp, b boolean, dec decimal(10,2), s string"
    rows = [
        (
            1,
            7,
            dt.date(2024, 2, 29),
            dt.datetime(2024, 1, 1, 10, 0, 0, 123456),
            True,
            decimal.Decimal("1.50"),
            "a b/c:d=e",
        ),
        (2, None, None, None, None, None, None),
        (
            3,
            -1,
            dt.date(1969, 12, 31),
            dt.datetime(1999, 12, 31, 23, 59, 59),
            False,
            decimal.Decimal("3.25"),
            "é%",
        ),
    ]
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # serialized in UTC regardless
    try:
        df = spark.createDataFrame(rows, schema)
        write(df, str(path), partitionBy=["i", "d", "ts", "b", "dec", "s"])
        table = DeltaTable.forPath(spark, str(path))
        assert_df_equality(table.toDF().select(*df.columns), df, ignore_row_order=True)
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    lines = (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    values = {
        json.loads(a["add"]["stats"])["minValues"]["id"]: a["add"]["partitionValues"]
        for a in map(json.loads, lines)
        if "add" in a
    }
    assert values[1] == {
        "i": "7",
        "d": "2024-02-29",
        # Python's naive datetime is the instant 10:00 UTC; New York would print it as 05:00.
        "ts": "2024-01-01T10:00:00.123456Z",
        "b": "true",
        "dec": "1.50",
        "s": "a b/c:d=e",
    }
    assert values[2] == dict.fromkeys(("i", "d", "ts", "b", "dec", "s"))
    # (delta-rs 1.6.6 mis-parses negative decimal partition values, e.g. "-3.25" as "-3.-25": none here)
    assert len(_delta_rs_rows(path)) == 3
    check_table(path)


def test_statistics_are_true_bounds(spark, tmp_path):
    path = tmp_path / "t"
    long_text = "m" * 40
    rows = [
        (1, "apple", 2.0, dt.datetime(2024, 1, 1, 0, 0, 0, 999), long_text),
        (5, None, float("nan"), dt.datetime(2024, 1, 1, 0, 0, 1, 1500), "a"),
    ]
    df = spark.createDataFrame(rows, "id long, s string, f double, ts timestamp, t string").coalesce(1)
    write(df, str(path))
    (stats,) = _stats(path, 0)
    assert stats["numRecords"] == 2
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 5
    assert stats["nullCount"] == {"id": 0, "s": 1, "f": 0, "ts": 0, "t": 0}
    assert stats["minValues"]["s"] == "apple" and stats["maxValues"]["s"] == "apple"
    assert "f" not in stats["minValues"] and "f" not in stats["maxValues"]  # NaN: no bounds
    assert stats["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-01-01T00:00:01.002Z"  # .0015 rounded up, not down
    assert stats["minValues"]["t"] == "a" and "t" not in stats["maxValues"]  # a prefix is no maximum
    table = DeltaTable.forPath(spark, str(path))
    assert table.snapshot().files("id > 5").count() == 0
    assert table.snapshot().files("id = 5").count() == 1
    assert table.toDF("t = '" + long_text + "'").count() == 1
    check_table(path)


def test_statistics_respect_indexed_column_settings(spark, tmp_path):
    df = spark.createDataFrame([(1, 2, 3)], "a int, b int, c int")
    write(df, str(tmp_path / "n"), properties={"delta.dataSkippingNumIndexedCols": "1"})
    write(df, str(tmp_path / "s"), properties={"delta.dataSkippingStatsColumns": "c"})
    assert set(_stats(tmp_path / "n", 0)[0]["nullCount"]) == {"a"}
    assert set(_stats(tmp_path / "s", 0)[0]["nullCount"]) == {"c"}


def test_replace_where_replaces_only_matching_partitions(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, p string")
    write(df, str(path), partitionBy=["p"])
    new = spark.createDataFrame([(10, "a"), (11, "b")], "id long, p string")
    result = write(new, str(path), mode="overwrite", replaceWhere="p IN ('a', 'b')")
    table = DeltaTable.forPath(spark, str(path))
    assert _rows_of(table.toDF()) == [(3, "c"), (10, "a"), (11, "b")]
    assert result.metrics["numRemovedFiles"] == 2
    assert _delta_rs_rows(path) == [(3, "c"), (10, "a"), (11, "b")]
    with pytest.raises(InvariantViolationError, match="replaceWhere"):
        write(
            spark.createDataFrame([(12, "c")], "id long, p string"),
            str(path),
            mode="overwrite",
            replaceWhere="p = 'a'",
        )
    with pytest.raises(InvalidArgumentError, match="partition columns only"):
        write(new, str(path), mode="overwrite", replaceWhere="id > 3")
    assert table.snapshot().version == 1  # nothing committed by the refused writes
    check_table(path)


def test_modes_and_schema_checks(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark.createDataFrame([(1, "a")], "id long, s string"), path, mode="error")
    with pytest.raises(TableAlreadyExistsError):
        write(spark.createDataFrame([(1, "a")], "id long, s string"), path, mode="error")
    assert write(spark.createDataFrame([(1, "a")], "id long, s string"), path, mode="ignore") is None
    with pytest.raises(InvalidArgumentError, match="extra"):
        write(spark.createDataFrame([(1, "a", 1)], "id long, s string, extra int"), path)
    with pytest.raises(InvalidArgumentError, match="does not convert without loss"):
        write(spark.createDataFrame([("x", "a")], "id string, s string"), path)
    write(spark.createDataFrame([(2,)], "id int"), path)  # int widens to long; s is null
    table = DeltaTable.forPath(spark, path)
    assert _rows_of(table.toDF().orderBy("id")) == [(1, "a"), (2, None)]
    assert table.snapshot().schema["id"].dataType.simpleString() == "bigint"


def test_create_builder_and_constraints(spark, tmp_path):
    path = str(tmp_path / "t")
    table = (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("id", "BIGINT", nullable=False)
        .addColumn("amount", "DOUBLE")
        .addColumn("amount_x2", "DOUBLE", generatedAlwaysAs="amount * 2")
        .addColumn("day", "DATE")
        .partitionedBy("day")
        .property("delta.constraints.positive", "amount > 0")
        .comment("orders")
        .execute()
    )
    snapshot = table.snapshot()
    assert snapshot.partitionColumns == ["day"] and snapshot.metadata.description == "orders"
    assert {"checkConstraints", "generatedColumns", "invariants"} <= set(snapshot.tableFeatures)
    rows = spark.createDataFrame([(1, 2.0, dt.date(2024, 1, 1))], "id long, amount double, day date")
    write(rows, path)
    assert table.toDF().select("amount_x2").first()[0] == 4.0  # computed when absent
    with pytest.raises(InvariantViolationError, match="positive"):
        write(spark.createDataFrame([(2, -1.0, None)], "id long, amount double, day date"), path)
    with pytest.raises(InvariantViolationError, match="NOT NULL id"):
        write(spark.createDataFrame([(None, 1.0, None)], "id long, amount double, day date"), path)
    with pytest.raises(InvariantViolationError, match="generated column amount_x2"):
        write(
            spark.createDataFrame(
                [(3, 1.0, 5.0, None)], "id long, amount double, amount_x2 double, day date"
            ),
            path,
        )
    assert table.snapshot().version == 1
    with pytest.raises(TableAlreadyExistsError):
        DeltaTable.create(spark).location(path).addColumn("id", "INT").execute()
    DeltaTable.createIfNotExists(spark).location(path).addColumn("id", "INT").execute()
    assert table.snapshot().version == 1
    replaced = DeltaTable.createOrReplace(spark).location(path).addColumn("x", "STRING").execute()
    assert replaced.snapshot().version == 2 and replaced.toDF().count() == 0
    assert replaced.snapshot().schema.fieldNames() == ["x"]
    check_table(Path(path))


def test_column_mapping_on_create(spark, tmp_path):
    path = str(tmp_path / "t")
    table = (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("a", "INT")
        .addColumn("s", "STRUCT<x: INT, y: STRING>")
        .property("delta.columnMapping.mode", "name")
        .execute()
    )
    snapshot = table.snapshot()
    fields = snapshot.schema.fields
    ids = [f.metadata["delta.columnMapping.id"] for f in fields]
    ids += [f.metadata["delta.columnMapping.id"] for f in fields[1].dataType.fields]
    assert sorted(ids) == [1, 2, 3, 4] and snapshot.configuration["delta.columnMapping.maxColumnId"] == "4"
    assert all(f.metadata["delta.columnMapping.physicalName"].startswith("col-") for f in fields)
    assert "columnMapping" in snapshot.protocol.readerFeatures
    write(spark.createDataFrame([(1, (2, "z"))], "a int, s struct<x:int,y:string>"), path)  # see
    assert [tuple(r) for r in table.toDF().collect()] == [(1, (2, "z"))]  # test_column_mapping_writes


def test_properties_and_protocol(spark, tmp_path):
    path = str(tmp_path / "t")
    write(spark.createDataFrame([(1,)], "id long"), path)
    table = DeltaTable.forPath(spark, path)
    assert table.snapshot().protocol.asDict() == {"minReaderVersion": 1, "minWriterVersion": 2}
    table.setProperties(
        {"delta.enableChangeDataFeed": "true", "delta.logRetentionDuration": "interval 7 days"}
    )
    protocol = table.snapshot().protocol
    assert protocol.minWriterVersion == 7 and set(protocol.writerFeatures) == {
        "appendOnly",
        "invariants",
        "changeDataFeed",
    }
    table.setProperties({"delta.enableDeletionVectors": "true"})
    protocol = table.snapshot().protocol
    assert protocol.minReaderVersion == 3 and protocol.readerFeatures == ("deletionVectors",)
    table.unsetProperties(["delta.logRetentionDuration"])
    assert "delta.logRetentionDuration" not in table.snapshot().configuration
    with pytest.raises(InvalidArgumentError):
        table.unsetProperties(["delta.nothing"])
    assert table.unsetProperties(["delta.nothing"], ifExists=True) is None
    assert table.addFeatureSupport("v2Checkpoint").version == 4
    assert table.addFeatureSupport("v2Checkpoint") is None
    with pytest.raises(InvalidArgumentError, match="downgrade"):
        table.upgradeTableProtocol(1, 2)
    other = str(tmp_path / "u")
    write(spark.createDataFrame([(1,)], "id long"), other)
    legacy = DeltaTable.forPath(spark, other)
    legacy.upgradeTableProtocol(1, 4)
    assert legacy.snapshot().protocol.asDict() == {"minReaderVersion": 1, "minWriterVersion": 4}
    legacy.upgradeTableProtocol(1, 7)
    assert set(legacy.snapshot().protocol.writerFeatures) == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
    }
    legacy.upgradeTableProtocol(3, 7)  # a reader upgrade adds no writer feature
    upgraded = legacy.snapshot().protocol
    assert upgraded.readerFeatures == () and set(upgraded.writerFeatures) == {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
    }
    assert deltalake.DeltaTable(path).protocol().reader_features == ["deletionVectors", "v2Checkpoint"]
    check_table(Path(path))


def test_checkpoint_interval_is_honoured(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(1,)], "id long")
    write(df, str(path), properties={"delta.checkpointInterval": "2"})
    write(df, str(path))
    assert not list((path / "_delta_log").glob("*.checkpoint*.parquet"))
    write(df, str(path))
    assert (path / "_delta_log" / f"{2:020d}.checkpoint.parquet").is_file()
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 2
    assert DeltaTable.forPath(spark, str(path)).toDF().count() == 3
    assert len(_delta_rs_rows(path)) == 3


def test_commits_on_top_of_a_delta_rs_table(spark, tmp_path):
    import pyarrow as pa

    path = tmp_path / "t"
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array(["a", "b"])})
    deltalake.write_deltalake(str(path), data, partition_by=["p"])
    write(spark.createDataFrame([(3, "a")], "id long, p string"), str(path))
    write(
        spark.createDataFrame([(4, "b")], "id long, p string"),
        str(path),
        mode="overwrite",
        replaceWhere="p = 'b'",
    )
    expected = [(1, "a"), (3, "a"), (4, "b")]
    assert _rows_of(DeltaTable.forPath(spark, str(path)).toDF().select("id", "p")) == expected
    assert _delta_rs_rows(path) == expected


def test_float_special_values_and_empty_writes(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(1, float("inf")), (2, -0.0)], "id long, f double")
    write(df, str(path))
    values = sorted(r[0] for r in DeltaTable.forPath(spark, str(path)).toDF().select("f").collect())
    assert values[0] == 0.0 and math.isinf(values[1])
    result = write(spark.createDataFrame([], "id long, f double"), str(path))
    assert result.version == 1 and result.metrics["numFiles"] == 0
    assert DeltaTable.forPath(spark, str(path)).toDF().count() == 2


def test_restore_to_version_and_timestamp(spark, tmp_path):
    path = tmp_path / "t"
    schema = "id long, p string"
    write(spark.createDataFrame([(1, "a"), (2, "b")], schema), str(path), partitionBy=["p"])
    write(spark.createDataFrame([(3, "c")], schema), str(path))
    write(spark.createDataFrame([(9, "a")], schema), str(path), mode="overwrite", replaceWhere="p = 'a'")
    table = DeltaTable.forPath(spark, str(path))
    sizes = {v: {r["path"]: r["size"] for r in table.snapshot(version=v).files().collect()} for v in (0, 2)}
    restored = {p: n for p, n in sizes[0].items() if p not in sizes[2]}
    removed = {p: n for p, n in sizes[2].items() if p not in sizes[0]}
    metrics = table.restoreToVersion(0).first().asDict()
    assert metrics == {
        "table_size_after_restore": sum(sizes[0].values()),
        "num_of_files_after_restore": 2,
        "num_removed_files": 2,  # c and the new a
        "num_restored_files": 1,  # the old a
        "removed_files_size": sum(removed.values()),
        "restored_files_size": sum(restored.values()),
    }
    assert table.snapshot().version == 3
    assert _rows_of(table.toDF()) == [(1, "a"), (2, "b")] == _delta_rs_rows(path)
    assert [r["operation"] for r in table.history(1).collect()] == ["RESTORE"]
    when = table.snapshot(version=1).timestamp
    (path / "_delta_log" / f"{1:020d}.crc").unlink()  # the restored size is then counted, not read
    metrics = table.restoreToTimestamp(when).first().asDict()
    assert metrics["table_size_after_restore"] == table.snapshot().summary()["sizeInBytes"]
    assert _rows_of(table.toDF()) == [(1, "a"), (2, "b"), (3, "c")] == _delta_rs_rows(path)
    with pytest.raises(InvalidArgumentError, match="latest version"):
        table.restoreToVersion(table.snapshot().version)
    check_table(path)


def test_restore_refuses_files_that_are_gone(spark, tmp_path):
    from deltaspark.errors import MissingDataFileError

    path = tmp_path / "t"
    write(spark.createDataFrame([(1,)], "id long"), str(path))
    write(spark.createDataFrame([(2,)], "id long"), str(path), mode="overwrite")
    table = DeltaTable.forPath(spark, str(path))
    (old,) = [r["path"] for r in table.snapshot(version=0).files().collect()]
    (path / old).unlink()  # as VACUUM would
    with pytest.raises(MissingDataFileError, match="no longer exist"):
        table.restoreToVersion(0)
    assert table.snapshot().version == 1


def test_restore_keeps_row_ids(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.createDataFrame([(1,), (2,)], "id long"),
        str(path),
        properties={"delta.enableRowTracking": "true"},
    )
    table = DeltaTable.forPath(spark, str(path))
    before = {
        r["id"]: r["row_id"] for r in table.toDF(rowTracking=True).select("id", "_metadata.row_id").collect()
    }
    write(spark.createDataFrame([(3,)], "id long"), str(path), mode="overwrite")
    table.restoreToVersion(0)
    after = {
        r["id"]: r["row_id"] for r in table.toDF(rowTracking=True).select("id", "_metadata.row_id").collect()
    }
    assert after == before
    assert table.snapshot().rowIdHighWaterMark == 2
    check_table(path)


def test_delete_rewrites_only_what_it_must(spark, tmp_path):
    path = tmp_path / "t"
    rows = [(1, "a"), (2, "a"), (3, "b"), (4, "c"), (None, "c")]
    write(spark.createDataFrame(rows, "id long, p string").coalesce(1), str(path), partitionBy=["p"])
    table = DeltaTable.forPath(spark, str(path))
    files_before = {r["path"] for r in table.snapshot().files().collect()}
    assert table.delete("id > 100") is None  # statistics: no file can hold a match
    result = table.delete("id = 2")
    assert result.metrics["numRemovedFiles"] == 1 and result.metrics["numDeletedRows"] == 1
    assert result.metrics["numCopiedRows"] == 1
    files_after = {r["path"] for r in table.snapshot().files().collect()}
    assert len(files_before - files_after) == 1  # only partition a's file was rewritten
    whole = table.delete("p = 'b'")  # partition values decide: removed without being read
    assert whole.metrics["numAddedFiles"] == 0 and whole.metrics["numDeletedRows"] == 1
    table.delete(F_col_id_is_4())
    assert _rows_of(table.toDF()) == [(None, "c"), (1, "a")] == _delta_rs_rows(path)  # NULL: the row stays
    assert [r["operation"] for r in table.history(1).collect()] == ["DELETE"]
    table.delete()
    assert table.toDF().count() == 0
    check_table(path)


def test_copy_on_write_delete_keeps_row_ids(spark, tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "t"
    write(spark.range(0, 4).coalesce(1), str(path), properties={"delta.enableRowTracking": "true"})
    write(spark.range(4, 6).coalesce(1), str(path))
    table = DeltaTable.forPath(spark, str(path))

    def tracked():
        frame = table.toDF(rowTracking=True).select("id", "_metadata.row_id", "_metadata.row_commit_version")
        return {r[0]: (r[1], r[2]) for r in frame.collect()}

    before = tracked()
    assert before[5] == (5, 1)
    result = table.delete("id IN (1, 4)")  # one row from each file: both rewritten
    assert result.metrics["numRemovedFiles"] == 2 and result.metrics["numCopiedRows"] == 4
    assert tracked() == {k: v for k, v in before.items() if k not in (1, 4)}
    assert table.snapshot().rowIdHighWaterMark == 9  # the new files got fresh base row ids
    configuration = table.snapshot().configuration
    id_column = configuration["delta.rowTracking.materializedRowIdColumnName"]
    version_column = configuration["delta.rowTracking.materializedRowCommitVersionColumnName"]
    lines = (path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    written = {}
    for add in (a["add"] for a in map(json.loads, lines) if "add" in a):
        data = pq.read_table(path / add["path"]).to_pydict()
        written.update(zip(data["id"], zip(data[id_column], data[version_column], strict=True), strict=True))
    assert written == {0: (0, 0), 2: (2, 0), 3: (3, 0), 5: (5, 1)}
    check_table(path)


def F_col_id_is_4():  # noqa: N802 - reads as the Column it builds
    from pyspark.sql import functions as F

    return F.col("id") == 4


def test_delete_with_change_data_feed_writes_change_files(spark, tmp_path):
    path = tmp_path / "t"
    rows = [(1, "a"), (2, "a"), (3, "b")]
    write(
        spark.createDataFrame(rows, "id long, p string").coalesce(1),
        str(path),
        partitionBy=["p"],
        properties={"delta.enableChangeDataFeed": "true"},
    )
    table = DeltaTable.forPath(spark, str(path))
    result = table.delete("id = 1")
    assert result.metrics["numAddedChangeFiles"] == 1
    commit = [json.loads(line) for line in (path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    (cdc,) = [a["cdc"] for a in commit if "cdc" in a]
    assert cdc["path"].startswith("_change_data/") and cdc["partitionValues"] == {"p": "a"}
    changes = table.changes(startingVersion=1).select("id", "p", "_change_type", "_commit_version").collect()
    assert [tuple(r) for r in changes] == [(1, "a", "delete", 1)]
    import pyarrow as pa

    theirs = pa.table(deltalake.DeltaTable(str(path)).load_cdf(starting_version=1).read_all()).to_pylist()
    assert [(r["id"], r["p"], r["_change_type"]) for r in theirs] == [(1, "a", "delete")]
    table.delete("p = 'b'")  # whole files: the feed comes from the remove actions
    changes = table.changes(startingVersion=2).select("id", "_change_type").collect()
    assert [tuple(r) for r in changes] == [(3, "delete")]
    check_table(path)


def test_merge_schema_and_overwrite_schema(spark, tmp_path):
    path = tmp_path / "t"
    write(spark.createDataFrame([(1, "a")], "id long, p string"), str(path), partitionBy=["p"])
    wider = spark.createDataFrame([(2, "b", 2.5)], "id long, p string, score double")
    with pytest.raises(InvalidArgumentError, match="mergeSchema=True"):
        write(wider, str(path))
    write(wider, str(path), mergeSchema=True)
    table = DeltaTable.forPath(spark, str(path))
    assert table.snapshot().schema.fieldNames() == ["id", "p", "score"]
    assert _rows_of(table.toDF()) == [(1, "a", None), (2, "b", 2.5)] == _delta_rs_rows(path)
    with pytest.raises(InvalidArgumentError, match="cannot change column `score`"):
        write(
            spark.createDataFrame([(3, "c", "x")], "id long, p string, score string"),
            str(path),
            mergeSchema=True,
        )
    replaced = spark.createDataFrame([("x", 1)], "name string, n int")
    with pytest.raises(InvalidArgumentError, match="overwriteSchema needs"):
        write(replaced, str(path), overwriteSchema=True)
    write(replaced, str(path), mode="overwrite", overwriteSchema=True, partitionBy=["n"])
    snapshot = table.snapshot()
    assert snapshot.schema.fieldNames() == ["name", "n"] and snapshot.partitionColumns == ["n"]
    assert _rows_of(table.toDF()) == [("x", 1)] == _delta_rs_rows(path)
    check_table(path)


def test_convert_to_delta(spark, tmp_path):
    path = tmp_path / "my table"  # a space: file URIs are encoded, the root is not
    rows = [(1, "x y", dt.date(2024, 1, 1)), (2, "z", dt.date(2024, 1, 2)), (3, None, dt.date(2024, 1, 2))]
    df = spark.createDataFrame(rows, "id long, s string, day date")
    df.write.partitionBy("day").parquet(str(path))
    with pytest.raises(InvalidArgumentError, match="partition schema"):
        DeltaTable.convertToDelta(spark, f"parquet.`{path}`")
    assert not (path / "_delta_log").exists() or not list((path / "_delta_log").glob("*.json"))
    table = DeltaTable.convertToDelta(spark, f"parquet.`{path}`", "day DATE")
    snapshot = table.snapshot()
    assert snapshot.version == 0 and snapshot.partitionColumns == ["day"]
    assert _rows_of(table.toDF().select("id", "s", "day")) == _sorted(rows)
    assert _rows_of(spark.createDataFrame(_delta_rs_rows(path), "id long, s string, day date")) == _sorted(
        rows
    )
    files = snapshot.files().select("partitionValues", "stats_parsed.numRecords").collect()
    assert sum(r[1] for r in files) == 3 and {r[0]["day"] for r in files} == {
        "2024-01-01",
        "2024-01-02",
    }
    assert [r["operation"] for r in table.history().collect()] == ["CONVERT"]
    assert DeltaTable.convertToDelta(spark, f"parquet.`{path}`").snapshot().version == 0  # already Delta
    check_table(path)


def test_convert_unpartitioned_pyarrow_files(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t"
    path.mkdir()
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), path / "one.parquet")
    pq.write_table(pa.table({"a": [3], "c": [1.5]}), path / "two.parquet")  # schemas are merged
    table = DeltaTable.convertToDelta(spark, str(path))
    assert table.snapshot().schema.fieldNames() == ["a", "b", "c"]
    assert _rows_of(table.toDF()) == [(1, "x", None), (2, "y", None), (3, None, 1.5)] == _delta_rs_rows(path)


def test_enabling_row_tracking_backfills_row_ids(spark, tmp_path):
    path = tmp_path / "t"
    write(spark.range(0, 3).coalesce(1), str(path))
    write(spark.range(3, 5).coalesce(1), str(path))
    table = DeltaTable.forPath(spark, str(path))
    stale = table.snapshot()
    result = table.setProperties({"delta.enableRowTracking": "true"})
    snapshot = table.snapshot()
    assert "rowTracking" in snapshot.protocol.writerFeatures
    assert snapshot.configuration["delta.rowTracking.materializedRowIdColumnName"].startswith("_row-id-col-")
    files = (
        snapshot.files().select("baseRowId", "defaultRowCommitVersion", "stats_parsed.numRecords").collect()
    )
    # The files take consecutive ranges from 0; the protocol leaves their order to the writer.
    assert sorted((r["baseRowId"], r["numRecords"]) for r in files) in ([(0, 3), (3, 2)], [(0, 2), (2, 3)])
    assert {r["defaultRowCommitVersion"] for r in files} == {result.version}
    ids = table.toDF(rowTracking=True).select("id", "_metadata.row_id").collect()
    assert sorted(r["row_id"] for r in ids) == [0, 1, 2, 3, 4] and snapshot.rowIdHighWaterMark == 4
    assert _rows_of(table.toDF()) == [(i,) for i in range(5)] == _delta_rs_rows(path)
    check_table(path)
    # A transaction that read the table before the backfill and appends now must not land files
    # without row ids in it: it conflicts.
    from deltaspark.errors import MetadataChangedError
    from deltaspark.operations.write import write as write_with_snapshot
    from deltaspark.storage import storage_for

    with pytest.raises(MetadataChangedError):
        write_with_snapshot(spark, storage_for(spark), str(path), stale, spark.range(9, 10))


def test_a_backfill_racing_an_append_conflicts(spark, tmp_path):
    from deltaspark.errors import ConcurrentAppendError
    from deltaspark.operations.table_changes import set_properties
    from deltaspark.storage import storage_for

    path = tmp_path / "t"
    write(spark.range(0, 2), str(path))
    table = DeltaTable.forPath(spark, str(path))
    stale = table.snapshot()
    write(spark.range(2, 3), str(path))  # lands first, without row ids
    with pytest.raises(ConcurrentAppendError):
        set_properties(spark, storage_for(spark), str(path), stale, {"delta.enableRowTracking": "true"})
    assert "delta.enableRowTracking" not in table.snapshot().configuration


def test_checks_raised_inside_the_write_count_rows_and_commit_nothing(spark, tmp_path):
    path = str(tmp_path / "t")
    table = (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("id", "BIGINT", nullable=False)
        .addColumn("v", "INT")
        .property("delta.constraints.small", "v < 100")
        .execute()
    )
    write(spark.range(1000).selectExpr("id", "cast(id % 50 as int) as v").repartition(4), path)
    bad = spark.range(1000).selectExpr("id", "cast(id % 120 as int) as v").repartition(4)
    with pytest.raises(InvariantViolationError, match=r"CHECK constraint small \(v < 100\): 160 row\(s\)"):
        write(bad, path)  # ids with id % 120 >= 100: 8 x 20, in several tasks
    assert table.snapshot().version == 1 and table.toDF().count() == 1000
    # Rows a join drops are not checked (the rule is evaluated on what is written, not pushed below
    # the join onto its inputs): odd ids break the constraint, and only even ids are joined.
    left = spark.range(100).selectExpr("id", "cast(if(id % 2 = 0, 99, 500) as int) as v")
    even = spark.range(0, 100, 2).withColumnRenamed("id", "k")
    write(left.join(even, left["id"] == even["k"]).drop("k"), path)
    assert table.snapshot().version == 2 and table.toDF().where("v = 99").count() == 50
