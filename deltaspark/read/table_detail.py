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

from deltaspark.features import clustering
from deltaspark.features.column_mapping import physical_name
from deltaspark.spark_compat import held_frame

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
    """The clustering columns by their logical names, as DESCRIBE DETAIL shows them (the domain
    records physical names: under column mapping each path is mapped back through the schema)."""
    rows = snapshot.domainMetadata().where(f"domain = '{clustering.DOMAIN}'").collect()
    if not rows:
        return []
    paths = clustering.parse_columns(rows[0]["configuration"], snapshot.tableRoot)
    return [".".join(_logical_path(snapshot.schema, path, snapshot.columnMappingMode)) for path in paths]


def _logical_path(schema: StructType, path: tuple[str, ...], mode: str) -> list[str]:
    names: list[str] = []
    current: Any = schema
    for part in path:
        fields = current.fields if isinstance(current, StructType) else []
        field = next((f for f in fields if physical_name(f, mode) == part), None)
        if field is None:  # not in the schema (a stale domain): shown as recorded
            return [*names, part]
        names.append(field.name)
        current = field.dataType
    return names


def detail_frame(snapshot: Any, name: str | None = None) -> DataFrame:
    """DESCRIBE DETAIL's one row; `name` is the catalog name the table was opened by, if any."""
    summary = snapshot.summary()
    created = snapshot.metadata.createdTime
    row = (
        "delta",
        snapshot.metadata.id,
        name if name is not None else snapshot.metadata.name,
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
    return held_frame(snapshot._spark, [row], DETAIL_SCHEMA)
