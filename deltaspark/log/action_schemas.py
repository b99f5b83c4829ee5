"""Spark schemas of the log's actions, as the protocol's "Actions" section defines them.

One schema reads a JSON commit line; the checkpoint schema reads parquet checkpoints, sidecars
and V2 JSON checkpoints. Fields a writer did not write read as null, and unknown fields are
ignored, which is exactly what the protocol asks of readers. `commitInfo` is free-form, so it is
kept as its raw JSON text.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

STRING_MAP = MapType(StringType(), StringType(), valueContainsNull=True)


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, data_type, nullable=True) for name, data_type in fields])  # type: ignore[arg-type]


DELETION_VECTOR = _struct(
    ("storageType", StringType()),
    ("pathOrInlineDv", StringType()),
    ("offset", IntegerType()),
    ("sizeInBytes", IntegerType()),
    ("cardinality", LongType()),
    ("maxRowIndex", LongType()),
)

ADD = _struct(
    ("path", StringType()),
    ("partitionValues", STRING_MAP),
    ("size", LongType()),
    ("modificationTime", LongType()),
    ("dataChange", BooleanType()),
    ("stats", StringType()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", LongType()),
    ("defaultRowCommitVersion", LongType()),
    ("clusteringProvider", StringType()),
)

REMOVE = _struct(
    ("path", StringType()),
    ("deletionTimestamp", LongType()),
    ("dataChange", BooleanType()),
    ("extendedFileMetadata", BooleanType()),
    ("partitionValues", STRING_MAP),
    ("size", LongType()),
    ("stats", StringType()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", LongType()),
    ("defaultRowCommitVersion", LongType()),
)

METADATA = _struct(
    ("id", StringType()),
    ("name", StringType()),
    ("description", StringType()),
    ("format", _struct(("provider", StringType()), ("options", STRING_MAP))),
    ("schemaString", StringType()),
    ("partitionColumns", ArrayType(StringType(), containsNull=True)),
    ("createdTime", LongType()),
    ("configuration", STRING_MAP),
)

PROTOCOL = _struct(
    ("minReaderVersion", IntegerType()),
    ("minWriterVersion", IntegerType()),
    ("readerFeatures", ArrayType(StringType(), containsNull=True)),
    ("writerFeatures", ArrayType(StringType(), containsNull=True)),
)

TXN = _struct(("appId", StringType()), ("version", LongType()), ("lastUpdated", LongType()))

# `configuration` is a string in the current protocol and was a string map in the draft; reading
# it as a string keeps either (Spark returns a JSON object's raw text for a string field).
DOMAIN_METADATA = _struct(
    ("domain", StringType()), ("configuration", StringType()), ("removed", BooleanType())
)

CDC = _struct(
    ("path", StringType()),
    ("partitionValues", STRING_MAP),
    ("size", LongType()),
    ("dataChange", BooleanType()),
    ("tags", STRING_MAP),
)

CHECKPOINT_METADATA = _struct(("version", LongType()), ("tags", STRING_MAP))

SIDECAR = _struct(
    ("path", StringType()),
    ("sizeInBytes", LongType()),
    ("modificationTime", LongType()),
    ("tags", STRING_MAP),
)

# From the row-ID draft of the protocol; older tables may still carry it.
ROW_ID_HIGH_WATER_MARK = _struct(("highWaterMark", LongType()), ("preservedRowIds", BooleanType()))

ACTION_TYPES: dict[str, StructType | StringType] = {
    "protocol": PROTOCOL,
    "metaData": METADATA,
    "txn": TXN,
    "add": ADD,
    "remove": REMOVE,
    "domainMetadata": DOMAIN_METADATA,
    "cdc": CDC,
    "checkpointMetadata": CHECKPOINT_METADATA,
    "sidecar": SIDECAR,
    "rowIdHighWaterMark": ROW_ID_HIGH_WATER_MARK,
    "commitInfo": StringType(),
}

CORRUPT_RECORD = "_corrupt_record"


def action_schema(
    kinds: list[str] | tuple[str, ...] | None = None,
    with_corrupt: bool = False,
    add_stats_parsed: DataType | None = None,
) -> StructType:
    """A schema holding the given action columns (all when `None`), in protocol order; checkpoints
    may add `add.stats_parsed` of the type their writer used."""
    names = list(ACTION_TYPES) if kinds is None else [k for k in ACTION_TYPES if k in kinds]
    types = dict(ACTION_TYPES)
    if add_stats_parsed is not None:
        types["add"] = StructType([*ADD.fields, StructField("stats_parsed", add_stats_parsed, nullable=True)])
    fields = [StructField(name, types[name], nullable=True) for name in names]
    if with_corrupt:
        fields.append(StructField(CORRUPT_RECORD, StringType(), nullable=True))
    return StructType(fields)


# What a checkpoint (classic, multi-part, V2 top-level or sidecar) may hold.
CHECKPOINT_ACTIONS = (
    "protocol",
    "metaData",
    "txn",
    "add",
    "remove",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
    "rowIdHighWaterMark",
)
