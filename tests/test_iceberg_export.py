"""`DeltaTable.toIceberg`: Iceberg metadata written for a Delta table, checked by reading the table
as Iceberg with pyiceberg (an independent reader) and with deltaspark's Iceberg reader against the
Delta rows; bounds against Delta's statistics; deletion vectors and row lineage (format 3);
conversions again after changes; refusals by name."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import struct
from pathlib import Path
from urllib.parse import unquote

import pytest
from pyspark.sql import functions as F

import deltaspark
from deltaspark import DeltaTable
from deltaspark.errors import (
    IcebergCommitConflictError,
    IcebergExportMismatchError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)
from deltaspark.iceberg import IcebergTable
from deltaspark.iceberg import types as ice_types

SCHEMA = (
    "a int, b long, s string, d date, ts timestamp, dec decimal(10,2), x double, "
    "st struct<p:int,q:string>, arr array<int>, m map<string,int>"
)


def _rows(start: int, end: int) -> list[tuple]:
    return [
        (
            i,
            i * 10,
            f"s{i % 3}",
            dt.date(2024, 1, 1 + i % 2),
            dt.datetime(2024, 1, 1, 12, 0, i % 60, 1234),
            decimal.Decimal(f"{i}.25"),
            i / 3,
            (i, f"n{i}"),
            [i, i + 1],
            {f"k{i}": i},
        )
        for i in range(start, end)
    ]


def _norm(value):  # noqa: ANN001, ANN202
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # pyiceberg's maps
            return tuple(sorted(value))
        return tuple(_norm(v) for v in value)
    return value


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted((tuple(_norm(r[k]) for k in sorted(r)) for r in rows), key=repr)


def _spark_rows(df) -> list[dict]:  # noqa: ANN001
    return [r.asDict(recursive=True) for r in df.collect()]


def _pyiceberg(location: str, snapshot_id: int | None = None) -> list[dict]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(location)
    return table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def _local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


@pytest.fixture()
def table(spark, tmp_path) -> DeltaTable:  # noqa: ANN001
    df = spark.createDataFrame(_rows(0, 20), SCHEMA)
    deltaspark.write(df, str(tmp_path / "t"), partitionBy=["s", "d"])
    return DeltaTable.forPath(spark, str(tmp_path / "t"))


def test_iceberg_readers_see_the_delta_rows(spark, table) -> None:  # noqa: ANN001
    done = table.toIceberg()
    assert done.written and done.data_files == table.snapshot().files().count()
    delta_rows = _sorted(_spark_rows(table.toDF()))
    assert _sorted(_pyiceberg(done.metadata_location)) == delta_rows
    iceberg = IcebergTable.forPath(spark, table.path)
    assert _sorted(_spark_rows(iceberg.toDF())) == delta_rows
    assert iceberg.count() == 20
    assert iceberg.properties["delta-version"] == "0"
    again = table.toIceberg()  # nothing changed: nothing written
    assert not again.written and again.metadata_location == done.metadata_location
    assert sorted(p.name for p in (Path(table.path) / "metadata").glob("*.metadata.json")) == [
        "v1.metadata.json"
    ]


def test_bounds_are_true_bounds_of_the_delta_stats(spark, table) -> None:  # noqa: ANN001
    table.toIceberg()
    iceberg = IcebergTable.forPath(spark, table.path)
    fields = {f["name"]: f for f in iceberg.metadata.schema["fields"]}
    stats = {
        unquote(r["path"]): r["stats_parsed"].asDict(recursive=True)
        for r in table.snapshot().files().collect()
    }
    checked = 0
    for entry in iceberg.snapshot().files().where("content = 0").collect():
        mine = stats[entry["file_path"][len(table.path) + 1 :]]
        lower, upper = dict(entry["lower_bounds"]), dict(entry["upper_bounds"])
        for name in ("a", "b", "x", "dec"):
            fid, kind = fields[name]["id"], fields[name]["type"]
            assert ice_types.from_bytes(lower[fid], kind) == mine["minValues"][name]
            assert ice_types.from_bytes(upper[fid], kind) == mine["maxValues"][name]
        ts = fields["ts"]["id"]
        low_us = struct.unpack("<q", lower[ts])[0]
        high_us = struct.unpack("<q", upper[ts])[0]
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        low_stat, high_stat = (
            (v.replace(tzinfo=dt.timezone.utc) - epoch) // dt.timedelta(microseconds=1)
            for v in (mine["minValues"]["ts"], mine["maxValues"]["ts"])
        )
        assert low_us == low_stat  # Delta keeps milliseconds: a lower bound
        assert high_us == high_stat + 999  # ... and 999 microseconds more an upper one
        assert dict(entry["null_value_counts"])[fields["a"]["id"]] == mine["nullCount"]["a"]
        checked += 1
    assert checked == table.snapshot().files().count()
    # pruning by those bounds keeps exactly the files whose rows can match
    from pyiceberg.table import StaticTable

    planned = (
        StaticTable.from_metadata(iceberg.metadata.metadata_file).scan(row_filter="a >= 15").plan_files()
    )
    expected = table.snapshot().files().where(F.col("stats_parsed.maxValues.a") >= 15).count()
    assert len(list(planned)) == expected


def test_conversion_follows_changes_and_keeps_history(spark, table) -> None:  # noqa: ANN001
    first = table.toIceberg()
    deltaspark.write(spark.createDataFrame(_rows(20, 30), SCHEMA), table.path)
    table.delete("a < 5")
    second = table.toIceberg()
    assert second.written and second.delta_version == 2 and second.incremental
    assert _sorted(_pyiceberg(second.metadata_location)) == _sorted(_spark_rows(table.toDF()))
    version_0 = _sorted(_spark_rows(table.snapshot(0).toDF()))
    assert _sorted(_pyiceberg(second.metadata_location, first.snapshot_id)) == version_0
    iceberg = IcebergTable.forPath(spark, table.path)
    assert [r["snapshot_id"] for r in iceberg.history().collect()] == [first.snapshot_id, second.snapshot_id]
    assert iceberg.snapshot(first.snapshot_id).count() == 20 and iceberg.count() == 25


def _manifests(location: str) -> dict[str, dict]:
    """The manifest list of the current snapshot of the metadata at `location`, by manifest path."""
    import fastavro

    metadata = json.loads(_local(location).read_text())
    current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    with _local(current["manifest-list"]).open("rb") as handle:
        return {m["manifest_path"]: m for m in fastavro.reader(handle)}


def _statuses(spark, path: str) -> dict[str, list[int]]:  # noqa: ANN001
    """Entry statuses of the current snapshot's data files, by path in the table."""
    out: dict[str, list[int]] = {}
    for r in IcebergTable.forPath(spark, path).snapshot().entries().where("content = 0").collect():
        out.setdefault(r["file_path"][len(path) + 1 :], []).append(r["status"])
    return out


