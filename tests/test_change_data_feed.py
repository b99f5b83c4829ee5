"""Change data feed: every CDF table against delta-rs where it reads it, and an independent
derivation everywhere; refusals; timestamps."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from deltaspark import ChangeDataNotRecordedError, DeltaTable, InvalidArgumentError
from tests.log_builder import commit_info, metadata, protocol, remove, write_parquet
from tests.reference_changes import reference_changes
from tests.reference_rows import normalized_rows
from tests.suites import skip_unless_swept

# table -> (startingVersion, endingVersion): the ranges where the feed was recorded.
CDF_TABLES = {
    "cdf-table": (0, 3),
    "cdf-table-backtick-column-names": (0, 1),
    "cdf-table-data-change": (0, 1),
    "cdf-table-delete-conditional-all-rows": (0, 1),
    "cdf-table-delete-conditional-two-rows": (0, 1),
    "cdf-table-delete-unconditional": (0, 1),
    "cdf-table-non-partitioned": (0, 4),
    "cdf-table-partitioned": (0, 2),
    "cdf-table-simple": (0, 2),
    "cdf-table-update-ops": (0, 2),
    "cdf-table-with-cdc-and-dvs": (0, 25),
    "cdf-table-with-dv": (0, 6),
    "cdf-column-mapping-id-mode": (1, 4),
    "cdf-column-mapping-name-mode": (1, 4),
    "cdf-column-mapping-name-mode-3-7": (1, 4),
    "table-with-cdf": (3, 4),
}


def changes_rows(df) -> list[tuple]:
    return normalized_rows([r.asDict(recursive=True) for r in df.drop("_commit_timestamp").collect()])


@pytest.mark.parametrize("name", list(CDF_TABLES))
def test_change_feed_matches_independent_readers(spark, conformance, name):
    skip_unless_swept(name)
    start, end = CDF_TABLES[name]
    path = str(conformance / name)
    table = DeltaTable.forPath(spark, path)
    ours = changes_rows(table.changes(start, end))
    assert ours == normalized_rows(reference_changes(path, start, end))
    if table.snapshot().columnMappingMode != "none":
        return  # delta-rs: "Column mapping is not supported for ... CHANGE DATA FEED scans"
    from deltalake import DeltaTable as RsTable

    try:
        theirs = RsTable(path).load_cdf(starting_version=start, ending_version=end).read_all()
    except Exception as exc:  # noqa: BLE001 - delta-rs double-decodes '%' in file names
        assert "Failed to fetch metadata" in str(exc), exc
        return
    assert ours == normalized_rows(pa.table(theirs).drop(["_commit_timestamp"]).to_pylist())


@pytest.mark.connect
def test_change_feed_on_spark_connect(spark, conformance):
    path = str(conformance / "cdf-table-with-dv")
    assert changes_rows(DeltaTable.forPath(spark, path).changes(0)) == normalized_rows(
        reference_changes(path, 0, 6)
    )


def test_versions_without_the_feed_are_refused(spark, conformance):
    table = DeltaTable.forPath(spark, str(conformance / "table-with-cdf"))
    with pytest.raises(ChangeDataNotRecordedError, match=r"version\(s\) 2") as err:
        table.changes(0, 4)
    assert err.value.versions == [2]
    assert table.changes(3, 4).count() == 0  # recorded again from version 3 (no data changes there)
    with pytest.raises(ChangeDataNotRecordedError, match=r"version\(s\) 0"):
        DeltaTable.forPath(spark, str(conformance / "cdf-column-mapping-id-mode")).changes(0)


def test_arguments_are_checked(spark, conformance):
    table = DeltaTable.forPath(spark, str(conformance / "cdf-table"))
    with pytest.raises(InvalidArgumentError):
        table.changes()
    with pytest.raises(InvalidArgumentError):
        table.changes(3, 1)


T0 = 1_700_000_000_000


@pytest.fixture
def feed_table(log):
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "part": pa.array(["x", "x"])})
    conf = {"delta.enableChangeDataFeed": "true"}
    a = write_parquet(log.root, "a.parquet", data)
    b = write_parquet(log.root, "b.parquet", data.slice(1, 1))
    log.commit(0, protocol(1, 4), metadata(configuration=conf), a, commit_info(), mtime_ms=T0)
    log.commit(1, b, commit_info(), mtime_ms=T0 + 10_000)
    log.commit(2, remove("a.parquet", T0), commit_info(), mtime_ms=T0 + 20_000)
    return log


def test_inserts_deletes_and_commit_timestamps(spark, feed_table):
    rows = DeltaTable.forPath(spark, feed_table.path).changes(0).collect()
    got = sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in rows)
    assert got == [(1, "delete", 2), (1, "insert", 0), (2, "delete", 2), (2, "insert", 0), (2, "insert", 1)]
    stamps = {r["_commit_version"]: r["_commit_timestamp"].replace(tzinfo=dt.timezone.utc) for r in rows}
    assert {v: int(t.timestamp() * 1000) for v, t in stamps.items()} == {
        0: T0,
        1: T0 + 10_000,
        2: T0 + 20_000,
    }


def test_feed_by_timestamps(spark, feed_table):
    table = DeltaTable.forPath(spark, feed_table.path)
    start = dt.datetime.fromtimestamp((T0 + 5_000) / 1000, tz=dt.timezone.utc)
    end = dt.datetime.fromtimestamp((T0 + 15_000) / 1000, tz=dt.timezone.utc)
    rows = table.changes(startingTimestamp=start, endingTimestamp=end).collect()
    assert {r["_commit_version"] for r in rows} == {1}
