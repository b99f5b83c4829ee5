"""Writing deletion vectors: rows marked deleted without rewriting their data files.

Given the rows a DML operation deletes (data file and row index), the bitmaps are built on the
executors: each file's new deleted rows are merged with the rows its current DV already deletes,
and each Spark task writes one DV file in the protocol's format ("Deletion Vector File Storage
Format") holding the bitmaps of its files (`dv_codec.dv_file_encoder`). Spark's writers write text,
not bytes, so tasks stage each DV file as base64 text and the driver's JVM decodes it into
`<table>/deletion_vector_<uuid>.bin` (created, never overwritten); the bitmaps never pass through
Python on the driver. The result is a DataFrame of new DV descriptors, one per data file, cached
until the commit has rendered it.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import DeletionVectorError
from deltaspark.features import dv_codec
from deltaspark.log.paths import canonical_path
from deltaspark.read.scan import deleted_rows
from deltaspark.spark_compat import check_python_workers
from deltaspark.storage import Storage, join_path, name_of, parent_of

log = logging.getLogger(__name__)

FILES_PER_DV_FILE = 1_000  # data files whose DVs share one DV file (one Spark task)
DV_ROWS_SCHEMA = (
    "key string, dvFile string, pathOrInlineDv string, offset int, sizeInBytes int, "
    "cardinality long, stats string, content string, fileSize long"
)


@dataclass
class DeletionVectorUpdate:
    """New DVs for the files that lost rows: `descriptors` has `key` (canonical data file path),
    `deletionVector` (the new descriptor), `stats` (bounds made wide) and `newlyDeleted`."""

    descriptors: DataFrame
    dv_files: int
    _cached: DataFrame

    def unpersist(self) -> None:
        self._cached.unpersist()


def write_deletion_vectors(
    spark: SparkSession,
    storage: Storage,
    snapshot: object,
    candidates: DataFrame,
    matched: DataFrame,
    candidate_count: int,
) -> DeletionVectorUpdate:
    """DV files for `matched` rows (`path` as in the log, `row_index`) of `candidates` (rows of
    `Snapshot.files()`); every candidate must carry `stats.numRecords`, as the protocol requires
    of files with a DV."""
    root = snapshot.tableRoot  # type: ignore[attr-defined]
    new_rows = matched.select(
        canonical_path(F.col("path"), root).alias("key"), "row_index", F.lit(1).alias("is_new")
    )
    with_dv = candidates.where(F.col("deletionVector").isNotNull())
    old_rows = deleted_rows(snapshot, with_dv).select("key", "row_index", F.lit(0).alias("is_new"))
    touched = (
        new_rows.unionByName(old_rows)
        .groupBy("key")
        .agg(F.collect_list("row_index").alias("rows"), F.max("is_new").alias("touched"))
        .where(F.col("touched") == 1)
    )
    info = candidates.select(
        canonical_path(F.col("path"), root).alias("key"),
        F.col("stats"),
        F.col("stats_parsed.numRecords").alias("numRecords"),
        F.coalesce(F.col("deletionVector.cardinality"), F.lit(0)).alias("oldCardinality"),
    )
    tasks = max(1, min(math.ceil(candidate_count / FILES_PER_DV_FILE), 200))
    write_id = uuid.uuid4().hex
    check_python_workers(spark)
    encoded = (
        touched.join(info, "key")
        .select("key", "rows", "stats", "numRecords", "oldCardinality")
        .repartition(tasks, "key")
        .sortWithinPartitions("key")
        .mapInArrow(dv_codec.dv_file_encoder(write_id), DV_ROWS_SCHEMA)
    )
    # The descriptors must describe exactly the bytes written: keep the task output for both.
    encoded = encoded.persist()
    try:
        written = stage_dv_files(storage, root, encoded, write_id)
    except BaseException:
        encoded.unpersist()
        raise
    descriptors = (
        encoded.where(F.col("key").isNotNull())
        .join(info.select("key", "oldCardinality"), "key")
        .select(
            "key",
            encoded_descriptor().alias("deletionVector"),
            F.col("stats"),
            (F.col("cardinality") - F.col("oldCardinality")).alias("newlyDeleted"),
        )
    )
    return DeletionVectorUpdate(descriptors, written, encoded)


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


def stage_dv_files(storage: Storage, root: str, encoded: DataFrame, write_id: str) -> int:
    """Write the DV files `dv_codec.dv_file_encoder` produced (its rows with `key` null) under
    `root`, each created once, checking every file's size; returns how many were written."""
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
