"""A snapshot's manifests and manifest entries as DataFrames, decoded on the executors.

The manifest list is decoded by one task, its manifests spread over the cluster by a round-robin
repartition, and each manifest decoded by one task (inheritance needs a manifest's entries in
order). Format v1 snapshots that list their manifests inline start from that list instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.iceberg import avro_decode, relocation
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.table_metadata import Snapshot, TableMetadata
from deltaspark.spark_compat import check_python_workers, conf_get, is_connect

for _module in (avro_decode, relocation, ice_types):
    cloudpickle.register_pickle_by_value(_module)


def _spark_schema(arrow_schema: Any) -> T.StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


MANIFEST_SPARK_SCHEMA = _spark_schema(avro_decode.MANIFEST_SCHEMA)
ENTRY_SPARK_SCHEMA = _spark_schema(avro_decode.ENTRY_SCHEMA)


def spec_types(metadata: TableMetadata) -> dict[int, list[list[Any]]]:
    """Per spec: `[field id, name, result type]` of each partition field (for canonical values)."""
    sources: dict[int, Any] = {}
    for schema_id in sorted(metadata.schemas):
        sources.update(
            {fid: f["type"] for fid, f in ice_types.field_index(metadata.schemas[schema_id]).items()}
        )
    return {
        spec_id: [
            [f.field_id, f.name, ice_types.partition_result_type(f.transform, sources.get(f.source_id))]
            for f in fields
        ]
        for spec_id, fields in metadata.specs.items()
    }


def parallelism(spark: SparkSession) -> int:
    """How many tasks to spread manifests and files over (the cluster's cores)."""
    if is_connect(spark):
        return max(1, int(conf_get(spark, "spark.sql.shuffle.partitions", "2")))
    return max(1, spark.sparkContext.defaultParallelism)


def manifests(spark: SparkSession, metadata: TableMetadata, snapshot: Snapshot) -> DataFrame:
    """One row per manifest of the snapshot (MANIFEST_SCHEMA)."""
    check_python_workers(spark)
    if snapshot.manifest_list:
        source = spark.createDataFrame([(snapshot.manifest_list,)], "manifest_list string")
        return source.mapInArrow(avro_decode.manifest_list_decoder(metadata.paths), MANIFEST_SPARK_SCHEMA)
    rows = [
        {name: None for name in MANIFEST_SPARK_SCHEMA.fieldNames()}
        | {
            "manifest_path": metadata.paths.apply(path),
            "content": 0,
            "sequence_number": 0,
            "min_sequence_number": 0,
            "added_snapshot_id": snapshot.snapshot_id,
            "has_key_metadata": False,
        }
        for path in snapshot.manifests
    ]
    return spark.createDataFrame(rows or [], MANIFEST_SPARK_SCHEMA)


def entries(
    spark: SparkSession,
    metadata: TableMetadata,
    snapshot: Snapshot,
    manifest_content: int | None = None,
    prune: Callable[[DataFrame], DataFrame] | None = None,
) -> DataFrame:
    """Every manifest entry of the snapshot (ADDED, EXISTING and DELETED), inheritance applied;
    `manifest_content` 0 or 1 decodes only the data or only the delete manifests; `prune` drops
    manifests (rows of `manifests`) before they are decoded."""
    listed = manifests(spark, metadata, snapshot)
    if prune is not None:
        listed = prune(listed)
    spread = listed.repartition(parallelism(spark)) if snapshot.manifest_list else listed
    if manifest_content is not None:
        spread = spread.where(F.col("content") == manifest_content)
    return spread.mapInArrow(
        avro_decode.manifest_decoder(metadata.paths, spec_types(metadata)), ENTRY_SPARK_SCHEMA
    )
