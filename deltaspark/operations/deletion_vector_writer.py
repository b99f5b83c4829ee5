"""Writing deletion vectors: rows marked deleted without rewriting their data files.

Given the rows a DML operation deletes (data file and row index), the bitmaps are built on the
executors: each file's new deleted rows are merged with the rows its current DV already deletes,
and each Spark task writes one DV file in the protocol's format ("Deletion Vector File Storage
Format") holding the bitmaps of its files (`dv_codec.dv_file_encoder`). Each lands in
`<table>/deletion_vector_<uuid>.bin`, created, never overwritten:

- few DVs (`dv_bytes_bound` of the candidate files within
  `spark.deltaspark.write.driverDeletionVectorBytes`, default 16 MiB): the tasks' output is
  collected in one job and the driver writes the files; the descriptors are held there;
- otherwise Spark's writers, which write text, not bytes, stage each DV file as base64 text and
  the driver's JVM decodes it in place, so the bitmaps never pass through Python on the driver;
  the descriptors stay cached until the commit has rendered them.
"""

from __future__ import annotations

import base64
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import DeletionVectorError
from deltaspark.features import dv_codec
from deltaspark.log.paths import canonical_path, path_key
from deltaspark.read.scan import deleted_rows
from deltaspark.spark_compat import check_python_workers, conf_get, held_frame
from deltaspark.storage import Storage, join_path, name_of, parent_of

log = logging.getLogger(__name__)

FILES_PER_DV_FILE = 1_000  # data files whose DVs share one DV file (one Spark task)
DV_ROWS_SCHEMA = (
    "key string, dvFile string, pathOrInlineDv string, offset int, sizeInBytes int, "
    "cardinality long, newlyDeleted long, stats string, content string, fileSize long"
)
# DV files of at most this many bytes in all (by `dv_bytes_bound`) are collected and written by
# the driver: one job gives every descriptor and every file, where staging them as text costs a
# write job, its commit, a listing and a decode per file. 0: always staged.
DRIVER_DV_BYTES_CONF = "spark.deltaspark.write.driverDeletionVectorBytes"
DEFAULT_DRIVER_DV_BYTES = 16 * 1024 * 1024
# The most a data file's DV takes beside one bit a row: the roaring bitmap's headers and one
# 8 KiB container more than its rows fill (a partly filled container), framed.
DV_BYTES_PER_FILE = 8 * 1024 + 128
_DESCRIPTOR_SCHEMA = (
    "key string, pathOrInlineDv string, offset int, sizeInBytes int, cardinality long, "
    "newlyDeleted long, stats string"
)
_DESCRIPTOR_FIELDS = tuple(part.split()[0] for part in _DESCRIPTOR_SCHEMA.split(","))


def dv_bytes_bound(files: int, records: int) -> int:
    """An upper bound of the DV bytes of `files` data files holding `records` rows in all: a
    roaring container never takes more than a bit per row it covers (8 KiB for 65,536 rows)."""
    return records // 8 + files * DV_BYTES_PER_FILE


@dataclass
class DeletionVectorUpdate:
    """New DVs for the files that lost rows: `descriptors` has `key` (canonical data file path),
    `deletionVector` (the new descriptor), `stats` (bounds made wide) and `newlyDeleted`; held on
    the driver (a local relation) when the driver wrote the DV files, and then also as `held`
    (`key` and the `deletionVector`, `stats`, `newlyDeleted` values, as `descriptors` has them)."""

    descriptors: DataFrame
    dv_files: int
    _cached: DataFrame | None
    held: list[tuple] | None = None

    def unpersist(self) -> None:
        if self._cached is not None:
            self._cached.unpersist()


