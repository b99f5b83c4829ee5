"""Time travel by version and by timestamp (file times, and in-commit timestamps), and history."""

from __future__ import annotations

import datetime as dt

import pytest

from deltaspark import DeltaTable, TimestampOutOfRangeError, VersionNotFoundError
from tests.log_builder import add, commit_info, metadata, protocol, remove

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
ICT_PROTOCOL = protocol(1, 7, writer_features=["inCommitTimestamp"])


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def paths(snap) -> list[str]:
    return sorted(r["path"] for r in snap.files().select("path").collect())


@pytest.fixture
def three_commits(log):
    log.commit(0, protocol(), metadata(), add("a"), commit_info(operation="CREATE TABLE"), mtime_ms=T0)
    log.commit(
        1,
        add("b"),
        commit_info(operation="WRITE", operationParameters={"mode": "Append"}),
        mtime_ms=T0 + 10_000,
    )
    log.commit(2, remove("a", T0), commit_info(operation="DELETE"), mtime_ms=T0 + 20_000)
    return log


@pytest.mark.connect
def test_snapshot_at_each_version(spark, three_commits):
    table = DeltaTable.forPath(spark, three_commits.path)
    assert paths(table.snapshot(version=0)) == ["a"]
    assert paths(table.snapshot(version=1)) == ["a", "b"]
    assert paths(table.snapshot(version=2)) == ["b"]
    assert table.snapshot().version == 2


@pytest.mark.connect
def test_snapshot_at_timestamp_uses_commit_file_times(spark, three_commits):
    table = DeltaTable.forPath(spark, three_commits.path)
    assert table.snapshot(timestamp=iso(T0)).version == 0
    assert table.snapshot(timestamp=iso(T0 + 15_000)).version == 1
    assert table.snapshot(timestamp=iso(T0 + 10_000)).version == 1  # exactly at a commit
    assert table.snapshot(timestamp=T0 + 20_000).version == 2  # epoch milliseconds
    aware = dt.datetime.fromtimestamp((T0 + 12_000) / 1000, tz=dt.timezone.utc)
    assert table.snapshot(timestamp=aware).version == 1
    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        table.snapshot(timestamp=iso(T0 - 1000))
    with pytest.raises(TimestampOutOfRangeError, match="after the latest"):
        table.snapshot(timestamp=iso(T0 + 60_000))


def test_date_string_is_midnight_in_the_session_time_zone(spark, log):
    day = 1_714_521_600_000  # 2024-05-01T00:00:00Z
    log.commit(0, protocol(), metadata(), mtime_ms=day - 1000)
    log.commit(1, add("x"), mtime_ms=day + 1000)
    assert DeltaTable.forPath(spark, log.path).snapshot(timestamp="2024-05-01").version == 0


def test_file_times_are_made_monotonic(spark, log):
    log.commit(0, protocol(), metadata(), mtime_ms=T0)
    log.commit(1, add("b"), mtime_ms=T0 + 10_000)
    log.commit(2, add("c"), mtime_ms=T0 + 5_000)  # clock skew: earlier than version 1
    table = DeltaTable.forPath(spark, log.path)
    # version 2 counts as T0+10s+1ms, so at T0+10s the table is still at version 1
    assert table.snapshot(timestamp=iso(T0 + 10_000)).version == 1
    assert table.snapshot(timestamp=T0 + 10_001).version == 2
    times = {r["version"]: r["timestamp"] for r in table.history().collect()}
    assert times[2] > times[1] > times[0]


def test_a_versions_timestamp_finds_that_version(spark, log):
    """`snapshot(version=v).timestamp` is the time history shows and timestamp time travel resolves
    to v - also when the snapshot was planned from `_last_checkpoint` (only the log's tail listed)
    and commits share a file time (copied tables), where monotonic times depend on the whole log."""
    log.commit(0, protocol(), metadata(), add("a"), mtime_ms=T0)
    for version in range(1, 6):
        log.commit(version, add(f"f{version}"), mtime_ms=T0)
    log.classic_checkpoint(4, [protocol(), metadata(), add("a"), *[add(f"f{v}") for v in range(1, 5)]])
    log.last_checkpoint(4)
    table = DeltaTable.forPath(spark, log.path)
    history = {r["version"]: r["timestamp"] for r in table.history().collect()}
    for version in range(6):
        snap = table.snapshot() if version == 5 else table.snapshot(version=version)
        assert snap.timestamp.replace(tzinfo=None) == history[version]
        assert table.snapshot(timestamp=snap.timestamp).version == version


