"""`spark.read.format("delta")` and `spark.readStream.format("delta")` (Spark 4.0+).

Batch reads must return exactly `DeltaTable.toDF()`'s rows; streams must emit each file once, in
delta-spark's order, and react to removes, schema changes and cleaned-up logs as delta-spark does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import deltaspark
from deltaspark import DeltaTable
from deltaspark.datasource.registration import PUSHDOWN_CONF
from deltaspark.datasource.table_state import load, output_schema
from deltaspark.errors import ChangeDataNotRecordedError, DeltaSparkError, UnsupportedSessionError
from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.reference_replay import dv_id
from tests.reference_replay import replay as reference_replay
from tests.test_conformance import REFUSED, TABLES

needs_spark_4 = pytest.mark.skipif(PYSPARK_VERSION < (4, 0), reason="Python data sources need Spark 4.0+")
ADMISSION_CONTROL = PYSPARK_VERSION >= (4, 2)
PLANNED_ONLY = {"300k-add-files-100-col-partitioned"}  # a log of 300,000 files without their data


@pytest.fixture(scope="module")
def delta(spark):
    if PYSPARK_VERSION < (4, 0):
        pytest.skip("Python data sources need Spark 4.0+")
    assert deltaspark.register(spark) == "delta"
    assert deltaspark.register(spark) == "delta"  # idempotent
    return spark


def _iso(seconds: float) -> str:
    """A time to the millisecond, in UTC (ISO 8601, as `timestampAsOf` takes it)."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


def _rows(df) -> list[str]:
    return sorted(repr(tuple(r)) for r in df.collect())


# ---- registration --------------------------------------------------------------------------------
@pytest.mark.skipif(PYSPARK_VERSION >= (4, 0), reason="Spark 3.5 only: the named error")
def test_spark_35_gets_a_named_error_for_the_data_source(spark):
    with pytest.raises(UnsupportedSessionError, match=r"Spark 4\.0 or newer"):
        deltaspark.register(spark)