def write_deletion_vectors(
    spark: SparkSession,
    storage: Storage,
    snapshot: object,
    candidates: DataFrame,
    matched: DataFrame,
    candidate_count: int,
    candidate_records: int | None = None,
    old_dvs: bool = True,
    held: Any = None,
) -> DeletionVectorUpdate:
    """DV files for `matched` rows (`path`: the file's path in the log or its location as a scan
    names it - both keyed by their canonical path -, and `row_index`, or each file's `rows` listed
    once: an array of distinct row indexes) of `candidates` (rows of
    `Snapshot.files()`); every candidate must carry `stats.numRecords`, as the protocol requires
    of files with a DV. `candidate_records`: the candidates' rows in all, which bounds the DV
    bytes (`dv_bytes_bound`): within `DRIVER_DV_BYTES_CONF` the driver writes the DV files. A file
    whose every row would then be deleted gets a descriptor with its cardinality and no bytes
    (the caller removes it: `cardinality >= numRecords`), so no DV file holds a DV nothing logs.
    `old_dvs` False: the caller knows no candidate has a DV, so no old deleted rows are read.
    `held`: `matched`'s lists as a pyarrow Table (`path`, `rows`) held on the driver; with no old
    DV to read and the DV files the driver's to write, the driver then encodes them too (no job)."""
    root = snapshot.tableRoot  # type: ignore[attr-defined]
    tasks = max(1, min(math.ceil(candidate_count / FILES_PER_DV_FILE), 200))
    write_id = uuid.uuid4().hex
    bound = None if candidate_records is None else dv_bytes_bound(candidate_count, candidate_records)
    limit = int(conf_get(spark, DRIVER_DV_BYTES_CONF, str(DEFAULT_DRIVER_DV_BYTES)))
    on_driver = bound is not None and bound <= limit and storage.direct_reads
    if on_driver and not old_dvs and tasks == 1:
        # the lists and the files held on the driver: encoded there too, with no job
        lists = _lists_on_driver(held, candidates, root, write_id)
        if lists is not None:
            return _written_on_driver(spark, storage, root, lists)
    key = canonical_path("path", root).alias("key")
    old_rows = (
        deleted_rows(snapshot, candidates.where(F.col("deletionVector").isNotNull())) if old_dvs else None
    )
    if "rows" in matched.columns:  # each file's rows listed already: its old DV's rows joined to them
        touched = matched.select(key, "rows")
        if old_rows is not None:
            old = old_rows.groupBy("key").agg(F.collect_list("row_index").alias("old"))
            kept = F.concat("rows", F.coalesce("old", F.array().cast("array<long>")))
            touched = touched.join(old, "key", "left").select("key", kept.alias("rows"))
    else:
        new_rows = matched.select(key, "row_index", F.lit(1).alias("is_new"))
        if old_rows is not None:
            new_rows = new_rows.unionByName(old_rows.select("key", "row_index", F.lit(0).alias("is_new")))
        touched = (
            new_rows.groupBy("key")
            .agg(F.collect_list("row_index").alias("rows"), F.max("is_new").alias("touched"))
            .where(F.col("touched") == 1)
        )
    info = candidates.select(
        canonical_path("path", root).alias("key"),
        F.col("stats"),
        F.col("stats_parsed.numRecords").alias("numRecords"),
        F.coalesce(F.col("deletionVector.cardinality"), F.lit(0)).alias("oldCardinality"),
    )
    check_python_workers(spark)
    joined = touched.join(info, "key").select("key", "rows", "stats", "numRecords", "oldCardinality")
    encoded = (
        (joined.coalesce(1) if tasks == 1 else joined.repartition(tasks, "key"))
        .sortWithinPartitions("key")
        .mapInArrow(dv_codec.dv_file_encoder(write_id, skip_whole=True), DV_ROWS_SCHEMA)
    )
    if on_driver:  # one job gives every descriptor and every file; nothing is cached
        return _written_on_driver(spark, storage, root, encoded.collect())
    # The descriptors must describe exactly the bytes written: keep the task output for both.
    encoded = encoded.persist()
    try:
        written = stage_dv_files(storage, root, encoded, write_id)
    except BaseException:
        encoded.unpersist()
        raise
    return DeletionVectorUpdate(_descriptors(encoded), written, encoded)


def _written_on_driver(
    spark: SparkSession, storage: Storage, root: str, rows: list[Any]
) -> DeletionVectorUpdate:
    """The update of the encoder's `rows` (collected, or encoded on the driver): the DV files
    written by the driver, the descriptors held there."""
    written, descriptors = _write_on_driver(storage, root, rows)
    frame = held_frame(spark, descriptors, _DESCRIPTOR_SCHEMA)
    values = [(r[0], _descriptor_of(r[1], r[2], r[3], r[4]), r[6], r[5]) for r in descriptors]
    return DeletionVectorUpdate(_descriptors(frame), written, None, values)