def test_incremental_conversion_rewrites_only_manifests_naming_changed_files(spark, table) -> None:  # noqa: ANN001
    first = table.toIceberg()
    before = _manifests(first.metadata_location)
    deltaspark.write(spark.createDataFrame(_rows(20, 26), SCHEMA), table.path)
    appended = table.toIceberg()
    assert appended.incremental and appended.data_files == table.snapshot().files().count()
    after_append = _manifests(appended.metadata_location)
    assert set(before) < set(after_append)  # every earlier manifest kept, byte for byte
    assert {m["added_snapshot_id"] for p, m in after_append.items() if p not in before} == {
        appended.snapshot_id
    }
    summary = IcebergTable.forPath(spark, table.path).snapshot().summary
    assert summary["operation"] == "append" and summary["total-records"] == "26"

    removed = {
        unquote(r["path"]) for r in table.snapshot().files().where("stats_parsed.minValues.a < 3").collect()
    }
    table.delete("a < 3")  # rewrites the files holding those rows
    third = table.toIceberg()
    assert third.incremental and third.delta_version == 2
    delta_rows = _sorted(_spark_rows(table.toDF()))
    assert len(delta_rows) == 23 and _sorted(_pyiceberg(third.metadata_location)) == delta_rows
    iceberg = IcebergTable.forPath(spark, table.path)
    assert _sorted(_spark_rows(iceberg.toDF())) == delta_rows and iceberg.count() == 23
    statuses = _statuses(spark, table.path)
    assert removed and all(statuses[name] == [2] for name in removed), (removed, statuses)  # DELETED now
    live = {unquote(r["path"]) for r in table.snapshot().files().collect()}
    assert {n for n, s in statuses.items() if s != [2]} == live
    after_delete = _manifests(third.metadata_location)
    rewritten = [m for p, m in after_delete.items() if p not in after_append]
    assert rewritten and all(m["added_snapshot_id"] == third.snapshot_id for m in rewritten)
    assert sum(m["deleted_files_count"] for m in after_delete.values()) == len(removed)
    untouched = [p for p in after_append if p in after_delete]
    assert untouched  # manifests of partitions the delete did not touch are kept
    # every conversion is still readable: Iceberg time travel matches each Delta version
    for done, version in ((first, 0), (appended, 1), (third, 2)):
        expected = _sorted(_spark_rows(table.snapshot(version).toDF()))
        assert _sorted(_pyiceberg(third.metadata_location, done.snapshot_id)) == expected
    # a later conversion: manifests left with nothing live are dropped; kept ones keep their
    # DELETED entries, which stay the earlier snapshot's (readers skip them)
    deltaspark.write(spark.createDataFrame(_rows(40, 41), SCHEMA), table.path)
    fourth = table.toIceberg()
    assert fourth.incremental
    history = IcebergTable.forPath(spark, table.path)
    assert history.snapshot(third.snapshot_id).summary["operation"] == "overwrite"  # removed files
    assert history.snapshot().summary["operation"] == "append"  # kept DELETED entries are not new
    assert all(
        m["added_files_count"] + m["existing_files_count"] > 0
        for m in _manifests(fourth.metadata_location).values()
    )
    deleted = IcebergTable.forPath(spark, table.path).snapshot().entries().where("status = 2")
    assert {r[0] for r in deleted.select("snapshot_id").distinct().collect()} <= {third.snapshot_id}
    assert _sorted(_pyiceberg(fourth.metadata_location)) == _sorted(_spark_rows(table.toDF()))


