"""OPTIMIZE: compaction bins as the rules say (checked file by file against the files they
replace), deletion vectors purged, Z-order making data skipping work, row ids kept, no change
data, snapshot isolation; every version read alike by deltaspark and delta-rs and checked against
the protocol's writer rules (`writer_rules.check_table`)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from deltaspark import DeltaTable
from deltaspark.errors import ConcurrentDeleteReadError, InvalidArgumentError
from deltaspark.operations.optimize.bins import MAX_FILE_SIZE_CONF, MIN_FILE_SIZE_CONF, assign_bins
from deltaspark.operations.optimize.execute import optimize
from deltaspark.operations.optimize.layout import along_curve, quantile_boundaries, rank_of
from deltaspark.spark_compat import range_sample
from deltaspark.table import write
from tests.writer_rules import check_table

deltalake = pytest.importorskip("deltalake")


@contextmanager
def file_sizes(spark: Any, max_size: int, min_size: int | None = None) -> Iterator[None]:
    spark.conf.set(MAX_FILE_SIZE_CONF, str(max_size))
    spark.conf.set(MIN_FILE_SIZE_CONF, str(min_size if min_size is not None else max_size))
    try:
        yield
    finally:
        spark.conf.unset(MAX_FILE_SIZE_CONF)
        spark.conf.unset(MIN_FILE_SIZE_CONF)


def _actions(path: Path, version: int) -> list[dict[str, Any]]:
    lines = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _live_files(path: Path) -> dict[str, dict[str, Any]]:
    table = deltalake.DeltaTable(str(path))
    return {a["path"]: a for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()}


def _rows_of(path: Path, version: int | None = None) -> list[tuple]:
    table = deltalake.DeltaTable(str(path), version=version)
    data = deltalake.QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return sorted(tuple(r.values()) for r in pa.table(data.read_all()).to_pylist())


def _ids_in_file(path: Path, relative: str) -> list[int]:
    return sorted(pq.read_table(str(path / relative), columns=["id"]).column("id").to_pylist())


def expected_bins(files: dict[str, dict[str, Any]], max_size: int, min_size: int) -> list[list[str]]:
    """delta-spark's compaction rules (`OptimizeExecutor.groupFilesIntoBins`), written out: per
    partition, candidates (smaller than min_size) smallest first, each added to the current bin
    unless it would take the bin above max_size, when it starts a new one; single-file bins
    (without a DV) dropped."""
    by_partition: dict[Any, list[tuple[int, str]]] = {}
    for path, add in files.items():
        if add["size_bytes"] < min_size:
            key = tuple(sorted((k, v) for k, v in add.items() if k.startswith("partition.")))
            by_partition.setdefault(key, []).append((add["size_bytes"], path))
    bins = []
    for candidates in by_partition.values():
        groups: list[list[str]] = [[]]
        total = 0
        for size, path in sorted(candidates):
            if total + size > max_size:
                groups.append([])
                total = 0
            groups[-1].append(path)
            total += size
        bins.extend(sorted(g) for g in groups if len(g) > 1)
    return sorted(bins)


def test_compaction_bins_files_per_partition_and_changes_no_row(spark, tmp_path):
    path = tmp_path / "t"
    properties = {"delta.enableChangeDataFeed": "true"}
    schema = "id long, payload string, part int"
    for batch in range(7):
        rows = [(batch * 100 + i, "x" * (i * 7 % 50), i % 3) for i in range(batch * 3 + 4)]
        write(
            spark.createDataFrame(rows, schema).coalesce(1),
            str(path),
            partitionBy=["part"],
            properties=properties if batch == 0 else None,
        )
    # part 2 gets one large file: never a candidate
    write(
        spark.createDataFrame([(10_000 + i, "y" * 200, 2) for i in range(400)], schema).coalesce(1), str(path)
    )
    before = _live_files(path)
    rows_before = _rows_of(path)
    sizes = sorted(a["size_bytes"] for a in before.values())
    max_size = sum(sizes[:-1]) // 5  # a few bins per partition
    min_size = sizes[-1]  # everything but the largest file is a candidate
    bins = expected_bins(before, max_size, min_size)
    assert len(bins) >= 4 and any(len(b) >= 3 for b in bins)
    table = DeltaTable.forPath(spark, str(path))
    with file_sizes(spark, max_size, min_size):
        metrics = table.optimize().executeCompaction().first()["metrics"]
    version = table.snapshot().version
    actions = _actions(path, version)
    removed = sorted(a["remove"]["path"] for a in actions if "remove" in a)
    added = [a["add"] for a in actions if "add" in a]
    assert removed == sorted(p for b in bins for p in b)
    assert len(added) == len(bins)
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert all(a["dataChange"] is False for a in added)
    # each new file holds exactly the rows of one bin
    new_files = sorted(_ids_in_file(path, a["path"]) for a in added)
    assert new_files == sorted(sorted(i for p in b for i in _ids_in_file(path, p)) for b in bins)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert metrics["numFilesRemoved"] == len(removed) and metrics["numFilesAdded"] == len(bins)
    assert metrics["filesRemoved"]["totalSize"] == sum(before[p]["size_bytes"] for p in removed)
    assert metrics["totalConsideredFiles"] == len(before)
    assert metrics["partitionsOptimized"] == len({before[b[0]]["partition.part"] for b in bins})
    assert _rows_of(path) == rows_before == _rows_of(path, version - 1)
    assert sorted(table.toDF().collect()) == sorted(spark.createDataFrame(rows_before, schema).collect())
    # OPTIMIZE writes no change data: the feed between the versions around it is empty
    assert table.changes(version, version).count() == 0
    check_table(path)
    # a second run finds nothing left to bin at these sizes (or only the new files' bins)
    with file_sizes(spark, 1 << 40, min_size):
        table.optimize().where("part = 1").executeCompaction()
    assert {a["partition.part"] for a in _live_files(path).values()}.issuperset({0, 1, 2})
    assert sum(1 for a in _live_files(path).values() if a["partition.part"] == 1) == 1
    with file_sizes(spark, 1 << 40, min_size):
        again = table.optimize().where("part = 1").executeCompaction().first()["metrics"]
    assert again["numFilesRemoved"] == 0 and again["numFilesAdded"] == 0
    assert _rows_of(path) == rows_before
    check_table(path)


def test_bins_are_packed_as_delta_spark_packs_them():
    """A file joins the current bin unless it would take it above the maximum: never cut at fixed
    offsets of the running total (a bin of 4+4+... then 9 would cross 10 by a whole file)."""
    files = [("p=1", size, f"f{i}", False) for i, size in enumerate([1, 2, 3, 4, 9, 9, 30])]
    files += [("p=2", 5, "g0", False), ("p=2", 6, "g1", True)]
    got = [(path, group) for path, group, _, _ in assign_bins(files, 10, curve=False)]
    # p=1: 1+2+3+4 = 10 fits; 9 alone (9+9 > 10); 9 alone; 30 alone (above the maximum by itself)
    assert got == [
        ("f0", 0),
        ("f1", 0),
        ("f2", 0),
        ("f3", 0),
        ("f4", 1),
        ("f5", 2),
        ("f6", 3),
        ("g0", 0),
        ("g1", 1),
    ]
    counts = {path: (n, dvs) for path, _, n, dvs in assign_bins(files, 10, curve=False)}
    assert counts["f0"] == (4, 0) and counts["f4"] == (1, 0) and counts["g1"] == (1, 1)
    curve = {path: group for path, group, _, _ in assign_bins(files, 10, curve=True)}
    assert set(curve.values()) == {0}  # a curve lays out each partition as one group


@pytest.mark.parametrize(
    "route",
    ["small-log-on-the-driver", "held-files-joined-with-their-bins", "collected-to-the-driver", "in-tasks"],
)
def test_an_optimized_table_compacts_to_nothing_more(spark, tmp_path, monkeypatch, route):
    """Compaction twice at the same sizes: the second commits nothing (no bin holds more than the
    maximum, so none is cut again), on each of the packing's routes: a small log's files binned on
    the driver (their bins named by one SQL map, or, for more than `HELD_MAP_FILES` files, joined
    with them there); with the driver replay off, the candidates collected to the driver and
    their bins joined back as a local relation, or, beyond `read.maxDriverFiles` candidates,
    Python tasks over each partition's files."""
    from deltaspark.operations.optimize import bins as bins_module

    calls: dict[str, list[int]] = {"held": [], "joined": [], "tasks": []}
    original_held_frame, original_local_frame = bins_module.held_frame, bins_module.local_frame
    original_tasks = bins_module._groups_in_tasks

    def counting_held_frame(spark_session, rows, schema):
        calls["held"].append(len(rows))
        return original_held_frame(spark_session, rows, schema)

    def counting_local_frame(spark_session, columns, schema):
        calls["joined"].append(len(next(iter(columns.values()))))
        return original_local_frame(spark_session, columns, schema)

    def counting_tasks(max_file_size, curve):
        calls["tasks"].append(1)
        return original_tasks(max_file_size, curve)

    monkeypatch.setattr(bins_module, "held_frame", counting_held_frame)
    monkeypatch.setattr(bins_module, "local_frame", counting_local_frame)
    monkeypatch.setattr(bins_module, "_groups_in_tasks", counting_tasks)
    if route == "held-files-joined-with-their-bins":
        monkeypatch.setattr(bins_module, "HELD_MAP_FILES", 1)
    if route == "in-tasks":
        monkeypatch.setattr(bins_module, "DEFAULT_MAX_DRIVER_FILES", 0)
    path = tmp_path / "t"
    schema = "id long, payload string, part int"
    noise = random.Random(7)  # incompressible payloads: a file's size is its rows', not its footer's
    for batch in range(7):
        rows = [(batch * 1000 + i, f"{noise.getrandbits(400):0100x}", i % 2) for i in range(400)]
        write(spark.createDataFrame(rows, schema).coalesce(1), str(path), partitionBy=["part"])
    before = _live_files(path)
    sizes = sorted(a["size_bytes"] for a in before.values())
    assert 4 * sizes[0] > 3 * sizes[-1] + 1  # files of about one size: three fit in a bin, four do not
    max_size = 3 * sizes[-1] + 1
    bins = expected_bins(before, max_size, 1 << 40)
    assert sorted(len(b) for b in bins) == [3, 3, 3, 3]  # 7 files a partition: 3 + 3 (+ 1 left alone)
    table = DeltaTable.forPath(spark, str(path))
    replay = "spark.deltaspark.replay.driverMaxBytes"
    if route in ("collected-to-the-driver", "in-tasks"):
        spark.conf.set(replay, "0")
    try:
        with file_sizes(spark, max_size, 1 << 40):
            first = table.optimize().executeCompaction().first()["metrics"]
            version = table.snapshot().version
            again = table.optimize().executeCompaction().first()["metrics"]
    finally:
        spark.conf.unset(replay)
    removed = sorted(a["remove"]["path"] for a in _actions(path, version) if "remove" in a)
    assert removed == sorted(p for b in bins for p in b)
    assert first["numFilesAdded"] == len(bins)
    assert again["numFilesRemoved"] == 0 and again["numFilesAdded"] == 0
    assert table.snapshot().version == version  # nothing committed
    expected = {
        "small-log-on-the-driver": {"held": [], "joined": [], "tasks": []},  # one SQL map
        "held-files-joined-with-their-bins": {"held": [12], "joined": [], "tasks": []},
        "collected-to-the-driver": {"held": [], "joined": [12], "tasks": []},  # 12 of 14 files rewritten
        "in-tasks": {"held": [], "joined": [], "tasks": [1, 1]},  # both calls
    }[route]
    assert calls == expected
    check_table(path)


