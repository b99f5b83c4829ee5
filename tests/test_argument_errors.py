"""Bad arguments get deltaspark's own errors before anything is written.

Conditions, `replaceWhere`, filters, CHECK constraints and generation expressions are resolved
against the table's columns at once (`features/expressions.py`); `delta.*` properties are checked
as delta-spark's `DeltaConfigs` checks them (`features/table_properties.py`); a path that is a
file is named. Each refusal leaves the table as it was: no commit, no data file.
"""

from __future__ import annotations

import os

import pytest

import deltaspark
from deltaspark import DeltaTable, InvalidArgumentError, InvariantViolationError, StorageError
from deltaspark.features.table_properties import stats_column_names, validate_properties


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("arguments") / "t")
    deltaspark.write(spark.range(10).selectExpr("id", "id % 3 AS p", "'x' AS s"), path, partitionBy=["p"])
    return path


def _unchanged(table: str, data: bool = True):
    """A context that checks a refusal committed nothing (and, with `data`, wrote no data file:
    it came before the write)."""

    class Unchanged:
        def __enter__(self):
            self.log = sorted(os.listdir(os.path.join(table, "_delta_log")))
            self.files = sorted(os.listdir(table))
            return self

        def __exit__(self, *exc):
            assert sorted(os.listdir(os.path.join(table, "_delta_log"))) == self.log
            assert not data or sorted(os.listdir(table)) == self.files

    return Unchanged()


@pytest.mark.parametrize(
    ("condition", "says"),
    [
        ("id = = 1", "PARSE_SYNTAX_ERROR"),
        ("nosuchcol = 1", "nosuchcol"),
        ("id + 1", "of type bigint, not boolean"),
    ],
)
def test_a_bad_condition_is_named_before_anything_is_written(spark, table, condition, says):
    dt = DeltaTable.forPath(spark, table)
    calls = {
        "delete": lambda: dt.delete(condition),
        "replaceWhere": lambda: deltaspark.write(
            spark.range(1).selectExpr("id", "0 AS p", "'y' AS s"),
            table,
            mode="overwrite",
            replaceWhere=condition,
        ),
        "toDF": lambda: dt.toDF(condition),
        "files": lambda: dt.snapshot().files(condition),
    }
    for name, call in calls.items():
        with _unchanged(table), pytest.raises(InvalidArgumentError) as caught:
            call()
        message = str(caught.value)
        assert repr(condition) in message and says in message, name
        assert "columns: id, p, s" in message, name


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ({"delta.appendOnly": "maybe"}, "delta.appendOnly='maybe' needs to be a boolean"),
        (
            {"delta.checkpointInterval": "abc"},
            "delta.checkpointInterval='abc' needs to be a positive integer",
        ),
        ({"delta.checkpointInterval": "0"}, "needs to be a positive integer"),
        ({"delta.logRetentionDuration": "1 month"}, "months and years are not accepted"),
        ({"delta.deletedFileRetentionDuration": "soon"}, "needs to be a calendar interval"),
        ({"delta.dataSkippingNumIndexedCols": "-2"}, "needs to be an integer >= -1"),
        ({"delta.checkpointPolicy": "v3"}, "needs to be classic or v2"),
        ({"delta.dataSkippingStatsColumns": "id,nosuch"}, "names nosuch, which is not a column"),
        ({"delta.dataSkippingStatsColumns": "id,,s"}, "comma-separated list of column names"),
        ({"delta.appendOnlly": "true"}, "Unknown table property delta.appendOnlly"),
        ({"delta.columnMapping.maxColumnId": "7"}, "is set by the writer"),
        ({"delta.minReaderVersion": "2"}, "use upgradeTableProtocol"),
        ({"delta.constraints.positive": "id >"}, "PARSE_SYNTAX_ERROR"),
        ({"delta.constraints.known": "nosuch > 0"}, "nosuch"),
    ],
)
def test_a_bad_table_property_is_refused(spark, table, properties, says):
    with _unchanged(table), pytest.raises(InvalidArgumentError, match=says):
        DeltaTable.forPath(spark, table).setProperties(properties)


def test_properties_are_stored_in_their_canonical_spelling_and_unknown_ones_when_allowed(spark, tmp_path):
    path = str(tmp_path / "t")
    deltaspark.write(spark.range(3), path)
    dt = DeltaTable.forPath(spark, path)
    dt.setProperties({"delta.CHECKPOINTINTERVAL": "5", "team.owner": "ops"})
    assert {
        "delta.checkpointInterval": "5",
        "team.owner": "ops",
    }.items() <= dt.snapshot().configuration.items()
    spark.conf.set("spark.deltaspark.properties.allowUnknown", "true")
    try:
        dt.setProperties({"delta.someFutureProperty": "1"})
    finally:
        spark.conf.unset("spark.deltaspark.properties.allowUnknown")
    assert dt.snapshot().configuration["delta.someFutureProperty"] == "1"
    with pytest.raises(InvalidArgumentError, match="delta.appendOnly='yes'"):  # a new table too
        deltaspark.write(spark.range(1), str(tmp_path / "u"), properties={"delta.appendOnly": "yes"})
    assert not os.path.exists(tmp_path / "u" / "_delta_log")


