"""Small work in a user's own session: what a small table's operations cost, and that every route
taken on the driver for it gives exactly the answer of the Spark route it stands in for.

A session with Spark's defaults has 200 shuffle partitions; Spark coalesces them for a query but not
for a plan it caches, and every job costs tens of milliseconds whatever it reads. So a small table's
files and rows are held on the driver where the driver already holds them (a small log's replay),
caches are sized to their data, and Python work over held rows runs on the driver with the same
functions the executors run for a large table (see docs/design.md, "Small tables").
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

import deltaspark
from deltaspark import DeltaTable
from deltaspark.audit.timeline import Timeline
from deltaspark.errors import DeltaSparkError
from deltaspark.log import replay
from deltaspark.log.files import LogFileKind
from deltaspark.log.history import history_frame
from deltaspark.log.listing import list_log_files, table_root_from
from deltaspark.maintenance import checkpoint_writer, table_listing
from deltaspark.operations.file_set import FILE_TOTALS, FileSet, totals_of
from deltaspark.operations.optimize.layout import bin_keys, spark_hash_long
from deltaspark.spark_compat import (
    coalesced_partitions,
    held_frame,
    held_left_join,
    is_local,
    local_frame,
    map_in_arrow,
    parse_bytes,
    persist_sized,
    spark_version,
    sql_in,
)
from deltaspark.storage import storage_for
from tests.conftest import CONNECT
from tests.suites import SPARK_35_TABLES

pytestmark = pytest.mark.skipif(CONNECT, reason="classic sessions: the routes measured need the JVM")


@contextlib.contextmanager
def default_partitions(spark: Any) -> Iterator[None]:
    """Spark's default 200 shuffle partitions, as a user's session has them."""
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "4")


class _Jobs:
    def __init__(self, spark: Any) -> None:
        self.context = spark.sparkContext
        self.n = 0

    @contextlib.contextmanager
    def group(self) -> Iterator[dict[str, int]]:
        self.n += 1
        name = f"small-work-{self.n}"
        self.context.setJobGroup(name, name)
        found: dict[str, int] = {}
        try:
            yield found
        finally:
            self.context.setJobGroup("", "")
            tracker = self.context.statusTracker()
            jobs = tracker.getJobIdsForGroup(name)
            tasks = [
                tracker.getStageInfo(s).numTasks
                for j in jobs
                for s in tracker.getJobInfo(j).stageIds
                if tracker.getStageInfo(s) is not None and tracker.getStageInfo(s).numCompletedTasks
            ]
            found.update(jobs=len(jobs), widest=max(tasks, default=0))


def test_byte_settings_and_partitions_follow_adaptive_executions_rule(spark):
    assert [parse_bytes(s) for s in ("64MB", "67108864b", "1m", "1048576", "0.5g", "1k")] == [
        64 << 20,
        64 << 20,
        1 << 20,
        1 << 20,
        512 << 20,
        1024,
    ]
    with default_partitions(spark):
        parallelism = spark.sparkContext.defaultParallelism
        assert coalesced_partitions(spark, 10_000) == 1  # under the 1 MB minimum partition size
        # parallelism first: spread over the cores, no partition under 1 MB, none over 64 MB
        assert coalesced_partitions(spark, 8 << 20) == min(parallelism, 8)
        assert coalesced_partitions(spark, 6400 << 20) == 100
        assert coalesced_partitions(spark, 1 << 40) == 200  # never more than the shuffle partitions


def test_a_small_cache_keeps_the_partitions_its_data_needs(spark):
    """A cached aggregate keeps Spark's 200 partitions (its last stage is not coalesced); sized, it
    has one, and the Python work above the shuffle runs once, not per shuffle partition."""
    rows = spark.range(1000).select((F.col("id") % 4).alias("p"), "id")
    with default_partitions(spark):
        plain = rows.groupBy("p").count().persist()
        sized = persist_sized(rows.groupBy("p").count(), 1000)
        python = persist_sized(
            rows.groupBy("p").count().mapInArrow(lambda batches: batches, "p long, count long"), 1000
        )
        try:
            assert plain.rdd.getNumPartitions() == 200
            assert sized.rdd.getNumPartitions() == 1
            assert python.rdd.getNumPartitions() == 1
            assert sorted(sized.collect()) == sorted(plain.collect()) == sorted(python.collect())
            held = local_frame(spark, {"a": [1, 2]}, "a long")
            assert persist_sized(held, 10) is held  # rows on the driver are not cached at all
            big = persist_sized(rows.groupBy("p").count(), 1 << 40)  # a large estimate: as planned
            assert big.rdd.getNumPartitions() == 200
            big.unpersist()
        finally:
            for frame in (plain, sized, python):
                frame.unpersist()


def _table(spark: Any, path: Path, rows: int = 400) -> str:
    def part(start: int, end: int) -> Any:
        return spark.range(start, end).selectExpr(
            "id", "cast(id % 4 as int) as p", "id * 2 as v", "cast(id as string) as s"
        )

    step = rows // 5
    deltaspark.write(part(0, step), str(path), partitionBy=["p"])
    for i in range(1, 5):
        deltaspark.write(part(step * i, step * (i + 1)), str(path))
    return str(path)


def test_a_small_tables_operations_run_few_small_jobs(spark, tmp_path):
    """The everyday operations on a small table, in a session with 200 shuffle partitions: a
    handful of jobs each, none of 200 tasks, none for what the driver holds (history, the listing
    of files, the checkpoint's counts). Bounds with a little room; `benchmarks/small.py` times them."""
    path = _table(spark, tmp_path / "t")
    jobs = _Jobs(spark)
    # a notebook's source: Python rows, which Spark has no size for (held on the driver, Spark 4)
    source = spark.createDataFrame(
        [(i, i % 4, i * 3, str(i)) for i in range(380, 420)], "id long, p int, v long, s string"
    )
    # exact on Spark 4: a source not held (kept by Spark instead) runs one more job
    merge_jobs = 8 if spark_version(spark) >= (4, 0) else 10  # a Spark 3.5 source is kept
    steps = [
        ("count", lambda t: t.toDF().count(), 3),
        ("delete", lambda t: t.delete("id < 20"), 6),
        ("update", lambda t: t.update("id = 200", {"v": "v + 1"}), 6),
        (
            "merge",
            lambda t: (
                t.alias("t")
                .merge(source.alias("s"), "t.id = s.id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            ),
            merge_jobs,
        ),
        ("optimize", lambda t: t.optimize().executeCompaction().collect(), 6),
        ("checkpoint", lambda t: t.checkpoint(), 1),
        ("history", lambda t: t.history().collect(), 0),
        ("vacuum", lambda t: t.vacuum(dryRun=True), 12),
        ("audit", lambda t: t.audit(), 22),
    ]
    with default_partitions(spark):
        for name, step, most in steps:
            with jobs.group() as ran:
                step(DeltaTable.forPath(spark, path))
            assert ran["jobs"] <= most, (name, ran)
            # No stage of 200 tasks for kilobytes; the widest is the audit's union of its checks'
            # frames (a task per check's partition, about 20, before it is shuffled into one).
            assert ran["widest"] <= (24 if name == "audit" else 8), (name, ran)
    assert DeltaTable.forPath(spark, path).toDF().count() == 400 - 20 + 20


def test_driver_work_gives_the_spark_routes_answers(spark, tmp_path, monkeypatch):
    """Held frames, joins of held frames, Python work over held rows, SQL IN lists and the task
    keys of compaction: each equal to what Spark computes for the same rows."""
    nested = "i int, m map<string,int>, st struct<x:int,y:string>, a array<int>"
    rows = [(1, {"a": 1}, (1, "s"), [1, 2]), (None, None, None, None)]
    held = held_frame(spark, rows, nested)
    assert sorted(map(str, held.collect())) == sorted(map(str, spark.createDataFrame(rows, nested).collect()))
    assert is_local(held_frame(spark, [(1, "a")], "a long, b string"))

    left = local_frame(spark, {"k": ["a", "b", None, "c"], "x": [1, 2, 3, 4]}, "k string, x long")
    right = local_frame(spark, {"rk": ["a", "a", "c", None], "y": [10, 11, 12, 13]}, "rk string, y long")
    joined = held_left_join(left, right, "k", "rk")
    assert joined is not None and is_local(joined)
    expected = left.join(right, left["k"] == right["rk"], "left")
    assert sorted(map(tuple, joined.collect()), key=str) == sorted(map(tuple, expected.collect()), key=str)

    def double(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            doubled = [2 * v for v in batch.column(1).to_pylist()]
            yield pa.RecordBatch.from_pydict({"k": batch.column(0), "x2": doubled})

    on_driver = map_in_arrow(left, double, "k string, x2 long")
    assert is_local(on_driver)
    in_tasks = left.mapInArrow(double, "k string, x2 long")
    assert sorted(map(str, on_driver.collect())) == sorted(map(str, in_tasks.collect()))

    frame = spark.createDataFrame([("a",), ("it's",), ("b\\c",), ("d",)], "v string")
    for values in (["a", "d"], ["it's", "b\\c"], []):
        assert sorted(r[0] for r in frame.where(sql_in("v", values)).collect()) == sorted(values)

    ids = list(range(-3, 3)) + [2**40 + 7, -(2**63), 2**63 - 1]
    hashed = spark.createDataFrame([(i,) for i in ids], "x long").select(F.hash("x")).collect()
    assert [r[0] for r in hashed] == [spark_hash_long(i) for i in ids]
    keys = bin_keys(7)
    assert sorted(keys) == list(range(7)) and all(spark_hash_long(k) % 7 == b for b, k in keys.items())


def test_held_files_total_as_the_aggregate_does(spark, tmp_path):
    path = _table(spark, tmp_path / "t")
    snapshot = DeltaTable.forPath(spark, path).snapshot()
    files = snapshot.files()
    assert is_local(files)
    cached: list[Any] = []
    held = FileSet.of(files, 1, cached, snapshot.stateBytes)
    copy = spark.createDataFrame(files.collect(), files.schema)  # the same rows, not held
    assert not is_local(copy)
    assert held.totals == totals_of(copy, FILE_TOTALS)
    assert held.held is not None and len(held.held) == held.count("files") == copy.count() > 4
    assert {r["line"] for r in held.held} == {
        r["line"] for r in FileSet.of(copy, 1, cached, snapshot.stateBytes).held or []
    }
    for frame in cached:
        frame.unpersist()


@pytest.mark.one_suite("4.x")  # reads each table three times
def test_driver_reads_of_small_logs_equal_sparks(spark, conformance, monkeypatch):
    """For one conformance table per feature (`tests/suites.py`) whose log the driver reads: its
    JSON lines as Spark's text scan gives them, its file intervals as the audit's Spark replay
    gives them, its history as Spark's. (Every table: about 2.5 minutes.)"""
    storage = storage_for(spark)
    compared = 0
    for table in sorted(t for t in conformance.iterdir() if t.name in SPARK_35_TABLES):
        root = next((d for d in (table, table / "delta") if (d / "_delta_log").is_dir()), None)
        if root is None:
            continue
        listing = list_log_files(storage, f"file:{root}/_delta_log")
        commits = sorted((f for f in listing if f.kind is LogFileKind.COMMIT), key=lambda f: f.version)
        if not commits or commits[0].version != 0:
            continue
        lines = replay.lines_on_driver(spark, commits[:64])
        if lines is None:
            continue
        kinds = ["protocol", "metaData", "txn", "domainMetadata", "commitInfo", "cdc", "add", "remove"]
        held = sorted(map(str, replay.read_json_actions(spark, commits[:64], kinds).collect()))
        with monkeypatch.context() as patch:
            patch.setattr(replay, "lines_on_driver", lambda *args: None)
            scanned = sorted(map(str, replay.read_json_actions(spark, commits[:64], kinds).collect()))
        assert held == scanned, table.name

        root_uri = table_root_from(listing, storage, f"file:{root}")
        latest = max(f.version for f in listing if f.kind is not LogFileKind.CHECKSUM)
        timeline = Timeline(spark, storage, str(root), root_uri, listing, latest)
        driver = timeline._intervals_on_driver()
        if driver is not None:
            spark_route = Timeline(spark, storage, str(root), root_uri, listing, latest)
            spark_route._intervals_on_driver = lambda *args, **kwargs: None  # type: ignore[method-assign]
            columns = driver.columns
            assert sorted(map(str, driver.collect())) == sorted(
                map(str, spark_route.intervals.select(*columns).collect())
            ), table.name

        try:
            snapshot = DeltaTable.forPath(spark, str(root)).snapshot()
        except DeltaSparkError:  # a table deltaspark refuses (an unknown reader feature)
            compared += 1
            continue
        history = history_frame(spark, listing, snapshot.inCommitTimestamps)
        with monkeypatch.context() as patch:
            patch.setattr("deltaspark.log.history._infos_on_driver", lambda lines: None)
            expected = history_frame(spark, listing, snapshot.inCommitTimestamps)
        assert [r.asDict() for r in history.collect()] == [r.asDict() for r in expected.collect()], table.name
        compared += 1
    assert compared >= 15, compared


@pytest.mark.parametrize("partitioned", [True, False])
def test_small_trees_are_listed_on_the_driver_as_tasks_list_them(spark, tmp_path, monkeypatch, partitioned):
    """The same entries either way, for a tree the driver lists to its leaves before it finds it too
    large to hold (a flat table's root, a partitioned table's last level): tasks relist those."""
    path = str(tmp_path / "t")
    if partitioned:
        _table(spark, tmp_path / "t")
    else:
        for i in range(3):
            deltaspark.write(spark.range(i * 10, i * 10 + 10).repartition(3), path)
    (tmp_path / "t" / "orphan.parquet").write_bytes(b"x")
    (tmp_path / "t" / "_hidden").mkdir()
    columns = ["p"] if partitioned else []
    held = table_listing.list_table_files(spark, path, columns)
    assert is_local(held)
    monkeypatch.setattr(table_listing, "DRIVER_ENTRIES", 0)
    tasks = table_listing.list_table_files(spark, path, columns)
    assert not is_local(tasks)
    listed = sorted(held.collect())
    assert listed == sorted(tasks.collect())
    names = [e.path.rsplit("/", 1)[-1] for e in listed]
    assert names.count("orphan.parquet") == 1 and "_hidden" not in names
    files = DeltaTable.forPath(spark, path).snapshot().files().collect()
    assert files and {f.path.rsplit("/", 1)[-1] for f in files} <= set(names)


def test_a_small_checkpoint_is_counted_on_the_driver_as_spark_counts_it(spark, tmp_path):
    path = _table(spark, tmp_path / "t")
    table = DeltaTable.forPath(spark, path)
    table.delete("id < 10")
    directory = str(tmp_path / "written")
    snapshot = table.snapshot()
    rows = checkpoint_writer._checkpointed_rows(snapshot)
    frame = rows.select(F.col("is_add"), F.to_json(F.struct("add")).alias("add_json"))
    frame.coalesce(1).write.parquet(directory)
    storage = storage_for(spark)
    statuses = [s for s in storage.list_dir(directory) or [] if checkpoint_writer._PART_NAME.match(s.name)]
    kinds = ["is_add", "add_json"]
    on_driver = checkpoint_writer._counted_on_driver(storage, statuses, "parquet", kinds)
    by_spark = checkpoint_writer._counted_by_spark(spark, directory, "parquet", kinds)
    assert on_driver is not None and set(on_driver) == set(by_spark)
    for name, counts in on_driver.items():
        assert counts == {k: int(by_spark[name].get(k) or 0) for k in ["rows", *kinds]}, name
    result = table.checkpoint()
    assert (
        result.numOfAddFiles
        == json.loads(Path(tmp_path / "t" / "_delta_log" / "_last_checkpoint").read_text())["numOfAddFiles"]
    )


_TIMINGS = ("executionTimeMs", "scanTimeMs", "rewriteTimeMs")


def _counts(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics without timings and sizes of written files: a file's bytes follow the order its rows
    reach the writer's task, which Spark does not fix (a byte apart between two runs of one route)."""
    kept: dict[str, Any] = {}
    for key, value in metrics.items():
        if key in _TIMINGS or "Bytes" in key or key in ("min", "max", "avg", "totalSize"):
            continue
        kept[key] = _counts(value) if isinstance(value, dict) else value
    return kept


def test_the_held_and_the_distributed_routes_change_tables_alike(spark, tmp_path):
    """The same delete, update, merge and compaction on two copies of one table: one with its log
    replayed and its files held on the driver, one with the driver replay and the held file
    actions off (every file list a Spark plan, cached and aggregated). Same rows, same metrics."""
    import shutil

    held = _table(spark, tmp_path / "held")
    spread = str(tmp_path / "spread")
    shutil.copytree(held, spread)
    source = spark.range(380, 420).selectExpr(
        "id", "cast(id % 4 as int) as p", "id * 3 as v", "cast(id as string) as s"
    )

    def run(path: str) -> list[dict[str, Any]]:
        table = DeltaTable.forPath(spark, path)
        metrics = [
            table.delete("id < 20 OR id = 77").metrics,
            table.update("p = 2 AND id > 300", {"v": "v * 10"}).metrics,
        ]
        merge = table.alias("t").merge(source.alias("s"), "t.id = s.id")
        merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        metrics.append(DeltaTable.forPath(spark, path).history(1).collect()[0]["operationMetrics"])
        with _file_sizes(spark):
            optimized = table.optimize().executeCompaction().collect()[0]["metrics"].asDict(True)
        metrics.append({k: v for k, v in optimized.items() if k not in ("startTimeMs", "endTimeMs")})
        return [_counts(m) for m in metrics]

    on_driver = run(held)
    spark.conf.set("spark.deltaspark.replay.driverMaxBytes", "0")
    spark.conf.set("spark.deltaspark.commit.driverFileActions", "0")
    try:
        distributed = run(spread)
    finally:
        spark.conf.unset("spark.deltaspark.replay.driverMaxBytes")
        spark.conf.unset("spark.deltaspark.commit.driverFileActions")
    assert on_driver == distributed
    rows = [sorted(DeltaTable.forPath(spark, p).toDF().collect()) for p in (held, spread)]
    assert rows[0] == rows[1] and len(rows[0]) == 400 - 21 + 20


@contextlib.contextmanager
def _file_sizes(spark: Any) -> Iterator[None]:
    from deltaspark.operations.optimize.bins import MAX_FILE_SIZE_CONF, MIN_FILE_SIZE_CONF

    spark.conf.set(MAX_FILE_SIZE_CONF, "4000")
    spark.conf.set(MIN_FILE_SIZE_CONF, "4000")
    try:
        yield
    finally:
        spark.conf.unset(MAX_FILE_SIZE_CONF)
        spark.conf.unset(MIN_FILE_SIZE_CONF)


def test_deltasparks_own_plans_skip_pysparks_call_site_capture(spark, tmp_path, monkeypatch):
    """PySpark 4 records the user's call site at every `functions` call and Column operator (about
    eight JVM round trips each). Inside a deltaspark call the sites would be deltaspark's own
    lines: its plans are built without them, and the user's own DataFrame code, before and after
    and after a failed call, still records them (`spark_compat.internal_plan`)."""
    from pyspark.errors import utils as error_utils

    if not hasattr(error_utils, "_enable_debugging_cache"):
        pytest.skip("Spark 3.5's PySpark records no call sites")
    captured: list[str] = []
    original = error_utils._capture_call_site

    def capture(depth: int) -> str:
        captured.append("x")
        return original(depth)

    monkeypatch.setattr(error_utils, "_capture_call_site", capture)
    path = _table(spark, tmp_path / "t")
    F.col("id") + 1  # the user's own expression: recorded
    assert captured, "PySpark records call sites in this session (else the test proves nothing)"
    captured.clear()
    table = DeltaTable.forPath(spark, path)
    table.update("id = 200", {"v": "v + 1"})
    table.toDF().where("id < 5").count()
    assert captured == []
    with pytest.raises(DeltaSparkError):
        table.delete("no_such_column > 1")
    assert captured == []
    F.col("id") + 1  # restored after the calls, the failed one included
    assert captured