# ---- batch ---------------------------------------------------------------------------------------
@needs_spark_4
def test_format_delta_reads_what_todf_reads_with_time_travel(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    rows = spark.range(0, 40).select(
        "id",
        (F.col("id") % 3).cast("string").alias("part"),
        F.to_date(F.lit("2024-02-29")).alias("day"),
        (F.col("id") / 7).cast("decimal(10,2)").alias("amount"),
        F.timestamp_seconds(F.col("id") * 3600).alias("at"),
    )
    deltaspark.write(rows, path, partitionBy=["part", "day"])
    first_commit = time.time()
    time.sleep(1.1)
    deltaspark.write(rows.where("id < 5"), path)
    DeltaTable.forPath(spark, path).delete("id = 7")
    read = spark.read.format("delta").load(path)
    assert read.schema.simpleString() == DeltaTable.forPath(spark, path).toDF().schema.simpleString()
    assert _rows(read) == _rows(DeltaTable.forPath(spark, path).toDF())
    assert read.count() == 44
    assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 40
    stamp = _iso(first_commit + 0.5)
    as_of = spark.read.format("delta").option("timestampAsOf", stamp).load(path)
    assert _rows(as_of) == _rows(DeltaTable.forPath(spark, path).snapshot(version=0).toDF())


@needs_spark_4
def test_deletion_vectors_and_column_mapping_are_read_as_todf_reads_them(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    properties = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name"}
    deltaspark.write(spark.range(0, 50, 1, 2).withColumn("v", F.col("id") * 2), path, properties=properties)
    table = DeltaTable.forPath(spark, path)
    table.delete("id % 5 = 0")
    table.renameColumn("v", "doubled") if hasattr(table, "renameColumn") else None
    log = "".join(p.read_text() for p in sorted((tmp_path / "t" / "_delta_log").glob("*.json")))
    assert '"deletionVector":{' in log  # the delete wrote a DV, not a rewrite
    read = spark.read.format("delta").load(path)
    assert _rows(read) == _rows(table.toDF())
    assert read.count() == 40


def test_a_scan_is_split_into_tasks_as_spark_splits_its_own_file_scans(delta, tmp_path):
    """Tasks sized by the session's `spark.sql.files.*` settings and parallelism, read when
    `register` is called: as many as Spark's own scan of the same files, each task a run of files
    in the table's order. Twelve files of about equal size (each 1,000 bytes more with the open
    cost below) over the session's 4 cores: three a task, two a task when the maximum is lowered,
    six a task over 2 cores (the leaf nodes' parallelism), all in one task when the minimum number
    of partitions is 1."""
    spark, path = delta, str(tmp_path / "t")
    deltaspark.write(spark.range(0, 1200, 1, 12).select("id", (F.col("id") * 7).alias("v")), path)
    files = DeltaTable.forPath(spark, path).toDF().inputFiles()
    assert len(files) == 12
    settings = {
        "spark.sql.files.openCostInBytes": "1000",
        "spark.sql.files.maxPartitionBytes": None,
        "spark.sql.files.minPartitionNum": None,
        "spark.sql.leafNodeDefaultParallelism": None,
    }
    expected_rows = _rows(DeltaTable.forPath(spark, path).toDF())

    def planned(**changes: str | None) -> int:
        for key, value in {**settings, **changes}.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)
        deltaspark.register(spark)
        ours = spark.read.format("delta").load(path)
        assert _rows(ours) == expected_rows
        tasks = ours.rdd.getNumPartitions()
        assert tasks == spark.read.parquet(*files).rdd.getNumPartitions()
        return tasks

    try:
        size = os.path.getsize(files[0].removeprefix("file:"))
        assert 1000 < size < 2200  # so that the counts below follow from the settings
        assert planned() == 4  # 12 x (size + 1000) over 4 cores: 3 files a task
        assert planned(**{"spark.sql.files.maxPartitionBytes": str(2 * (size + 1000) + 200)}) == 6
        assert planned(**{"spark.sql.leafNodeDefaultParallelism": "2"}) == 2
        assert planned(**{"spark.sql.files.minPartitionNum": "1"}) == 1
    finally:
        for key in settings:
            spark.conf.unset(key)
        deltaspark.register(spark)


@pytest.mark.skipif(PYSPARK_VERSION < (4, 1), reason="filter pushdown for Python data sources: Spark 4.1+")
def test_partition_filters_leave_files_out_when_the_session_allows_pushdown(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    rows = spark.range(0, 40, 1, 1).select(
        "id", F.when(F.col("id") % 4 == 3, F.lit(None)).otherwise(F.col("id") % 4).cast("int").alias("p")
    )
    deltaspark.write(rows, path, partitionBy=["p"])  # 4 files: p = 0, 1, 2 and null

    def scan(condition: str):
        df = spark.read.format("delta").load(path).where(condition)
        expected = sorted(r[0] for r in DeltaTable.forPath(spark, path).toDF().where(condition).collect())
        assert sorted(r[0] for r in df.select("id").collect()) == expected
        return df.rdd.getNumPartitions()

    data = str(tmp_path / "data")  # 4 files of 10 ids each, in order: statistics tell them apart
    deltaspark.write(
        spark.range(0, 40, 1, 4).select(
            "id",
            F.format_string("k%02d", "id").alias("key"),
            F.timestamp_seconds(F.col("id") * 86400 + F.lit(0.0005)).alias("at"),  # 500 us past the ms
            F.when(F.col("id") >= 10, F.col("id")).alias("late"),  # all null in the first file
        ),
        data,
    )

    def files(condition: str) -> int:
        df = spark.read.format("delta").load(data).where(condition)
        expected = DeltaTable.forPath(spark, data).toDF().where(condition)
        assert _rows(df) == _rows(expected)
        return df.rdd.getNumPartitions()

    assert scan("p = 1") == 4  # pushdown off (Spark's default): every file is read
    assert files("id = 15") == 4
    spark.conf.set(PUSHDOWN_CONF, "true")
    deltaspark.register(spark)
    try:
        assert scan("p = 1") == 1
        assert scan("p IS NULL") == 1
        assert scan("p IN (0, 2)") == 2
        assert scan("NOT p = 1") == 2  # null is not "not 1": its file is left out too
        assert scan("p > 0 AND id > 10") == 2  # ids are spread over every file: nothing skipped
        assert scan("p = 1 OR id = 3") == 4  # a disjunction is not offered to the source
        assert scan("id > 100") == 1  # no file's maximum reaches it: Spark plans one empty partition
        # data skipping by each file's statistics (min/max, nullCount)
        assert files("id = 15") == 1
        assert files("id >= 30") == 1
        assert files("id < 10 OR id > 35") == 4  # not offered
        assert files("NOT id = 15") == 4
        assert files("id IN (3, 38)") == 2
        assert files("key = 'k15'") == 1
        assert files("key LIKE 'k2%'") == 1  # StringStartsWith
        assert files("late IS NULL") == 1  # nullCount 0 elsewhere
        assert files("late IS NOT NULL") == 3
        assert files("late < 12") == 1  # the all-null file matches no comparison
        assert (
            files("at >= timestamp_seconds(9 * 86400 + 0.0005) AND at < timestamp_seconds(10 * 86400)") == 1
        )
    finally:
        spark.conf.set(PUSHDOWN_CONF, "false")
        deltaspark.register(spark)  # the data source follows the setting when registered
    assert scan("p = 1") == 4


@needs_spark_4
@pytest.mark.connect
def test_format_delta_batch_and_stream_from_a_spark_connect_client(delta, conformance):
    """The Connect run (tests/test_spark_connect.py) registers the source from a client session
    (which cannot commit: read-only tables); planning and reading run on the server's side."""
    spark, path = delta, str(conformance / "table-with-dv-small")
    table = DeltaTable.forPath(spark, path)
    assert _rows(spark.read.format("delta").load(path)) == _rows(table.toDF())
    assert _rows(spark.read.format("delta").option("versionAsOf", 0).load(path)) == _rows(
        table.snapshot(version=0).toDF()
    )
    name = f"connect_{os.getpid()}"
    query = (
        spark.readStream.format("delta")
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert _rows(spark.table(name)) == _rows(table.toDF())


@needs_spark_4
def test_a_table_by_name_is_refused_with_what_to_do(delta, tmp_path):
    spark = delta
    database = f"ds_{os.getpid()}"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    try:
        deltaspark.write(spark.range(3), tableName=f"{database}.t", path=str(tmp_path / "named"))
        assert [r[0] for r in spark.sql(f"DESCRIBE TABLE {database}.t").collect()] == ["id"]
        with pytest.raises(Exception, match="reaches this data source without its location"):
            spark.table(f"{database}.t").collect()
    finally:
        spark.sql(f"DROP DATABASE {database} CASCADE")


@needs_spark_4
@pytest.mark.parametrize("name", TABLES)
def test_format_delta_agrees_with_todf_on_every_conformance_table(delta, conformance, name):
    path = str(conformance / name)
    if name in PLANNED_ONLY:  # its data files are not there: the plan, not the rows
        assert len(load(path).files) == DeltaTable.forPath(delta, path).snapshot().files().count()
        return
    try:
        expected = DeltaTable.forPath(delta, path).toDF()
        expected_rows = _rows(expected)
    except Exception as exc:  # a table deltaspark refuses or cannot read: format('delta') must fail too
        assert name in REFUSED or "data file" in str(exc).lower(), exc
        with pytest.raises(Exception, match="deltaspark|delta"):
            delta.read.format("delta").load(path).collect()
        return
    read = delta.read.format("delta").load(path)
    assert [f.name for f in read.schema.fields] == [f.name for f in expected.schema.fields]
    assert _rows(read) == expected_rows


CDF_TABLES = [name for name in TABLES if "cdf" in name]
CDF_RANGE_TABLES = {"cdf-table-with-cdc-and-dvs", "cdf-column-mapping-name-mode", "cdf-table-update-ops"}


@needs_spark_4
@pytest.mark.parametrize("name", CDF_TABLES)
def test_the_change_data_feed_agrees_with_delta_table_changes(delta, conformance, name):
    """From the first version the feed is recorded at (earlier starts: both refuse them)."""
    path = str(conformance / name)
    table = DeltaTable.forPath(delta, path)
    for start in range(table.snapshot().version + 1):
        try:
            expected = _rows(table.changes(startingVersion=start))
        except ChangeDataNotRecordedError:
            with pytest.raises(Exception, match="ChangeDataNotRecordedError"):
                _feed(delta, path, startingVersion=start).collect()
            continue
        read = _feed(delta, path, startingVersion=start)
        assert [f.name for f in read.schema.fields][-3:] == [
            "_change_type",
            "_commit_version",
            "_commit_timestamp",
        ]
        assert _rows(read) == expected
        if name in CDF_RANGE_TABLES:  # an ending version too (the range is the same code for each)
            ending = max(start, table.snapshot().version - 1)
            assert _rows(_feed(delta, path, startingVersion=start, endingVersion=ending)) == _rows(
                table.changes(startingVersion=start, endingVersion=ending)
            )
        return
    pytest.fail(f"no version of {name} has its changes recorded")


def test_modification_times_are_whole_milliseconds_truncated_as_spark_lists_them(spark, tmp_path):
    """The data source's own storage (pyarrow, in Spark's Python workers) and Hadoop's listing give
    a log file the same modification time - a commit's timestamp when it has no in-commit one: the
    nanoseconds truncated, where pyarrow's `mtime` rounds them to microseconds (.787999721 s read
    as .788: one ms later, and every later commit's timestamp moved with it)."""
    from deltaspark.datasource.arrow_storage import ArrowStorage
    from deltaspark.storage import storage_for

    log = tmp_path / "_delta_log"
    log.mkdir()
    base = 1_796_295_695 * 10**9
    nanos = {f"{v:020d}.json": base + offset for v, offset in enumerate((787_999_721, 788_034_953, 999_999))}
    for name, ns in nanos.items():
        (log / name).write_text("{}\n")
        os.utime(log / name, ns=(ns, ns))
    expected = {name: ns // 1_000_000 for name, ns in nanos.items()}
    arrow = ArrowStorage()
    assert {f.name: f.modification_time for f in arrow.list_dir(str(log))} == expected
    assert {n: arrow.status(str(log / n)).modification_time for n in nanos} == expected
    hadoop = storage_for(spark).list_dir(str(log))
    assert {f.name: f.modification_time for f in hadoop if f.name in nanos} == expected


def _feed(spark, path: str, **options):
    reader = spark.read.format("delta").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(path)


# ---- streams -------------------------------------------------------------------------------------
def _stream(spark, path: str, checkpoint: Path, sink: Path, **options):
    """One AvailableNow run of a stream from the table into a parquet sink; the query."""
    reader = spark.readStream.format("delta")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (
        reader.load(path)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    with contextlib.suppress(Exception):  # the test reads query.exception()
        query.awaitTermination(120)
    return query


def _batches(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] or p["batchId"] == 0]


def _offsets(checkpoint: Path) -> list[dict]:
    files = sorted(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    return [json.loads(f.read_text().splitlines()[-1]) for f in files]


def _ids(spark, sink: Path) -> list[int]:
    return sorted(r[0] for r in spark.read.parquet(str(sink)).select("id").collect())


@needs_spark_4
def test_a_stream_reads_the_snapshot_then_each_commit_once_in_rate_limited_batches(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    checkpoint, sink = tmp_path / "cp", tmp_path / "out"
    for start in (0, 10, 20):
        deltaspark.write(spark.range(start, start + 10, 1, 2), path)  # 2 files each
    first = _stream(spark, path, checkpoint, sink, maxFilesPerTrigger=2)
    assert first.exception() is None
    if ADMISSION_CONTROL:
        assert _batches(first) == [10, 10, 10]  # 6 files of the snapshot, 2 per batch
    assert _ids(spark, sink) == list(range(30))
    offset = _offsets(checkpoint)[-1]
    table_id = DeltaTable.forPath(spark, path).snapshot().metadata.id
    assert offset == {
        "sourceVersion": 1,
        "reservoirId": table_id,
        "reservoirVersion": 3,
        "index": -1,
        "isStartingVersion": False,
    }
    deltaspark.write(spark.range(100, 105, 1, 1), path)
    DeltaTable.forPath(spark, path).optimize().executeCompaction()  # dataChange=false: nothing
    deltaspark.write(spark.range(200, 203, 1, 1), path)
    again = _stream(spark, path, checkpoint, sink, maxFilesPerTrigger=1)
    assert again.exception() is None
    if ADMISSION_CONTROL:
        assert [n for n in _batches(again) if n] == [5, 3]
    assert _ids(spark, sink) == [*range(30), *range(100, 105), *range(200, 203)]
    assert [(o["reservoirVersion"], o["index"], o["isStartingVersion"]) for o in _offsets(checkpoint)][
        :3
    ] == [
        (2, 1, True),
        (2, 3, True),
        (3, -1, False),
    ]


@needs_spark_4
def test_starting_version_latest_and_timestamp(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    for start in (0, 10, 20):
        deltaspark.write(spark.range(start, start + 10, 1, 1), path)
        time.sleep(1.5 if start == 0 else 0)
    from_one = _stream(spark, path, tmp_path / "c1", tmp_path / "o1", startingVersion=1)
    assert from_one.exception() is None
    assert _ids(spark, tmp_path / "o1") == list(range(10, 30))
    latest = _stream(spark, path, tmp_path / "c2", tmp_path / "o2", startingVersion="latest")
    assert latest.exception() is None
    deltaspark.write(spark.range(50, 52, 1, 1), path)
    _stream(spark, path, tmp_path / "c2", tmp_path / "o2", startingVersion="latest")
    assert _ids(spark, tmp_path / "o2") == [50, 51]
    commit_1 = (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").stat().st_mtime
    stamp = _iso(commit_1 - 0.5)
    by_time = _stream(spark, path, tmp_path / "c3", tmp_path / "o3", startingTimestamp=stamp)
    assert by_time.exception() is None
    assert _ids(spark, tmp_path / "o3") == [*range(10, 30), 50, 51]


@needs_spark_4
def test_removes_fail_the_stream_unless_an_option_says_otherwise(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    deltaspark.write(spark.range(0, 10, 1, 2).withColumn("p", F.col("id") % 2), path, partitionBy=["p"])
    table = DeltaTable.forPath(spark, path)
    start = _stream(spark, path, tmp_path / "cp", tmp_path / "out")
    assert start.exception() is None
    table.delete("p = 1")  # whole files: a delete
    deleted = _stream(spark, path, tmp_path / "cp", tmp_path / "out")
    assert "Detected deleted data (for example" in str(deleted.exception())
    assert "DeletedDataInStreamError" in str(deleted.exception())
    ignored = _stream(spark, path, tmp_path / "cp", tmp_path / "out", ignoreDeletes=True)
    assert ignored.exception() is None
    table.update("id = 0", {"id": "100"})  # a rewrite: an update
    updated = _stream(spark, path, tmp_path / "cp", tmp_path / "out", ignoreDeletes=True)
    assert "Detected a data update (for example" in str(updated.exception())
    changes = _stream(spark, path, tmp_path / "cp", tmp_path / "out", ignoreChanges=True)
    assert changes.exception() is None  # the rewritten file again: 100 and the rows beside it
    version = table.snapshot().version
    commit = (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    rewritten = [str(tmp_path / "t" / json.loads(line)["add"]["path"]) for line in commit if '"add"' in line]
    again = sorted(r[0] for r in spark.read.parquet(*rewritten).collect())
    assert 100 in again and 0 not in again
    assert _ids(spark, tmp_path / "out") == sorted([*range(10), *again])
    table.update("id = 2", {"id": "102"})
    deltaspark.write(spark.range(300, 301).withColumn("p", F.lit(0)), path)
    skipped = _stream(spark, path, tmp_path / "cp", tmp_path / "out", skipChangeCommits=True)
    assert skipped.exception() is None
    assert 102 not in _ids(spark, tmp_path / "out") and 300 in _ids(spark, tmp_path / "out")


@needs_spark_4
def test_schema_changes_and_cleaned_up_logs_stop_the_stream_by_name(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    deltaspark.write(spark.range(0, 4, 1, 1).withColumn("v", F.lit("a")), path)
    assert _stream(spark, path, tmp_path / "cp", tmp_path / "out").exception() is None
    wider = spark.range(4, 6, 1, 1).withColumn("v", F.lit("b")).withColumn("extra", F.lit(1))
    deltaspark.write(wider, path, mergeSchema=True)  # additive: read on, without the new column
    assert _stream(spark, path, tmp_path / "cp", tmp_path / "out").exception() is None
    assert _ids(spark, tmp_path / "out") == list(range(6))
    deltaspark.write(
        spark.range(9, 10).withColumn("v", F.lit(1.5)), path, mode="overwrite", overwriteSchema=True
    )
    changed = _stream(spark, path, tmp_path / "cp", tmp_path / "out")
    assert "SchemaChangedInStreamError" in str(changed.exception()), str(changed.exception())[-3000:]
    # a second table: versions the stream has not read yet are cleaned up
    other = str(tmp_path / "u")
    deltaspark.write(spark.range(0, 2, 1, 1), other)
    assert _stream(spark, other, tmp_path / "cp2", tmp_path / "out2").exception() is None
    for start in (10, 20, 30):
        deltaspark.write(spark.range(start, start + 2, 1, 1), other)
    DeltaTable.forPath(spark, other).checkpoint()
    (tmp_path / "u" / "_delta_log" / f"{1:020d}.json").unlink()  # as log cleanup would
    lost = _stream(spark, other, tmp_path / "cp2", tmp_path / "out2")
    assert "StreamDataLossError" in str(lost.exception()) and "failOnDataLoss" in str(lost.exception())
    on = _stream(spark, other, tmp_path / "cp2", tmp_path / "out2", failOnDataLoss=False)
    assert on.exception() is None
    assert _ids(spark, tmp_path / "out2") == [0, 1, 20, 21, 30, 31]


@needs_spark_4
def test_a_replaced_table_and_excluded_files(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    deltaspark.write(spark.range(0, 3, 1, 1), path)
    assert _stream(spark, path, tmp_path / "cp", tmp_path / "out").exception() is None
    shutil.rmtree(path)
    deltaspark.write(spark.range(0, 3, 1, 1), path)  # a new table (new id) at the same place
    replaced = _stream(spark, path, tmp_path / "cp", tmp_path / "out")
    assert "StreamTableChangedError" in str(replaced.exception())
    excluded = _stream(spark, path, tmp_path / "cp2", tmp_path / "out2", excludeRegex=r"part-0000[0-9]")
    assert excluded.exception() is None
    assert not (tmp_path / "out2").exists() or spark.read.parquet(str(tmp_path / "out2")).count() == 0


# ---- a stream's initial snapshot past memory ----------------------------------------------------
def test_file_order_sorts_through_spilled_runs_as_in_memory(tmp_path, monkeypatch):
    """Runs of 7 files in blocks of 5: the merged list equals a sort in memory, read by index,
    slice and iteration; the runs are closed once merged, the list's file when it is dropped, and
    none has a name in the file system."""
    import gc
    import pickle
    import random
    import tempfile

    from deltaspark.datasource import file_order

    monkeypatch.setattr(file_order, "BLOCK_FILES", 5)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    opened = []
    temp_file = file_order._temp_file
    monkeypatch.setattr(file_order, "_temp_file", lambda: opened.append(temp_file()) or opened[-1])
    rng = random.Random(7)
    entries = [
        {
            "path": f"file:/t/{rng.randrange(40):03d}-{i}.parquet",
            "modificationTime": rng.choice([None, 5, 6, 7]),
            "size": i,
            "partitionValues": {"p": str(i % 3)},
            "deletionVector": None,
        }
        for i in range(53)
    ]
    expected = sorted(entries, key=lambda e: (e["modificationTime"] or 0, e["path"]))
    order = file_order.FileOrder(run_files=7)
    for entry in entries:
        order.add(entry)
    files = order.sorted()
    assert isinstance(files, file_order.SpilledFiles)
    assert len(opened) == 9 and [f.closed for f in opened] == [True] * 8 + [False]  # 8 runs merged
    assert os.listdir(tmp_path) == []  # no names: nothing stays if the process is killed
    assert len(files) == 53 and list(files) == expected
    assert [files[i] for i in (0, 4, 5, 52, -1)] == [expected[i] for i in (0, 4, 5, 52, -1)]
    assert files[3:17] == expected[3:17] and files[50:99] == expected[50:]
    with pytest.raises(IndexError):
        files[53]
    with pytest.raises(TypeError, match="stays in the process"):
        pickle.dumps(files)
    small = file_order.FileOrder(run_files=100)
    for entry in entries:
        small.add(entry)
    assert small.sorted() == expected  # one run: a list, nothing written
    del files
    gc.collect()
    assert opened[-1].closed


def _agrees_with_the_reference(path: str, files: list[dict]) -> None:
    expected = reference_replay(path).files
    assert sorted(
        (f["path"].rsplit("/", 1)[-1], dv_id(f["deletionVector"]), f["size"]) for f in files
    ) == sorted((p.rsplit("/", 1)[-1], dv, add["size"]) for (p, dv), add in expected.items())


def _same_state(path: str, run_files: int, reference: bool = True) -> None:
    """`load`'s live files are the independent reference replay's (with `reference`);
    `load_in_stream_order` (sorted through runs of `run_files`) gives them in the same order, and
    it and `load(files=False)` the same protocol and metadata."""
    from deltaspark.datasource.file_order import SpilledFiles
    from deltaspark.datasource.table_state import load_in_stream_order

    try:
        full = load(path)
    except DeltaSparkError as exc:
        with pytest.raises(type(exc)):
            load_in_stream_order(path, None, lambda f: True, run_files)
        return
    if reference:  # independent: every commit in log order, last action wins
        _agrees_with_the_reference(path, full.files)
    state, files = load_in_stream_order(path, full.version, lambda f: True, run_files)
    assert list(files) == list(full.files)
    assert isinstance(files, SpilledFiles) == (len(full.files) > run_files)
    light = load(path, files=False)
    for other in (state, light):
        assert (other.version, other.protocol, other.metadata, other.files) == (
            full.version,
            full.protocol,
            full.metadata,
            None,
        )


@needs_spark_4
def test_the_stream_snapshot_replay_agrees_with_the_full_replay_on_every_conformance_table(conformance):
    for name in TABLES:
        path = str(conformance / name)
        # the 300,000-file table: through three runs; its files against the reference replay are
        # checked by tests/test_conformance.py (through deltaspark's snapshot)
        _same_state(path, 100_000 if name in PLANNED_ONLY else 2, reference=name not in PLANNED_ONLY)


@needs_spark_4
def test_the_stream_snapshot_leaves_out_checkpoint_files_a_later_commit_removed_or_replaced(tmp_path):
    """A checkpoint of 400 files, then commits removing some of them and re-adding others with
    a deletion vector (a remove of the old key, an add of the new): neither the removed files nor
    the replaced keys come back from the streamed checkpoint."""
    from benchmarks.generate import LogSpec, generate

    spec = LogSpec(
        files=500,
        commits=4,
        partitions=3,
        remove_fraction=0.2,
        dv_fraction=0.2,
        checkpoint=True,
        tail_files_per_commit=40,
    )
    made = generate(tmp_path / "t", spec)
    full = load(str(tmp_path / "t"))
    assert len(full.files) == made.live_files == 500
    assert sum(1 for f in full.files if f["deletionVector"]) > 0
    _same_state(str(tmp_path / "t"), 64)


@needs_spark_4
def test_the_stream_snapshot_reads_commits_newest_first_by_the_reconciliation_rules(tmp_path):
    """Commits read newest first, keeping only keys: a file removed later, re-added later, added
    twice (the later wins), added and removed in one version (the remove wins), replaced by a
    deletion vector - as the full replay, which keeps every action."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)

    def add(path: str, size: int, dv: str | None = None) -> dict:
        vector = (
            {"storageType": "i", "pathOrInlineDv": dv, "sizeInBytes": 1, "cardinality": 1} if dv else None
        )
        return {
            "add": {
                "path": path,
                "partitionValues": {},
                "size": size,
                "modificationTime": size,
                "dataChange": True,
                "deletionVector": vector,
            }
        }

    def remove(path: str) -> dict:
        return {"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}}

    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    head = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
            }
        },
    ]
    commits = [
        [*head, add("a", 1), add("b", 2), add("c", 3), add("d", 4)],
        [remove("b"), add("e", 5), add("a", 6, dv="wi5b=000010000siXQKl0rr91000f55c8Xg0@fqbz"), remove("a")],
        [add("b", 7), remove("e"), add("f", 8), remove("f")],
        [add("c", 9), add("c", 10)],
    ]
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    full = load(str(tmp_path / "t"))
    assert sorted((f["path"].rsplit("/", 1)[-1], f["size"]) for f in full.files) == [
        ("a", 6),
        ("b", 7),
        ("c", 10),
        ("d", 4),
    ]
    _same_state(str(tmp_path / "t"), 2)


@needs_spark_4
def test_a_stream_over_a_snapshot_sorted_through_local_files_reads_each_file_once(delta, tmp_path):
    """`spark.deltaspark.stream.snapshotRunFiles=3`: a 12-file snapshot sorted in runs of 3 on disk
    streams as the same offsets and rows as one sorted in memory."""
    from deltaspark.datasource.registration import SNAPSHOT_RUN_FILES_CONF
    from deltaspark.errors import InvalidArgumentError

    spark, path = delta, str(tmp_path / "t")
    for start in (0, 10, 20):
        deltaspark.write(spark.range(start, start + 10, 1, 4), path)
    DeltaTable.forPath(spark, path).delete("id % 10 = 3")  # deletion vectors or rewritten files
    expected = sorted(r[0] for r in DeltaTable.forPath(spark, path).toDF().collect())
    in_memory = _stream(spark, path, tmp_path / "c1", tmp_path / "o1", maxFilesPerTrigger=5)
    assert in_memory.exception() is None
    try:
        spark.conf.set(SNAPSHOT_RUN_FILES_CONF, "zero")
        with pytest.raises(InvalidArgumentError, match="snapshotRunFiles"):
            deltaspark.register(spark)
        spark.conf.set(SNAPSHOT_RUN_FILES_CONF, "3")
        deltaspark.register(spark)
        spilled = _stream(spark, path, tmp_path / "c2", tmp_path / "o2", maxFilesPerTrigger=5)
    finally:
        spark.conf.unset(SNAPSHOT_RUN_FILES_CONF)
        deltaspark.register(spark)
    assert spilled.exception() is None
    assert _ids(spark, tmp_path / "o1") == _ids(spark, tmp_path / "o2") == expected
    assert _offsets(tmp_path / "c1") == _offsets(tmp_path / "c2")
    if ADMISSION_CONTROL:
        assert len(_offsets(tmp_path / "c2")) >= 3  # 5 files a batch


@needs_spark_4
def test_a_change_feed_stream_emits_the_snapshot_as_inserts_then_each_commits_changes(delta, tmp_path):
    spark, path = delta, str(tmp_path / "t")
    feed = {"delta.enableChangeDataFeed": "true"}
    deltaspark.write(spark.range(0, 6, 1, 2).withColumn("v", F.lit(0)), path, properties=feed)
    table = DeltaTable.forPath(spark, path)
    table.delete("id = 1")
    snapshot_version = table.snapshot().version

    def run(checkpoint: str, sink: str, **options):
        query = _stream(spark, path, tmp_path / checkpoint, tmp_path / sink, readChangeFeed=True, **options)
        assert query.exception() is None, query.exception()
        columns = ["id", "v", "_change_type", "_commit_version"]
        return sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / sink)).select(*columns).collect())

    assert run("c1", "o1") == [(i, 0, "insert", snapshot_version) for i in (0, 2, 3, 4, 5)]
    table.update("id = 2", {"v": "7"})
    deltaspark.write(spark.range(10, 11).withColumn("v", F.lit(0)), path)
    changes = run("c1", "o1")
    assert (2, 0, "update_preimage", snapshot_version + 1) in changes
    assert (2, 7, "update_postimage", snapshot_version + 1) in changes
    assert (10, 0, "insert", snapshot_version + 2) in changes
    from_zero = run("c2", "o2", startingVersion=0)
    batch = table.changes(startingVersion=0).select("id", "v", "_change_type", "_commit_version")
    assert from_zero == sorted(tuple(r) for r in batch.collect())


@needs_spark_4
def test_bronze_to_silver_restarts_without_losing_or_repeating_a_row(delta, tmp_path):
    """A delta → delta pipeline: the source's offsets and the sink's transactions together."""
    spark, bronze, silver = delta, str(tmp_path / "bronze"), str(tmp_path / "silver")
    rs = pytest.importorskip("deltalake")
    pa = pytest.importorskip("pyarrow")
    rs.write_deltalake(bronze, pa.table({"id": pa.array([0, 1, 2], pa.int64())}))  # another engine's table

    def run():
        stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(bronze)
        query = deltaspark.writeStream(
            stream.withColumn("doubled", F.col("id") * 2),
            silver,
            checkpointLocation=str(tmp_path / "cp"),
            trigger={"availableNow": True},
        )
        with contextlib.suppress(Exception):
            query.awaitTermination(120)
        assert query.exception() is None

    run()
    rs.write_deltalake(bronze, pa.table({"id": pa.array([3, 4], pa.int64())}), mode="append")
    deltaspark.write(spark.range(5, 7), bronze)
    run()
    last = max(int(p.name) for p in (tmp_path / "cp" / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the last batch committed to silver, not to the checkpoint
        (tmp_path / "cp" / "commits" / name).unlink(missing_ok=True)
    run()
    silver_rows = sorted(tuple(r) for r in DeltaTable.forPath(spark, silver).toDF().collect())
    assert silver_rows == [(i, 2 * i) for i in range(7)]


@pytest.mark.skipif(PYSPARK_VERSION < (4, 1), reason="filter pushdown for Python data sources: Spark 4.1+")
def test_pruning_keeps_every_file_it_cannot_decide():
    import datetime

    from pyspark.sql import datasource as ds

    from deltaspark.datasource.pruning import keeps

    utc = datetime.timezone.utc
    assert not keeps([ds.EqualTo(("p",), 1)], {"p": 2})
    assert not keeps([ds.EqualTo(("p",), 1)], {"p": None})  # null: no row kept
    assert keeps([ds.IsNull(("p",))], {"p": None})
    assert keeps([ds.EqualTo(("p",), "1")], {"p": 1})  # another type: undecided, kept
    assert keeps([ds.EqualTo(("p",), 1)], {"p": True})  # a boolean is not a number here
    naive, aware = datetime.datetime(2024, 1, 1), datetime.datetime(2024, 1, 1, tzinfo=utc)
    assert keeps([ds.LessThan(("p",), naive)], {"p": aware})  # naive against aware: kept
    assert not keeps([ds.LessThan(("p",), aware)], {"p": aware})
    assert keeps([ds.EqualTo(("q",), 1)], {"p": 1})  # not a partition column
    assert not keeps([ds.In(("p",), (1, 2))], {"p": 3})
    assert keeps([ds.In(("p",), (1, None))], {"p": 1})
    assert not keeps([ds.Not(ds.StringStartsWith(("p",), "eu"))], {"p": "eu-west"})
    assert not keeps(
        [ds.GreaterThanOrEqual(("p",), datetime.date(2024, 2, 1))], {"p": datetime.date(2024, 1, 31)}
    )


def _spark_truth(filter_, value) -> bool:
    """Whether a row with `value` satisfies `filter_` as Spark decides it: SQL's comparisons on
    the value itself (null satisfies none; NaN is above every number and equal to itself),
    written here apart from the code under test."""
    import operator

    from pyspark.sql import datasource as ds

    if isinstance(filter_, ds.Not):
        inner = filter_.child
        if isinstance(inner, ds.IsNull | ds.IsNotNull):
            return not _spark_truth(inner, value)
        return value is not None and not _spark_truth(inner, value)
    if isinstance(filter_, ds.IsNull | ds.IsNotNull):
        return (value is None) == isinstance(filter_, ds.IsNull)
    if value is None:
        return False
    if isinstance(filter_, ds.In):
        return any(
            _spark_truth(ds.EqualTo(filter_.attribute, v), value) for v in filter_.value if v is not None
        )
    if isinstance(filter_, ds.StringStartsWith):
        return value.startswith(filter_.value)
    compare = {
        ds.EqualTo: operator.eq,
        ds.GreaterThan: operator.gt,
        ds.GreaterThanOrEqual: operator.ge,
        ds.LessThan: operator.lt,
        ds.LessThanOrEqual: operator.le,
    }[type(filter_)]
    literal = filter_.value

    def order(v):  # Spark's order of floating point: NaN last, and equal to itself
        return (1, 0.0) if isinstance(v, float) and v != v else (0, v)

    if isinstance(value, float) or isinstance(literal, float):
        return compare(order(value), order(literal))
    return compare(value, literal)


@pytest.mark.skipif(PYSPARK_VERSION < (4, 1), reason="filter pushdown for Python data sources: Spark 4.1+")
@pytest.mark.parametrize("name", [t for t in TABLES if t not in REFUSED and t not in PLANNED_ONLY])
def test_data_skipping_never_leaves_out_a_file_holding_a_matching_row(conformance, name):
    """Every filter kind over every top-level column of every conformance table, with literals
    taken from the table's own values: a file left out by its statistics holds no row the filter
    keeps (rows read with the tasks' own reader, deleted rows left out). Plain Python: no Spark."""
    from pyspark.sql import datasource as ds

    from deltaspark.datasource.batch import FileReading, file_partitions
    from deltaspark.datasource.pruning import Skipping
    from deltaspark.spark_compat import FileSplitting

    state = load(str(conformance / name), stats=True)
    skipping = Skipping(state)
    reading = FileReading(state, None)
    names = {f.name.lower(): f.name for f in output_schema(state).fields}
    per_file = []
    for entry in state.files:
        (partition,) = file_partitions(state, FileSplitting(), [entry])
        try:
            rows = [r for batch in reading.read(partition) for r in batch.to_pylist()]
        except DeltaSparkError as exc:
            assert "missing data file" in str(exc)
            pytest.skip(f"{name} is a log without its data files: {exc}")
        per_file.append((entry, rows))
    skipped = 0
    for column, (_, data_type) in skipping.data.items():
        if (name, column) in STATISTICS_OF_NO_DATA:
            continue
        logical = names[column]
        filters = [ds.IsNull((logical,)), ds.IsNotNull((logical,))]
        if isinstance(data_type, MIN_MAX_TYPES):
            values = sorted(
                {r[logical] for _, rows in per_file for r in rows} - {None}, key=lambda v: (v != v, v)
            )
            for v in {values[i] for i in (0, len(values) // 2, -1)} if values else ():
                for kind in (
                    ds.EqualTo,
                    ds.GreaterThan,
                    ds.GreaterThanOrEqual,
                    ds.LessThan,
                    ds.LessThanOrEqual,
                ):
                    filters += [kind((logical,), v), ds.Not(kind((logical,), v))]
                filters.append(ds.In((logical,), (v, values[0])))
                if isinstance(v, str):
                    filters += [ds.StringStartsWith((logical,), v[:n]) for n in (1, 3)]
        for filter_ in filters:
            assert skipping.offered(filter_), filter_
            for entry, rows in per_file:
                if skipping.keeps([filter_], entry):
                    continue
                skipped += 1
                matching = [r[logical] for r in rows if _spark_truth(filter_, r[logical])]
                assert not matching, f"{filter_} left out {entry['path']}, which holds {matching[:3]}"
    if name in SKIPPING_TABLES:
        assert skipped > 0, "statistics left no file out: the test would not see a wrong decision"


# The fixture's data files hold no `ts_col`, though its statistics describe one (min, max, no nulls):
# a table made to test the parsing of statistics. Every reader trusts them (`toDF` leaves the same
# files out), so they cannot be checked against the rows.
STATISTICS_OF_NO_DATA = {("parsed-stats", "ts_col")}
SKIPPING_TABLES = {"stats-writing-all-types", "timestamp-truncation-stats", "parsed-stats", "type-widening"}
