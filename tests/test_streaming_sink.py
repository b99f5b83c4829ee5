"""Idempotent writes (`txnAppId` / `txnVersion`) and the exactly-once streaming sink.

The sink's promise is tested the way it can break: a query that stops after its commit and before
Spark records the batch in its checkpoint runs that batch again on restart; the table must then
hold every row once.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

import deltaspark
from deltaspark import DeltaTable
from deltaspark.errors import InvalidArgumentError
from deltaspark.streaming import sink as sink_module
from deltaspark.transaction.idempotent import APP_ID_CONF, AUTO_RESET_CONF, VERSION_CONF


def _ids(table: DeltaTable) -> list[int]:
    return sorted(r[0] for r in table.toDF().select("id").collect())


def _commits(path: Path) -> list[list[dict]]:
    files = sorted((path / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines()] for f in files]


def _table(spark, path: Path, ids: range) -> DeltaTable:
    deltaspark.write(spark.range(ids.start, ids.stop).withColumn("v", F.col("id") * 10), str(path))
    return DeltaTable.forPath(spark, str(path))


# ---- idempotent DML ------------------------------------------------------------------------------
def test_delete_update_and_merge_are_applied_once_per_application_version(spark, tmp_path):
    table = _table(spark, tmp_path / "t", range(10))
    assert table.delete("id = 1", txnAppId="job", txnVersion=1) is not None
    assert table.delete("id = 2", txnAppId="job", txnVersion=1) is None  # same version: nothing
    assert table.update("id = 3", {"v": "-1"}, txnAppId="job", txnVersion=0) is None  # older
    assert table.update("id = 3", {"v": "-1"}, txnAppId="job", txnVersion=2) is not None
    source = spark.range(8, 12).withColumn("v", F.lit(0))

    def merge(version: int):
        builder = table.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsertAll()
        return builder.execute(txnAppId="job", txnVersion=version).first().asDict()

    assert merge(3)["num_inserted_rows"] == 2
    again = merge(3)
    assert again == dict.fromkeys(again, 0)  # applied already: nothing read, all metrics 0
    assert _ids(table) == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert {r["id"]: r["v"] for r in table.toDF().collect()}[3] == -1
    assert table.transactionVersion("job") == 3
    assert table.transactionVersion("other") is None
    txns = [a["txn"] for commit in _commits(tmp_path / "t") for a in commit if "txn" in a]
    assert [(t["appId"], t["version"]) for t in txns] == [("job", 1), ("job", 2), ("job", 3)]


def test_the_session_settings_make_dml_and_writes_idempotent(spark, tmp_path):
    table = _table(spark, tmp_path / "t", range(5))
    spark.conf.set(APP_ID_CONF, "nightly")
    spark.conf.set(VERSION_CONF, "7")
    try:
        assert table.delete("id = 0") is not None
        assert table.delete("id = 1") is None  # version 7 of nightly is in the table
        assert deltaspark.write(spark.range(50, 51).withColumn("v", F.lit(0)), str(tmp_path / "t")) is None
        spark.conf.set(AUTO_RESET_CONF, "true")
        spark.conf.set(VERSION_CONF, "8")
        assert table.delete("id = 1") is not None
        with pytest.raises(InvalidArgumentError, match=VERSION_CONF):  # reset after its use
            table.delete("id = 2")
    finally:
        for key in (APP_ID_CONF, VERSION_CONF, AUTO_RESET_CONF):
            spark.conf.unset(key)
    assert _ids(table) == [2, 3, 4]
    assert table.transactionVersion("nightly") == 8


@pytest.mark.one_suite("4.x")
def test_half_an_application_transaction_is_refused(spark, tmp_path):
    table = _table(spark, tmp_path / "t", range(3))
    with pytest.raises(InvalidArgumentError, match="together"):
        table.delete("id = 0", txnAppId="job")
    with pytest.raises(InvalidArgumentError, match="txnVersion"):
        table.update("id = 0", {"v": "1"}, txnAppId="job", txnVersion=-1)
    with pytest.raises(InvalidArgumentError, match="txnAppId"):
        table.delete("id = 0", txnAppId="", txnVersion=1)
    spark.conf.set(VERSION_CONF, "x")
    try:
        with pytest.raises(InvalidArgumentError, match="whole number"):
            table.delete("id = 0")
    finally:
        spark.conf.unset(VERSION_CONF)
    assert _ids(table) == [0, 1, 2]


# ---- the streaming sink --------------------------------------------------------------------------
def _source(spark, folder: Path, ids: range, files: int = 2) -> None:
    """Append `ids` to the parquet folder a file stream reads, in `files` files."""
    spark.range(ids.start, ids.stop, 1, files).write.mode("append").parquet(str(folder))


def _run(spark, folder: Path, table: str, checkpoint: Path, **options):
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(folder))
    query = deltaspark.writeStream(
        stream, table, checkpointLocation=str(checkpoint), trigger={"availableNow": True}, **options
    )
    with contextlib.suppress(StreamingQueryException):  # the test reads query.exception()
        query.awaitTermination(120)
    return query


def test_each_batch_is_one_commit_with_the_querys_transaction(spark, tmp_path):
    folder, path, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "cp"
    _source(spark, folder, range(0, 10))
    query = _run(spark, folder, str(path), checkpoint, partitionBy=None)
    assert query.exception() is None
    _source(spark, folder, range(10, 20))
    _run(spark, folder, str(path), checkpoint)
    table = DeltaTable.forPath(spark, str(path))
    assert _ids(table) == list(range(20))
    commits = _commits(path)
    assert len(commits) == 4  # one per file (maxFilesPerTrigger 1), across the two runs
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert query_id == str(query.id)
    for batch, actions in enumerate(commits):
        info = actions[0]["commitInfo"]
        assert info["operation"] == "STREAMING UPDATE"
        assert info["operationParameters"] == {
            "outputMode": "Append",
            "queryId": query_id,
            "epochId": str(batch),
        }
        (txn,) = [a["txn"] for a in actions if "txn" in a]
        assert (txn["appId"], txn["version"]) == (query_id, batch)
    assert table.transactionVersion(query_id) == 3


def test_a_batch_committed_before_a_crash_is_not_committed_again(spark, tmp_path, monkeypatch):
    """The query dies after the table holds batch 1 and before Spark records it: the restart runs
    batch 1 again (Spark's replay), and the sink commits nothing for it."""
    folder, path, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "cp"
    _source(spark, folder, range(0, 20), files=2)
    real = sink_module.write_table
    seen: list[int] = []

    def commit_then_crash(batch, *args, **kwargs):
        result = real(batch, *args, **kwargs)
        seen.append(kwargs["txnVersion"])
        if kwargs["txnVersion"] == 1:
            raise RuntimeError("killed between the commit and the checkpoint")
        return result

    monkeypatch.setattr(sink_module, "write_table", commit_then_crash)
    crashed = _run(spark, folder, str(path), checkpoint)
    assert crashed.exception() is not None and "killed between" in str(crashed.exception())
    assert not (checkpoint / "commits" / "1").exists()  # Spark did not record batch 1
    monkeypatch.setattr(sink_module, "write_table", real)
    _source(spark, folder, range(20, 30), files=1)
    restarted = _run(spark, folder, str(path), checkpoint)
    assert restarted.exception() is None
    assert (checkpoint / "commits" / "2").exists()
    table = DeltaTable.forPath(spark, str(path))
    assert _ids(table) == list(range(30))  # nothing lost, nothing twice
    assert [c[0]["commitInfo"]["operationParameters"]["epochId"] for c in _commits(path)] == ["0", "1", "2"]


def test_complete_mode_replaces_the_rows_in_each_batch_commit(spark, tmp_path):
    folder, path, checkpoint = tmp_path / "in", tmp_path / "t", tmp_path / "cp"
    _source(spark, folder, range(0, 10), files=1)
    counts = spark.readStream.schema("id long").parquet(str(folder)).groupBy((F.col("id") % 2).alias("id"))
    counts = counts.count()

    def run():
        query = deltaspark.writeStream(
            counts,
            str(path),
            checkpointLocation=str(checkpoint),
            outputMode="complete",
            trigger={"availableNow": True},
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    _source(spark, folder, range(10, 16), files=1)
    run()
    table = DeltaTable.forPath(spark, str(path))
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(0, 8), (1, 8)]
    last = _commits(path)[-1]
    assert last[0]["commitInfo"]["operationParameters"]["outputMode"] == "Complete"
    assert [a for a in last if "remove" in a] and [a for a in last if "add" in a]  # one commit


@pytest.mark.one_suite("4.x")
def test_the_sink_refuses_what_it_cannot_do(spark, tmp_path):
    folder = tmp_path / "in"
    _source(spark, folder, range(0, 2), files=1)
    stream = spark.readStream.schema("id long").parquet(str(folder))
    with pytest.raises(InvalidArgumentError, match="update mode"):
        deltaspark.writeStream(
            stream, str(tmp_path / "t"), checkpointLocation=str(tmp_path / "c"), outputMode="update"
        )
    with pytest.raises(InvalidArgumentError, match="streaming DataFrame"):
        deltaspark.writeStream(spark.range(1), str(tmp_path / "t"), checkpointLocation=str(tmp_path / "c"))
    with pytest.raises(InvalidArgumentError, match="checkpointLocation"):
        deltaspark.writeStream(stream, str(tmp_path / "t"), checkpointLocation="")


def test_the_sink_appends_to_a_table_by_name_and_to_one_delta_rs_wrote(spark, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    pa = pytest.importorskip("pyarrow")
    folder, path = tmp_path / "in", tmp_path / "rs"
    deltalake.write_deltalake(str(path), pa.table({"id": pa.array([100, 101], pa.int64())}))
    _source(spark, folder, range(0, 4), files=1)
    query = _run(spark, folder, str(path), tmp_path / "cp1")
    assert query.exception() is None
    rs = deltalake.DeltaTable(str(path))
    assert sorted(rs.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 100, 101]
    assert rs.transaction_version(str(query.id)) == 0
    database = f"sink_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database}")
    try:
        deltaspark.write(spark.range(0, 0), tableName=f"{database}.events", path=str(tmp_path / "named"))
        named = _run(spark, folder, f"{database}.events", tmp_path / "cp2")
        assert named.exception() is None
        assert _ids(DeltaTable.forName(spark, f"{database}.events")) == [0, 1, 2, 3]
    finally:
        spark.sql(f"DROP DATABASE {database} CASCADE")