def test_bins_planned_on_the_driver_count_their_files_there(spark, tmp_path, monkeypatch):
    """With the log replayed by Spark and more rewritten files than a commit collects
    (`commit.driverFileActions`), the candidates' one collect gives the bins, their totals, the
    read's listing and what the checksum counts of the removed files: no aggregate runs over the
    removes, and the metrics and the checksum (deletion vectors' rows included) are still those
    of a full replay."""
    from deltaspark.transaction import checksum as checksum_module

    path = tmp_path / "t"
    properties = {"delta.enableDeletionVectors": "true"}
    schema = "id long, part int"
    for batch in range(3):
        rows = [(batch * 1000 + i, i % 2) for i in range(200)]
        first = {"properties": properties} if batch == 0 else {}
        write(spark.createDataFrame(rows, schema).coalesce(1), str(path), partitionBy=["part"], **first)
    table = DeltaTable.forPath(spark, str(path))
    table.delete("id % 5 = 3")  # a DV on each of the 6 files: 20 of its 100 rows
    rows_before, sizes_before = _rows_of(path), sum(a["size_bytes"] for a in _live_files(path).values())
    aggregated: list[list[str]] = []
    original = checksum_module.file_aggregates

    def recording(files, dvs):
        aggregated.append(files.columns)
        return original(files, dvs)

    monkeypatch.setattr(checksum_module, "file_aggregates", recording)
    settings = {
        "spark.deltaspark.replay.driverMaxBytes": "0",  # the log replayed by Spark, not held
        "spark.deltaspark.commit.driverFileActions": "1",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        metrics = table.optimize().executeCompaction().first()["metrics"]
    finally:
        for key in settings:
            spark.conf.unset(key)
    assert metrics["numFilesRemoved"] == 6 and metrics["numFilesAdded"] == 2  # a bin per partition
    assert metrics["totalConsideredFiles"] == 6 and metrics["partitionsOptimized"] == 2
    dv_stats = metrics["deletionVectorStats"]
    assert dv_stats["numDeletionVectorsRemoved"] == 6 and dv_stats["numDeletionVectorRowsRemoved"] == 120
    assert metrics["filesRemoved"]["totalSize"] == sizes_before
    removes = [a["remove"] for a in _actions(path, table.snapshot().version) if "remove" in a]
    assert len(removes) == 6 and all(r["dataChange"] is False and r["deletionVector"] for r in removes)
    assert aggregated and not any("deletionTimestamp" in columns for columns in aggregated)  # adds only
    version = table.snapshot().version
    written = json.loads((path / "_delta_log" / f"{version:020d}.crc").read_text())
    assert written == checksum_module.full_checksum(table.snapshot(), written.get("txnId"))
    assert written["numDeletionVectorsOpt"] == 0 and written["numFiles"] == 2
    assert _rows_of(path) == rows_before
    check_table(path)


def test_purge_and_compaction_drop_deleted_rows_keeping_row_ids(spark, tmp_path):
    path = tmp_path / "t"
    properties = {
        "delta.enableDeletionVectors": "true",
        "delta.enableRowTracking": "true",
        "delta.columnMapping.mode": "name",
    }
    schema = "id long, name string"
    for batch in range(3):
        rows = [(batch * 1000 + i, f"n{i}") for i in range(200)]
        first = {"properties": properties} if batch == 0 else {}
        write(spark.createDataFrame(rows, schema).coalesce(1), str(path), **first)
    table = DeltaTable.forPath(spark, str(path))
    table.delete("id % 10 = 3 AND id < 2000")  # DVs on the first two files, 10% of their rows

    def tracked() -> list[tuple]:
        frame = table.toDF(rowTracking=True).select(
            "id", "name", "_metadata.row_id", "_metadata.row_commit_version"
        )
        return sorted(tuple(r) for r in frame.collect())

    before = tracked()
    rows_before = _rows_of(path)
    # compaction with files already "large": only the DV rule picks files (ratio 0.1 > 0.05)
    with file_sizes(spark, 1 << 30, 1):
        metrics = table.optimize().executeCompaction().first()["metrics"]
    assert metrics["numFilesRemoved"] == 2 and metrics["numFilesAdded"] == 1  # one bin: 2 small files
    assert metrics["deletionVectorStats"]["numDeletionVectorsRemoved"] == 2
    assert metrics["deletionVectorStats"]["numDeletionVectorRowsRemoved"] == 40

    def with_dvs() -> int:
        return table.snapshot().files().where("deletionVector IS NOT NULL").count()

    assert with_dvs() == 0
    assert tracked() == before and _rows_of(path) == rows_before
    # purge: every file with a DV, whatever its ratio
    table.delete("id = 2005")
    assert with_dvs() == 1
    metrics = table.optimize().purgeDeletionVectors().first()["metrics"]
    info = next(a["commitInfo"] for a in _actions(path, table.snapshot().version) if "commitInfo" in a)
    assert info["operation"] == "REORG"
    assert (
        metrics["numFilesRemoved"] == 1
        and metrics["deletionVectorStats"]["numDeletionVectorRowsRemoved"] == 1
    )
    assert with_dvs() == 0
    after = tracked()
    assert after == [r for r in before if r[0] != 2005]
    assert table.optimize().purgeDeletionVectors().first()["metrics"]["numFilesRemoved"] == 0
    check_table(path)


def _files_hit(path: Path, column: str, value: int) -> Fraction:
    files = _live_files(path).values()
    hits = [f for f in files if f[f"min.{column}"] <= value <= f[f"max.{column}"]]
    return Fraction(len(hits), len(files))  # exact: thresholds compare sums of these


def test_zorder_makes_point_lookups_skip_files_on_each_column(spark, tmp_path):
    path = tmp_path / "t"
    rng = random.Random(5)
    rows = [(rng.randrange(1_000_000), rng.randrange(1_000_000), i) for i in range(6000)]
    frame = spark.createDataFrame(rows, "x long, y long, i long").repartition(16)
    write(frame, str(path))
    rows_before = _rows_of(path)
    probes = [rows[k] for k in range(0, 6000, 600)]
    before = {c: sum(_files_hit(path, c, r[j]) for r in probes) / len(probes) for j, c in enumerate("xy")}
    assert min(before.values()) > 0.9
    total = sum(a["size_bytes"] for a in _live_files(path).values())
    table = DeltaTable.forPath(spark, str(path))
    with file_sizes(spark, total // 16 + 1):
        metrics = table.optimize().executeZOrderBy("x", "y").first()["metrics"]
    assert metrics["numFilesRemoved"] == 16 and 12 <= metrics["numFilesAdded"] <= 20
    assert metrics["zOrderStats"]["numOutputCubes"] == metrics["numFilesAdded"]
    after = {c: sum(_files_hit(path, c, r[j]) for r in probes) / len(probes) for j, c in enumerate("xy")}
    # a Z-curve over 16 files: a point on one column meets about 4 of them (more where a file
    # straddles two cells of the curve)
    assert max(after.values()) <= 0.5 and sum(after.values()) / 2 <= 0.4, after
    assert _rows_of(path) == rows_before
    check_table(path)
    with pytest.raises(InvalidArgumentError, match="no such top-level column"):
        table.optimize().executeZOrderBy("nope")
    with pytest.raises(InvalidArgumentError, match="at least one column"):
        table.optimize().executeZOrderBy()


def test_the_curve_cuts_files_at_the_same_exact_places_whatever_ran_before(spark):
    """Spark seeds a range partitioning's sample with the RDD's id, so with its default sample (100
    rows a file) the files' boundaries on the curve, and so their sizes and overlap, changed with
    what the session had run before. OPTIMIZE samples as many rows as it ranks (all, when few): the
    files hold equal counts, the same in any session."""
    rng = random.Random(3)
    frame = spark.createDataFrame(
        [(rng.randrange(10**6), rng.randrange(10**6)) for _ in range(3000)], "x long, y long"
    ).repartition(3)
    keys = [F.col(c).cast("double") for c in "xy"]
    cuts = quantile_boundaries(frame, keys, 3000, 8)
    ranks = [rank_of(key, True, key_cuts) for key, key_cuts in zip(keys, cuts, strict=True)]

    def layout() -> list[tuple[int, int, int]]:
        laid = along_curve(frame, [], ranks, 8, 8).groupBy(F.spark_partition_id().alias("file"))
        with range_sample(spark, 3000, 8):
            return sorted(tuple(r) for r in laid.agg(F.count("*"), F.min("x") + F.min("y")).collect())

    first = layout()
    for _ in range(11):
        spark.sparkContext.parallelize([0])  # later RDD ids: another seed
    assert layout() == first
    assert len(first) == 8 and all(abs(count - 375) <= 3 for _, count, _ in first), first


def test_quantile_cuts_are_the_same_from_arrow_as_from_rows(spark, monkeypatch):
    """The sampled keys arrive as Arrow columns and are sorted there (no Python object per value);
    the cuts are the ones Python's own sort of the collected rows gives: nulls and NaN left out,
    strings in code point order (UTF-8 bytes, as Arrow sorts them, order alike)."""
    from deltaspark.operations.optimize import layout as layout_module

    rng = random.Random(11)
    words = ["a", "b", "z", "é", "ß", "Ω", "中", "😀", "ab", "Z", ""]
    rows = [
        (
            None if i % 13 == 0 else float("nan") if i % 17 == 0 else rng.random() * 100,
            None if i % 7 == 0 else rng.choice(words) + str(rng.randrange(50)),
        )
        for i in range(2000)
    ]
    frame = spark.createDataFrame(rows, "d double, s string")
    keys = [F.col("d"), F.col("s")]
    from_arrow = quantile_boundaries(frame, keys, 2000, 5)
    monkeypatch.setattr(layout_module, "collect_arrow", lambda sample: None)
    from_rows = quantile_boundaries(frame, keys, 2000, 5)
    assert from_arrow == from_rows
    numbers, strings = from_arrow
    assert len(numbers) == 31 and not any(n != n for n in numbers)  # 2^5 ranges, no NaN cut
    assert 20 <= len(strings) <= 31 and strings == sorted(strings)


def test_optimize_isolation_refusals_and_the_cli(spark, tmp_path, capsys):
    from deltaspark.cli import main as cli

    path = tmp_path / "t"
    schema = "id long, part int"
    for batch in range(3):
        write(
            spark.createDataFrame([(batch * 10 + i, i % 2) for i in range(6)], schema).coalesce(1),
            str(path),
            partitionBy=["part"] if batch == 0 else None,
        )
    table = DeltaTable.forPath(spark, str(path))
    with pytest.raises(InvalidArgumentError, match="partition columns only"):
        table.optimize().where("id > 3").executeCompaction()
    with pytest.raises(InvalidArgumentError, match="partition column"):
        table.optimize().executeZOrderBy("part")
    with pytest.raises(InvalidArgumentError, match="both partitioned and clustered"):
        table.clusterBy("id")
    assert table.clusterBy() is None  # CLUSTER BY NONE on a table never clustered records nothing
    assert "clustering" not in (table.snapshot().protocol.writerFeatures or ())
    stale = table.snapshot()
    # a blind append after the snapshot: OPTIMIZE still commits, both changes kept
    write(spark.createDataFrame([(100, 0)], schema), str(path))
    outcome = optimize(spark, table._storage, table._path, stale, "part = 0")
    assert outcome.commit is not None and outcome.metrics["numFilesRemoved"] == 3
    assert sorted(r[0] for r in table.toDF().collect()) == sorted(
        [b * 10 + i for b in range(3) for i in range(6)] + [100]
    )
    # a delete that removed a file OPTIMIZE rewrites: a named conflict, nothing committed
    stale = table.snapshot()
    table.delete("part = 1 AND id = 1")
    version = table.snapshot().version
    with pytest.raises(ConcurrentDeleteReadError):
        optimize(spark, table._storage, table._path, stale, "part = 1")
    assert table.snapshot().version == version
    assert 1 not in [r[0] for r in table.toDF().collect()]
    # another OPTIMIZE of the same files landed first: a named conflict too
    stale = table.snapshot()
    assert cli(["optimize", str(path), "--where", "part = 1"]) == 0
    assert "Rewrote 3 file(s)" in capsys.readouterr().out
    with pytest.raises(ConcurrentDeleteReadError):
        optimize(spark, table._storage, table._path, stale, "part = 1")
    check_table(path)
    assert cli(["optimize", str(path), "--where", "part = 1"]) == 0
    assert "Nothing to rewrite among 1 file(s)" in capsys.readouterr().out
    assert cli(["optimize", str(path), "--purge", "--zorder-by", "id"]) == 2
    assert sorted(r[0] for r in table.toDF().collect()) == sorted(
        [b * 10 + i for b in range(3) for i in range(6) if b * 10 + i != 1] + [100]
    )


@pytest.mark.one_suite("4.x")  # the log's rules; the curve itself runs on both lines in the Z-order test
def test_liquid_clustering_is_created_recorded_and_optimized_incrementally(spark, tmp_path):
    path = tmp_path / "t"
    with pytest.raises(InvalidArgumentError, match="both partitioned and clustered"):
        DeltaTable.create(spark).location(str(tmp_path / "p")).addColumn("x", "bigint").partitionedBy(
            "x"
        ).clusterBy("x").execute()
    table = (
        DeltaTable.create(spark)
        .location(str(path))
        .addColumn("x", "bigint")
        .addColumn("y", "bigint")
        .addColumn("i", "bigint")
        .clusterBy("x", "y")
        .property("delta.columnMapping.mode", "name")
        .execute()
    )
    created = _actions(path, 0)
    protocol = next(a["protocol"] for a in created if "protocol" in a)
    assert {"clustering", "domainMetadata"} <= set(protocol["writerFeatures"])
    schema = json.loads(next(a["metaData"] for a in created if "metaData" in a)["schemaString"])
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in schema["fields"]}
    domain = next(a["domainMetadata"] for a in created if "domainMetadata" in a)
    assert domain["domain"] == "delta.clustering"
    assert json.loads(domain["configuration"]) == {"clusteringColumns": [[physical["x"]], [physical["y"]]]}
    assert table.detail().first()["clusteringColumns"] == ["x", "y"]  # logical names, as delta-spark shows

    rng = random.Random(9)
    rows = [(rng.randrange(10**6), rng.randrange(10**6), i) for i in range(3000)]
    for k in range(8):
        write(spark.createDataFrame(rows[k::8], "x long, y long, i long").coalesce(1), str(path))
    with pytest.raises(InvalidArgumentError, match="clustered table"):
        table.optimize().executeZOrderBy("x")
    total = sum(a["size_bytes"] for a in _live_files(path).values())
    probes = [rows[k] for k in range(0, 3000, 300)]
    with file_sizes(spark, total // 8 + 1):
        metrics = table.optimize().executeCompaction().first()["metrics"]
    version = table.snapshot().version
    actions = _actions(path, version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["clusterBy"]) == [
        "x",
        "y",
    ]
    clustered = {a["add"]["path"] for a in actions if "add" in a}
    assert metrics["numFilesRemoved"] == 8 and len(clustered) == metrics["numFilesAdded"] >= 6
    assert all(a["add"]["clusteringProvider"] == "liquid" for a in actions if "add" in a)
    hits = [sum(_files_hit(path, physical[c], r[j]) for r in probes) / 10 for j, c in enumerate("xy")]
    assert max(hits) <= 0.6 and sum(hits) / 2 <= 0.5, hits
    assert sorted(tuple(r) for r in table.toDF().collect()) == sorted(rows)

    # a merge adds unclustered files; the clustering domain stays; OPTIMIZE clusters only those
    source = spark.createDataFrame(
        [(5, 5, 10**6 + k) for k in range(3)] + [(rows[0][0], 1, 0)], "x long, y long, i long"
    )
    table.alias("t").merge(
        source.alias("s"), "t.i = s.i"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    rows = [(rows[0][0], 1, 0), *rows[1:], *[(5, 5, 10**6 + k) for k in range(3)]]
    assert table.snapshot().domainMetadata().where("domain = 'delta.clustering'").count() == 1
    live = table.snapshot().files().select("path", "clusteringProvider").collect()
    unclustered = {r["path"] for r in live if r["clusteringProvider"] is None}
    assert unclustered and len(unclustered) < len(live)
    with file_sizes(spark, total // 8 + 1):
        table.optimize().executeCompaction()
    removed = {a["remove"]["path"] for a in _actions(path, table.snapshot().version) if "remove" in a}
    assert removed == unclustered
    assert all(r["clusteringProvider"] == "liquid" for r in table.snapshot().files().collect())
    assert sorted(tuple(r) for r in table.toDF().collect()) == sorted(rows)
    assert _rows_of(path) == sorted(rows)

    # ALTER TABLE CLUSTER BY (y), then NONE: recorded; a table without columns compacts as usual
    assert table.clusterBy("y") is not None and table.clusterBy("y") is None
    assert table.detail().first()["clusteringColumns"] == ["y"]
    with pytest.raises(InvalidArgumentError, match="no such top-level column"):
        table.clusterBy("nope")
    table.clusterBy()
    assert table.detail().first()["clusteringColumns"] == []
    with file_sizes(spark, 1 << 30):
        assert table.optimize().executeCompaction().first()["metrics"]["numFilesAdded"] == 1
    assert _rows_of(path) == sorted(rows)
    check_table(path)


def test_the_maintenance_job_optimizes_before_it_checkpoints(spark, tmp_path, capsys):
    from deltaspark.operations.maintenance_job import main as job

    path = tmp_path / "t"
    for batch in range(3):
        write(
            spark.createDataFrame([(batch, "x")], "id long, p string"),
            str(path),
            **({"partitionBy": ["p"]} if batch == 0 else {}),
        )
    output = tmp_path / "summary.json"
    assert (
        job(
            [str(path), "--optimize", "--interval", "1", "--no-cleanup", "--output", str(output)], spark=spark
        )
        == 0
    )
    (table,) = json.loads(output.read_text())["tables"]
    assert table["optimize"] == {**table["optimize"], "version": 3, "filesRemoved": 3, "filesAdded": 1}
    assert (
        table["version"] == 3 and table["checkpoint"]["version"] == 3
    )  # the checkpoint lists the compacted file
    assert "3->1" in capsys.readouterr().out
    assert sorted(r[0] for r in DeltaTable.forPath(spark, str(path)).toDF().collect()) == [0, 1, 2]


@pytest.mark.one_suite("4.x")  # the log's rules, as in the clustering test above
def test_writes_create_clustered_tables_and_keep_their_clustering_columns(spark, tmp_path):
    path = tmp_path / "t"
    frame = spark.createDataFrame([(1, "a", 10), (2, "b", 20)], "x long, s string, z long")
    write(frame, str(path), clusterBy=["x"], properties={"delta.columnMapping.mode": "name"})
    table = DeltaTable.forPath(spark, str(path))

    def physical(name: str) -> str:
        field = next(f for f in table.snapshot().schema.fields if f.name == name)
        return field.metadata["delta.columnMapping.physicalName"]

    assert table.detail().first()["clusteringColumns"] == ["x"]
    domain = table.snapshot().domainMetadata().where("domain = 'delta.clustering'").first()
    assert json.loads(domain["configuration"]) == {"clusteringColumns": [[physical("x")]]}
    with pytest.raises(InvalidArgumentError, match="clusterBy applies to a new table"):
        write(frame, str(path), clusterBy=["s"])
    with pytest.raises(InvalidArgumentError, match="both partitioned and clustered"):
        write(frame, str(path), mode="overwrite", overwriteSchema=True, partitionBy=["s"])
    with pytest.raises(InvalidArgumentError, match="no such top-level column"):
        write(frame.drop("x"), str(path), mode="overwrite", overwriteSchema=True)
    before = physical("x")
    # a new schema keeping x: new physical names under column mapping, recorded again
    write(
        frame.select("x", F.col("z").cast("string").alias("z")),
        str(path),
        mode="overwrite",
        overwriteSchema=True,
    )
    assert physical("x") != before
    domain = table.snapshot().domainMetadata().where("domain = 'delta.clustering'").first()
    assert json.loads(domain["configuration"]) == {"clusteringColumns": [[physical("x")]]}
    with file_sizes(spark, 1 << 30):
        table.optimize().executeCompaction()
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(1, "10"), (2, "20")]
    assert _rows_of(path) == [(1, "10"), (2, "20")]
    check_table(path)


def test_compaction_writes_widened_columns_as_their_current_type(spark, tmp_path):
    path = tmp_path / "t"
    write(
        spark.createDataFrame([(1, 10)], "id long, n int"),
        str(path),
        properties={"delta.enableTypeWidening": "true"},
    )
    write(spark.createDataFrame([(2, 2**40)], "id long, n long"), str(path), mergeSchema=True)
    table = DeltaTable.forPath(spark, str(path))
    assert table.snapshot().schema["n"].dataType.simpleString() == "bigint"
    table.optimize().executeCompaction()
    (added,) = [a["add"] for a in _actions(path, table.snapshot().version) if "add" in a]
    assert str(pq.read_schema(str(path / added["path"])).field("n").type) == "int64"
    # (delta-rs 1.6 cannot read typeWidening tables: the file's own type is the check)
    assert sorted(tuple(r) for r in table.toDF().collect()) == [(1, 10), (2, 2**40)]
    check_table(path)
