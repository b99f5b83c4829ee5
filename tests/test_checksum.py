"""Version checksum files: written after every commit, incrementally, and equal to a full replay.

`full_checksum` itself is checked against the `.crc` files delta-spark wrote into the conformance
tables (table size, file count, the file-size and deleted-record histograms).
"""

from __future__ import annotations

import json
from pathlib import Path

from deltaspark import DeltaTable
from deltaspark.table import write
from deltaspark.transaction.checksum import FILE_SIZE_BINS, full_checksum
from tests.test_conformance import VARIANT_TABLES

COMPARED = (
    "tableSizeBytes",
    "numFiles",
    "numMetadata",
    "numProtocol",
    "histogramOpt",
    "protocol",
    "metadata",
)


def _crc(path: Path, version: int) -> dict:
    return json.loads((path / "_delta_log" / f"{version:020d}.crc").read_text())


def _assert_matches_replay(spark, path: Path, version: int) -> None:
    written = _crc(path, version)
    snapshot = DeltaTable.forPath(spark, str(path)).snapshot(version=version)
    replayed = full_checksum(snapshot, written.get("txnId"))
    assert written == replayed, version


def test_every_commit_writes_a_checksum_equal_to_a_full_replay(spark, tmp_path):
    path = tmp_path / "t"
    schema = "id long, p string"
    props = {"delta.enableDeletionVectors": "true", "delta.feature.domainMetadata": "supported"}
    write(spark.createDataFrame([(1, "a"), (2, "b")], schema), str(path), partitionBy=["p"], properties=props)
    write(spark.createDataFrame([(3, "c")], schema), str(path), txnAppId="app", txnVersion=1)
    write(spark.createDataFrame([(4, "a")], schema), str(path), mode="overwrite", replaceWhere="p = 'a'")
    table = DeltaTable.forPath(spark, str(path))
    table.setProperties({"delta.logRetentionDuration": "interval 9 days"})
    table.restoreToVersion(1)
    latest = table.snapshot().version
    for version in range(latest + 1):
        _assert_matches_replay(spark, path, version)
    last = _crc(path, latest)
    assert last["numFiles"] == table.snapshot().summary()["numFiles"] == 3
    assert last["setTransactions"][0]["appId"] == "app" and last["numDeletionVectorsOpt"] == 0
    assert (
        last["txnId"]
        == json.loads((path / "_delta_log" / f"{latest:020d}.json").read_text().splitlines()[0])[
            "commitInfo"
        ]["txnId"]
    )


def test_a_missing_or_damaged_previous_checksum_means_a_full_computation(spark, tmp_path):
    path = tmp_path / "t"
    df = spark.createDataFrame([(1,)], "id long")
    write(df, str(path))
    (path / "_delta_log" / f"{0:020d}.crc").write_text("{not json")
    write(df, str(path))
    (path / "_delta_log" / f"{1:020d}.crc").unlink()
    write(df, str(path))
    assert _crc(path, 2)["numFiles"] == 3
    _assert_matches_replay(spark, path, 2)
    assert (path / "_delta_log" / f"{0:020d}.crc").read_text() == "{not json"  # never overwritten


def test_a_commit_without_data_never_computes_a_full_checksum(spark, tmp_path):
    """Without the previous `.crc`, a commit that changes no file (setProperties) writes none rather
    than reading the whole table; the next commit that changes files writes a full one."""
    path = tmp_path / "t"
    write(spark.createDataFrame([(1,)], "id long"), str(path))
    (path / "_delta_log" / f"{0:020d}.crc").unlink()
    DeltaTable.forPath(spark, str(path)).setProperties({"delta.logRetentionDuration": "interval 40 days"})
    assert not (path / "_delta_log" / f"{1:020d}.crc").exists()
    write(spark.createDataFrame([(2,)], "id long"), str(path))
    assert _crc(path, 2)["numFiles"] == 2
    _assert_matches_replay(spark, path, 2)
    DeltaTable.forPath(spark, str(path)).setProperties({"delta.logRetentionDuration": "interval 41 days"})
    assert _crc(path, 3)["numFiles"] == 2  # from version 2's, incrementally


def test_checksums_can_be_turned_off(spark, tmp_path):
    path = tmp_path / "t"
    spark.conf.set("spark.deltaspark.commit.checksum", "off")
    try:
        write(spark.createDataFrame([(1,)], "id long"), str(path))
    finally:
        spark.conf.unset("spark.deltaspark.commit.checksum")
    assert not list((path / "_delta_log").glob("*.crc"))


def _crc_tables(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.iterdir()
        # crc-malformed and crc-full are checksum-reader fixtures whose .crc does not describe their log
        if any(c.name[:20].isdigit() for c in p.glob("_delta_log/*.crc"))
        and p.name not in ("crc-malformed", "crc-full")
        and p.name not in VARIANT_TABLES
    )


def test_full_checksum_agrees_with_delta_spark(spark, conformance):
    checked = 0
    for table in _crc_tables(conformance):
        crc = sorted(p for p in table.glob("_delta_log/*.crc") if p.name[:20].isdigit())[-1]
        version = int(crc.name[:20])
        theirs = json.loads(crc.read_text())
        ours = full_checksum(DeltaTable.forPath(spark, str(table)).snapshot(version=version))
        for key in ("tableSizeBytes", "numFiles", "numDeletedRecordsOpt", "numDeletionVectorsOpt"):
            if key in theirs:
                assert ours[key] == theirs[key], (table.name, key)
        if "histogramOpt" in theirs:
            assert theirs["histogramOpt"]["sortedBinBoundaries"] == list(FILE_SIZE_BINS)
            assert ours["histogramOpt"] == theirs["histogramOpt"], table.name
        if "deletedRecordCountsHistogramOpt" in theirs:
            assert ours["deletedRecordCountsHistogramOpt"] == theirs["deletedRecordCountsHistogramOpt"], (
                table.name
            )
        assert ours["protocol"] == theirs["protocol"] and ours["metadata"]["id"] == theirs["metadata"]["id"]
        checked += 1
    assert checked >= 10
