"""Iceberg pruning: a filter skips manifests and data files by the manifest list's partition
summaries, partition values and column bounds, and never changes the rows it returns.

The rows of `toDF(filter)` are compared with the unpruned rows filtered by Spark, over filters
built from each table's own values (equal to, below and above a middle value, NULL tests) on the
partition source columns and on columns with bounds. Pruning must also happen: in each table a NULL
test prunes a file, and for three tables the files (or manifests) kept equal those derived by hand
from their manifest entries."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
from typing import Any

import pytest
from pyspark.sql import functions as F

from deltaspark import IcebergTable
from deltaspark.iceberg.pruning import source_range
from deltaspark.iceberg.types import from_bytes
from tests.iceberg_conformance import tables

# table -> columns to filter on (None: partition sources first, then other comparable columns)
SWEEP = {
    "impala-iceberg_partitioned": ["action", "event_time"],  # identity, hour
    "duckdb-partition_timestamp_year": None,  # year
    "duckdb-map_stats": None,  # day
    "impala-iceberg_timestamptz_part": None,  # hour on timestamptz
    "impala-iceberg_legacy_partition_schema_evolution": None,  # int -> long, float -> double bounds
    "duckdb-equality_deletes_partitioned": None,  # identity, equality deletes
    "impala-iceberg_v2_partitioned_position_deletes": None,  # identity, position deletes
    "impala-iceberg_v3_deletion_vectors": None,  # metrics only, deletion vectors
    "duckdb-partition_decimal_hugeint": None,  # decimal(38) identity only in metadata
}
# CI reads these (identity, hour, promoted bounds, equality deletes); all with the variable set
CI_SUBSET = {
    "impala-iceberg_partitioned",
    "impala-iceberg_legacy_partition_schema_evolution",
    "duckdb-equality_deletes_partitioned",
}
ALL = os.environ.get("DELTASPARK_ICEBERG_ALL_TABLES", "") == "1"


def _table(spark: Any, name: str) -> IcebergTable:
    info = next(t for t in tables() if t.name == name)
    return IcebergTable.forPath(spark, str(info.path), info.entry_metadata, info.relocate())


def _columns(table: IcebergTable, chosen: list[str] | None) -> list[str]:
    if chosen:
        return chosen
    schema = table.schema()
    comparable = [
        f.name
        for f in schema.fields
        if f.dataType.typeName()
        in ("integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string")
        or f.dataType.typeName().startswith("decimal")
    ]
    sources = {f.source_id for fields in table.metadata.specs.values() for f in fields}
    by_id = {int(f.metadata.get("parquet.field.id", -1)): f.name for f in schema.fields}
    first = [by_id[i] for i in sorted(sources) if by_id.get(i) in comparable]
    return list(dict.fromkeys(first + comparable))[:2]


def _key(row: Any) -> str:
    return repr(sorted(row.asDict(recursive=True).items(), key=lambda kv: kv[0]))


def _sql_literal(value: Any, type_name: str) -> str | None:
    """A SQL literal of `value` (filters given as SQL text are the ones file pruning reads fully)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, decimal.Decimal)):
        return str(value)
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMP_NTZ" if type_name == "timestamp_ntz" else "TIMESTAMP"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return None


