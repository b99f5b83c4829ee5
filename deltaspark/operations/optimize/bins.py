"""Which files OPTIMIZE rewrites, and which of them go into one new file (bin-packing).

Everything here is a DataFrame transform over the snapshot's file list, so a table of any number
of files is planned on the cluster; the driver holds totals only.

- Compaction: a file is a candidate when it is smaller than `minFileSize`, or when its deletion
  vector marks more than `maxDeletedRowsRatio` of its rows (delta-spark's rules and settings).
  Within each partition the candidates, smallest first, are cut into bins at every `maxFileSize`
  bytes of their running total: a bin holds about `maxFileSize` bytes (at most one candidate more).
  A bin of one file without a deletion vector would be rewritten as it is: it is left alone.
- Purge (`REORG ... APPLY (PURGE)`): every file with a deletion vector, alone or binned as above.
- Z-order: every file of each partition, one group per partition (the rows are then laid out
  along the curve into `maxFileSize` files, see `layout`).
- Clustering (OPTIMIZE on a clustered table, which is never partitioned): every file that no
  clustering laid out (`clusteringProvider` unset), in one group; files already clustered are left
  alone, whatever their size (incremental clustering).
"""

from __future__ import annotations

from typing import NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from deltaspark.errors import InvalidArgumentError
from deltaspark.spark_compat import conf_get

MAX_FILE_SIZE_CONF = "spark.databricks.delta.optimize.maxFileSize"
MIN_FILE_SIZE_CONF = "spark.databricks.delta.optimize.minFileSize"
MAX_DELETED_ROWS_RATIO_CONF = "spark.databricks.delta.optimize.maxDeletedRowsRatio"
DEFAULT_FILE_SIZE = 1024**3
DEFAULT_DELETED_ROWS_RATIO = 0.05

COMPACTION, ZORDER, PURGE, CLUSTER = "compaction", "zorder", "purge", "cluster"
CURVE_KINDS = (ZORDER, CLUSTER)  # rows laid out along a curve, one group per partition
BIN = "__deltaspark_bin"  # the bin (0, 1, ... across the table) a rewritten file belongs to
PARTITION = "__deltaspark_partition"  # the file's partition values, as one comparable string


class BinSizes(NamedTuple):
    max_file_size: int
    min_file_size: int
    max_deleted_rows_ratio: float

    @classmethod
    def of(cls, spark: SparkSession) -> BinSizes:
        max_size = int(conf_get(spark, MAX_FILE_SIZE_CONF, str(DEFAULT_FILE_SIZE)))
        min_size = int(conf_get(spark, MIN_FILE_SIZE_CONF, str(DEFAULT_FILE_SIZE)))
        ratio = float(conf_get(spark, MAX_DELETED_ROWS_RATIO_CONF, str(DEFAULT_DELETED_ROWS_RATIO)))
        if max_size <= 0 or min_size <= 0:
            raise InvalidArgumentError(
                f"{MAX_FILE_SIZE_CONF} and {MIN_FILE_SIZE_CONF} must be positive, "
                f"got {max_size} and {min_size}"
            )
        return cls(max_size, min_size, ratio)


def partition_key() -> Column:
    """The file's partition values as a string equal for equal partitions, whatever the order of
    the map's keys in the log."""
    return F.to_json(F.array_sort(F.map_entries(F.col("partitionValues"))))


def _deleted_ratio() -> Column:
    records = F.col("stats_parsed.numRecords")
    return F.when(records > 0, F.col("deletionVector.cardinality") / records)


def binned_files(files: DataFrame, kind: str, sizes: BinSizes) -> DataFrame:
    """The files (rows of `snapshot.files()`) that `kind` rewrites, each with its `BIN` (dense,
    from 0) and its `PARTITION` key."""
    files = files.withColumn(PARTITION, partition_key())
    has_dv = F.col("deletionVector").isNotNull()
    if kind == ZORDER:
        chosen = files.withColumn("__group", F.lit(0))
    elif kind == CLUSTER:
        chosen = files.where(F.col("clusteringProvider").isNull()).withColumn("__group", F.lit(0))
    else:
        if kind == PURGE:
            wanted = has_dv
        else:
            wanted = (F.col("size") < sizes.min_file_size) | F.coalesce(
                has_dv & (_deleted_ratio() > sizes.max_deleted_rows_ratio), F.lit(False)
            )
        order = Window.partitionBy(PARTITION).orderBy("size", "path")
        before = F.coalesce(F.sum("size").over(order.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
        chosen = files.where(wanted).withColumn("__group", F.floor(before / sizes.max_file_size))
    group = Window.partitionBy(PARTITION, "__group")
    chosen = chosen.withColumn("__files", F.count(F.lit(1)).over(group)).withColumn(
        "__dvs", F.count(F.col("deletionVector")).over(group)
    )
    if kind not in CURVE_KINDS:
        chosen = chosen.where((F.col("__files") > 1) | (F.col("__dvs") > 0))
    # dense bin numbers: one small window over the bins' keys, joined back
    keys = chosen.select(PARTITION, "__group").distinct()
    numbered = keys.withColumn(
        BIN, (F.row_number().over(Window.orderBy(PARTITION, "__group")) - 1).cast("int")
    )
    return chosen.join(numbered, [PARTITION, "__group"]).drop("__group", "__files", "__dvs")
