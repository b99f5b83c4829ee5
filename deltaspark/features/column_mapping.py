"""Column mapping: logical (display) names versus the physical names files and the log use.

In `name` and `id` mode, partition values, statistics (and data files) refer to columns by the
physical name in the field metadata `delta.columnMapping.physicalName`. The mode is only honoured
when the protocol supports the `columnMapping` feature (reader version 2, or the named feature).
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol
from deltaspark.features.schema import map_fields

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "parquet.field.id"  # Spark's struct-field metadata key for parquet field ids
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


def with_field_ids(data_type: DataType) -> DataType:
    """Attach `parquet.field.id` (from `delta.columnMapping.id`) to every struct field at any depth:
    Spark then reads (`id` mode) and writes parquet columns by field id."""
    if isinstance(data_type, StructType):
        return StructType(
            [
                StructField(
                    f.name,
                    with_field_ids(f.dataType),
                    f.nullable,
                    {FIELD_ID_KEY: int(f.metadata[ID_KEY])} if ID_KEY in f.metadata else {},
                )
                for f in data_type.fields
            ]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(with_field_ids(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(
            with_field_ids(data_type.keyType),
            with_field_ids(data_type.valueType),
            data_type.valueContainsNull,
        )
    return data_type


def physical_field(field: StructField, mode: str) -> StructField:
    """The field as data files store it: physical names at every depth and, under column mapping,
    parquet field ids (delta-spark writes them in `name` mode too)."""
    if mode == "none":
        return field
    data_type = with_field_ids(physical_type(field.dataType, mode))
    metadata = {FIELD_ID_KEY: int(field.metadata[ID_KEY])} if ID_KEY in field.metadata else {}
    return StructField(physical_name(field, mode), data_type, field.nullable, metadata)


def physical_schema(schema: StructType, mode: str) -> StructType:
    result = physical_type(schema, mode)
    assert isinstance(result, StructType)
    return result


MAX_ID_KEY = "delta.columnMapping.maxColumnId"


def with_column_mapping(
    schema: StructType, configuration: dict[str, str], keep_names: bool
) -> tuple[StructType, dict[str, str]]:
    """`schema` with ids (above `configuration`'s `maxColumnId`) and physical names for every field
    lacking them, and `configuration` with the new `maxColumnId`, when `configuration` turns column
    mapping on (both unchanged otherwise)."""
    from deltaspark.errors import InvalidArgumentError

    mode = (configuration.get(MODE_KEY) or "none").lower()
    if mode not in MODES:
        raise InvalidArgumentError(
            f"{MODE_KEY} must be none, name or id, got {configuration.get(MODE_KEY)!r}"
        )
    if mode == "none":
        return schema, configuration
    max_id = int(configuration.get(MAX_ID_KEY) or 0)
    schema, new_max = assign_column_mapping(schema, mode, max_id, keep_names)
    return schema, {**configuration, MAX_ID_KEY: str(new_max)}


def assign_column_mapping(
    schema: StructType, mode: str, max_id: int, keep_names: bool
) -> tuple[StructType, int]:
    """Give every field (at any depth) without one a column id and a physical name, as a writer
    enabling column mapping must; returns the schema and the new `maxColumnId`. New tables get
    `col-<uuid>` physical names; enabling `name` mode on an existing table keeps the current
    names as physical names (`keep_names`), so no data file needs rewriting."""
    import uuid

    counter = [max_id]

    def visit(data_type: DataType) -> DataType:
        if isinstance(data_type, StructType):
            fields = []
            for f in data_type.fields:
                metadata = dict(f.metadata)
                if ID_KEY not in metadata:
                    counter[0] += 1
                    metadata[ID_KEY] = counter[0]
                if PHYSICAL_NAME_KEY not in metadata:
                    metadata[PHYSICAL_NAME_KEY] = f.name if keep_names else f"col-{uuid.uuid4()}"
                fields.append(StructField(f.name, visit(f.dataType), f.nullable, metadata))
            return StructType(fields)
        if isinstance(data_type, ArrayType):
            return ArrayType(visit(data_type.elementType), data_type.containsNull)
        if isinstance(data_type, MapType):
            return MapType(visit(data_type.keyType), visit(data_type.valueType), data_type.valueContainsNull)
        return data_type

    if mode not in ("name", "id"):
        return schema, max_id
    result = visit(schema)
    assert isinstance(result, StructType)
    return result, counter[0]
