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
from pyspark.sql.types import (
    ArrayType,
    CharType,
    DataType,
    DayTimeIntervalType,
    DecimalType,
    MapType,
    NullType,
    StructField,
    StructType,
    VarcharType,
    YearMonthIntervalType,
)

from deltaspark.errors import CorruptLogError, UnsupportedFeatureError
from deltaspark.spark_compat import try_cast


def parse_schema_string(schema_string: str | None, where: str) -> StructType:
    """The table schema from `metaData.schemaString`; none (or empty) is an empty schema, as Spark's
    Delta reads a `metaData` that old writers left without one."""
    if not schema_string:
        return StructType([])
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


def tree_string(schema: StructType) -> str:
    """The schema as Spark's `printSchema` draws it (`StructType.treeString` is pyspark 4 only)."""
    lines = ["root"]

    def walk(data_type: DataType, depth: int) -> None:
        prefix = " |   " * depth + " |-- "
        if isinstance(data_type, StructType):
            for f in data_type.fields:
                lines.append(
                    f"{prefix}{f.name}: {_node_name(f.dataType)} (nullable = {str(f.nullable).lower()})"
                )
                walk(f.dataType, depth + 1)
        elif isinstance(data_type, ArrayType):
            lines.append(
                f"{prefix}element: {_node_name(data_type.elementType)} "
                f"(containsNull = {str(data_type.containsNull).lower()})"
            )
            walk(data_type.elementType, depth + 1)
        elif isinstance(data_type, MapType):
            lines.append(f"{prefix}key: {_node_name(data_type.keyType)}")
            walk(data_type.keyType, depth + 1)
            lines.append(
                f"{prefix}value: {_node_name(data_type.valueType)} "
                f"(valueContainsNull = {str(data_type.valueContainsNull).lower()})"
            )
            walk(data_type.valueType, depth + 1)

    walk(schema, 0)
    return "\n".join(lines) + "\n"


_PARAMETERIZED = (DecimalType, CharType, VarcharType, DayTimeIntervalType, YearMonthIntervalType)


def _node_name(data_type: DataType) -> str:
    # Spark names types by `typeName`, except where the parameters are part of the name.
    if isinstance(
        data_type, (DecimalType, CharType, VarcharType, DayTimeIntervalType, YearMonthIntervalType)
    ):
        return data_type.simpleString()
    return data_type.typeName()
