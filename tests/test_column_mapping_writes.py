"""Writing rows to column-mapped tables: physical names and parquet field ids in the data files,
statistics and partition values keyed by physical names, new columns given ids.

Each table is read by deltaspark, delta-rs's DataFusion reader (its pyarrow path refuses column
mapping) and the tests' plain-Python reader (`reference_rows`, which resolves by physical name or
field id on its own).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from deltaspark import DeltaTable
from deltaspark.table import write
from tests.reference_rows import normalized_rows, reference_rows
from tests.writer_rules import check_commit, check_table

deltalake = pytest.importorskip("deltalake")


def _delta_rs_rows(path: Path) -> list[tuple]:
    import pyarrow as pa
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", deltalake.DeltaTable(str(path))).execute("SELECT * FROM t")
    return normalized_rows(pa.table(result.read_all()).to_pylist())


def _ours(table: DeltaTable) -> list[tuple]:
    return normalized_rows([r.asDict(recursive=True) for r in table.toDF().collect()])


def _actions(path: Path, version: int, kind: str) -> list[dict]:
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [a[kind] for a in map(json.loads, lines) if kind in a]


@pytest.mark.parametrize("mode", ["name", "id"])
def test_rows_written_under_physical_names_and_field_ids(spark, tmp_path, mode):
    path = tmp_path / "t"
    schema = "id long, s string, st struct<d: double, t: string>, arr array<struct<z: int>>, p string"
    rows = [(1, "a", (1.5, "x"), [(1,)], "p1"), (2, None, None, [], "p2")]
    write(
        spark.createDataFrame(rows, schema),
        str(path),
        partitionBy=["p"],
        properties={"delta.columnMapping.mode": mode},
    )
    table = DeltaTable.forPath(spark, str(path))
    fields = {f.name: f for f in table.snapshot().schema.fields}
    physical = {name: f.metadata["delta.columnMapping.physicalName"] for name, f in fields.items()}
    assert all(p.startswith("col-") for p in physical.values())

    adds = _actions(path, 0, "add")
    assert {tuple(a["partitionValues"]) for a in adds} == {(physical["p"],)}
    stats = json.loads(next(a for a in adds if a["partitionValues"][physical["p"]] == "p1")["stats"])
    nested = fields["st"].dataType.fields[0].metadata["delta.columnMapping.physicalName"]
    assert stats["minValues"][physical["id"]] == 1 and stats["minValues"][physical["st"]][nested] == 1.5
    file_schema = pq.read_schema(path / adds[0]["path"])
    assert physical["id"] in file_schema.names and "id" not in file_schema.names
    field_id = int(file_schema.field(physical["id"]).metadata[b"PARQUET:field_id"])
    assert field_id == fields["id"].metadata["delta.columnMapping.id"]

    write(spark.createDataFrame([(3, "p3", 9)], "id long, p string, extra int"), str(path), mergeSchema=True)
    snapshot = table.snapshot()
    extra = snapshot.schema["extra"].metadata
    assert extra["delta.columnMapping.id"] == int(snapshot.configuration["delta.columnMapping.maxColumnId"])
    assert extra["delta.columnMapping.physicalName"].startswith("col-")
    assert [r["path"] for r in snapshot.files("id = 3").collect()] == [_actions(path, 1, "add")[0]["path"]]

    expected = normalized_rows(
        [
            {"id": 1, "s": "a", "st": {"d": 1.5, "t": "x"}, "arr": [{"z": 1}], "p": "p1", "extra": None},
            {"id": 2, "s": None, "st": None, "arr": [], "p": "p2", "extra": None},
            {"id": 3, "s": None, "st": None, "arr": None, "p": "p3", "extra": 9},
        ]
    )
    assert _ours(table) == expected == _delta_rs_rows(path) == normalized_rows(reference_rows(str(path)))

    table.delete("id = 1")  # copy-on-write: the rewritten file keeps physical names
    assert _ours(table) == expected[1:] == normalized_rows(reference_rows(str(path)))
    check_table(path)


@pytest.mark.parametrize("name", ["column-mapping-id", "data-reader-partition-values-column-mapping-name"])
def test_appending_to_a_delta_spark_column_mapped_table(spark, tmp_path, conformance, name):
    path = tmp_path / "t"
    shutil.copytree(conformance / name, path)
    table = DeltaTable.forPath(spark, str(path))
    before = table.toDF()
    rows = _ours(table)
    result = write(before, str(path))  # the table's own rows, appended again
    assert check_commit(path, result.version) == []
    doubled = sorted(rows + rows, key=repr)
    assert _ours(table) == doubled == normalized_rows(reference_rows(str(path)))


def test_change_data_of_a_delete_on_a_column_mapped_table(spark, tmp_path, conformance):
    path = tmp_path / "t"
    shutil.copytree(conformance / "cdf-column-mapping-name-mode", path)
    table = DeltaTable.forPath(spark, str(path))
    some_id = min(r["id"] for r in table.toDF().collect())
    result = table.delete(f"id = {some_id}")
    (cdc,) = _actions(path, result.version, "cdc")
    physical = table.snapshot().schema["id"].metadata["delta.columnMapping.physicalName"]
    assert physical in pq.read_schema(path / cdc["path"]).names  # change files use physical names too
    changes = table.changes(startingVersion=result.version).select("id", "_change_type").collect()
    assert [tuple(r) for r in changes] == [(some_id, "delete")]
