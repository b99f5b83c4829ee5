"""Partition pruning and data skipping: files are skipped, and results never change."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable
from tests.log_builder import metadata, protocol, write_parquet

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "region", "type": "string", "nullable": True, "metadata": {}},
    ],
}


@pytest.fixture
def table(spark, log):
    """Three partitions, four files with known stats (one with nulls, one with wide bounds)."""
    files = [
        ("eu", [1, 2, 3], ["ann", "bob", None]),
        ("eu", [10, 11, 12], ["cat", "dan", "eve"]),
        ("us", [20, 21, 22], [None, None, None]),
        ("apac", [30, 31, 32], ["x" * 40, "y" * 40, "z" * 40]),  # long strings: stats are truncated
    ]
    adds = []
    for i, (region, ids, names) in enumerate(files):
        data = pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())})
        action = write_parquet(log.root, f"region={region}/f{i}.parquet", data)
        action["add"]["partitionValues"] = {"region": region}
        adds.append(action)
    stats = adds[3]["add"]["stats"]
    adds[3]["add"]["stats"] = stats.replace("z" * 40, "z" * 32).replace(
        "x" * 40, "x" * 32
    )  # as writers truncate
    log.commit(0, protocol(), metadata(SCHEMA, ["region"]), *adds)
    return DeltaTable.forPath(spark, log.path)


FILTERS = {
    "region = 'eu'": 2,
    "region = 'eu' AND id > 10": 1,
    "id > 15": 2,
    "id = 11 OR region = 'us'": 2,
    "NOT (id < 20)": 2,
    "id IN (2, 31)": 2,
    "id BETWEEN 3 AND 10": 2,
    "name IS NULL": 2,  # f0 (one null) and f2 (all null)
    "name IS NOT NULL": 3,  # f2 holds only nulls
    "name = 'bob'": 1,  # f2 has no non-null values, f3's minimum is above 'bob'
    "name > 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz'": 1,  # f3's max is a truncated prefix: keep it
    "region IN ('apac', 'us') AND name IS NULL": 1,
    "upper(name) = 'BOB'": 4,  # not understood: nothing pruned
    "id > 100": 0,
}


# The filters are SQL text, parsed and turned into the keep-Column the same way on both Spark
# versions; the 3.5 suite runs one of each kind (partition, stats, NULLs, truncated strings, opaque).
ON_SPARK_35 = {
    "region = 'eu' AND id > 10",
    "NOT (id < 20)",
    "name IS NULL",
    "name > 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz'",
    "upper(name) = 'BOB'",
}


@pytest.mark.parametrize(
    "condition",
    [c if c in ON_SPARK_35 else pytest.param(c, marks=pytest.mark.one_suite("4.x")) for c in FILTERS],
)
def test_files_are_pruned_and_rows_unchanged(table, condition):
    snapshot = table.snapshot()
    assert snapshot.files(condition).count() == FILTERS[condition]
    expected = sorted(map(tuple, snapshot.toDF().where(condition).collect()))
    assert sorted(map(tuple, snapshot.toDF(condition).collect())) == expected


@pytest.mark.connect
def test_column_filters_prune_like_sql(table):
    snapshot = table.snapshot()
    condition = (F.col("region") == "eu") & (F.col("id") >= 11)
    assert snapshot.files(condition).count() == 1
    assert sorted(r["id"] for r in snapshot.toDF(condition).collect()) == [11, 12]
    assert snapshot.files(F.col("id").isin(1, 30)).count() == 2
    assert snapshot.files(~F.col("name").isNull()).count() == 3


def test_wide_bounds_only_trust_null_counts_of_zero_or_all(spark, log):
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", None, "c"])})
    wide = write_parquet(log.root, "wide.parquet", data)
    # After a DV, bounds are "wide": nullCount=1 of 3 carries no information beyond "not 0, not all".
    wide["add"]["stats"] = (
        '{"numRecords":3,"tightBounds":false,"minValues":{"id":1,"name":"a"},'
        '"maxValues":{"id":3,"name":"c"},"nullCount":{"id":0,"name":1}}'
    )
    none = write_parquet(log.root, "none.parquet", data.slice(0, 1))
    log.commit(0, protocol(), metadata(SCHEMA), wide, none)
    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    assert snapshot.files("name IS NULL").count() == 1  # none.parquet has nullCount 0
    assert snapshot.files("id IS NULL").count() == 0
    assert snapshot.files("name IS NOT NULL").count() == 2


def test_truncated_timestamp_maxima_keep_their_files(spark, conformance):
    snapshot = DeltaTable.forPath(spark, str(conformance / "timestamp-truncation-stats")).snapshot()
    # 00:00:04.0005 lives in a file whose max statistic was truncated to 00:00:04.000
    condition = "ts_col = TIMESTAMP '1970-01-01 00:00:04.0005'"
    assert snapshot.files(condition).count() == 1
    assert [r["id"] for r in snapshot.toDF(condition).collect()] == [4]
    assert snapshot.files("ts_col > TIMESTAMP '1970-01-01 00:00:05'").count() == 1


def test_a_double_that_was_a_float_reads_older_bounds_as_float32(spark, conformance):
    """type-widening's first file was written while `float_double` was a float: its statistics say
    3.4, the file holds the float32 3.4000000953674316 (a double now). Read as a double, 3.4 left
    that file out of `= 3.4000000953674316` and `>=`: rows silently missing."""
    snapshot = DeltaTable.forPath(spark, str(conformance / "type-widening")).snapshot()
    for condition in ("float_double = 3.4000000953674316D", "float_double >= 3.4000000953674316D"):
        assert snapshot.files(condition).count() == 1
        assert snapshot.toDF(condition).count() == 1
    assert snapshot.files("float_double > 3.5D").count() == 0  # the bounds still prune


def test_files_without_stats_are_kept(spark, log):
    data = pa.table({"id": pa.array([1], pa.int64())})
    action = write_parquet(log.root, "a.parquet", data)
    del action["add"]["stats"]
    log.commit(0, protocol(), metadata(SCHEMA), action)
    assert DeltaTable.forPath(spark, log.path).snapshot().files("id > 5").count() == 1


def test_stats_from_checkpoint_struct_prune_too(spark, conformance):
    # v1-single-part-struct-stats-only keeps stats only as the checkpoint's stats_parsed struct
    snapshot = DeltaTable.forPath(spark, str(conformance / "v1-single-part-struct-stats-only")).snapshot()
    assert snapshot.files().where("stats is null or stats_parsed.numRecords is not null").count() == 5
    lowest = snapshot.files().agg(F.min("stats_parsed.minValues.id")).first()[0]
    assert snapshot.files(f"id < {lowest}").count() == 0


def test_columns_without_min_max_stats_are_not_used_for_ranges(spark, log):
    schema = {
        "type": "struct",
        "fields": [
            {"name": "flag", "type": "boolean", "nullable": True, "metadata": {}},
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    data = pa.table({"flag": pa.array([True, None]), "tags": pa.array([["a"], None], pa.list_(pa.string()))})
    action = write_parquet(log.root, "a.parquet", data)
    log.commit(0, protocol(), metadata(schema), action)
    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    assert snapshot.files("flag = true").count() == 1  # booleans have no min/max: keep
    assert snapshot.files("flag IS NULL").count() == 1  # but nullCount (1 of 2) is known
    assert snapshot.files("tags IS NULL").count() == 1
    assert [r["flag"] for r in snapshot.toDF("flag = true").collect()] == [True]
