"""Schema evolution on write: nested fields added by `mergeSchema`, fields matched by name at any
depth, and automatic type widening recorded in `delta.typeChanges`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.errors import InvalidArgumentError
from deltaspark.table import write
from tests.reference_rows import normalized_rows, reference_rows
from tests.writer_rules import check_table

deltalake = pytest.importorskip("deltalake")

SCHEMA = "id long, s struct<a: int, b: string>, arr array<struct<x: int>>, m map<string, struct<v: int>>"


def _rows(table: DeltaTable) -> list[tuple]:
    return normalized_rows([r.asDict(recursive=True) for r in table.toDF().collect()])


def _delta_rs(path: Path) -> list[tuple]:
    return normalized_rows(deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def _schema_json(path: Path, version: int) -> dict:
    for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        if '"metaData"' in line:
            return json.loads(json.loads(line)["metaData"]["schemaString"])
    raise AssertionError(f"no metaData in version {version}")


def test_nested_fields_are_added_and_matched_by_name(spark, tmp_path):
    path = tmp_path / "t"
    write(spark.createDataFrame([(1, (1, "one"), [(1,)], {"k": (1,)})], SCHEMA), str(path))
    table = DeltaTable.forPath(spark, str(path))

    # Same fields, another order: values must land by name (Spark's struct cast is positional).
    reordered = SCHEMA.replace("struct<a: int, b: string>", "struct<b: string, a: int>")
    write(spark.createDataFrame([(2, ("two", 2), [], {})], reordered), str(path))

    wider = (
        "id long, s struct<b: string, c: double, a: int>, arr array<struct<x: int, y: string>>, "
        "m map<string, struct<v: int, w: boolean>>"
    )
    new_rows = spark.createDataFrame([(3, ("three", 3.5, 3), [(3, "y")], {"k": (3, True)})], wider)
    with pytest.raises(InvalidArgumentError, match=r"`s` has field\(s\) c"):
        write(new_rows, str(path))
    write(new_rows, str(path), mergeSchema=True)
    fields = {f["name"]: f["type"] for f in _schema_json(path, 2)["fields"]}
    assert [f["name"] for f in fields["s"]["fields"]] == ["a", "b", "c"]  # the table's order, new ones last
    assert [f["name"] for f in fields["arr"]["elementType"]["fields"]] == ["x", "y"]
    assert [f["name"] for f in fields["m"]["valueType"]["fields"]] == ["v", "w"]

    expected = normalized_rows(
        [
            {"id": 1, "s": {"a": 1, "b": "one", "c": None}, "arr": [{"x": 1, "y": None}],
             "m": {"k": {"v": 1, "w": None}}},
            {"id": 2, "s": {"a": 2, "b": "two", "c": None}, "arr": [], "m": {}},
            {"id": 3, "s": {"a": 3, "b": "three", "c": 3.5}, "arr": [{"x": 3, "y": "y"}],
             "m": {"k": {"v": 3, "w": True}}},
        ]
    )  # fmt: skip
    assert _rows(table) == expected == _delta_rs(path) == normalized_rows(reference_rows(str(path)))
    check_table(path)


def test_type_widening_by_schema_evolution_is_recorded(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.createDataFrame([(1, [1])], "n int, arr array<int>"),
        str(path),
        properties={"delta.enableTypeWidening": "true"},
    )
    table = DeltaTable.forPath(spark, str(path))
    big = spark.createDataFrame([(2**40, [2**41])], "n long, arr array<long>")
    with pytest.raises(InvalidArgumentError, match="cannot convert|does not convert"):
        write(big, str(path))  # without mergeSchema a wider type is refused
    write(big, str(path), mergeSchema=True)
    fields = {f["name"]: f for f in _schema_json(path, 1)["fields"]}
    assert fields["n"]["type"] == "long"
    assert fields["n"]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert fields["arr"]["type"]["elementType"] == "long"
    assert fields["arr"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    assert "typeWidening" in table.snapshot().protocol.readerFeatures
    expected = normalized_rows([{"n": 1, "arr": [1]}, {"n": 2**40, "arr": [2**41]}])
    assert _rows(table) == expected == normalized_rows(reference_rows(str(path)))
    write(spark.createDataFrame([(5, [6])], "n int, arr array<int>"), str(path))  # narrower: cast, no change
    assert len(_schema_json(path, 1)["fields"]) == 2 and table.snapshot().version == 2
    check_table(path)


def test_widening_needs_the_table_to_allow_it(spark, tmp_path):
    path = tmp_path / "t"
    write(spark.createDataFrame([(1,)], "n int"), str(path))
    with pytest.raises(InvalidArgumentError, match="delta.enableTypeWidening=true"):
        write(spark.createDataFrame([(2,)], "n long"), str(path), mergeSchema=True)
    with pytest.raises(InvalidArgumentError, match="cannot change column `n`"):
        write(spark.createDataFrame([("x",)], "n string"), str(path), mergeSchema=True)
    assert DeltaTable.forPath(spark, str(path)).snapshot().version == 0
