"""VACUUM with an inventory: the table's files from a DataFrame or table (an S3 Inventory or ADLS
blob inventory report, loaded by the user) instead of a listing.

The inventory needs the columns `path string, length long, isDir boolean, modificationTime long`
(times in epoch milliseconds, paths fully qualified, other columns ignored), as delta-spark's
`VACUUM ... USING INVENTORY`. Rows outside the table root are ignored and so are hidden names, by
the listing's rule applied to every component of the path (delta-spark tests only the first one
for inventories, so it would delete `p=1/.part-0.crc`, which its own listing never does).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType

from deltaspark.errors import InvalidInventoryError
from deltaspark.log.paths import normalize_root, unify_file_uri
from deltaspark.maintenance.table_listing import LISTING_SCHEMA

REQUIRED = {
    "path": StringType(),
    "length": LongType(),
    "isDir": BooleanType(),
    "modificationTime": LongType(),
}


def _hidden(name: Column, partition_columns: Sequence[str]) -> Column:
    """`table_listing.is_hidden` as a Spark expression over one path component."""
    exempt = name.startswith("_delta_index") | name.startswith("_change_data")
    for column in partition_columns:
        exempt = exempt | name.startswith(column + "=")
    return (name.startswith("_") | name.startswith(".")) & ~exempt


def inventory_files(
    spark: SparkSession, inventory: DataFrame | str, table_root: str, partition_columns: Sequence[str]
) -> DataFrame:
    """The inventory's entries under `table_root` that vacuum considers, in the listing's schema
    (`path, size, modificationTime, isDir`)."""
    frame = spark.table(inventory) if isinstance(inventory, str) else inventory
    fields = {f.name: f.dataType for f in frame.schema.fields}
    wrong = [f"{name} {kind.simpleString()}" for name, kind in REQUIRED.items() if fields.get(name) != kind]
    if wrong:
        raise InvalidInventoryError(
            "The vacuum inventory does not contain all of the required fields "
            "`path string, length bigint, isDir boolean, modificationTime bigint`: missing or of another "
            f"type: {', '.join(wrong)} (it has: {frame.schema.simpleString()})"
        )
    root = normalize_root(table_root)
    path = unify_file_uri(F.col("path"))
    relative = F.substring(path, len(root) + 2, 1 << 30)
    components = F.split(relative, "/")
    top = F.element_at(components, 1)
    hidden = F.exists(components, lambda c: _hidden(c, partition_columns)) | (top == F.lit("metadata"))
    under_root = path.startswith(root + "/") & (F.length(relative) > 0)
    return (
        frame.select(path.alias("path"), "length", "isDir", "modificationTime")
        .where(under_root & ~hidden)
        .select(
            F.regexp_replace("path", "/+$", "").alias("path"),
            F.col("length").alias("size"),
            "modificationTime",
            "isDir",
        )
        .select(*[F.col(c) for c in _names(LISTING_SCHEMA)])
    )


def _names(schema: str) -> list[str]:
    return [part.strip().split(" ")[0] for part in schema.split(",")]