def test_full_conversion_when_the_log_no_longer_holds_the_commits(spark, table) -> None:  # noqa: ANN001
    table.toIceberg()
    deltaspark.write(spark.createDataFrame(_rows(20, 22), SCHEMA), table.path)
    deltaspark.write(spark.createDataFrame(_rows(22, 24), SCHEMA), table.path)
    table.checkpoint()
    (Path(table.path) / "_delta_log" / "00000000000000000001.json").unlink()  # as log cleanup would
    done = table.toIceberg()
    assert done.written and not done.incremental
    assert _sorted(_pyiceberg(done.metadata_location)) == _sorted(_spark_rows(table.toDF()))
    assert all(
        m["added_snapshot_id"] == done.snapshot_id for m in _manifests(done.metadata_location).values()
    )


def test_counts_that_disagree_with_the_delta_snapshot_commit_nothing(spark, table, monkeypatch) -> None:  # noqa: ANN001
    from deltaspark.conversion import incremental

    first = table.toIceberg()
    table.delete("a < 3")
    plan = incremental.plan

    def blind(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - an increment that misses the changes
        found = plan(*args, **kwargs)  # ... rewriting the manifests without dropping a file
        return dataclasses.replace(
            found, dirty=found.dirty.withColumn("drop", F.array().cast("array<string>"))
        )

    monkeypatch.setattr(incremental, "plan", blind)
    with pytest.raises(IcebergExportMismatchError, match="data files|rows") as caught:
        table.toIceberg()
    assert "Nothing was committed" in str(caught.value)
    metadata_dir = Path(table.path) / "metadata"
    assert sorted(p.name for p in metadata_dir.glob("*.metadata.json")) == ["v1.metadata.json"]
    assert IcebergTable.forPath(spark, table.path).snapshot().snapshotId == first.snapshot_id


def test_data_bytes_are_checked_against_the_delta_snapshot(spark, table) -> None:  # noqa: ANN001
    """Each conversion records the data files' bytes; the next (incremental) one adds what it
    changed to the recorded total, and a total that disagrees with the Delta snapshot's sizes
    commits nothing. A snapshot without the total is converted in full."""
    key = "deltaspark.data-files-size"
    first = table.toIceberg()
    metadata_file = Path(first.metadata_location.removeprefix("file:"))
    raw = json.loads(metadata_file.read_text())
    summary = raw["snapshots"][-1]["summary"]
    delta_bytes = table.snapshot().files().agg(F.sum("size")).first()[0]
    assert int(summary[key]) == delta_bytes
    table.delete("a < 3")  # rewrites manifests: their bytes before and after
    deltaspark.write(spark.createDataFrame(_rows(40, 42), SCHEMA), table.path)
    second = table.toIceberg()
    assert second.incremental
    summary = json.loads(Path(second.metadata_location.removeprefix("file:")).read_text())["snapshots"][-1][
        "summary"
    ]
    assert int(summary[key]) == table.snapshot().files().agg(F.sum("size")).first()[0] != delta_bytes
    # the recorded total no longer says what the kept manifests list
    latest = Path(second.metadata_location.removeprefix("file:"))
    raw = json.loads(latest.read_text())
    raw["snapshots"][-1]["summary"][key] = str(int(raw["snapshots"][-1]["summary"][key]) + 1)
    latest.write_text(json.dumps(raw))
    deltaspark.write(spark.createDataFrame(_rows(42, 44), SCHEMA), table.path)
    with pytest.raises(IcebergExportMismatchError, match="bytes of data files"):
        table.toIceberg()
    # no total recorded (a conversion by an older deltaspark): converted in full
    del raw["snapshots"][-1]["summary"][key]
    latest.write_text(json.dumps(raw))
    third = table.toIceberg()
    assert third.written and not third.incremental
    assert _sorted(_pyiceberg(third.metadata_location)) == _sorted(_spark_rows(table.toDF()))


def test_deletion_vectors_and_row_lineage_in_format_3(spark, tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "dv")
    props = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    # pyiceberg 0.12 reads Spark's default INT96 timestamps, but not when it applies deletes
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        rows = spark.createDataFrame(_rows(0, 40), SCHEMA)
        deltaspark.write(rows, path, partitionBy=["s"], properties=props)
    finally:
        spark.conf.set(key, before)
    table = DeltaTable.forPath(spark, path)
    table.delete("a % 4 = 1")
    assert table.snapshot().files().where("deletionVector is not null").count() > 0
    with pytest.raises(UnsupportedFeatureError, match="formatVersion=3"):
        table.toIceberg(formatVersion=2)
    done = table.toIceberg(formatVersion=3)
    assert done.deletion_vectors == table.snapshot().files().where("deletionVector is not null").count()
    delta_rows = _sorted(_spark_rows(table.toDF()))
    assert len(delta_rows) == 30
    assert _sorted(_pyiceberg(done.metadata_location)) == delta_rows
    iceberg = IcebergTable.forPath(spark, path)
    assert iceberg.formatVersion == 3 and iceberg.count() == 30
    lineage = iceberg.toDF(rowLineage=True).select("a", "_row_id").collect()
    tracked = table.snapshot().toDF(rowTracking=True).select("a", "_metadata.row_id").collect()
    assert sorted(map(tuple, lineage)) == sorted(map(tuple, tracked))
    # more deletes: files get new vectors (a remove and an add of the file); converted incrementally
    table.delete("a % 4 = 2 or a = 3")
    again = table.toIceberg(formatVersion=3)
    assert again.incremental
    delta_rows = _sorted(_spark_rows(table.toDF()))
    assert len(delta_rows) == 19 and _sorted(_pyiceberg(again.metadata_location)) == delta_rows
    iceberg = IcebergTable.forPath(spark, path)
    assert iceberg.count() == 19 and _sorted(_spark_rows(iceberg.toDF())) == delta_rows
    vectors = iceberg.snapshot().files().where("content = 1")
    assert vectors.count() == again.deletion_vectors  # one live vector per file, the newest
    assert vectors.select("referenced_data_file").distinct().count() == again.deletion_vectors
    lineage = iceberg.toDF(rowLineage=True).select("a", "_row_id").collect()
    tracked = table.snapshot().toDF(rowTracking=True).select("a", "_metadata.row_id").collect()
    assert sorted(map(tuple, lineage)) == sorted(map(tuple, tracked))
    assert _sorted(_pyiceberg(again.metadata_location, done.snapshot_id)) == _sorted(
        _spark_rows(table.snapshot(table.snapshot().version - 1).toDF())
    )


def test_a_vector_gone_from_a_shared_puffin_file_deletes_nothing(spark, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Two files' DVs in one Puffin file; a restore drops one of them. pyiceberg 0.12 applies every
    blob of a Puffin file it opens, so the incremental conversion writes the surviving DV again into
    a new Puffin file: no live entry names the old one."""
    from deltaspark.conversion import to_iceberg as export

    monkeypatch.setattr(export, "parallelism", lambda spark: 1)  # one task: one Puffin file
    path = str(tmp_path / "shared")
    props = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)
    spark.conf.set(key, "TIMESTAMP_MICROS")  # (pyiceberg applies no deletes to INT96 files)
    try:
        deltaspark.write(spark.createDataFrame(_rows(0, 20), SCHEMA).coalesce(1), path, properties=props)
        deltaspark.write(spark.createDataFrame(_rows(20, 40), SCHEMA).coalesce(1), path)
    finally:
        spark.conf.set(key, before)
    table = DeltaTable.forPath(spark, path)
    table.delete("a = 3")
    one_vector = table.snapshot().version
    table.delete("a = 23")
    done = table.toIceberg(formatVersion=3)
    vectors = IcebergTable.forPath(spark, path).snapshot().files().where("content = 1")
    assert done.deletion_vectors == 2 and vectors.select("file_path").distinct().count() == 1
    table.restoreToVersion(one_vector)  # the second file goes back to having no DV
    if table.snapshot().configuration.get("delta.enableRowTracking") != "true":
        table.setProperties({"delta.enableRowTracking": "true"})
    again = table.toIceberg(formatVersion=3)
    assert again.incremental and again.deletion_vectors == 1
    delta_rows = _sorted(_spark_rows(table.toDF()))
    assert len(delta_rows) == 39 and _sorted(_pyiceberg(again.metadata_location)) == delta_rows
    live = IcebergTable.forPath(spark, path).snapshot().files().where("content = 1")
    assert live.select("file_path").first()[0] != vectors.select("file_path").first()[0]


def test_refusals_by_name(spark, table, monkeypatch) -> None:  # noqa: ANN001
    with pytest.raises(UnsupportedFeatureError, match="row tracking"):
        table.toIceberg(formatVersion=3)
    with pytest.raises(InvalidArgumentError, match="formatVersion"):
        table.toIceberg(formatVersion=1)
    done = table.toIceberg()
    metadata_dir = Path(table.path) / "metadata"
    deltaspark.write(spark.createDataFrame(_rows(50, 52), SCHEMA), table.path)
    # a racing conversion commits v2 between this one's read of v1 and its write
    from deltaspark.conversion import to_iceberg as export

    stale = export._previous(table.path)
    (metadata_dir / "v2.metadata.json").write_text(_local(done.metadata_location).read_text())
    with monkeypatch.context() as patch:
        patch.setattr(export, "_previous", lambda root: stale)
        with pytest.raises(IcebergCommitConflictError, match="v2.metadata.json"):
            table.toIceberg()
    assert _local(done.metadata_location).read_text() == (metadata_dir / "v2.metadata.json").read_text()
    (metadata_dir / "v2.metadata.json").unlink()
    foreign = json.loads(_local(done.metadata_location).read_text())
    del foreign["properties"]["delta-version"]
    _local(done.metadata_location).write_text(json.dumps(foreign))
    with pytest.raises(InvalidArgumentError, match="no Delta conversion wrote"):
        table.toIceberg()


def test_a_not_null_partition_column_reads_in_pyiceberg(spark, conformance, tmp_path) -> None:  # noqa: ANN001
    import shutil

    path = tmp_path / "t"
    shutil.copytree(conformance / "timestamp-partitioned-table", path)  # `time` NOT NULL, partitioned
    table = DeltaTable.forPath(spark, str(path))
    assert not next(f for f in table.snapshot().schema.fields if f.name == "time").nullable
    table.setProperties({"delta.enableRowTracking": "true"})  # it has deletion vectors: format 3
    done = table.toIceberg(formatVersion=3)
    field = next(
        f for f in IcebergTable.forPath(spark, str(path)).metadata.schema["fields"] if f["name"] == "time"
    )
    assert field["required"] is False  # the data files do not hold it; readers fill it in
    assert _sorted(_pyiceberg(done.metadata_location)) == _sorted(_spark_rows(table.toDF()))


def test_data_files_with_a_change_type_column_read_in_pyiceberg(spark, conformance, tmp_path) -> None:  # noqa: ANN001
    import shutil

    import pyarrow.parquet as pq

    path = tmp_path / "t"
    shutil.copytree(conformance / "cdf-table", path)
    table = DeltaTable.forPath(spark, str(path))
    live = [unquote(r["path"]) for r in table.snapshot().files().collect()]
    assert any("_change_type" in pq.read_schema(path / p).names for p in live)  # not a table column
    done = table.toIceberg()
    assert _sorted(_pyiceberg(done.metadata_location)) == _sorted(_spark_rows(table.toDF()))


def test_the_name_mapping_keeps_fields_earlier_snapshots_hold() -> None:
    """Files of earlier snapshots hold columns the schema no longer has (a restore to an older
    schema); readers resolving files without field ids through the mapping must still find them,
    unless the current schema uses the name again."""
    from deltaspark.conversion.to_iceberg import _kept_mappings

    previous = [
        {"field-id": 1, "names": ["i"]},
        {
            "field-id": 2,
            "names": ["s"],
            "fields": [{"field-id": 4, "names": ["x"]}, {"field-id": 5, "names": ["y"]}],
        },
        {"field-id": 3, "names": ["k"]},
        {"field-id": 6, "names": ["j"]},
    ]
    current = [
        {"field-id": 1, "names": ["i"]},
        {"field-id": 2, "names": ["s"], "fields": [{"field-id": 4, "names": ["x"]}]},
        {"field-id": 7, "names": ["j"]},  # a new field reusing a dropped one's name
    ]
    assert _kept_mappings(current, previous) == [
        {"field-id": 1, "names": ["i"]},
        {
            "field-id": 2,
            "names": ["s"],
            "fields": [{"field-id": 4, "names": ["x"]}, {"field-id": 5, "names": ["y"]}],
        },
        {"field-id": 7, "names": ["j"]},
        {"field-id": 3, "names": ["k"]},
    ]
