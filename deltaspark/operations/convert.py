"""CONVERT TO DELTA: make a directory of parquet files a Delta table, in place, as one commit.

The files are found and described by Spark on the executors: one scan with the merged schema of
all footers, grouped by file (`_metadata.file_path`), gives every `add` action with its size,
modification time, partition values and statistics. Nothing per file is collected to the driver;
the commit streams the actions as any large commit does. Partition directories (`key=value`) need
the `partitionSchema`, as in delta-spark; their values are parsed as those types and written in
the protocol's serialization. Files Spark's listing skips (names starting with `_` or `.`) are not
part of the table, and neither are parquet files without rows (they add nothing to it).
"""

from __future__ import annotations

import logging
import re

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.enablement import features_for_schema, required_protocol
from deltaspark.operations.write import describe_files, new_table_metadata
from deltaspark.storage import HadoopStorage, Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)

_IDENTIFIER = re.compile(r"^\s*parquet\s*\.\s*`(.+)`\s*$", re.IGNORECASE | re.DOTALL)


def parse_identifier(identifier: str) -> str:
    """The path in delta-spark's ``parquet.`/path/to/table` `` form (a plain path is accepted)."""
    match = _IDENTIFIER.match(identifier)
    if match:
        return match.group(1)
    if identifier.strip().lower().startswith(("delta.", "iceberg.")):
        raise InvalidArgumentError(f"convertToDelta converts parquet directories; got {identifier!r}")
    return identifier.strip()


def _encoded_root(storage: Storage, root: str) -> str:
    """The root as Spark spells file URIs (`_metadata.file_path`): Hadoop's `Path.toUri()`."""
    if isinstance(storage, HadoopStorage):
        return str(storage.jvm.org.apache.hadoop.fs.Path(root).toUri().toString()).rstrip("/")
    return root.rstrip("/")


def convert(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    partition_schema: StructType | None,
    properties: dict[str, str] | None = None,
) -> CommitResult:
    root = storage.qualify(table_path)
    partitions = list(partition_schema.fields) if partition_schema is not None else []
    txn = Transaction(spark, storage, table_path, None)  # refuses sessions that cannot commit
    inferred = spark.read.option("mergeSchema", "true").parquet(root).schema
    names = {f.name.lower() for f in partitions}
    data_fields = [
        StructField(f.name, f.dataType, True, f.metadata)
        for f in inferred.fields
        if f.name.lower() not in names
    ]
    if not data_fields:
        raise InvalidArgumentError(f"{table_path} holds no parquet columns to convert")
    encoded = _encoded_root(storage, root)
    relative = F.when(
        F.col("__file").startswith(encoded + "/"), F.substring("__file", len(encoded) + 2, 1 << 30)
    ).otherwise(
        F.raise_error(F.concat(F.lit("deltaspark: data file outside the table root "), F.col("__file")))
    )
    described = describe_files(
        spark, root, data_fields, partitions, properties or {}, relative, reserialize=True
    )
    adds, per_file = described.adds, described.cached
    try:
        # Directories named key=value that the partition schema does not account for.
        depth = len(partitions)
        segments = F.split(F.col("add.path"), "/")
        dirs = F.slice(segments, 1, F.size(segments) - 1)
        stray = (
            adds.where(
                (F.size(dirs) != depth) | F.exists(dirs, lambda d: ~d.contains("="))
                if depth
                else F.exists(dirs, lambda d: d.contains("="))
            )
            .select("add.path")
            .first()
        )
        if stray is not None:
            expected = "/".join(f"{f.name}=..." for f in partitions) or "no partition directories"
            raise InvalidArgumentError(
                f"{stray[0]} under {table_path} does not match the partition schema ({expected}); "
                "give partitionSchema with every partition column, in directory order"
            )
        schema = StructType([*data_fields, *[StructField(f.name, f.dataType, True) for f in partitions]])
        configuration = dict(properties or {})
        txn.updateProtocol(required_protocol(None, features_for_schema(schema)))
        txn.updateMetadata(new_table_metadata(schema, [f.name for f in partitions], configuration))
        txn.addFiles(adds, described.files, described.lines)
        parameters = {
            "numFiles": described.files,
            "partitionedBy": [f.name for f in partitions],
            "collectStats": True,
            "sourceFormat": "parquet",
        }
        metrics = {"numConvertedFiles": described.files, "numOutputRows": described.rows}
        log.info("Converting %s: %d parquet files", table_path, parameters["numFiles"])
        return txn.commit("CONVERT", parameters, metrics)
    finally:
        per_file.unpersist()
