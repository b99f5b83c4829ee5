"""Listing every file under a table's root, distributed over Spark tasks (vacuum and audits).

delta-spark lists a table for VACUUM with its own JVM code on the executors; deltaspark ships no
JVM code, so directories are listed in Python tasks with `pyarrow.fs` (local disks, S3 - `s3a://`
read as `s3://` with AWS default credentials -, GCS, HDFS with libhdfs, Azure). The driver lists
only the first levels of directories, until there are enough of them to spread over the cluster
(or the tree ends); each task then walks its subtrees. Files never visit the driver: the result is
a DataFrame of `path, size, modificationTime, isDir`.

What is listed follows delta-spark's `DeltaTableUtils.isHiddenDirectory`, applied to directory and
file names alike: names starting with `_` or `.` are skipped, and so is a top-level `metadata`
folder (UniForm's Iceberg metadata), except `_delta_index*`, `_change_data*` and names starting
with `<partition column>=` (partition directories such as `_x=1`). `_delta_log` is never listed.
Paths are absolute, in the canonical `file:/` form the log's keys use (`log.paths`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from deltaspark.errors import DeltaSparkError, UnsupportedFileSystemError
from deltaspark.file_io import carry_settings, open_file
from deltaspark.log.paths import normalize_root
from deltaspark.spark_compat import check_python_workers, is_connect, local_frame

log = logging.getLogger(__name__)

LISTING_SCHEMA = "path string, size long, modificationTime long, isDir boolean"
LISTING_COLUMNS = ("path", "size", "modificationTime", "isDir")
_LISTING_TYPE = StructType(
    [
        StructField("path", StringType()),
        StructField("size", LongType()),
        StructField("modificationTime", LongType()),
        StructField("isDir", BooleanType()),
    ]
)
# Directories the driver aims for before handing subtrees to tasks, per core of the cluster.
_DIRS_PER_CORE = 8
_MAX_DRIVER_DEPTH = 4
# A tree of at most this many entries, in at most this many directories below the driver's first
# levels, is listed on the driver (a Spark job with Python tasks costs more than listing it).
DRIVER_ENTRIES = 10_000
DRIVER_DIRECTORIES = 256
_DRIVER_THREADS = 16


def is_hidden(name: str, partition_columns: Sequence[str], top_level: bool = False) -> bool:
    """Whether vacuum (and the orphan check) pass over a file or directory named `name`."""
    if top_level and name == "metadata":
        return True
    if not name.startswith(("_", ".")):
        return False
    if name.startswith(("_delta_index", "_change_data")):
        return False
    return not any(name.startswith(column + "=") for column in partition_columns)


def _children(fs: Any, directory: str, partition_columns: Sequence[str], top_level: bool) -> list[Any]:
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True, recursive=False))
    return [i for i in infos if not is_hidden(i.base_name, partition_columns, top_level)]


def _walk_batches(root: str, partition_columns: list[str]):  # noqa: ANN202 - a mapInArrow function
    """`mapInArrow` body: rows `(directory, recursive)` -> the entries below each directory.

    A directory's entries become columns in one comprehension each (a million files is a
    million `FileInfo`s; per-entry function calls and appends would cost as much as the stats)."""

    def walk(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyarrow import fs as pafs

        directory_type = pafs.FileType.Directory
        fs, root_local = open_file(root)
        root_local = root_local.rstrip("/") or "/"
        cut = len(root_local.rstrip("/"))  # a pyarrow path back in the table's URI form: root + rest
        schema = _arrow_schema()
        pending: list[Any] = []
        pending_rows = 0
        for batch in batches:
            for row in batch.to_pylist():
                stack = [root_local + row["directory"]]
                while stack:
                    directory = stack.pop()
                    try:
                        infos = _children(fs, directory, partition_columns, directory == root_local)
                    except OSError as exc:  # denied, unreachable: the task fails naming the folder
                        where = root + directory[cut:]
                        raise DeltaSparkError(f"deltaspark: cannot list {where}: {exc}") from exc
                    if not infos:
                        continue
                    dirs = [i.type == directory_type for i in infos]
                    mtimes = [i.mtime_ns for i in infos]
                    sizes = [0 if d else (i.size or 0) for i, d in zip(infos, dirs, strict=True)]
                    pending.append(
                        pa.RecordBatch.from_arrays(
                            [
                                pa.array([root + i.path[cut:] for i in infos], pa.string()),
                                pa.array(sizes, pa.int64()),
                                pa.array([None if m is None else m // 1_000_000 for m in mtimes], pa.int64()),
                                pa.array(dirs, pa.bool_()),
                            ],
                            schema=schema,
                        )
                    )
                    pending_rows += len(infos)
                    if row["recursive"]:
                        stack += [i.path for i, d in zip(infos, dirs, strict=True) if d]
                    if pending_rows >= 65536:
                        yield from pa.Table.from_batches(pending, schema).combine_chunks().to_batches()
                        pending, pending_rows = [], 0
        if pending:
            yield from pa.Table.from_batches(pending, schema).combine_chunks().to_batches()

    return carry_settings(walk)


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64()), ("isDir", pa.bool_())]
    )


def _entries_frame(spark: SparkSession, root: str, root_local: str, infos: list[Any]) -> DataFrame:
    """Entries listed on the driver, as the tasks report them (`_walk_batches`), held on the driver."""
    cut = len(root_local.rstrip("/"))
    dirs = [i.type.name == "Directory" for i in infos]
    return local_frame(
        spark,
        {
            "path": [root + i.path[cut:] for i in infos],
            "size": [0 if d else (i.size or 0) for i, d in zip(infos, dirs, strict=True)],
            "modificationTime": [None if i.mtime_ns is None else i.mtime_ns // 1_000_000 for i in infos],
            "isDir": dirs,
        },
        _LISTING_TYPE,
    )


def _walk_on_driver(fs: Any, frontier: list[str], columns: list[str], seen: list[Any]) -> list[Any] | None:
    """`seen` and every entry below the `frontier` directories, listed on the driver (a level's
    directories at once, in threads) when the tree holds at most `DRIVER_ENTRIES` entries in at most
    `DRIVER_DIRECTORIES` directories below the frontier; None when it holds more (tasks list it)."""
    entries, listed = list(seen), 0
    with ThreadPoolExecutor(max_workers=_DRIVER_THREADS) as pool:
        while frontier:
            listed += len(frontier)
            if listed > DRIVER_DIRECTORIES or len(entries) > DRIVER_ENTRIES:
                return None
            levels = list(pool.map(lambda d: _children(fs, d, columns, False), frontier))
            below = [i.path for infos in levels for i in infos if i.type.name == "Directory"]
            entries += [i for infos in levels for i in infos]
            frontier = below
    return entries if len(entries) <= DRIVER_ENTRIES else None


def list_table_files(
    spark: SparkSession, table_root: str, partition_columns: Sequence[str] = ()
) -> DataFrame:
    """Every file and directory under `table_root` that vacuum may consider, as a lazy DataFrame
    (`LISTING_SCHEMA`; directories have size 0)."""
    root = normalize_root(table_root)
    try:
        fs, root_local = open_file(root)
    except Exception as exc:  # pyarrow cannot reach this scheme from Python
        raise UnsupportedFileSystemError(
            root, f"deltaspark lists tables with pyarrow.fs on the executors, which cannot open it ({exc})"
        ) from exc
    root_local = root_local.rstrip("/") or "/"
    columns = list(partition_columns)
    cores = 2 if is_connect(spark) else spark.sparkContext.defaultParallelism
    target = max(1, cores) * _DIRS_PER_CORE
    # Driver: breadth first over directories, until the frontier is wide enough.
    shallow: list[str] = []  # directories whose own files a task lists (not their subdirectories)
    frontier = [root_local]
    seen: list[Any] = []  # every entry the driver listed
    complete = False  # whether `seen` is the whole tree
    for _ in range(_MAX_DRIVER_DEPTH):
        if len(frontier) >= target:
            break
        below: list[str] = []
        for directory in frontier:
            infos = _children(fs, directory, columns, directory == root_local)
            seen += infos
            below += [i.path for i in infos if i.type.name == "Directory"]
        if not below:
            complete = True  # tasks relist the frontier (in full) if the tree is too large to hold
            break
        shallow += frontier
        frontier = below
    if complete:
        whole = seen if len(seen) <= DRIVER_ENTRIES else None
    else:
        whole = _walk_on_driver(fs, frontier, columns, seen)
    if whole is not None:
        log.info("Listed %s on the driver: %d entries", root, len(whole))
        return _entries_frame(spark, root, root_local, whole)
    work = [(d[len(root_local) :], False) for d in shallow] + [(d[len(root_local) :], True) for d in frontier]
    log.info(
        "Listing %s: %d directories walked by tasks, %d listed one level", root, len(frontier), len(shallow)
    )
    check_python_workers(spark)
    tasks = spark.createDataFrame(work, "directory string, recursive boolean")
    entries = tasks.repartition(min(len(work), target)).mapInArrow(
        _walk_batches(root, columns), LISTING_SCHEMA
    )
    # Subdirectories are reported by their parent's listing, so the driver's own are not repeated.
    return entries
