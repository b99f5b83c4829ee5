"""The checkpoint writer: every protocol rule it implements, read back with pyarrow (not deltaspark),
with deltaspark, with the plain-Python reference replay and with delta-rs (`deltalake`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable, UnsupportedFeatureError
from deltaspark.errors import CheckpointWriteError, UnsupportedSessionError, UnsupportedWriterFeatureError
from deltaspark.log import driver_replay
from deltaspark.log.json_checksum import checksum_of_text
from deltaspark.log.paths import join_key_of_canonical
from deltaspark.log.replay import count_actions_bound
from deltaspark.maintenance import checkpoint_writer
from deltaspark.maintenance.checkpoint_writer import (
    _checkpointed_rows,
    _classic_layout,
    _file_actions,
    _plan,
    write_checkpoint,
)
from deltaspark.spark_compat import is_connect
from tests.conftest import REPO, replay_plan
from tests.log_builder import LogBuilder, add, commit_info, domain, dv, metadata, protocol, remove, txn
from tests.reference_replay import dv_id, replay
from tests.suites import in_this_suite
from tests.test_conformance import REFUSED, TABLES, _absolute, _stats_differences

DAY = 86_400_000
NOW = int(time.time() * 1000)
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _log_names(root: Path) -> set[str]:
    return set(os.listdir(root / "_delta_log"))


def _rows(path: Path) -> list[dict]:
    """A parquet checkpoint file's rows, each as {action: value} for its non-null column."""
    out = []
    for row in pq.read_table(path).to_pylist():
        present = {k: v for k, v in row.items() if v is not None}
        assert len(present) == 1, f"a checkpoint row holds exactly one action: {row}"
        out.append(present)
    return out