@pytest.fixture
def ict_table(log):
    """Commits 0-1 before in-commit timestamps, enabled at version 2; file times are misleading."""
    log.commit(0, protocol(), metadata(), add("a"), mtime_ms=T0)
    log.commit(1, add("b"), mtime_ms=T0 + 10_000)
    conf = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "2",
        "delta.inCommitTimestampEnablementTimestamp": str(T0 + 100_000),
    }
    log.commit(
        2,
        commit_info(inCommitTimestamp=T0 + 100_000),
        ICT_PROTOCOL,
        metadata(configuration=conf),
        add("c"),
        mtime_ms=T0 + 999_000,
    )
    log.commit(3, commit_info(inCommitTimestamp=T0 + 200_000), add("d"), mtime_ms=T0 + 11_000)
    return log


@pytest.mark.connect
def test_in_commit_timestamps_drive_time_travel(spark, ict_table):
    table = DeltaTable.forPath(spark, ict_table.path)
    snap = table.snapshot()
    assert snap.inCommitTimestamps.enabled and snap.inCommitTimestamps.enablement_version == 2
    assert snap.timestampMs == T0 + 200_000  # from commitInfo, not the file time
    assert table.snapshot(timestamp=T0 + 150_000).version == 2
    assert table.snapshot(timestamp=T0 + 200_000).version == 3
    # Before the enablement timestamp only pre-ICT versions count, by their file times.
    assert table.snapshot(timestamp=T0 + 10_500).version == 1
    assert table.snapshot(timestamp=T0 + 99_999).version == 1
    with pytest.raises(TimestampOutOfRangeError):
        table.snapshot(timestamp=T0 + 300_000)


def test_in_commit_timestamps_from_table_creation(spark, log):
    conf = {"delta.enableInCommitTimestamps": "true"}
    log.commit(
        0,
        commit_info(inCommitTimestamp=T0),
        ICT_PROTOCOL,
        metadata(configuration=conf),
        mtime_ms=T0 + 500_000,
    )
    log.commit(1, commit_info(inCommitTimestamp=T0 + 1000), add("a"), mtime_ms=T0 + 400_000)
    table = DeltaTable.forPath(spark, log.path)
    assert table.snapshot(timestamp=T0 + 500).version == 0
    assert table.snapshot(timestamp=T0 + 1000).version == 1


def test_time_travel_needs_the_log_to_reach_back(spark, log):
    log.commit(2, protocol(), metadata(), add("a"), mtime_ms=T0)  # versions 0-1 cleaned up
    log.classic_checkpoint(2, [protocol(), metadata(), add("a")])
    log.commit(3, add("b"), mtime_ms=T0 + 1000)
    table = DeltaTable.forPath(spark, log.path)
    assert paths(table.snapshot(version=2)) == ["a"]
    with pytest.raises(VersionNotFoundError, match="versions 2 to 3"):
        table.snapshot(version=1)


@pytest.mark.connect
def test_history_lists_commit_info_newest_first(spark, three_commits):
    rows = DeltaTable.forPath(spark, three_commits.path).history().collect()
    assert [r["version"] for r in rows] == [2, 1, 0]
    assert [r["operation"] for r in rows] == ["DELETE", "WRITE", "CREATE TABLE"]
    assert rows[1]["operationParameters"] == {"mode": "Append"}
    assert [int(r["timestamp"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000) for r in rows] == [
        T0 + 20_000,
        T0 + 10_000,
        T0,
    ]
    assert '"operation":"DELETE"' in rows[0]["commitInfo"]
    limited = DeltaTable.forPath(spark, three_commits.path).history(limit=2).collect()
    assert [r["version"] for r in limited] == [2, 1]


def test_history_uses_in_commit_timestamps(spark, ict_table):
    rows = {r["version"]: r for r in DeltaTable.forPath(spark, ict_table.path).history().collect()}
    stamp = {
        v: int(r["timestamp"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000) for v, r in rows.items()
    }
    assert stamp[3] == T0 + 200_000 and stamp[2] == T0 + 100_000
    assert stamp[1] == T0 + 10_000 and stamp[0] == T0
    assert rows[3]["inCommitTimestamp"] == T0 + 200_000


def test_history_of_a_commit_without_commit_info(spark, log):
    log.commit(0, protocol(), metadata(), mtime_ms=T0)
    rows = DeltaTable.forPath(spark, log.path).history().collect()
    assert len(rows) == 1 and rows[0]["version"] == 0 and rows[0]["operation"] is None
