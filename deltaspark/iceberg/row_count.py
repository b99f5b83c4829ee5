"""A snapshot's row count from its metadata: the data files' `record_count`, less the rows their
deletion vectors and position deletes remove. No data file is opened; deletion vectors and position
delete files are (they are small, and a count must not trust a vector it has not checked).

One pass over the data manifests: each data file is joined with the deletes grouped by the file they
name, and `scan`'s rules pick the ones that apply. A position counts once however many delete files
list it, and only below the file's `record_count` (as when rows are read).

Equality deletes can only be applied to rows, so a snapshot with any live equality delete file has
no metadata count (`None`) and the caller reads the rows.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.iceberg import data_reader, manifests, scan
from deltaspark.iceberg.table_metadata import Snapshot, TableMetadata

_SUMS = T.StructType([T.StructField("rows", T.LongType()), T.StructField("deleted", T.LongType())])


def metadata_count(spark: SparkSession, metadata: TableMetadata, snapshot: Snapshot | None) -> int | None:
    """The snapshot's row count, or None when equality deletes exist (rows must be read)."""
    if snapshot is None:
        return 0
    kinds = []
    deletes = None
    if metadata.format_version >= 2:
        deletes = scan.live_deletes(spark, metadata, snapshot)
        kinds = scan.delete_kinds(deletes)
    if any(k["content"] == 2 for k in kinds):
        return None
    vectors = any(k["content"] == 1 and k["puffin"] for k in kinds)
    positions = any(k["content"] == 1 and not k["puffin"] for k in kinds)
    files = (
        manifests.entries(spark, metadata, snapshot, manifest_content=0)
        .where((F.col("status") != 2) & (F.col("content") == 0))
        .select(
            "file_path",
            F.coalesce("record_count", F.lit(0)).alias("record_count"),
            scan.match_key(F.col("file_path")).alias("data_key"),
            F.col("sequence_number").alias("data_seq"),
        )
    )
    pos_deleted = F.lit(0)
    if positions:
        files = files.join(scan.positions_by_file(metadata, deletes), "data_key", "left")
        applied = scan.applicable_positions(F.col("pos_list"), F.col("data_seq"))
        in_range = F.filter(applied, lambda p: (p >= 0) & (p < F.col("record_count")))
        # no delete names the file: 0 (`size` of a null array is -1, or null under ANSI)
        pos_deleted = F.when(F.col("pos_list").isNull(), F.lit(0)).otherwise(
            F.size(F.array_distinct(in_range))
        )
    if not vectors:
        sums = files.agg(F.sum("record_count"), F.sum(pos_deleted)).first()
        return int((sums[0] or 0) - (sums[1] or 0))
    files = files.join(scan.vectors_by_file(deletes), "data_key", "left")
    dv = scan.applicable_vector(F.col("dv_list"), F.col("data_seq"))
    per_file = files.select(
        "file_path",
        "record_count",
        pos_deleted.cast("long").alias("pos_deleted"),
        dv["dv_path"].alias("dv_path"),
        dv["dv_offset"].alias("dv_offset"),
        dv["dv_length"].alias("dv_length"),
        dv["dv_cardinality"].alias("dv_cardinality"),
    )
    sums = per_file.mapInArrow(data_reader.row_counter(), _SUMS).agg(F.sum("rows"), F.sum("deleted")).first()
    return int((sums[0] or 0) - (sums[1] or 0))