def _by_kind(rows: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for row in rows:
        ((kind, value),) = row.items()
        kinds.setdefault(kind, []).append(value)
    return kinds


def _last_checkpoint(root: Path) -> dict:
    text = (root / "_delta_log" / "_last_checkpoint").read_text()
    document = json.loads(text)
    assert checksum_of_text(text) == document["checksum"]  # canonical-JSON MD5 (protocol appendix)
    return document


def _files(snapshot) -> list[tuple]:
    return sorted(
        (r["path"], r["size"], dv_id(r["deletionVector"] and r["deletionVector"].asDict()))
        for r in snapshot.files().select("path", "size", "deletionVector").collect()
    )


# ---- classic checkpoints: content and schema ----------------------------------------------------


@pytest.fixture
def mixed_table(log):
    """Adds, a replaced file, tombstones of every age, txns, domains, cdc and commitInfo."""
    stats = {"numRecords": 2, "minValues": {"id": 1}, "maxValues": {"id": 2}, "nullCount": {"id": 0}}
    log.commit(
        0,
        protocol(),
        metadata(partition_columns=["part"]),
        add("part=a/1", partition_values={"part": "a"}, stats=stats, tags={"k": "v"}),
        add("part=b/2", partition_values={"part": "b"}),
        txn("app", 3, NOW),
        domain("user.keep", '{"x":1}'),
        domain("user.dropped", "{}"),
        commit_info(),
    )
    log.commit(
        1,
        remove("part=a/1", NOW - DAY, partitionValues={"part": "a"}, size=100, stats="{}", tags={"t": "1"}),
        add("part=a/3", partition_values={"part": "a"}),
        {"cdc": {"path": "_change_data/c1", "partitionValues": {}, "size": 5, "dataChange": False}},
        commit_info(),
    )
    log.commit(
        2,
        remove("part=b/2", NOW - 30 * DAY),  # older than the default 1-week retention: expired
        remove("never-added", None),  # no deletionTimestamp counts as 0: expired
        add("x%20y", partition_values={"part": "c"}),
        domain("user.dropped", "{}", removed=True),
        txn("app", 4, NOW),
        commit_info(),
    )
    return log


@pytest.mark.usefixtures("replay")  # replayed on the driver, and by Spark
def test_classic_checkpoint_holds_exactly_the_reconciled_state(spark, mixed_table):
    root = mixed_table.root
    before = DeltaTable.forPath(spark, mixed_table.path).snapshot()
    result = DeltaTable.forPath(spark, mixed_table.path).checkpoint()

    name = "00000000000000000002.checkpoint.parquet"
    assert (result.kind, result.files, result.parts, result.version) == ("classic", [name], None, 2)
    assert _log_names(root) == {f"{v:020d}.json" for v in range(3)} | {name, "_last_checkpoint"}
    table = pq.read_table(root / "_delta_log" / name)
    # Exactly the protocol's checkpoint columns: no commitInfo, no cdc.
    assert table.column_names == ["protocol", "metaData", "txn", "add", "remove", "domainMetadata"]
    add_fields = [f.name for f in table.schema.field("add").type]
    remove_fields = [f.name for f in table.schema.field("remove").type]
    assert (
        "stats" in add_fields
        and "stats_parsed" not in add_fields
        and "partitionValues_parsed" not in add_fields
    )
    assert "stats" not in remove_fields and "tags" not in remove_fields  # tombstones carry neither
    kinds = _by_kind(_rows(root / "_delta_log" / name))
    assert sorted(a["path"] for a in kinds["add"]) == ["part=a/3", "x%20y"]
    assert [r["path"] for r in kinds["remove"]] == ["part=a/1"]  # only the unexpired tombstone
    assert kinds["remove"][0]["deletionTimestamp"] == NOW - DAY and kinds["remove"][0]["size"] == 100
    assert all(a["dataChange"] is False for a in kinds["add"] + kinds["remove"])
    assert kinds["protocol"] == [
        {"minReaderVersion": 1, "minWriterVersion": 2, "readerFeatures": None, "writerFeatures": None}
    ]
    assert kinds["metaData"][0]["id"] == before.metadata.id
    assert kinds["metaData"][0]["partitionColumns"] == ["part"]
    assert kinds["txn"] == [{"appId": "app", "version": 4, "lastUpdated": NOW}]
    assert [d["domain"] for d in kinds["domainMetadata"]] == ["user.keep"]  # removed domain dropped
    assert table.num_rows == 1 + 1 + 1 + 2 + 1 + 1
    footer = pq.ParquetFile(root / "_delta_log" / name).metadata
    assert footer.row_group(0).column(0).compression == "ZSTD"
    groups = [footer.row_group(g) for g in range(footer.num_row_groups)]
    chunks = [group.column(c) for group in groups for c in range(footer.num_columns)]
    assert not any(chunk.has_dictionary_page for chunk in chunks)  # mostly unique strings: plain encoded

    hint = _last_checkpoint(root)
    assert hint["version"] == 2 and hint["size"] == table.num_rows and hint["numOfAddFiles"] == 2
    assert hint["sizeInBytes"] == (root / "_delta_log" / name).stat().st_size and "parts" not in hint
    assert (result.numActions, result.numOfAddFiles, result.numOfRemoves) == (7, 2, 1)

    after = DeltaTable.forPath(spark, mixed_table.path).snapshot()
    assert after.segment.checkpoint.files[0].name == name and after.segment.tail_files == ()
    assert _files(after) == _files(before)
    kept = ["path", "deletionTimestamp", "partitionValues", "size", "deletionVector"]  # no stats/tags
    assert after.tombstones().select(kept).collect() == before.tombstones().select(kept).collect()
    assert after.transactions().collect() == before.transactions().collect()
    assert after.domainMetadata().collect() == before.domainMetadata().collect()
    assert sorted(replay(mixed_table.path).files) == sorted(replay_without_checkpoint(mixed_table).files)


def replay_without_checkpoint(log):
    scratch = log.root.parent / "json-only"
    shutil.copytree(
        log.root / "_delta_log", scratch / "_delta_log", ignore=shutil.ignore_patterns("*checkpoint*")
    )
    return replay(str(scratch))


# ---- a small state's checkpoint, written on the driver --------------------------------------------


def _checkpoint_jobs(spark, table_path: str, group: str):
    """Checkpoint a loaded table inside a job group; the result and the Spark jobs it ran."""
    DeltaTable.forPath(spark, table_path).snapshot()  # loaded (and replayed) before, as after a commit
    spark.sparkContext.setJobGroup(group, "checkpoint")
    try:
        result = DeltaTable.forPath(spark, table_path).checkpoint()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return result, list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def _rich_small_log(log, *extra_commits):
    """A small table with everything a checkpoint holds: partition values (one null), statistics,
    tags, a DV, row tracking fields, tombstones young and expired, txns (one past the table's txn
    retention), live and removed domains."""
    stats = {"numRecords": 2, "minValues": {"id": 1}, "maxValues": {"id": 2}, "nullCount": {"id": 0}}
    config = {"delta.setTransactionRetentionDuration": "interval 30 days", "delta.checkpointInterval": "100"}
    log.commit(
        0,
        protocol(3, 7, ["deletionVectors"], ["deletionVectors", "domainMetadata"]),
        metadata(partition_columns=["part"], configuration=config),
        add("part=a/1", partition_values={"part": "a"}, stats=stats, tags={"k": "v"}),
        add("part=b/2", partition_values={"part": None}, baseRowId=10, defaultRowCommitVersion=0),
        txn("app", 3, NOW),
        txn("stale", 1, NOW - 40 * DAY),
        domain("user.keep", '{"x":1}'),
        domain("user.dropped", "{}"),
        commit_info(),
    )
    log.commit(
        1,
        remove("part=a/1", NOW - DAY, partitionValues={"part": "a"}, size=100, stats="{}", tags={"t": "1"}),
        remove("gone", NOW - 30 * DAY),
        add("part=a/3", partition_values={"part": "a"}, deletionVector=dv("abc")),
        txn("app", 4, NOW),
        domain("user.dropped", "{}", removed=True),
        commit_info(),
    )
    for version, actions in enumerate(extra_commits, start=2):
        log.commit(version, *actions)
    return log


def test_a_small_state_is_checkpointed_on_the_driver_exactly_as_spark_writes_it(spark, tmp_path):
    """A state the driver replayed is written there, with no Spark job, and the file is the Spark
    route's: the same parquet schema and footer types, the same rows, the same hint."""
    driver = _rich_small_log(LogBuilder(tmp_path / "driver"))
    by_spark = tmp_path / "spark"
    shutil.copytree(driver.root, by_spark)
    name = "00000000000000000001.checkpoint.parquet"

    driver_replay.clear_cache()
    result, jobs = _checkpoint_jobs(spark, driver.path, "checkpoint-on-driver")
    assert jobs == [] and result.kind == "classic" and result.files == [name]
    spark.conf.set(driver_replay.MAX_BYTES_CONF, "0")
    try:
        spark_result, spark_jobs = _checkpoint_jobs(spark, str(by_spark), "checkpoint-by-spark")
    finally:
        spark.conf.unset(driver_replay.MAX_BYTES_CONF)
    assert spark_jobs, "the Spark route ran no job: the comparison compares nothing"

    ours, theirs = driver.root / "_delta_log" / name, by_spark / "_delta_log" / name
    assert pq.ParquetFile(ours).schema.equals(pq.ParquetFile(theirs).schema)
    spark_types = b"org.apache.spark.sql.parquet.row.metadata"
    footer = pq.ParquetFile(ours).metadata
    assert json.loads(footer.metadata[spark_types]) == json.loads(
        pq.ParquetFile(theirs).metadata.metadata[spark_types]
    )
    assert footer.row_group(0).column(0).compression == "ZSTD"
    assert not any(footer.row_group(0).column(c).has_dictionary_page for c in range(footer.num_columns))
    assert sorted(map(str, _rows(ours))) == sorted(map(str, _rows(theirs)))
    kinds = _by_kind(_rows(ours))
    assert [t["appId"] for t in kinds["txn"]] == ["app"] and kinds["txn"][0][
        "version"
    ] == 4  # "stale" expired
    assert [d["domain"] for d in kinds["domainMetadata"]] == ["user.keep"]
    assert [r["path"] for r in kinds["remove"]] == ["part=a/1"]
    assert {a["path"]: a["partitionValues"] for a in kinds["add"]}["part=b/2"] == [("part", None)]
    same = ("version", "size", "numOfAddFiles")
    assert [_last_checkpoint(driver.root)[k] for k in same] == [_last_checkpoint(by_spark)[k] for k in same]
    assert (result.numActions, result.numOfAddFiles, result.numOfRemoves, result.numTransactions) == (
        spark_result.numActions,
        spark_result.numOfAddFiles,
        spark_result.numOfRemoves,
        spark_result.numTransactions,
    )

    driver_replay.clear_cache()
    after = DeltaTable.forPath(spark, driver.path).snapshot()
    assert after.segment.checkpoint.files[0].name == name and after.segment.tail_files == ()
    assert _files(after) == _files(DeltaTable.forPath(spark, str(by_spark)).snapshot())


@pytest.mark.parametrize(
    "case",
    [
        "txn after another action on its line",
        "txn key spelled otherwise",
        "draft domain configuration",
        "statistics as a struct",
        "lz4",
    ],
)
def test_what_the_driver_cannot_write_as_spark_would_is_left_to_spark(spark, log, case):
    """A txn or domain the driver cannot read exactly as Spark's replay would, or a layout the
    driver does not write: the checkpoint is Spark's (jobs ran), and holds what the snapshot says."""
    extra: list = []
    if case == "txn after another action on its line":
        extra = [commit_info(), {"commitInfo": {"timestamp": 1}, "txn": {"appId": "app", "version": 9}}]
    elif case == "txn key spelled otherwise":
        extra = [commit_info(), {"TXN": {"appId": "other", "version": 1}}]
    elif case == "draft domain configuration":
        extra = [commit_info(), {"domainMetadata": {"domain": "user.draft", "configuration": {"a": "1"}}}]
    elif case == "statistics as a struct":
        config = {"delta.checkpoint.writeStatsAsStruct": "true"}
        extra = [commit_info(), metadata(partition_columns=["part"], configuration=config)]
    else:
        config = {"delta.parquet.compression.codec": "lz4"}
        extra = [commit_info(), metadata(partition_columns=["part"], configuration=config)]
    _rich_small_log(log, extra)
    driver_replay.clear_cache()
    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    assert snapshot.statePlan.held is not None  # the file actions are still the driver's
    result, jobs = _checkpoint_jobs(spark, log.path, f"left-to-spark-{case}")
    assert jobs and result.version == 2
    kinds = _by_kind(_rows(log.log / "00000000000000000002.checkpoint.parquet"))
    expected = sorted((r["appId"], r["version"]) for r in snapshot.transactions().collect())
    assert sorted((t["appId"], t["version"]) for t in kinds["txn"]) == expected
    expected_domains = sorted(r["domain"] for r in snapshot.domainMetadata().collect())
    assert sorted(d["domain"] for d in kinds.get("domainMetadata", [])) == expected_domains


CM_SCHEMA = {
    "type": "struct",
    "fields": [
        {
            "name": f"logical_{name}",
            "type": kind,
            "nullable": True,
            "metadata": {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": f"col-{name}"},
        }
        for i, (name, kind) in enumerate([("id", "long"), ("ts", "timestamp"), ("day", "date")], start=1)
    ],
}


def test_struct_stats_and_typed_partition_values_use_physical_names(spark, log):
    config = {
        "delta.columnMapping.mode": "name",
        "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": "false",
        "delta.parquet.compression.codec": "snappy",
    }
    stats = {
        "numRecords": 2,
        "minValues": {"col-id": 1, "col-ts": "2024-01-02T03:04:05.000Z"},
        "maxValues": {"col-id": 9, "col-ts": "2024-01-03T00:00:00.000Z"},
        "nullCount": {"col-id": 0, "col-ts": 1},
    }
    log.commit(
        0,
        protocol(2, 5),
        metadata(schema=CM_SCHEMA, partition_columns=["logical_day"], configuration=config),
        add("col-day=2024-01-02/f1", partition_values={"col-day": "2024-01-02"}, stats=stats),
        add("col-day=__HIVE_DEFAULT_PARTITION__/f2", partition_values={"col-day": None}),
    )
    before = DeltaTable.forPath(spark, log.path).snapshot()
    DeltaTable.forPath(spark, log.path).checkpoint()
    path = log.log / "00000000000000000000.checkpoint.parquet"
    add_type = pq.read_schema(path).field("add").type
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"  # the table's codec
    names = [f.name for f in add_type]
    assert "stats" not in names  # writeStatsAsJson=false: omitted
    parsed = add_type.field("stats_parsed").type
    assert [f.name for f in parsed.field("minValues").type] == ["col-id", "col-ts"]
    assert str(parsed.field("minValues").type.field("col-ts").type) == "timestamp[us, tz=UTC]"  # INT64 micros
    partitions = add_type.field("partitionValues_parsed").type
    assert [(f.name, str(f.type)) for f in partitions] == [("col-day", "date32[day]")]
    adds = {a["path"]: a for a in _by_kind(_rows(path))["add"]}
    first = adds["col-day=2024-01-02/f1"]
    assert str(first["partitionValues_parsed"]["col-day"]) == "2024-01-02"
    assert first["stats_parsed"]["numRecords"] == 2 and first["stats_parsed"]["maxValues"]["col-id"] == 9
    assert first["stats_parsed"]["nullCount"] == {"col-id": 0, "col-ts": 1}
    assert adds["col-day=__HIVE_DEFAULT_PARTITION__/f2"]["partitionValues_parsed"]["col-day"] is None

    after = DeltaTable.forPath(spark, log.path).snapshot()
    assert after.segment.tail_files == ()
    columns = ["path", "stats_parsed", "partitionValues_parsed"]
    assert sorted(after.files().select(columns).collect()) == sorted(before.files().select(columns).collect())


@pytest.mark.parametrize(
    ("proto", "expected"),
    [
        (protocol(3, 7), ([], [])),  # reader 3 / writer 7: lists present even when empty
        (protocol(1, 7, writer_features=["appendOnly"]), (None, ["appendOnly"])),
        (protocol(2, 5), (None, None)),  # neither: the lists, if written, must be null
    ],
)
def test_feature_lists_are_non_null_exactly_for_reader_3_and_writer_7(spark, log, proto, expected):
    log.commit(0, proto, metadata(), add("a"))
    DeltaTable.forPath(spark, log.path).checkpoint()
    (row,) = _by_kind(_rows(log.log / "00000000000000000000.checkpoint.parquet"))["protocol"]
    assert (row["readerFeatures"], row["writerFeatures"]) == expected


def _log_with_a_txn_and_a_domain(spark, log: LogBuilder, where: str) -> None:
    """Version 2 of a log whose txn and domain are in a checkpoint at version 1, in a commit of the
    tail (the txn spelled with spaces, after a blank line), or nowhere."""
    log.commit(0, protocol(), metadata(), add("a"))
    if where == "checkpoint":
        log.commit(1, txn("app", 1, NOW), domain("user.d", "c"))
        write_checkpoint(DeltaTable.forPath(spark, log.path).snapshot())
    elif where == "tail":
        spaced = json.dumps(txn("app", 1, NOW), separators=(" , ", " : "))
        log.raw(f"{1:020d}.json", f"\n {spaced}\n" + json.dumps(domain("user.d", "c")) + "\n")
    else:
        log.commit(1, commit_info())
    log.commit(2, add("b"))


def _checkpoint_keeping_the_txn_and_the_domain(snapshot, log: LogBuilder, where: str):
    """Checkpoints `snapshot` (version 2 of `_log_with_a_txn_and_a_domain`) and checks the txn and
    the domain are in it unless they were nowhere; the result and the checkpoint's actions."""
    result = write_checkpoint(snapshot)
    kinds = _by_kind(_rows(log.log / "00000000000000000002.checkpoint.parquet"))
    want_txn = [] if where == "nowhere" else [{"appId": "app", "version": 1, "lastUpdated": NOW}]
    assert kinds.get("txn", []) == want_txn and result.numTransactions == len(want_txn)
    assert [d["domain"] for d in kinds.get("domainMetadata", [])] == (
        [] if where == "nowhere" else ["user.d"]
    )
    return result, kinds


@pytest.mark.parametrize("where", ["checkpoint", "tail", "nowhere"])
def test_txns_and_domains_are_bounded_from_the_log_files_and_kept(spark, log, spark_replay, where):
    """A Spark-replayed checkpoint skips the txn and domain replays only when the log's files hold
    none; a txn spelled with spaces, after a blank line, or in an earlier checkpoint is found."""
    _log_with_a_txn_and_a_domain(spark, log, where)

    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    files = [
        *snapshot.segment.tail_files,
        *(snapshot.segment.checkpoint.files if where == "checkpoint" else []),
    ]
    bounds = count_actions_bound(spark, files, ["txn", "domainMetadata"])
    tail = [log.log / f.name for f in snapshot.segment.tail_files]
    lines = sum(1 for p in tail for x in p.read_text().splitlines() if x.strip())
    rows = 5 if where == "checkpoint" else 0  # protocol, metaData, add, txn, domain
    assert bounds["actions"] == lines + rows
    expected = 0 if where == "nowhere" else 1
    assert (bounds["txn"], bounds["domainMetadata"]) == (expected, expected)

    result, kinds = _checkpoint_keeping_the_txn_and_the_domain(snapshot, log, where)
    assert sorted(a["path"] for a in kinds["add"]) == ["a", "b"]


@pytest.mark.parametrize("where", ["checkpoint", "tail", "nowhere"])
def test_txns_and_domains_are_counted_by_the_driver_replay_and_kept(spark, log, where):
    """A driver-replayed checkpoint takes its txn and domain bounds from the replay's own reading
    of the log files (a checkpoint part's rows too, read afresh), and skips a kind's replay only
    where the files hold none of it."""
    _log_with_a_txn_and_a_domain(spark, log, where)
    driver_replay.clear_cache()  # the checkpoint's part is read, not a state held from before it

    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    state = snapshot.statePlan.held
    assert state is not None and (where == "checkpoint") == (snapshot.segment.checkpoint is not None)
    expected = 0 if where == "nowhere" else 1
    assert state.counted.get("txn", 0) == expected and state.counted.get("domainMetadata", 0) == expected

    result, kinds = _checkpoint_keeping_the_txn_and_the_domain(snapshot, log, where)
    assert result.numOfAddFiles == 2


def test_the_driver_replay_counts_the_file_actions_a_checkpoint_keeps():
    """`FileState.checkpointed`: live files, and tombstones deleted after the cutoff (a tombstone
    without a deletionTimestamp is as old as can be)."""
    state = driver_replay.FileState("file:/t", False)
    state.apply(0, True, ("a", ""), json.dumps({"path": "a"}))
    state.apply(1, False, ("b", ""), json.dumps({"path": "b", "deletionTimestamp": 100}))
    state.apply(1, False, ("c", ""), json.dumps({"path": "c", "deletionTimestamp": 300}))
    state.apply(1, False, ("d", ""), json.dumps({"path": "d", "deletionTimestamp": None}))
    assert [state.checkpointed(cutoff) for cutoff in (-1, 99, 100, 299, 300)] == [4, 3, 2, 2, 1]


# ---- multi-part checkpoints ------------------------------------------------------------------------


ESCAPED_ADDS = ["k%20l", "m%3Dn", "o%2Bp"]
ESCAPED_KEYS = ["k l", "m=n", "o+p"]


@pytest.fixture(params=["driver", "broadcast", "union", "json-only"])
def multi_part_table(request, spark, log):
    """A DV table of 17 reconciled file actions at version 1, replayed by each plan: on the driver,
    or by Spark over a checkpoint at version 0 plus a tail (broadcast or union plan), or over the
    JSON commits alone. Five adds of the tail are not plain relative paths (escapes, and an
    absolute URI under the table), so their layout key differs from the path as logged."""
    features = ["deletionVectors"]
    log.commit(0, protocol(3, 7, features, features), metadata(), *[add(f"f{i}") for i in range(10)])
    if request.param in ("broadcast", "union"):
        write_checkpoint(DeltaTable.forPath(spark, log.path).snapshot())
    log.commit(
        1,
        remove("f3", NOW),
        add("f3", dv=dv("dvA")),
        remove("f4", NOW),
        add("f4", dv=dv("dvB", offset=None)),
        add("h%20i"),
        add(f"file://{log.path}/j"),
        *[add(p) for p in ESCAPED_ADDS],
    )
    with replay_plan(spark, request.param):
        yield request.param


def _segment_action_bound(log: LogBuilder, checkpointed: bool) -> int:
    """The actions in the files a Spark replay of version 1 reads, counted from the files."""
    commits = sorted(log.log.glob("*.json"))
    lines = sum(len(p.read_text().splitlines()) for p in (commits[1:] if checkpointed else commits))
    if checkpointed:
        return pq.read_metadata(log.log / "00000000000000000000.checkpoint.parquet").num_rows + lines
    return lines


def test_multi_part_parts_are_spark_hash_partitions_of_the_join_key(spark, log, multi_part_table):
    result = DeltaTable.forPath(spark, log.path).checkpoint(actionsPerPart=3)

    # Hash partitions: from the exact 17 file actions when the driver replayed the log, else from
    # the actions in the segment's files (an upper bound, counted without a replay).
    plan = multi_part_table
    file_actions = 17 if plan == "driver" else _segment_action_bound(log, plan != "json-only")
    hash_parts = -(-file_actions // 3)
    assert (result.numOfAddFiles, result.numOfRemoves) == (15, 2)
    parts = sorted(n for n in _log_names(log.root) if n.startswith("00000000000000000001.checkpoint."))
    p = len(parts)
    assert result.kind == "multi-part" and result.parts == p and result.files == parts
    assert parts == [f"00000000000000000001.checkpoint.{o:010d}.{p:010d}.parquet" for o in range(1, p + 1)]
    assert _last_checkpoint(log.root)["parts"] == p
    placed: dict[tuple[str, str | None], int] = {}
    for o, name in enumerate(parts, start=1):
        for row in _rows(log.log / name):
            ((kind, value),) = row.items()
            if kind in ("add", "remove"):
                placed[(value["path"], dv_id(value.get("deletionVector")) or None)] = o
            else:
                placed[(kind, None)] = o
    # Expected: Spark's hash partitioning (Murmur3, seed 42) of the join key (a function of the
    # canonical path: the path as logged for a plain relative one, as Spark's Delta lays parts
    # out) into `hash_parts` partitions, whichever plan replayed the log; empty partitions leave
    # no file, the others are numbered in partition order, and protocol and metadata come last,
    # in a part of their own.
    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    keys = snapshot.fileActions().withColumn("key", join_key_of_canonical("path_key", snapshot.tableRoot))
    assert {r["key"] for r in keys.where("is_add").collect()} == {
        *(f"f{i}" for i in range(10)),
        "h i",
        "j",
        *ESCAPED_KEYS,
    }
    bucket = F.expr(f"pmod(hash(key), {hash_parts})")
    hashed = {
        (r["path"], r["dv"]): r["bucket"]
        for r in keys.select(
            F.coalesce("add.path", "remove.path").alias("path"),
            F.when(F.col("dv_id") != "", F.col("dv_id")).alias("dv"),
            bucket.alias("bucket"),
        ).collect()
    }
    # The test's power, whatever the temporary path: a layout by the logged path instead of the key
    # must misplace at least one of the fixed escaped adds.
    by_logged = F.expr(f"pmod(hash(path), {hash_parts})")
    assert any(
        r["a"] != r["b"]
        for r in spark.createDataFrame(
            list(zip(ESCAPED_ADDS, ESCAPED_KEYS, strict=True)), "path string, key string"
        )
        .select(by_logged.alias("a"), bucket.alias("b"))
        .collect()
    )
    used = sorted(set(hashed.values()))
    assert p == len(used) + 1 and p <= hash_parts + 1
    assert {k: v for k, v in placed.items() if k in hashed} == {
        k: used.index(b) + 1 for k, b in hashed.items()
    }
    assert placed[("protocol", None)] == placed[("metaData", None)] == p
    assert ("f3", "udvA@1") in placed and ("f3", None) in placed and ("f4", "udvB") in placed
    assert ("h%20i", None) in placed and (f"file://{log.path}/j", None) in placed

    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    assert len(snapshot.segment.checkpoint.files) == p and snapshot.segment.tail_files == ()
    assert len(_files(snapshot)) == 15 and len(replay(log.path).files) == 15


@pytest.mark.usefixtures("replay")
def test_a_part_lost_after_the_write_fails_the_check_and_nothing_is_visible(spark, log, monkeypatch):
    """The staged files are checked against the adds observed on their way into the writer."""
    log.commit(0, protocol(), metadata(), *[add(f"f{i}") for i in range(8)])
    written = checkpoint_writer._written_files

    def one_part_lost(*args):
        files = written(*args)
        lost = next(w for w in files if w.counts["add"])  # an empty partition may leave an empty file
        return [w for w in files if w is not lost]

    monkeypatch.setattr(checkpoint_writer, "_written_files", one_part_lost)
    with pytest.raises(CheckpointWriteError, match=r"adds written, 8 live; nothing was made visible"):
        DeltaTable.forPath(spark, log.path).checkpoint(actionsPerPart=2)
    assert not [n for n in _log_names(log.root) if "checkpoint" in n]


@pytest.mark.parametrize("plan", ["union", "json-only", "broadcast"])
def test_a_multi_part_layout_shuffles_the_state_once(spark, log, plan):
    """The union plan's window and the part layout share one shuffle (by the `join_key` column it
    carries); the broadcast plan (the checkpoint streams through unshuffled) shuffles once for the
    layout, computing the key in the shuffle from the logged path, without a canonical path."""
    log.commit(0, protocol(), metadata(), *[add(f"f{i}") for i in range(6)])
    if plan != "json-only":
        write_checkpoint(DeltaTable.forPath(spark, log.path).snapshot())
    log.commit(1, remove("f1", NOW), add("g"))
    with replay_plan(spark, plan):
        snapshot = DeltaTable.forPath(spark, log.path).snapshot()
        plan_ = _plan(snapshot, 2, None)
        files = _file_actions(snapshot, plan_, _checkpointed_rows(snapshot, 4))
        text = _explain(_classic_layout(snapshot, files, 4, {"txn": 1, "domainMetadata": 1}))
    # One shuffle into the 4 parts: the union plan's window, or the layout after a broadcast plan
    # (whose ranked tail is shuffled by Spark's default partitioning).
    assert text.count("REPARTITION_BY_NUM") == 1, text
    layout = re.search(r"Exchange hashpartitioning\((.*), 4\), REPARTITION_BY_NUM", text)
    assert layout, text
    if plan == "broadcast":
        assert "path_key" not in layout[1] and "add" in layout[1], text
    else:
        assert re.fullmatch(r"join_key#\d+", layout[1]), text
        assert len(re.findall(r"Exchange hashpartitioning\(join_key#", text)) == 1, text


def _explain(frame) -> str:
    return frame._jdf.queryExecution().executedPlan().toString()


# ---- V2 checkpoints ----------------------------------------------------------------------------------


@pytest.fixture
def v2_table(log):
    features = ["v2Checkpoint"]
    log.commit(
        0,
        protocol(3, 7, features, [*features, "domainMetadata"]),
        metadata(configuration={"delta.checkpointPolicy": "v2"}),
        *[add(f"f{i}", stats={"numRecords": i}) for i in range(7)],
        domain("user.d", "cfg"),
        txn("stream", 9, NOW),
    )
    log.commit(1, remove("f6", NOW), commit_info())
    return log


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_v2_checkpoint_puts_file_actions_in_sidecars_and_the_rest_in_a_uuid_named_file(spark, v2_table, fmt):
    root = v2_table.root
    result = DeltaTable.forPath(spark, v2_table.path).checkpoint(actionsPerPart=2, v2Format=fmt)
    new = sorted(n for n in _log_names(root) if ".checkpoint." in n)
    assert len(new) == 1 and re.fullmatch(rf"00000000000000000001\.checkpoint\.{UUID}\.{fmt}", new[0])
    assert result.kind == "v2" and result.files == new and result.parts is None
    top_path = root / "_delta_log" / new[0]
    if fmt == "json":
        top = [json.loads(line) for line in top_path.read_text().splitlines()]
        assert all(len(action) == 1 for action in top)
    else:
        top = _rows(top_path)
    kinds = _by_kind(top)
    assert [{k: v for k, v in c.items() if v is not None} for c in kinds["checkpointMetadata"]] == [
        {"version": 1}
    ]
    assert len(kinds["protocol"]) == len(kinds["metaData"]) == 1
    assert [t["appId"] for t in kinds["txn"]] == ["stream"] and [
        d["domain"] for d in kinds["domainMetadata"]
    ] == ["user.d"]
    assert "add" not in kinds and "remove" not in kinds  # all file actions are in sidecars, none inline

    sidecar_dir = root / "_delta_log" / "_sidecars"
    on_disk = {n: (sidecar_dir / n).stat().st_size for n in os.listdir(sidecar_dir) if n.endswith(".parquet")}
    assert {s["path"]: s["sizeInBytes"] for s in kinds["sidecar"]} == on_disk
    assert len(on_disk) >= 2 and sorted(on_disk) == sorted(result.sidecars)
    sidecar_rows = []
    for name in on_disk:
        assert pq.read_schema(sidecar_dir / name).names == ["add", "remove"]
        sidecar_rows += _rows(sidecar_dir / name)
    file_kinds = _by_kind(sidecar_rows)
    assert len(file_kinds["add"]) == 6 and [r["path"] for r in file_kinds["remove"]] == ["f6"]

    hint = _last_checkpoint(root)
    assert hint["v2Checkpoint"]["path"] == new[0] and "parts" not in hint
    assert hint["size"] == len(top) + len(sidecar_rows) == result.numActions
    assert hint["sizeInBytes"] == top_path.stat().st_size + sum(on_disk.values())

    snapshot = DeltaTable.forPath(spark, v2_table.path).snapshot()
    assert snapshot.segment.checkpoint.files[0].name == new[0] and snapshot.segment.tail_files == ()
    assert [p for p, _, _ in _files(snapshot)] == [f"f{i}" for i in range(6)]
    assert sorted(p for p, _ in replay(v2_table.path).files) == [f"f{i}" for i in range(6)]
    from deltalake import DeltaTable as RsTable

    rs = RsTable(v2_table.path)
    assert rs.version() == 1 and sorted(Path(u).name for u in rs.file_uris()) == [f"f{i}" for i in range(6)]


def test_v2_feature_with_classic_policy_writes_one_classic_file_never_multi_part(spark, log):
    features = ["v2Checkpoint"]
    log.commit(
        0,
        protocol(3, 7, features, features),
        metadata(configuration={"delta.checkpointPolicy": "classic"}),
        *[add(f"f{i}") for i in range(5)],
    )
    result = DeltaTable.forPath(spark, log.path).checkpoint(actionsPerPart=1)
    assert result.kind == "classic" and result.files == ["00000000000000000000.checkpoint.parquet"]
    assert "checkpointMetadata" not in pq.read_schema(log.log / result.files[0]).names  # V1 spec


# ---- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proto", "words"),
    [
        (protocol(1, 7, writer_features=["appendOnly", "someFutureFeature"]), "someFutureFeature"),
        (protocol(1, 7, writer_features=["coordinatedCommits-preview"]), "coordinatedCommits-preview"),
        (protocol(1, 8), "writer version 8"),
    ],
)
def test_writer_features_deltaspark_does_not_implement_are_refused_by_name(spark, log, proto, words):
    log.commit(0, proto, metadata(), add("a"))
    with pytest.raises(UnsupportedWriterFeatureError, match=words) as error:
        DeltaTable.forPath(spark, log.path).checkpoint()
    assert isinstance(error.value, UnsupportedFeatureError)
    assert _log_names(log.root) == {"00000000000000000000.json"}  # nothing written, nothing staged


def test_checkpoint_protection_forbids_checkpoints_before_its_boundary(spark, log):
    config = {"delta.requireCheckpointProtectionBeforeVersion": "2"}
    log.commit(0, protocol(1, 7, writer_features=["checkpointProtection"]), metadata(configuration=config))
    for v in range(1, 4):
        log.commit(v, add(f"f{v}"))
    table = DeltaTable.forPath(spark, log.path)
    with pytest.raises(UnsupportedWriterFeatureError, match="checkpointProtection"):
        table.checkpoint(version=1)
    assert table.checkpoint(version=2).files == ["00000000000000000002.checkpoint.parquet"]


@pytest.mark.connect
def test_spark_connect_sessions_are_refused_with_the_reason(spark, log):
    log.commit(0, protocol(), metadata(), add("a"))
    table = DeltaTable.forPath(spark, log.path)
    if not is_connect(spark):
        assert table.checkpoint().kind == "classic"  # the same call works on a classic session
        return
    for operation in (table.checkpoint, lambda: table.cleanupLog(dryRun=True)):
        with pytest.raises(UnsupportedSessionError, match="Spark Connect"):
            operation()
    assert _log_names(log.root) == {"00000000000000000000.json"}


# ---- re-runs, concurrency, crashes -----------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_rerunning_never_overwrites_and_never_moves_the_hint_backwards(spark, mixed_table):
    table = DeltaTable.forPath(spark, mixed_table.path)
    first = table.checkpoint()
    path = mixed_table.log / first.files[0]
    digest, hint = _digest(path), _last_checkpoint(mixed_table.root)
    second = table.checkpoint()
    assert second.keptExisting == first.files and _digest(path) == digest
    assert _last_checkpoint(mixed_table.root)["version"] == hint["version"] == 2
    older = table.checkpoint(version=0)
    assert older.files == ["00000000000000000000.checkpoint.parquet"] and not older.lastCheckpointUpdated
    assert _last_checkpoint(mixed_table.root)["version"] == 2  # still the newest checkpoint
    assert "_deltaspark_tmp" not in _log_names(mixed_table.root)
    # A hint naming a version without a checkpoint (delta-rs cannot open such a table) is moved.
    mixed_table.last_checkpoint(7)
    assert table.checkpoint(version=1).lastCheckpointUpdated
    assert _last_checkpoint(mixed_table.root)["version"] == 1
    from deltalake import DeltaTable as RsTable

    assert RsTable(mixed_table.path).version() == 2


@pytest.mark.parametrize("kind", ["multi-part", "v2"])
def test_concurrent_checkpointers_do_not_corrupt_the_table(spark, log, kind):
    features = ["v2Checkpoint"] if kind == "v2" else []
    config = {"delta.checkpointPolicy": "v2"} if kind == "v2" else {}
    log.commit(
        0,
        protocol(3, 7, features, features),
        metadata(configuration=config),
        *[add(f"f{i}") for i in range(12)],
    )
    log.commit(1, remove("f0", NOW), add("g"))
    before = _files(DeltaTable.forPath(spark, log.path).snapshot())
    barrier = threading.Barrier(2)
    results, errors = [], []

    def run() -> None:
        try:
            barrier.wait()
            results.append(DeltaTable.forPath(spark, log.path).checkpoint(actionsPerPart=4))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(results) == 2
    snapshot = DeltaTable.forPath(spark, log.path).snapshot()
    assert snapshot.segment.checkpoint.version == 1 and snapshot.segment.tail_files == ()
    assert _files(snapshot) == before and len(before) == 12
    assert sorted(p for p, _ in replay(log.path).files) == [p for p, _, _ in before]
    hint = _last_checkpoint(log.root)
    assert hint["version"] == 1
    if kind == "multi-part":  # both wrote the same parts; each name was moved in once
        names = sorted(n for n in _log_names(log.root) if ".checkpoint." in n)
        assert names == results[0].files == results[1].files and hint["parts"] == len(names) > 1
    else:  # two V2 checkpoints, each complete with its own sidecars
        tops = sorted(n for n in _log_names(log.root) if ".checkpoint." in n)
        assert len(tops) == 2 and hint["v2Checkpoint"]["path"] in tops
    assert not (log.log / "_deltaspark_tmp").exists()


_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from pyspark.sql import SparkSession
    from deltaspark import DeltaTable
    from deltaspark.storage import HadoopStorage

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    real_rename, moved = HadoopStorage.rename, []

    def rename(self, src, dst):  # the driver is killed -9 right after the n-th file moved into the log
        ok = real_rename(self, src, dst)
        moved.append(dst)
        if len(moved) == {kill_after}:
            print("KILLING after", moved, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return ok

    HadoopStorage.rename = rename
    DeltaTable.forPath(spark, {path!r}).checkpoint(actionsPerPart=2)
    """
)


@pytest.mark.one_suite("3.5")  # crash safety: put-if-absent and renames, not the Spark version
def test_a_checkpoint_killed_mid_write_leaves_the_table_readable(spark, tmp_path):
    """Two drivers killed with SIGKILL (in child processes, run side by side): one after the first of
    several multi-part parts moved into the log, one after a V2 sidecar but before the top-level file."""
    tables, children = {}, {}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    for kind in ("multi-part", "v2"):
        log = LogBuilder(tmp_path / kind)
        features = ["v2Checkpoint"] if kind == "v2" else []
        config = {"delta.checkpointPolicy": "v2"} if kind == "v2" else {}
        log.commit(
            0,
            protocol(3, 7, features, features),
            metadata(configuration=config),
            *[add(f"f{i}") for i in range(8)],
        )
        log.commit(1, add("g"), commit_info())
        tables[kind] = (log, _files(DeltaTable.forPath(spark, log.path).snapshot()))
        code = _CRASH.format(repo=str(REPO), path=log.path, kill_after=1)
        children[kind] = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    for child in children.values():
        out, err = child.communicate(timeout=600)
        assert child.returncode == -9 and "KILLING" in out, out[-2000:] + err[-3000:]

    from deltalake import DeltaTable as RsTable

    for kind, (log, expected) in tables.items():
        names = _log_names(log.root)
        assert "_deltaspark_tmp" in names and "_last_checkpoint" not in names  # it died mid-write
        if kind == "multi-part":
            assert len([n for n in names if ".checkpoint." in n]) == 1  # one part of several
        else:
            assert not [n for n in names if ".checkpoint." in n] and os.listdir(log.log / "_sidecars")
        snapshot = DeltaTable.forPath(spark, log.path).snapshot()
        assert snapshot.version == 1 and snapshot.segment.checkpoint is None  # the partial one is ignored
        assert _files(snapshot) == expected
        assert RsTable(log.path).version() == 1 and len(RsTable(log.path).file_uris()) == len(expected)
        rerun = DeltaTable.forPath(spark, log.path).checkpoint(actionsPerPart=2)  # a re-run completes it
        after = DeltaTable.forPath(spark, log.path).snapshot()
        assert after.segment.checkpoint.version == 1 and _files(after) == expected
        assert _last_checkpoint(log.root)["version"] == 1 and rerun.version == 1


# ---- interoperability with delta-rs ----------------------------------------------------------------------


def _keep_only_checkpoint(root: Path, version: int, keep: set[str]) -> None:
    """Delete every log file but the checkpoint of `version` (and its commit), so readers must use it."""
    for name in os.listdir(root / "_delta_log"):
        path = root / "_delta_log" / name
        if path.is_file() and name not in keep | {f"{version:020d}.json", "_last_checkpoint"}:
            path.unlink()


def _add_actions(rs) -> list[dict]:
    import pyarrow as pa

    rows = pa.table(rs.get_add_actions(flatten=True)).to_pylist()
    return sorted(({k: v for k, v in r.items() if k != "data_change"} for r in rows), key=lambda r: r["path"])


def _protocol(rs) -> tuple:
    p = rs.protocol()
    return p.min_reader_version, p.min_writer_version, p.reader_features, p.writer_features


def test_deltalake_reads_our_checkpoint_with_the_same_version_files_and_metadata(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import write_deltalake

    path = str(tmp_path / "rs")
    for i in range(4):
        data = pa.table(
            {"id": [i * 10 + j for j in range(3)], "part": ["a", "b", "a"], "v": [1.5, None, 2.5]}
        )
        write_deltalake(path, data, partition_by=["part"], mode="append")
    RsTable(path).delete("id = 11")
    original = RsTable(path)
    version, files = original.version(), sorted(original.file_uris())
    stats = _add_actions(original)
    result = DeltaTable.forPath(spark, path).checkpoint()
    _keep_only_checkpoint(tmp_path / "rs", version, set(result.files))

    ours = RsTable(path)
    assert ours.version() == version and sorted(ours.file_uris()) == files
    assert ours.metadata().id == original.metadata().id
    assert (
        ours.metadata().partition_columns == ["part"]
        and ours.schema().to_json() == original.schema().to_json()
    )
    assert ours.metadata().configuration == original.metadata().configuration
    assert _protocol(ours) == _protocol(original)
    assert _add_actions(ours) == stats  # paths, sizes, partition values, numRecords, min/max, nullCount
    write_deltalake(
        path, pa.table({"id": [99], "part": ["c"], "v": [0.0]}), partition_by=["part"], mode="append"
    )
    assert RsTable(path).version() == version + 1  # delta-rs commits on top of our checkpoint
    assert len(_files(DeltaTable.forPath(spark, path).snapshot())) == len(files) + 1


def test_we_read_checkpoints_deltalake_writes(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import write_deltalake

    path = str(tmp_path / "rs")
    for i in range(3):
        write_deltalake(
            path, pa.table({"id": [i, i + 100], "part": ["x", "y"]}), partition_by=["part"], mode="append"
        )
    RsTable(path).delete("id = 1")
    rs = RsTable(path)
    rs.create_checkpoint()
    version = rs.version()
    checkpoint = f"{version:020d}.checkpoint.parquet"
    assert (tmp_path / "rs" / "_delta_log" / checkpoint).exists()
    _keep_only_checkpoint(tmp_path / "rs", version, {checkpoint})
    snapshot = DeltaTable.forPath(spark, path).snapshot()
    assert snapshot.version == version and snapshot.segment.checkpoint.files[0].name == checkpoint
    ours = sorted(_absolute(tmp_path / "rs", p) for p, _, _ in _files(snapshot))
    assert ours == sorted(_absolute(tmp_path / "rs", u) for u in RsTable(path).file_uris())
    assert _stats_differences(snapshot, RsTable(path)) == []
    again = DeltaTable.forPath(spark, path).checkpoint()  # and re-checkpoint it ourselves
    assert again.keptExisting == [checkpoint]


# ---- every conformance table, re-checkpointed -----------------------------------------------------------
#
# Every table is copied (its _delta_log only), checkpointed, stripped of every other log file so that
# readers must use the new checkpoint, and read back by deltaspark, by the reference replay (pyarrow)
# and by delta-rs. The tables are processed by a small thread pool sharing the session (Spark runs
# their small jobs concurrently); each table's outcome is then asserted by its own test.


def _conformance_kwargs(name: str) -> dict:
    # Every other table gets a tiny part size, so multi-part checkpoints are written and read back by
    # every reader too (V2 tables then get several sidecars).
    return {"actionsPerPart": 2} if TABLES.index(name) % 2 and not name.startswith("300k") else {}


def _rs_adds(rs) -> list[dict]:
    import pyarrow as pa

    rows = pa.table(rs.get_add_actions(flatten=True)).to_pylist()
    drop = ("data_change", "path")
    return sorted(
        ({k: v for k, v in r.items() if k not in drop} | {"path": unquote(r["path"])} for r in rows),
        key=lambda r: r["path"],
    )


def _small_state(snapshot) -> list[str]:
    """Live paths, tombstones, txns and domains of a snapshot, as sorted strings (one small job)."""
    paths = snapshot.files().select(F.concat_ws("|", F.lit("add"), "path"))
    tombstones = snapshot.tombstones().select(
        F.concat_ws("|", F.lit("remove"), "path", "deletionTimestamp", F.to_json("deletionVector"), "size")
    )
    txns = snapshot.transactions().select(F.concat_ws("|", F.lit("txn"), "appId", "version", "lastUpdated"))
    domains = snapshot.domainMetadata().select(F.concat_ws("|", F.lit("domain"), "domain", "configuration"))
    return sorted(r[0] for r in paths.union(tombstones).union(txns).union(domains).collect())


def _recheckpoint(spark, conformance: Path, workdir: Path, name: str) -> list[str]:
    """Re-checkpoint one table; the differences found (empty when it round-trips).

    The original's state comes from the independent readers (the reference replay and delta-rs) and
    from deltaspark reading the original log; the copy is read back by all three from the new
    checkpoint alone."""
    from deltalake import DeltaTable as RsTable

    source, copy = conformance / name, workdir / name
    shutil.copytree(source / "_delta_log", copy / "_delta_log")  # never write into the shared folder
    problems: list[str] = []
    if name in REFUSED:
        error, words = REFUSED[name]
        try:
            DeltaTable.forPath(spark, str(copy)).checkpoint()
            problems.append(f"not refused (expected {error.__name__})")
        except error as exc:
            if not re.search(words, str(exc)):
                problems.append(f"refused without naming {words!r}: {exc}")
        if sorted(os.listdir(copy / "_delta_log")) != sorted(os.listdir(source / "_delta_log")):
            problems.append("a refused table's log was changed")
        return problems

    original = DeltaTable.forPath(spark, str(copy)).snapshot()
    result = write_checkpoint(original, **_conformance_kwargs(name))  # DeltaTable.checkpoint, minus a load
    _keep_only_checkpoint(copy, original.version, set(result.files))
    sidecars = copy / "_delta_log" / "_sidecars"
    if sidecars.exists():
        for entry in os.listdir(sidecars):
            if entry not in result.sidecars:
                (sidecars / entry).unlink()

    after = DeltaTable.forPath(spark, str(copy)).snapshot()  # deltaspark, from the new checkpoint alone
    if [f.name for f in after.segment.checkpoint.files] != result.files or after.segment.tail_files:
        problems.append(f"the read-back did not use the new checkpoint alone: {after.segment}")
    if (after.version, after.protocol, after.metadata) != (
        original.version,
        original.protocol,
        original.metadata,
    ):
        problems.append("version, protocol or metadata differ")
    small = _small_state(after)
    conf = original.configuration
    keep_stats = (
        conf.get("delta.checkpoint.writeStatsAsJson", "true") == "true"
        or conf.get("delta.checkpoint.writeStatsAsStruct", "false") == "true"
    )
    big = name.startswith("300k")  # 300k files: paths only (their stats are compared by nothing faster)

    reference = None if big else replay(str(source))  # the original log, read by plain Python
    ours_rs, theirs_rs = RsTable(str(copy)), RsTable(str(source))
    if big:
        expected = sorted(_absolute(source, u) for u in theirs_rs.file_uris())
    else:
        expected = sorted(_absolute(source, p) for p, _ in reference.files)  # already decoded
        copied = replay(str(copy))  # pyarrow reads our checkpoint files
        if (copied.version, sorted(copied.files)) != (reference.version, sorted(reference.files)):
            problems.append("the reference replay reads different files from our checkpoint")
        if {d: v["configuration"] for d, v in copied.domains.items()} != {
            d: v["configuration"] for d, v in reference.domains.items()
        }:
            problems.append("the reference replay reads different domains from our checkpoint")
        expected_small = sorted(
            [f"domain|{d}|{v['configuration']}" for d, v in reference.domains.items()]
            + [
                f"txn|{a}|{t['version']}|{t.get('lastUpdated') or ''}".rstrip("|")
                for a, t in reference.txns.items()
            ]
        )
        cutoff = original.tombstoneRetentionCutoffMs()
        unexpired = sorted(
            path
            for (path, _), r in reference.tombstones.items()
            if (r.get("deletionTimestamp") or 0) > cutoff
        )
        if sorted(unquote(r.split("|")[1]) for r in small if r.startswith("remove|")) != unexpired:
            problems.append("deltaspark reads different tombstones from our checkpoint")
        actual_small = [r for r in small if r.startswith(("txn|", "domain|"))]
        if "delta.setTransactionRetentionDuration" not in conf and actual_small != expected_small:
            problems.append(f"deltaspark reads different txns or domains: {actual_small} != {expected_small}")
    paths = [r[len("add|") :] for r in small if r.startswith("add|")]
    if sorted(_absolute(source, unquote(p)) for p in paths) != expected:
        problems.append("deltaspark reads different files from our checkpoint")
    if result.numOfAddFiles != len(paths):
        problems.append("numOfAddFiles differs from the live file count")

    if (ours_rs.version(), ours_rs.metadata().id, json.loads(ours_rs.schema().to_json())) != (
        theirs_rs.version(),
        theirs_rs.metadata().id,
        json.loads(theirs_rs.schema().to_json()),
    ):
        problems.append("delta-rs reads a different version, id or schema")
    if sorted(_absolute(copy, u).replace(str(copy), str(source), 1) for u in ours_rs.file_uris()) != expected:
        problems.append("delta-rs reads different files from our checkpoint")
    elif keep_stats and not big:
        if _rs_adds(ours_rs) != _rs_adds(theirs_rs):
            problems.append("delta-rs reads different per-file stats from our checkpoint")
        differences = _stats_differences(after, ours_rs)  # deltaspark's stats_parsed, from our checkpoint
        if differences:
            problems.append(f"deltaspark reads different stats from our checkpoint: {differences[:3]}")
    return problems


# The 3.5 suite re-checkpoints one table per feature (tests/suites.py), the 4.x suite all but the
# 300k-file table, which takes two minutes on its own: DELTASPARK_BIG_TABLES=1 adds it.
BIG = {"300k-add-files-100-col-partitioned"}
BIG_TABLES = os.environ.get("DELTASPARK_BIG_TABLES", "") == "1"
SWEEP = [n for n in TABLES if in_this_suite(n) and (n not in BIG or BIG_TABLES)]


@pytest.fixture(scope="module")
def recheckpointed(spark, conformance, tmp_path_factory) -> dict:
    """Every conformance table re-checkpointed, by four worker threads: name -> problems."""
    from concurrent.futures import ThreadPoolExecutor

    workdir = tmp_path_factory.mktemp("recheckpointed")
    outcomes: dict[str, list[str]] = {}

    def run(name: str) -> None:
        try:
            outcomes[name] = _recheckpoint(spark, conformance, workdir, name)
        except Exception as exc:  # reported by the table's own test
            outcomes[name] = [f"{type(exc).__name__}: {exc}"]

    biggest_first = sorted(SWEEP, key=lambda n: not n.startswith("300k"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(run, biggest_first))
    return outcomes


@pytest.mark.parametrize("name", TABLES)
def test_recheckpointing_a_conformance_table_gives_the_same_snapshot(recheckpointed, name):
    if name in BIG and not BIG_TABLES:
        pytest.skip("a 300k-file table (about 2 minutes): DELTASPARK_BIG_TABLES=1 re-checkpoints it")
    if name not in SWEEP:
        pytest.skip("the pyspark 3.5 suite re-checkpoints one table per feature; the 4.x suite all")
    assert recheckpointed[name] == []
