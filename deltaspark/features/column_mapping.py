"""Column mapping: logical (display) names versus the physical names files and the log use.

In `name` and `id` mode, partition values, statistics (and data files) refer to columns by the
physical name in the field metadata `delta.columnMapping.physicalName`. The mode is only honoured
when the protocol supports the `columnMapping` feature (reader version 2, or the named feature).
"""

from __future__ import annotations

from pyspark.sql.types import DataType, StructField, StructType

from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol
from deltaspark.features.schema import map_fields

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
ID_KEY = "delta.columnMapping.id"
MODE_KEY = "delta.columnMapping.mode"
MODES = ("none", "name", "id")


def column_mapping_mode(protocol: Protocol, metadata: Metadata) -> str:
    if not protocol.hasFeature("columnMapping"):
        return "none"
    return (metadata.configuration.get(MODE_KEY) or "none").strip().lower()


def physical_name(field: StructField, mode: str) -> str:
    if mode == "none":
        return field.name
    return str(field.metadata.get(PHYSICAL_NAME_KEY) or field.name)


def physical_type(data_type: DataType, mode: str) -> DataType:
    """A type with struct fields renamed to their physical names (identity in mode `none`)."""
    if mode == "none":
        return data_type
    return map_fields(data_type, lambda f: physical_name(f, mode))


def physical_schema(schema: StructType, mode: str) -> StructType:
    result = physical_type(schema, mode)
    assert isinstance(result, StructType)
    return result
