"""UPDATE: copy-on-write and merge-on-read (deletion vectors), checked against a plain Spark oracle
(the rows before, with the assignments applied by `CASE WHEN`), against delta-rs's reader (its
DataFusion engine applies deletion vectors) and against the protocol's writer rules
(`writer_rules.check_table`) at every version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.errors import AppendOnlyTableError, InvalidArgumentError, InvariantViolationError
from deltaspark.table import write
from tests.writer_rules import check_table

deltalake = pytest.importorskip("deltalake")

ROWS = [(i, i * 1.5, f"n{i}", i % 3) for i in range(30)]
SCHEMA = "id long, amount double, name string, part int"


def _rows(table: DeltaTable, version: int | None = None) -> list[tuple]:
    frame = table.snapshot(version=version).toDF()
    return sorted(tuple(r) for r in frame.select("id", "amount", "name", "part").collect())


def _delta_rs_rows(path: Path) -> list[tuple]:
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = deltalake.DeltaTable(str(path))
    query = "SELECT id, amount, name, part FROM t"
    result = pa.table(QueryBuilder().register("t", table).execute(query).read_all()).to_pylist()
    return sorted((r["id"], r["amount"], r["name"], r["part"]) for r in result)


def _oracle(spark, before: list[tuple], condition: str, assignments: dict[str, str]) -> list[tuple]:
    frame = spark.createDataFrame(before, SCHEMA)
    columns = [
        f"CASE WHEN coalesce({condition}, false) THEN {assignments[c]} ELSE {c} END AS {c}"
        if c in assignments
        else c
        for c in ("id", "amount", "name", "part")
    ]
    return sorted(tuple(r) for r in frame.selectExpr(*columns).collect())


def _commit(path: Path, version: int) -> list[dict]:
    return [
        json.loads(line) for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    ]


@pytest.mark.one_suite("4.x")  # the 3.5 suite updates both ways in the tests below
@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_update_matches_a_spark_oracle_and_delta_rs(spark, tmp_path, dvs):
    path = tmp_path / "t"
    properties = {"delta.enableDeletionVectors": "true"} if dvs else {}
    write(
        spark.createDataFrame(ROWS, SCHEMA).repartition(2, "part"),
        str(path),
        partitionBy=["part"],
        properties=properties,
    )
    table = DeltaTable.forPath(spark, str(path))
    files_before = {r["path"] for r in table.snapshot().files().collect()}
    steps = [
        ("id % 7 = 0 AND part = 1", {"amount": "amount * 10", "name": "upper(name)"}),
        ("id = 3", {"part": "2"}),  # moves a row to another partition
        ("name IS NULL OR id > 27", {"name": "NULL"}),  # NULL conditions leave rows alone
    ]
    for step, (condition, assignments) in enumerate(steps):
        before = _rows(table)
        if not dvs:  # delta-rs updates a copy of the same version (it writes no deletion vectors)
            theirs = tmp_path / f"delta-rs-{step}"
            shutil.copytree(path, theirs)
            deltalake.DeltaTable(str(theirs)).update(updates=assignments, predicate=condition)
        result = table.update(condition, assignments)
        expected = _oracle(spark, before, condition, assignments)
        assert _rows(table) == expected
        assert _delta_rs_rows(path) == expected
        if not dvs:
            assert _delta_rs_rows(theirs) == expected
        m = result.metrics
        changed = sum(1 for a, b in zip(before, expected, strict=True) if a != b)
        assert m["numUpdatedRows"] >= changed > 0
        if dvs:
            assert m["numCopiedRows"] == 0  # merge-on-read: only the updated rows are written
            assert m["numDeletionVectorsAdded"] + m["numRemovedFiles"] >= 1
        else:
            assert m["numRemovedFiles"] >= 1 and m["numCopiedRows"] + m["numUpdatedRows"] > 0
    # The first step touched partition 1 only: the other partitions' files are untouched.
    first = _commit(path, 1)
    removed = {a["remove"]["path"] for a in first if "remove" in a}
    assert removed and all("part=1" in p for p in removed)
    assert files_before - removed >= {p for p in files_before if "part=1" not in p}
    assert table.update("id = 1000", {"name": "'x'"}) is None  # nothing matches: nothing committed
    assert table.snapshot().version == 3
    assert table.history().first()["operation"] == "UPDATE"
    check_table(path)


def test_update_without_condition_and_of_a_struct_field(spark, tmp_path):
    path = tmp_path / "t"
    rows = spark.createDataFrame(
        [(1, ("a", 1)), (2, ("b", 2)), (3, None)], "id long, s struct<k string, v int>"
    )
    write(rows.coalesce(1), str(path))
    table = DeltaTable.forPath(spark, str(path))
    result = table.update(set={"s.v": "s.v + 100"})
    assert result.metrics["numUpdatedRows"] == 3
    got = sorted((r["id"], None if r["s"] is None else tuple(r["s"])) for r in table.toDF().collect())
    assert got == [(1, ("a", 101)), (2, ("b", 102)), (3, None)]  # a field of a null struct stays null
    from pyspark.sql import functions as F

    table.update(F.col("id") == 1, {"S.K": F.lit("z")})  # names match case-insensitively
    assert table.toDF().where("id = 1").first()["s"]["k"] == "z"
    version = table.snapshot().version
    with pytest.raises(InvalidArgumentError, match=r"`s.v` in .* is out of the range of int"):
        table.update("id = 2", {"s.v": "3000000000"})  # a long that an int cannot hold: never wrapped
    with pytest.raises(InvalidArgumentError, match="out of the range of int"):
        table.update("id = 2", {"s.v": "double('NaN')"})
    table.update("id = 2", {"s.v": "7.9D", "s.k": "42"})  # ANSI store assignment: truncated, and a string
    assert tuple(table.toDF().where("id = 2").first()["s"]) == ("42", 7)
    assert table.snapshot().version == version + 1
    check_table(path)


def test_checks_generated_columns_and_refused_assignments(spark, tmp_path):
    from deltaspark.features.identity_columns import IdentityGenerator

    path = str(tmp_path / "t")
    table = (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("key", "BIGINT", generatedAlwaysAs=IdentityGenerator())
        .addColumn("amount", "DOUBLE", nullable=False)
        .addColumn("twice", "DOUBLE", generatedAlwaysAs="amount * 2")
        .property("delta.constraints.positive", "amount > 0")
        .execute()
    )
    write(spark.createDataFrame([(1.0,), (2.0,)], "amount double"), path)
    table.update("amount = 1.0", {"amount": "5.0"})
    assert sorted((r["amount"], r["twice"]) for r in table.toDF().collect()) == [(2.0, 4.0), (5.0, 10.0)]
    version = table.snapshot().version
    with pytest.raises(InvariantViolationError, match="positive"):
        table.update("amount = 2.0", {"amount": "-1.0"})
    with pytest.raises(InvariantViolationError, match="NOT NULL amount"):
        table.update(set={"amount": "NULL"})
    with pytest.raises(InvariantViolationError, match="generated column twice"):
        table.update(set={"twice": "0.0"})
    with pytest.raises(InvalidArgumentError, match="identity column GENERATED ALWAYS"):
        table.update(set={"key": "1"})
    with pytest.raises(InvalidArgumentError, match="no such column"):
        table.update(set={"nope": "1"})
    with pytest.raises(InvalidArgumentError, match="more than once"):
        table.update(set={"amount": "1.0", "AMOUNT": "2.0"})
    with pytest.raises(InvalidArgumentError, match="does not convert without loss"):
        table.update(set={"amount": "'text'"})
    with pytest.raises(InvalidArgumentError, match="update condition"):
        table.update("amount +", {"amount": "1.0"})
    assert table.snapshot().version == version  # nothing refused was committed
    check_table(Path(path))


@pytest.mark.one_suite("4.x")  # version-independent
@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_a_non_deterministic_condition_updates_each_row_once_or_leaves_it(spark, tmp_path, dvs):
    # With DVs the rows marked deleted and the rows given new values are one set, read once: when
    # each step evaluated the condition itself, rand() chose two sets (rows lost and duplicated).
    path = str(tmp_path / "t")
    properties = {"delta.enableDeletionVectors": "true"} if dvs else {}
    write(spark.range(0, 4000, 1, 2).selectExpr("id", "0 AS v"), path, properties=properties)
    DeltaTable.forPath(spark, path).update("rand() < 0.5", {"v": "v + 1"})
    rows = DeltaTable.forPath(spark, path).toDF()
    assert rows.count() == 4000 and rows.select("id").distinct().count() == 4000
    assert 0 < rows.where("v = 1").count() < 4000 and rows.where("v NOT IN (0, 1)").count() == 0
    check_table(Path(path))


def test_row_tracking_and_change_data(spark, tmp_path):
    import pyarrow as pa

    for dvs in (False, True):
        path = tmp_path / f"t{dvs}"
        properties = {"delta.enableRowTracking": "true", "delta.enableChangeDataFeed": "true"}
        if dvs:
            properties["delta.enableDeletionVectors"] = "true"
        write(
            spark.range(0, 6).selectExpr("id", "id * 10 AS v").coalesce(1), str(path), properties=properties
        )
        table = DeltaTable.forPath(spark, str(path))

        def tracked(table=table):
            frame = table.toDF(rowTracking=True).select(
                "id", "v", "_metadata.row_id", "_metadata.row_commit_version"
            )
            return {r[0]: (r[1], r[2], r[3]) for r in frame.collect()}

        before = tracked()
        result = table.update("id IN (1, 4)", {"v": "v + 1"})
        after = tracked()
        for key, (v, row_id, commit_version) in before.items():
            if key in (1, 4):
                assert after[key] == (v + 1, row_id, result.version), key  # same id, new version
            else:
                assert after[key] == (v, row_id, commit_version), key
        changes = table.changes(startingVersion=result.version).select("id", "v", "_change_type").collect()
        assert sorted(tuple(r) for r in changes) == [
            (1, 10, "update_preimage"),
            (1, 11, "update_postimage"),
            (4, 40, "update_preimage"),
            (4, 41, "update_postimage"),
        ]
        if not dvs:  # delta-rs's load_cdf reads copy-on-write change data
            theirs = pa.table(deltalake.DeltaTable(str(path)).load_cdf(starting_version=1).read_all())
            got = sorted((r["id"], r["v"], r["_change_type"]) for r in theirs.to_pylist())
            assert got == sorted(tuple(r) for r in changes)
        check_table(path)


def test_column_mapping_append_only_and_the_cli(spark, tmp_path, capsys):
    from deltaspark.cli import main as cli

    path = tmp_path / "t"
    write(
        spark.createDataFrame([(1, "a"), (2, "b")], "id long, `odd name` string").coalesce(1),
        str(path),
        properties={"delta.columnMapping.mode": "name"},
    )
    table = DeltaTable.forPath(spark, str(path))
    table.update("id = 2", {"`odd name`": "'c'"})
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(1, "a"), (2, "c")]
    assert cli(["update", str(path), "--set", "id=id + 10", "--where", "id = 1"]) == 0
    assert "(UPDATE): 1 row(s) updated" in capsys.readouterr().out
    assert sorted(r[0] for r in table.toDF().select("id").collect()) == [2, 11]
    assert cli(["update", str(path), "--set", "nonsense"]) == 2
    check_table(path)

    frozen = tmp_path / "frozen"
    write(spark.range(0, 2), str(frozen), properties={"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyTableError):
        DeltaTable.forPath(spark, str(frozen)).update(set={"id": "0"})
