"""Schema evolution (`mergeSchema`): the table's schema merged with a DataFrame's, at any depth.

As delta-spark's `SchemaMergingUtils.mergeSchemas`: fields are matched by name, case-insensitively;
the table's names, nullability and metadata win; fields the DataFrame adds are appended (nullable)
at the end of their struct, inside structs, arrays of structs and map keys and values. A value the
table's type holds without loss (an `int` written to a `long` column) keeps the table's type.

A wider incoming type changes the column only when the table enables type widening
(`delta.enableTypeWidening`), and only for the changes delta-spark applies automatically
("same family": byte -> short -> int -> long, float -> double, decimal(p, s) -> decimal(p + k1,
s + k2) with k1 >= k2 >= 0, date -> timestamp_ntz). Each change is recorded in `delta.typeChanges`
of the nearest struct field ({"fromType", "toType"}, plus "fieldPath" such as "element" or
"value" inside arrays and maps), as the Type Widening feature requires. Anything else is refused,
naming the column.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StructField,
    StructType,
    TimestampNTZType,
)

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.type_widening import TYPE_CHANGES_KEY

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


def _rank(data_type: DataType) -> int | None:
    return next((i for i, t in enumerate(_INTEGERS) if isinstance(data_type, t)), None)


def fits(source: DataType, target: DataType) -> bool:
    """Whether every value of `source` is a value of `target` (writing it needs only a cast)."""
    if source == target or isinstance(source, NullType):
        return True
    si, ti = _rank(source), _rank(target)
    if si is not None and ti is not None:
        return si <= ti
    if si is not None and si <= 2 and isinstance(target, (DoubleType, DecimalType)):
        return not isinstance(target, DecimalType) or target.precision - target.scale >= (3, 5, 10)[si]
    if isinstance(source, FloatType) and isinstance(target, DoubleType):
        return True
    if isinstance(source, DecimalType) and isinstance(target, DecimalType):
        integer_digits = target.precision - target.scale >= source.precision - source.scale
        return target.scale >= source.scale and integer_digits
    return False


def widens_automatically(source: DataType, target: DataType) -> bool:
    """The type changes delta-spark's schema evolution applies by itself (its "same family" set)."""
    si, ti = _rank(source), _rank(target)
    if si is not None and ti is not None:
        return si < ti
    if isinstance(source, FloatType) and isinstance(target, DoubleType):
        return True
    if isinstance(source, DateType) and isinstance(target, TimestampNTZType):
        return True
    if isinstance(source, DecimalType) and isinstance(target, DecimalType) and source != target:
        return target.precision - source.precision >= target.scale - source.scale >= 0
    return False


def type_name(data_type: DataType) -> str:
    """A type's name as `delta.typeChanges` records it (`integer`, `decimal(10,2)`, ...)."""
    if isinstance(data_type, DecimalType):
        return f"decimal({data_type.precision},{data_type.scale})"
    return data_type.typeName()


def merge_schemas(
    table: StructType, incoming: StructType, where: str, allow_type_widening: bool = False
) -> StructType:
    """The table's schema with the DataFrame's additions (see the module docstring)."""
    merged, changes = _merge_struct(table, incoming, "", where, allow_type_widening)
    assert not changes  # top-level fields record their own changes
    return merged


def _merge_struct(
    table: StructType, incoming: StructType, prefix: str, where: str, widen: bool
) -> tuple[StructType, list[dict[str, Any]]]:
    names = [f.name.lower() for f in incoming.fields]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(
            f"The DataFrame has columns differing only by case ({', '.join(twice)}) "
            f"at {prefix or 'top level'}"
        )
    given = {f.name.lower(): f for f in incoming.fields}
    fields = []
    for field in table.fields:
        other = given.pop(field.name.lower(), None)
        if other is None:
            fields.append(field)
            continue
        data_type, changes = _merge_type(
            field.dataType, other.dataType, prefix + field.name, "", where, widen
        )
        metadata = dict(field.metadata)
        if changes:
            recorded = metadata.get(TYPE_CHANGES_KEY) or []
            recorded = json.loads(recorded) if isinstance(recorded, str) else list(recorded)
            metadata[TYPE_CHANGES_KEY] = recorded + changes
        fields.append(StructField(field.name, data_type, field.nullable, metadata))
    for field in incoming.fields:
        if field.name.lower() in given:
            fields.append(StructField(field.name, field.dataType, True, dict(field.metadata)))
    return StructType(fields), []


def _merge_type(
    table: DataType, incoming: DataType, column: str, field_path: str, where: str, widen: bool
) -> tuple[DataType, list[dict[str, Any]]]:
    """The merged type, and the type changes to record on the enclosing struct field."""
    if isinstance(table, StructType) and isinstance(incoming, StructType):
        merged, _ = _merge_struct(table, incoming, column + ".", where, widen)
        return merged, []
    if isinstance(table, ArrayType) and isinstance(incoming, ArrayType):
        element, changes = _merge_type(
            table.elementType, incoming.elementType, column, _join(field_path, "element"), where, widen
        )
        return ArrayType(element, table.containsNull), changes
    if isinstance(table, MapType) and isinstance(incoming, MapType):
        key, key_changes = _merge_type(
            table.keyType, incoming.keyType, column, _join(field_path, "key"), where, widen
        )
        value, value_changes = _merge_type(
            table.valueType, incoming.valueType, column, _join(field_path, "value"), where, widen
        )
        return MapType(key, value, table.valueContainsNull), key_changes + value_changes
    if fits(incoming, table):
        return table, []
    if widen and widens_automatically(table, incoming):
        change = {"fromType": type_name(table), "toType": type_name(incoming)}
        if field_path:
            change["fieldPath"] = field_path
        return incoming, [change]
    hint = (
        ""
        if widen or not widens_automatically(table, incoming)
        else " (set delta.enableTypeWidening=true on the table to let mergeSchema widen it)"
    )
    inside = f" ({field_path})" if field_path else ""
    raise InvalidArgumentError(
        f"mergeSchema cannot change column `{column}`{inside} of {where} from {table.simpleString()} to "
        f"{incoming.simpleString()}{hint}"
    )


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
