"""Parsed JSON values typed exactly as Spark's JSON reader types them under an action schema.

The log is read on the driver only where that gives the answer Spark would give (`small_log`,
`driver_replay`). Spark's reader is lenient in ways a driver-side twin would have to copy: a
number in a string field becomes its text, a value of the wrong type nulls the record's fields.
Rather than copy those rules, `typed` accepts only values that need none of them - a string for
a string field, an integer in range for an integer field, and so on - and raises `UnclearError`
for anything else, so the caller leaves the file to Spark, which reads or rejects it its own way.
Fields the schema does not name are dropped, as Spark drops them.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

_RANGES = {IntegerType: (-(2**31), 2**31 - 1), LongType: (-(2**63), 2**63 - 1)}


class UnclearError(Exception):
    """A value Spark might read otherwise than its plain JSON meaning: the Spark path decides."""


def clean_string(value: Any) -> str:
    """A JSON string that is valid Unicode (a lone surrogate escape is left to Spark)."""
    if not isinstance(value, str):
        raise UnclearError
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnclearError from None
    return value


def typed(value: Any, data_type: DataType) -> Any:
    """`value` (from `json.loads`) as Spark reads it with `data_type`; `UnclearError` when unclear."""
    if value is None:
        return None
    if isinstance(data_type, StringType):
        return clean_string(value)
    if isinstance(data_type, (IntegerType, LongType)):
        low, high = _RANGES[type(data_type)]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise UnclearError
        return value
    if isinstance(data_type, BooleanType):
        if not isinstance(value, bool):
            raise UnclearError
        return value
    if isinstance(data_type, StructType):
        if not isinstance(value, dict):
            raise UnclearError
        return {f.name: typed(value.get(f.name), f.dataType) for f in data_type.fields}
    if isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        if not isinstance(value, dict):
            raise UnclearError
        return {clean_string(k): typed(v, data_type.valueType) for k, v in value.items()}
    if isinstance(data_type, ArrayType):
        if not isinstance(value, list):
            raise UnclearError
        return [typed(v, data_type.elementType) for v in value]
    raise UnclearError  # a type this module does not model
