"""`DeltaTable.detail()`: the table at a glance, with the columns of DESCRIBE DETAIL."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

DETAIL_SCHEMA = StructType(
    [
        StructField("format", StringType()),
        StructField("id", StringType()),
        StructField("name", StringType()),
        StructField("description", StringType()),
        StructField("location", StringType()),
        StructField("createdAt", TimestampType()),
        StructField("lastModified", TimestampType()),
        StructField("partitionColumns", ArrayType(StringType())),
        StructField("clusteringColumns", ArrayType(StringType())),
        StructField("numFiles", LongType()),
        StructField("sizeInBytes", LongType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("minReaderVersion", IntegerType()),
        StructField("minWriterVersion", IntegerType()),
        StructField("tableFeatures", ArrayType(StringType())),
        StructField("version", LongType()),
    ]
)


def _clustering_columns(snapshot: Any) -> list[str]:
    import json

    rows = snapshot.domainMetadata().where("domain = 'delta.clustering'").collect()
    if not rows:
        return []
    try:
        columns = json.loads(rows[0]["configuration"] or "{}").get("clusteringColumns") or []
    except ValueError:
        return []
    return [c if isinstance(c, str) else ".".join(c) for c in columns]


def detail_frame(snapshot: Any) -> DataFrame:
    summary = snapshot.summary()
    created = snapshot.metadata.createdTime
    row = (
        "delta",
        snapshot.metadata.id,
        snapshot.metadata.name,
        snapshot.metadata.description,
        snapshot.tableRoot,
        dt.datetime.fromtimestamp(created / 1000, tz=dt.timezone.utc) if created is not None else None,
        snapshot.timestamp,
        list(snapshot.partitionColumns),
        _clustering_columns(snapshot) if snapshot.protocol.hasFeature("clustering") else [],
        summary["numFiles"],
        summary["sizeInBytes"],
        snapshot.configuration,
        snapshot.protocol.minReaderVersion,
        snapshot.protocol.minWriterVersion,
        snapshot.tableFeatures,
        snapshot.version,
    )
    return snapshot._spark.createDataFrame([row], DETAIL_SCHEMA)
