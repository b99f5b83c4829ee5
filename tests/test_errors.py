"""Bad input gets a clear deltaspark error, and a bad hint never breaks a read."""

from __future__ import annotations

import logging

import pytest

from deltaspark import (
    CorruptLogError,
    DeletionVectorError,
    DeltaSparkError,
    DeltaTable,
    InvalidArgumentError,
    MissingActionError,
    NonContiguousVersionsError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from tests.log_builder import add, metadata, protocol, remove, txn


def paths(snap) -> list[str]:
    return sorted(r["path"] for r in snap.files().select("path").collect())


def checkpointed_table(log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.classic_checkpoint(1, [protocol(), metadata(), add("a"), add("b")])
    log.commit(2, add("c"))
    log.commit(3, remove("a", 1))


@pytest.mark.connect
def test_folder_without_delta_log_is_not_a_table(spark, tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(TableNotFoundError, match="Not a Delta table"):
        DeltaTable.forPath(spark, str(tmp_path / "plain"))
    assert DeltaTable.isDeltaTable(spark, str(tmp_path / "plain")) is False
    assert DeltaTable.isDeltaTable(spark, str(tmp_path / "missing")) is False


def test_empty_delta_log_is_not_a_table(spark, log):
    log.raw("00000000000000000000.crc", "{}")
    with pytest.raises(TableNotFoundError, match="no commit or checkpoint"):
        DeltaTable.forPath(spark, log.path)


def test_is_delta_table(spark, log):
    log.commit(0, protocol(), metadata())
    assert DeltaTable.isDeltaTable(spark, log.path) is True


def test_errors_share_one_base_class():
    for error in (TableNotFoundError, VersionNotFoundError, CorruptLogError, UnsupportedFeatureError):
        assert issubclass(error, DeltaSparkError)
    assert issubclass(InvalidArgumentError, ValueError)


@pytest.mark.parametrize(
    "content",
    [
        '{"version": 1, "size": 3, "checksum": "00000000000000000000000000000000"}',  # checksum lies
        "{not json",
        '{"size": 3}',  # no version
    ],
    ids=["bad-checksum", "not-json", "no-version"],
)
def test_untrustworthy_last_checkpoint_falls_back_to_listing(spark, log, content, caplog):
    checkpointed_table(log)
    log.raw("_last_checkpoint", content)
    with caplog.at_level(logging.WARNING, logger="deltaspark"):
        snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.version == 3 and snap.segment.checkpoint.version == 1
    assert paths(snap) == ["b", "c"]
    assert any("Ignoring" in r.message and "_last_checkpoint" in r.message for r in caplog.records)


def test_last_checkpoint_pointing_at_a_missing_checkpoint_falls_back(spark, log):
    checkpointed_table(log)
    log.last_checkpoint(3)  # valid checksum, but there is no checkpoint at version 3
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.version == 3 and snap.segment.checkpoint.version == 1
    assert paths(snap) == ["b", "c"]


def test_valid_last_checkpoint_lists_only_the_tail(spark, log):
    checkpointed_table(log)
    log.last_checkpoint(1)
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.segment.checkpoint.version == 1
    assert min(f.version for f in snap.segment.listing) == 1  # versions 0.. were never listed
    assert paths(snap) == ["b", "c"]
    assert DeltaTable.forPath(spark, log.path).snapshot(version=0).version == 0  # time travel lists all


def test_last_checkpoint_older_than_a_newer_checkpoint(spark, log):
    checkpointed_table(log)
    log.classic_checkpoint(3, [protocol(), metadata(), add("b"), add("c"), remove("a", 1)])
    log.last_checkpoint(1)  # stale hint: a newer checkpoint exists
    snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.segment.checkpoint.version == 3
    assert paths(snap) == ["b", "c"]


@pytest.mark.connect
def test_missing_versions_are_an_error(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.commit(3, add("d"))
    with pytest.raises(NonContiguousVersionsError, match=r"missing commit\(s\) 2"):
        DeltaTable.forPath(spark, log.path).snapshot()
    assert DeltaTable.forPath(spark, log.path).snapshot(version=1).version == 1


def test_version_out_of_range(spark, log):
    log.commit(0, protocol(), metadata())
    with pytest.raises(VersionNotFoundError, match="versions 0 to 0"):
        DeltaTable.forPath(spark, log.path).snapshot(version=5)
    with pytest.raises(InvalidArgumentError):
        DeltaTable.forPath(spark, log.path).snapshot(version="1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        DeltaTable.forPath(spark, log.path).snapshot(version=0, timestamp="2024-01-01")


@pytest.mark.connect
def test_missing_protocol(spark, log):
    log.commit(0, metadata(), add("a"))
    with pytest.raises(MissingActionError, match="no `protocol`"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_missing_metadata(spark, log):
    log.commit(0, protocol(), add("a"))
    with pytest.raises(MissingActionError, match="no `metaData`"):
        DeltaTable.forPath(spark, log.path).snapshot()


@pytest.mark.connect
def test_unknown_reader_feature_is_refused_by_name(spark, log):
    log.commit(
        0,
        protocol(3, 7, ["deletionVectors", "fancyNewThing"], ["deletionVectors", "fancyNewThing"]),
        metadata(),
    )
    with pytest.raises(UnsupportedFeatureError, match="fancyNewThing") as err:
        DeltaTable.forPath(spark, log.path).snapshot()
    assert err.value.features == ["fancyNewThing"]


def test_catalog_managed_is_refused(spark, log):
    log.commit(0, protocol(3, 7, ["catalogManaged"], ["catalogManaged"]), metadata())
    with pytest.raises(UnsupportedFeatureError, match="catalogManaged.*catalog"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_reader_version_above_three_is_refused(spark, log):
    log.commit(0, protocol(4, 7), metadata())
    with pytest.raises(UnsupportedFeatureError, match="reader version 4"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_writer_only_features_do_not_block_reads(spark, log):
    log.commit(0, protocol(1, 7, writer_features=["someFutureWriterFeature"]), metadata(), add("a"))
    assert paths(DeltaTable.forPath(spark, log.path).snapshot()) == ["a"]


@pytest.mark.connect
def test_corrupt_line_in_protocol_scan_names_the_file(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    bad = log.raw("00000000000000000001.json", 'this is not json\n{"add":{"path":"b"}}\n')
    with pytest.raises(CorruptLogError, match="00000000000000000001.json") as err:
        DeltaTable.forPath(spark, log.path).snapshot()
    assert err.value.path.endswith(bad.name)


@pytest.mark.connect
def test_truncated_file_action_fails_the_query_with_the_file_named(spark, log):
    log.commit(0, protocol(), metadata(), add("a"), txn("app", 1))
    # Lines damaged in the middle of the file (a torn last line fails the load: `torn_writes`).
    log.raw(
        "00000000000000000001.json",
        '{"add":{"path":"b","size":1\n{"txn":{"appId":"x","vers\n{"commitInfo":{}}\n',
    )
    snap = DeltaTable.forPath(spark, log.path).snapshot()  # protocol and metadata are intact
    for query in (
        lambda: snap.files().collect(),
        lambda: snap.files().count(),
        lambda: snap.transactions().collect(),
    ):
        with pytest.raises(Exception, match=r"corrupt Delta log file .*00000000000000000001\.json"):
            query()


def test_corrupt_checkpoint_without_replacement_is_named(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.raw("00000000000000000001.checkpoint.parquet", b"PAR1 definitely not parquet")
    (log.log / "00000000000000000000.json").unlink()  # nothing older can replace the checkpoint
    with pytest.raises(CorruptLogError, match=r"00001\.checkpoint\.parquet.*no older checkpoint"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_corrupt_checkpoint_is_replaced_by_the_commits(spark, log, caplog):
    """As Spark's Delta does: an unreadable checkpoint is passed over for an older one (or the
    commits from version 0), with a warning naming it; the answer is the same state."""
    log.commit(0, protocol(), metadata(), add("a"))
    log.commit(1, add("b"))
    log.raw("00000000000000000001.checkpoint.parquet", b"PAR1 definitely not parquet")
    with caplog.at_level(logging.WARNING, logger="deltaspark"):
        snap = DeltaTable.forPath(spark, log.path).snapshot()
    assert snap.version == 1 and snap.segment.checkpoint is None
    assert paths(snap) == ["a", "b"]
    assert any("00001.checkpoint.parquet" in r.getMessage() for r in caplog.records)


@pytest.mark.connect
def test_missing_sidecar_is_named(spark, log):
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    log.commit(0, v2, metadata(), add("a"))
    log.v2_checkpoint(0, [v2, metadata()], [[add("a")]])
    for sidecar in (log.log / "_sidecars").iterdir():
        sidecar.unlink()
    (log.log / "00000000000000000000.json").unlink()  # nothing but the checkpoint describes version 0
    with pytest.raises(CorruptLogError, match="sidecar"):
        DeltaTable.forPath(spark, log.path).snapshot()


def test_a_quoted_source_line_is_not_taken_for_the_message():
    """A Python worker's traceback quotes the line that raised, whose text holds the message's
    template: the message is the exception's own line."""
    from deltaspark.spark_errors import translate

    text = (
        "Traceback (most recent call last):\n"
        '    raise DeletionVectorError(f"deltaspark: deletion vector {where}: {reason}")\n'
        "deltaspark.errors.DeletionVectorError: deltaspark: deletion vector inline of data file a.parquet: "
        "checksum mismatch"
    )
    error = translate(RuntimeError(text))
    assert isinstance(error, DeletionVectorError)
    assert str(error) == "deletion vector inline of data file a.parquet: checksum mismatch"