def test_a_check_constraint_must_hold_for_the_rows_already_there(spark, tmp_path):
    path = str(tmp_path / "t")
    deltaspark.write(spark.range(5), path)
    dt = DeltaTable.forPath(spark, path)
    with (
        _unchanged(path),
        pytest.raises(InvariantViolationError, match=r"delta.constraints.small \(id < 3\) by 2 row"),
    ):
        dt.setProperties({"delta.constraints.small": "id < 3"})
    dt.setProperties({"delta.constraints.small": "id < 30"})
    with pytest.raises(InvariantViolationError):
        deltaspark.write(spark.range(40, 41), path)


def test_a_bad_generation_expression_is_refused_at_create(spark, tmp_path):
    path = str(tmp_path / "t")
    builder = (
        DeltaTable.create(spark)
        .location(path)
        .addColumn("id", "BIGINT")
        .addColumn("x", "BIGINT", generatedAlwaysAs="nosuch * 2")
    )
    with pytest.raises(InvalidArgumentError, match=r"generation expression of column x 'nosuch \* 2'"):
        builder.execute()
    assert not os.path.exists(os.path.join(path, "_delta_log"))


def test_a_path_that_is_a_file_is_named(spark, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a table")
    for target in (blocker, blocker / "below"):
        with pytest.raises(StorageError, match="a-file"):
            deltaspark.write(spark.range(1), str(target))
    assert blocker.read_text() == "not a table"


def test_a_binary_partition_column_round_trips(spark, tmp_path):
    """Binary partition values are the text their bytes encode in UTF-8 ("Partition Value
    Serialization"); bytes no text can hold are refused before anything is committed."""
    path = str(tmp_path / "t")
    rows = [(1, b"\x01\x02"), (2, b"abc"), (3, "é/=%".encode()), (4, None)]
    deltaspark.write(spark.createDataFrame(rows, "id long, b binary"), path, partitionBy=["b"])
    expected = sorted(rows)
    assert sorted(tuple(r) for r in DeltaTable.forPath(spark, path).toDF().collect()) == expected
    from deltalake import DeltaTable as RsTable

    assert sorted((r["id"], r["b"]) for r in RsTable(path).to_pyarrow_table().to_pylist()) == expected
    for bad in (b"\xff\xfe", b"a\x00"):
        with (
            _unchanged(path, data=False),
            pytest.raises(deltaspark.DeltaSparkError, match="binary partition"),
        ):
            deltaspark.write(spark.createDataFrame([(9, bad)], "id long, b binary"), path)
    assert DeltaTable.forPath(spark, path).snapshot().version == 0


# ---- no Spark -----------------------------------------------------------------------------------


def test_stats_column_names_parse_like_delta_spark():
    assert stats_column_names("a, b.c, `x.y`, `we``ird`.z") == [["a"], ["b", "c"], ["x.y"], ["we`ird", "z"]]
    for bad in ("a,,b", "`a", "a b", "a.`b`c", ""):
        with pytest.raises(ValueError):
            stats_column_names(bad)


def test_property_values_by_kind():
    ok = {
        "delta.appendOnly": "TRUE",
        "delta.logRetentionDuration": "interval 7 days",
        "delta.setTransactionRetentionDuration": "2 weeks",
        "delta.targetFileSize": "128mb",
        "delta.universalFormat.enabledFormats": "iceberg",
        "delta.autoOptimize.autoCompact": "auto",
        "delta.feature.deletionVectors": "supported",
        "delta.constraints.c": "a > 0",
        "owner": "me",
    }
    assert validate_properties(ok) == ok
    assert validate_properties({"delta.enabledeletionvectors": "true"}) == {
        "delta.enableDeletionVectors": "true"
    }
    for bad in (
        {"delta.universalFormat.enabledFormats": "iceberg,iceberg"},
        {"delta.targetFileSize": "big"},
        {"delta.randomPrefixLength": "0"},
        {"delta.isolationLevel": "SnapshotIsolation"},
        {"delta.columnMapping.mode": "position"},
    ):
        with pytest.raises(InvalidArgumentError, match=next(iter(bad))):
            validate_properties(bad)
    assert validate_properties({"delta.whatever": "1"}, allow_unknown=True) == {"delta.whatever": "1"}