def _filters(full: Any, column: str) -> list[str]:
    """NULL tests, and comparisons with a middle value of the column."""
    type_name = full.schema[column].dataType.typeName()
    rows = full.select(column).where(F.col(column).isNotNull()).distinct().collect()
    literals = [(r[0], _sql_literal(r[0], type_name)) for r in rows]
    values = sorted(value for value, text in literals if text is not None)
    quoted = f"`{column}`"
    out = [f"{quoted} IS NULL"]
    if values:
        middle = _sql_literal(values[len(values) // 2], type_name)
        out += [f"{quoted} = {middle}", f"{quoted} < {middle}", f"{quoted} >= {middle}"]
    return out


@pytest.mark.one_suite("4.x")
@pytest.mark.parametrize("name", sorted(SWEEP))
def test_pruned_rows_equal_filtered_rows(spark, name):
    if name not in CI_SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_ICEBERG_ALL_TABLES=1 reads every table")
    table = _table(spark, name)
    full = table.toDF().cache()
    live = len(_data_files(table.snapshot().files()))
    fewest = live
    try:
        for column in _columns(table, SWEEP[name]):
            for condition in _filters(full, column):
                got = sorted(_key(r) for r in table.toDF(condition).collect())
                expected = sorted(_key(r) for r in full.where(condition).collect())
                assert got == expected, f"{name}: {condition}"
                if condition.endswith("IS NULL"):
                    fewest = min(fewest, len(_data_files(table.snapshot().files(condition))))
    finally:
        full.unpersist()
    assert fewest < live, f"{name}: no NULL test pruned a file"


def _data_files(df: Any) -> set[str]:
    return {r.file_path for r in df.where("content = 0").select("file_path").collect()}


def test_identity_and_hour_partitions_prune_files(spark):
    """impala-iceberg_partitioned: 20 rows in files partitioned by hour(event_time) and
    identity(action); each file's partition is checked here from its own manifest entry."""
    table = _table(spark, "impala-iceberg_partitioned")
    files = table.snapshot().files().collect()
    data = [f for f in files if f.content == 0]
    spec = table.metadata.specs[data[0].spec_id]
    action = next(f for f in spec if f.transform == "identity")
    import json

    clicks = {f.file_path for f in data if json.loads(f.partition)[str(action.field_id)] == "click"}
    assert 0 < len(clicks) < len(data)
    assert _data_files(table.snapshot().files("action = 'click'")) == clicks
    assert _data_files(table.snapshot().files(F.col("action") == "click")) == clicks
    hour = next(f for f in spec if f.transform == "hour")
    hours = sorted({json.loads(f.partition)[str(hour.field_id)] for f in data})
    start, _ = source_range("hour", hours[-1], "timestamptz")
    late = {f.file_path for f in data if json.loads(f.partition)[str(hour.field_id)] == hours[-1]}
    condition = f"event_time >= TIMESTAMP '{start.replace(tzinfo=None).isoformat(sep=' ')}'"
    assert _data_files(table.snapshot().files(condition)) == late
    assert table.toDF(condition).count() == table.toDF().where(condition).count() == 6


def test_column_bounds_prune_files_and_nan_keeps_them(spark):
    """Column metrics prune an unpartitioned table; a file that may hold NaN is kept for `>`."""
    table = _table(spark, "impala-iceberg_v3_deletion_vectors")
    entries = [f for f in table.snapshot().files().collect() if f.content == 0]
    schema = table.metadata.schema_for(None)
    field = next(f for f in schema["fields"] if f["type"] in ("int", "long"))
    fid = int(field["id"])
    uppers = {f.file_path: from_bytes(dict(f.upper_bounds)[fid], field["type"]) for f in entries}
    lowers = {f.file_path: from_bytes(dict(f.lower_bounds)[fid], field["type"]) for f in entries}
    cut = max(lowers.values())
    expected = {path for path, high in uppers.items() if high >= cut}
    assert 0 < len(expected) < len(entries), "the table's files must overlap the cut partially"
    got = _data_files(table.snapshot().files(F.col(field["name"]) >= cut))  # an int literal: read
    assert got == expected


def test_source_range_of_transforms():
    assert source_range("identity", 5, "int") == (5, 5)
    assert source_range("identity", float("nan"), "double") == (None, None)
    assert source_range("year", 1, "date") == (dt.date(1971, 1, 1), dt.date(1971, 12, 31))
    assert source_range("month", -1, "date") == (dt.date(1969, 12, 1), dt.date(1969, 12, 31))
    assert source_range("day", 1, "timestamp") == (
        dt.datetime(1970, 1, 2),
        dt.datetime(1970, 1, 2, 23, 59, 59, 999999),
    )
    utc = dt.timezone.utc
    assert source_range("hour", -1, "timestamptz") == (
        dt.datetime(1969, 12, 31, 23, tzinfo=utc),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
    )
    assert source_range("hour", 1, "date") == (None, None)
    assert source_range("truncate[10]", -20, "long") == (-20, -11)
    assert source_range("truncate[10]", decimal.Decimal("1.20"), "decimal(9,2)") == (
        decimal.Decimal("1.20"),
        decimal.Decimal("1.29"),
    )
    assert source_range("truncate[2]", "ab", "string") == ("ab", None)
    assert source_range("bucket[4]", 1, "int") == (None, None)
    assert source_range("year", 10**6, "date") == (None, None)  # beyond Python's dates: unknown


def test_binary_bounds_decode_promoted_types():
    import struct

    assert from_bytes(struct.pack("<i", -7), "long") == -7  # written as int, read as long
    assert from_bytes(struct.pack("<f", 0.5), "double") == 0.5  # written as float
    assert from_bytes(struct.pack("<i", 1), "timestamp") == dt.datetime(1970, 1, 2)  # from date
    assert from_bytes((-12345).to_bytes(3, "big", signed=True), "decimal(9,2)") == decimal.Decimal("-123.45")
    assert from_bytes(b"\xff\xfe", "string") is None  # not UTF-8: no bound
    assert from_bytes(b"\x00" * 3, "int") is None  # wrong length: no bound
    assert from_bytes(b"x", "boolean") is None  # booleans are not pruned by bounds


def test_manifests_pruned_by_partition_summaries(spark):
    """duckdb-equality_deletes_partitioned: data manifests whose partition summary range excludes
    the value are not decoded; delete manifests are all kept."""
    from deltaspark.iceberg.pruning import Pruner
    from deltaspark.read.predicates import parse_sql

    table = _table(spark, "duckdb-equality_deletes_partitioned")
    snapshot = table.snapshot()
    spec = table.metadata.specs[0]
    (field,) = spec
    schema = table.metadata.schema_for(None)
    source = next(f for f in schema["fields"] if int(f["id"]) == field.source_id)
    listed = snapshot.manifests().collect()
    data = [m for m in listed if m.content == 0]
    lows = sorted(from_bytes(m.partitions[0].lower_bound, source["type"]) for m in data)
    value = lows[0]
    expected = {
        m.manifest_path
        for m in listed
        if m.content != 0
        or from_bytes(m.partitions[0].lower_bound, source["type"])
        <= value
        <= from_bytes(m.partitions[0].upper_bound, source["type"])
    }
    assert len(expected) < len(listed), "some data manifest must lie outside the value"
    pruner = Pruner(table.metadata, schema, parse_sql(f"{source['name']} = '{value}'"))
    kept = {r.manifest_path for r in pruner.manifests(snapshot.manifests()).collect()}
    assert kept == expected
