"""The commit path: put-if-absent, optimistic retries and delta-spark's conflict rules.

Two transactions read the same version; the first commits, and what the second does decides
whether it lands (at the next version) or fails with the named conflict.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.errors import (
    AppendOnlyTableError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    ProtocolChangedError,
    UnsafeCommitStoreError,
    UnsupportedSessionError,
    UnsupportedWriterFeatureError,
)
from deltaspark.features.protocol import Protocol
from deltaspark.operations.write import removes_of
from deltaspark.storage import DataFrameStorage, HadoopStorage
from deltaspark.table import write
from deltaspark.transaction.log_store import COMMIT_PROTOCOL_CONF, LogStore, choose_method
from deltaspark.transaction.transaction import Transaction


def _commit_lines(path: Path, version: int) -> list[dict]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _table(spark, path: Path, partitioned: bool = True, **properties: str) -> DeltaTable:
    rows = [(1, "a"), (2, "b")]
    df = spark.createDataFrame(rows, "id long, p string")
    write(df, str(path), partitionBy=["p"] if partitioned else None, properties=properties or None)
    return DeltaTable.forPath(spark, str(path))


def _txn(spark, table: DeltaTable, snapshot=None) -> Transaction:
    storage = HadoopStorage(spark)
    return Transaction(spark, storage, table.path, snapshot or table.snapshot())


def _append(spark, table: DeltaTable, rows, **kw):
    return write(spark.createDataFrame(rows, "id long, p string"), table.path, **kw)


# ---- put-if-absent ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "conditional", "configured", "expected"),
    [
        ("file", False, None, "link"),
        ("hdfs", False, None, "rename"),
        ("abfss", False, "auto", "rename"),
        ("s3a", True, None, "conditional-create"),
        ("gs", False, None, "create"),
        ("s3a", False, "single-driver", "single-driver"),
    ],
)
def test_commit_method_per_file_system(scheme, conditional, configured, expected):
    assert choose_method(scheme, conditional, configured) == expected


def test_s3_without_conditional_create_is_refused_with_the_options():
    with pytest.raises(UnsafeCommitStoreError) as err:
        choose_method("s3a", False, None)
    text = str(err.value)
    assert "Hadoop 3.4.2" in text and f"{COMMIT_PROTOCOL_CONF}=single-driver" in text
    with pytest.raises(UnsafeCommitStoreError, match="not one of"):
        choose_method("file", False, "yolo")


@pytest.mark.parametrize("method", ["link", "rename", "create", "single-driver"])
def test_put_if_absent_never_overwrites(spark, tmp_path, method):
    store = LogStore(HadoopStorage(spark))
    target = str(tmp_path / "_delta_log" / "00000000000000000000.json")
    spark.conf.set(COMMIT_PROTOCOL_CONF, method)
    try:
        assert store.put_if_absent(target, '{"first":1}\n')
        assert not store.put_if_absent(target, '{"second":2}\n')
    finally:
        spark.conf.unset(COMMIT_PROTOCOL_CONF)
    assert Path(target).read_text() == '{"first":1}\n'
    # No temporary file is left behind, win or lose.
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == ["00000000000000000000.json"]


def test_racing_writers_exactly_one_wins(spark, tmp_path):
    store = LogStore(HadoopStorage(spark))
    target = str(tmp_path / "_delta_log" / "00000000000000000007.json")
    (tmp_path / "_delta_log").mkdir()
    results: dict[int, bool] = {}

    def attempt(i: int) -> None:
        results[i] = store.put_if_absent(target, json.dumps({"writer": i}) + "\n")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert json.loads(Path(target).read_text()) == {"writer": winners[0]}


def test_connect_sessions_cannot_commit(spark):
    with pytest.raises(UnsupportedSessionError, match="Spark Connect"):
        LogStore(DataFrameStorage(spark))


# ---- commits ------------------------------------------------------------------------------------


def test_commit_info_first_and_blind_append(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    result = _append(spark, table, [(3, "c")])
    lines = _commit_lines(tmp_path / "t", result.version)
    info = lines[0]["commitInfo"]
    assert result.version == 1 and list(lines[0]) == ["commitInfo"]
    assert info["operation"] == "WRITE" and info["isBlindAppend"] is True and info["readVersion"] == 0
    assert info["txnId"] and info["engineInfo"].startswith("deltaspark/")
    assert info["operationMetrics"]["numOutputRows"] == "1"


def test_concurrent_blind_appends_both_land(spark, tmp_path):
    table = _table(spark, tmp_path / "t", **{"delta.feature.domainMetadata": "supported"})
    snapshot = table.snapshot()
    first, second = _txn(spark, table, snapshot), _txn(spark, table, snapshot)
    for txn, n in ((first, 10), (second, 20)):
        txn.addAction({"domainMetadata": {"domain": f"app.{n}", "configuration": "{}", "removed": False}})
    assert first.commit("WRITE").version == 1
    landed = second.commit("WRITE")
    assert landed.version == 2 and landed.attempts == 2
    domains = {r["domain"] for r in table.snapshot().domainMetadata().collect()}
    assert domains == {"app.10", "app.20"}


def test_concurrent_appends_from_threads_all_land_once(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            _append(spark, table, [(100 + i, "t")])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert table.snapshot().version == 4
    ids = sorted(r[0] for r in table.toDF().select("id").collect())
    assert ids == [1, 2, 100, 101, 102, 103]


def test_protocol_change_conflicts_with_protocol_change(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    first, second = _txn(spark, table, snapshot), _txn(spark, table, snapshot)
    first.updateProtocol(Protocol(1, 3))
    first.commit("UPGRADE PROTOCOL")
    second.updateProtocol(Protocol(1, 4))
    with pytest.raises(ProtocolChangedError, match="version 1"):
        second.commit("UPGRADE PROTOCOL")


def test_metadata_change_by_a_winner_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    loser = _txn(spark, table, snapshot)
    table.setProperties({"delta.logRetentionDuration": "interval 2 days"})
    loser.addAction({"txn": {"appId": "x", "version": 1, "lastUpdated": 0}})
    with pytest.raises(MetadataChangedError, match="SET TBLPROPERTIES"):
        loser.commit("WRITE")


def test_same_domain_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t", **{"delta.feature.domainMetadata": "supported"})
    snapshot = table.snapshot()
    first, second = _txn(spark, table, snapshot), _txn(spark, table, snapshot)
    for txn in (first, second):
        txn.addAction({"domainMetadata": {"domain": "app.state", "configuration": "{}", "removed": False}})
    first.commit("WRITE")
    with pytest.raises(ConcurrentTransactionError, match="app.state"):
        second.commit("WRITE")


def test_same_application_transaction_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    first, second = _txn(spark, table, snapshot), _txn(spark, table, snapshot)
    for txn in (first, second):
        assert txn.txnVersion("stream-1") is None
        txn.addAction({"txn": {"appId": "stream-1", "version": 1, "lastUpdated": 0}})
    first.commit("STREAMING UPDATE")
    with pytest.raises(ConcurrentTransactionError, match="stream-1"):
        second.commit("STREAMING UPDATE")


def test_idempotent_write_is_applied_once(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    assert _append(spark, table, [(5, "e")], txnAppId="job", txnVersion=3) is not None
    assert _append(spark, table, [(5, "e")], txnAppId="job", txnVersion=3) is None
    assert _append(spark, table, [(5, "e")], txnAppId="job", txnVersion=2) is None
    assert _append(spark, table, [(6, "f")], txnAppId="job", txnVersion=4) is not None
    assert sorted(r[0] for r in table.toDF().collect()) == [1, 2, 5, 6]


def _overwrite_partition(spark, table, snapshot, partition: str) -> Transaction:
    """A transaction that read partition `partition` and replaces its files (a replaceWhere)."""
    txn = _txn(spark, table, snapshot)
    predicate = f"p = '{partition}'"
    txn.readPredicate(predicate)
    files = snapshot.files(predicate)
    txn.readFiles(files)
    txn.removeFiles(removes_of(files, int(time.time() * 1000)))
    return txn


def test_append_into_a_partition_that_was_read_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    loser = _overwrite_partition(spark, table, snapshot, "a")
    # A non-blind write into partition a: it read the table, so it is not a blind append.
    winner = _overwrite_partition(spark, table, snapshot, "zzz")
    winner.addFiles(_adds_of(spark, table, [(7, "a")]))
    winner.commit("WRITE")
    with pytest.raises(ConcurrentAppendError, match="version 1"):
        loser.commit("DELETE")


def test_append_into_another_partition_does_not_conflict(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    loser = _overwrite_partition(spark, table, snapshot, "a")
    winner = _overwrite_partition(spark, table, snapshot, "zzz")
    winner.addFiles(_adds_of(spark, table, [(7, "b")]))
    winner.commit("WRITE")
    assert loser.commit("DELETE").version == 2
    assert sorted(r[0] for r in table.toDF().collect()) == [2, 7]


def test_a_predicate_with_arithmetic_still_confines_the_read(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    loser = _txn(spark, table, snapshot)
    loser.readPredicate("p = 'a' AND id % 2 = 0")  # the partition part is readable, the rest not
    loser.addFiles(_adds_of(spark, table, [(8, "a")]))
    winner = _overwrite_partition(spark, table, snapshot, "zzz")
    winner.addFiles(_adds_of(spark, table, [(7, "b")]))
    winner.commit("WRITE")
    assert loser.commit("WRITE").version == 2  # adds to partition b were never read


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_blind_append_against_a_whole_table_overwrite(spark, tmp_path, level):
    table = _table(spark, tmp_path / "t", **{"delta.isolationLevel": level})
    snapshot = table.snapshot()
    overwrite = _txn(spark, table, snapshot)
    overwrite.readWholeTable()
    overwrite.removeFiles(removes_of(snapshot.files(), 0))
    _append(spark, table, [(9, "a")])  # a blind append wins version 1
    if level == "Serializable":
        with pytest.raises(ConcurrentAppendError):
            overwrite.commit("WRITE")
    else:  # WriteSerializable lets blind appends through; the appended row survives
        assert overwrite.commit("WRITE").version == 2
        assert [r[0] for r in table.toDF().collect()] == [9]


def test_removing_a_file_this_transaction_read_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    reader = _txn(spark, table, snapshot)
    reader.readFiles(snapshot.files("p = 'b'"))
    reader.addFiles(_adds_of(spark, table, [(8, "c")]))
    _overwrite_partition(spark, table, snapshot, "b").commit("DELETE")
    with pytest.raises(ConcurrentDeleteReadError, match="which this transaction read"):
        reader.commit("UPDATE")


def test_removing_the_same_file_twice_conflicts(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    snapshot = table.snapshot()
    first = _overwrite_partition(spark, table, snapshot, "a")
    second = _txn(spark, table, snapshot)
    second.removeFiles(removes_of(snapshot.files("p = 'a'"), 0))
    first.commit("DELETE")
    with pytest.raises(ConcurrentDeleteDeleteError, match="removes too"):
        second.commit("DELETE")


# File actions held as a DataFrame (rendered by Spark tasks) or collected to the driver (a small
# commit's): row ids are assigned, and re-assigned after a conflict, the same way by both.
@pytest.mark.parametrize(("first_held", "second_held"), [("driver", "frame"), ("frame", "driver")])
def test_row_ids_are_reassigned_after_a_concurrent_append(spark, tmp_path, first_held, second_held):
    table = _table(spark, tmp_path / "t", **{"delta.enableRowTracking": "true"})
    assert table.snapshot().rowIdHighWaterMark == 1  # two rows: ids 0 and 1
    snapshot = table.snapshot()
    first, second = _txn(spark, table, snapshot), _txn(spark, table, snapshot)
    written = _written(spark, table, [(10, "x"), (11, "x"), (12, "x"), (13, "z")])
    _add(first, written, first_held)
    _add(second, _written(spark, table, [(20, "y"), (21, "y")]), second_held)
    first.commit("WRITE")
    assert second.commit("WRITE").version == 2
    latest = table.snapshot()
    assert latest.rowIdHighWaterMark == 7
    files = latest.files().select("baseRowId", "defaultRowCommitVersion", "stats_parsed.numRecords").collect()
    ranges = sorted((r[0], r[0] + r[2] - 1) for r in files)
    assert ranges[0][0] == 0 and ranges[-1][1] == 7
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges
    assert {r[1] for r in files} == {0, 1, 2}
    rows = latest.toDF(rowTracking=True).select("_metadata.row_id").collect()
    assert sorted(r[0] for r in rows) == list(range(8))


def test_in_commit_timestamps_increase_across_a_conflict(spark, tmp_path):
    table = _table(spark, tmp_path / "t", **{"delta.enableInCommitTimestamps": "true"})
    first_info = _commit_lines(tmp_path / "t", 0)[0]["commitInfo"]
    assert first_info["inCommitTimestamp"] > 0
    snapshot = table.snapshot()
    loser = _txn(spark, table, snapshot)
    winner_version = _append(spark, table, [(3, "c")]).version
    loser.addFiles(_adds_of(spark, table, [(4, "d")]))
    landed = loser.commit("WRITE")
    stamps = [_commit_lines(tmp_path / "t", v)[0]["commitInfo"]["inCommitTimestamp"] for v in range(3)]
    assert winner_version == 1 and landed.version == 2
    assert stamps == sorted(stamps) and len(set(stamps)) == 3


def test_enabling_in_commit_timestamps_records_the_enablement(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    result = table.setProperties({"delta.enableInCommitTimestamps": "true"})
    config = table.snapshot().configuration
    assert config["delta.inCommitTimestampEnablementVersion"] == str(result.version)
    ict = _commit_lines(tmp_path / "t", result.version)[0]["commitInfo"]["inCommitTimestamp"]
    assert config["delta.inCommitTimestampEnablementTimestamp"] == str(ict)
    assert "inCommitTimestamp" in table.snapshot().protocol.writerFeatures


def test_append_only_tables_refuse_removes(spark, tmp_path):
    table = _table(spark, tmp_path / "t", **{"delta.appendOnly": "true"})
    with pytest.raises(AppendOnlyTableError, match="append-only"):
        write(spark.createDataFrame([(1, "a")], "id long, p string"), table.path, mode="overwrite")
    assert _append(spark, table, [(3, "c")]).version == 1


def test_unknown_writer_features_are_refused_by_name(spark, tmp_path):
    table = _table(spark, tmp_path / "t")
    txn = _txn(spark, table)
    txn.updateProtocol(Protocol(1, 7, None, ("appendOnly", "someFutureFeature")))
    with pytest.raises(UnsupportedWriterFeatureError, match="someFutureFeature"):
        txn.commit("UPGRADE PROTOCOL")
    assert table.snapshot().version == 0


def _written(spark, table: DeltaTable, rows):
    """New data files holding `rows`, written like a real append (`WrittenFiles`)."""
    from deltaspark.operations.write import conform, write_data_files

    snapshot = table.snapshot()
    schema = snapshot.schema
    df = conform(spark.createDataFrame(rows, "id long, p string"), schema, table.path)
    return write_data_files(
        spark, snapshot.tableRoot, schema, snapshot.partitionColumns, snapshot.configuration, df
    )


def _adds_of(spark, table: DeltaTable, rows):
    """`add` actions (a DataFrame) for new data files holding `rows`."""
    return _written(spark, table, rows).adds_frame(spark)


def _add(txn, written, held: str) -> None:
    """Add `written`'s files as a DataFrame (`frame`) or as lines collected to the driver."""
    if held == "driver":
        assert written.lines is not None and len(written.lines) == written.files > 0
        txn.addFiles(written.adds, written.files, written.lines)
    else:
        txn.addFiles(written.adds_frame(txn.spark))