def _lists_on_driver(held: Any, candidates: DataFrame, root: str, write_id: str) -> list[dict] | None:
    """The encoder's output (`DV_ROWS_SCHEMA` rows) for lists `held` on the driver, encoded there
    as one task would: the candidates' entries collected (few: one DV file's worth, and no job when
    they are held), joined by canonical path, sorted by it. The DV encoder's two jobs cost about
    0.2 s for 1M rows of 100 files. None when nothing is held, or a key is not the driver's to
    compute or not one candidate's (Spark joins them, as it would)."""
    if held is None:
        return None
    import pyarrow as pa

    info: dict[str, Row] = {}
    entries = candidates.select("path", "stats", F.col("stats_parsed.numRecords").alias("numRecords"))
    for row in entries.collect():
        key = path_key(row["path"], root)
        if key is None or key in info:
            return None
        info[key] = row
    keys = [path_key(p, root) for p in held.column("path").to_pylist()]
    if any(k not in info for k in keys) or len(set(keys)) != len(keys):
        return None
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    table = pa.table(
        {
            "key": pa.array([keys[i] for i in order], pa.string()),
            "rows": held.column("rows").take(pa.array(order, pa.int64())),
            "stats": pa.array([info[keys[i]]["stats"] for i in order], pa.string()),
            "numRecords": pa.array([info[keys[i]]["numRecords"] for i in order], pa.int64()),
            "oldCardinality": pa.array([0] * len(order), pa.int64()),
        }
    )
    encode = dv_codec.dv_file_encoder(write_id, skip_whole=True)
    return [row for batch in encode(iter(table.to_batches())) for row in batch.to_pylist()]


def _descriptors(rows: DataFrame) -> DataFrame:
    return rows.where(F.col("key").isNotNull()).select(
        "key", encoded_descriptor().alias("deletionVector"), F.col("stats"), F.col("newlyDeleted")
    )


def encoded_descriptor() -> Column:
    """The DV descriptor of a row `dv_codec.dv_file_encoder` produced for a data file."""
    return F.struct(
        F.lit("u").alias("storageType"),
        F.col("pathOrInlineDv"),
        F.col("offset"),
        F.col("sizeInBytes"),
        F.col("cardinality"),
        F.lit(None).cast("long").alias("maxRowIndex"),
    )


def _descriptor_of(path_or_inline: str, offset: int, size: int, cardinality: int) -> tuple:
    """`encoded_descriptor`'s values (its fields' order) for a descriptor held on the driver."""
    return ("u", path_or_inline, offset, size, cardinality, None)


def stage_dv_files(storage: Storage, root: str, encoded: DataFrame, write_id: str) -> int:
    """Write the DV files `dv_codec.dv_file_encoder` produced (its rows with `key` null) under
    `root`, each created once, checking every file's size; returns how many were written. Tasks
    stage each file as base64 text (Spark's writers write text, not bytes) and the JVM decodes
    it in place."""
    staging = join_path(root, f".tmp-dv-{write_id}")
    try:
        files = encoded.where(F.col("key").isNull())
        files.select("dvFile", "content").write.mode("errorifexists").partitionBy("dvFile").option(
            "compression", "none"
        ).option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false").text(staging)
        expected = {r["dvFile"]: int(r["fileSize"]) for r in files.select("dvFile", "fileSize").collect()}
        written = 0
        for status in storage.list_files_recursive(staging):
            if status.name.startswith((".", "_")):
                continue  # checksum side files of the local file system
            name = name_of(parent_of(status.path)).split("=", 1)[-1]
            size = storage.decode_base64_to(status.path, join_path(root, name))
            if expected.get(name) != size:
                raise DeletionVectorError(
                    f"deltaspark: deletion vector file {join_path(root, name)} has {size} bytes, "
                    f"{expected.get(name)} were encoded; nothing was committed"
                )
            written += 1
        if written != len(expected):
            raise DeletionVectorError(
                f"deltaspark: {len(expected)} deletion vector files were encoded but {written} staged "
                f"under {staging}; nothing was committed"
            )
    finally:
        storage.delete(staging, recursive=True)
    log.info("Wrote %d deletion vector file(s) under %s", written, root)
    return written


def _write_on_driver(storage: Storage, root: str, rows: list[Any]) -> tuple[int, list[tuple]]:
    """Write the DV files of the encoder's collected `rows` (those with `key` null), each created
    once, their bytes checked against the size encoded; returns how many were written and the
    data files' descriptor rows (`_DESCRIPTOR_SCHEMA`)."""
    descriptors = []
    written = 0
    for row in rows:
        if row["key"] is not None:
            descriptors.append(tuple(row[name] for name in _DESCRIPTOR_FIELDS))
            continue
        path = join_path(root, row["dvFile"])
        data = base64.b64decode(row["content"])
        if len(data) != row["fileSize"]:
            raise DeletionVectorError(
                f"deltaspark: deletion vector file {path} has {len(data)} bytes, "
                f"{row['fileSize']} were encoded; nothing was committed"
            )
        storage.write_bytes(path, data)  # fails if it exists: a DV file is never overwritten
        written += 1
    log.info("Wrote %d deletion vector file(s) under %s from the driver", written, root)
    return written, descriptors
