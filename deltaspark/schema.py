"""Table schemas: parsing `schemaString`, and reshaping nested values between schemas.

Delta serialises schemas in Spark's own JSON format, so Spark's parser reads them. The helpers
here rename (logical <-> physical) and realign values whose field order or types differ from
what a caller expects, without any UDF.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, NullType, StructField, StructType

from .errors import CorruptLogError, UnsupportedFeatureError
from .spark_compat import try_cast


def parse_schema_string(schema_string: str | None, where: str) -> StructType:
    """The table schema from `metaData.schemaString`."""
    if not schema_string:
        raise CorruptLogError(where, "metaData has no schemaString")
    try:
        document = json.loads(schema_string)
    except ValueError as exc:
        raise CorruptLogError(where, f"metaData.schemaString is not JSON: {exc}") from exc
    try:
        schema = StructType.fromJson(document)
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise UnsupportedFeatureError(
            f"The schema of {where} uses a type this Spark version cannot represent: {exc}"
        ) from exc
    return schema


def map_fields(data_type: DataType, rename: Callable[[StructField], str]) -> DataType:
    """The same type with every struct field (at any depth) renamed by `rename`."""
    if isinstance(data_type, StructType):
        return StructType(
            [
                StructField(rename(f), map_fields(f.dataType, rename), f.nullable, f.metadata)
                for f in data_type.fields
            ]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(map_fields(data_type.elementType, rename), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(
            map_fields(data_type.keyType, rename),
            map_fields(data_type.valueType, rename),
            data_type.valueContainsNull,
        )
    return data_type


def drop_void_fields(schema: StructType) -> StructType:
    """Drop `void` (NullType) columns, as the protocol recommends and Spark's connector does."""
    return StructType([f for f in schema.fields if not isinstance(f.dataType, NullType)])


def conform_by_name(column: Column, source: DataType, target: DataType) -> Column:
    """Reshape a value of type `source` into `target`, matching struct fields by name.

    Fields missing from the source become null, extra source fields are dropped, leaves are cast
    (yielding null where a cast is impossible). Used for values written by other engines, such as
    a checkpoint's `stats_parsed`, whose layout is the writer's choice.
    """
    if source == target:
        return column
    if isinstance(source, StructType) and isinstance(target, StructType):
        by_name = {f.name: f for f in source.fields}
        parts = []
        for f in target.fields:
            if f.name in by_name:
                value = conform_by_name(column.getField(f.name), by_name[f.name].dataType, f.dataType)
            else:
                value = F.lit(None).cast(f.dataType)
            parts.append(value.alias(f.name))
        return F.when(column.isNull(), F.lit(None).cast(target)).otherwise(F.struct(*parts))
    return try_cast(column, target)
