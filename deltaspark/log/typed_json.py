"""Log actions typed exactly as Spark reads them under an action schema, from JSON or parquet.

The log is read on the driver only where that gives the answer Spark would give (`small_log`,
`driver_replay`). Spark's JSON reader is lenient in ways a driver-side twin would have to copy: a
number in a string field becomes its text, a value of the wrong type nulls the record's fields.
Rather than copy those rules, `typed` accepts only values that need none of them - a string for
a string field, an integer in range for an integer field, and so on - and raises `UnclearError`
for anything else, so the caller leaves the file to Spark, which reads or rejects it its own way.
Fields the schema does not name are dropped, as Spark drops them. `parquet_actions` does the same
for checkpoint parts: a column whose parquet type is not exactly the schema's, or whose name
differs only in case (Spark matches names case-insensitively), is unclear.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
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


class UnreadableParquetError(Exception):
    """A parquet log file (`path`) whose footer reads but whose pages pyarrow cannot decode: a
    pyarrow limitation, or damage. The caller asks Spark to decode the file before it calls the
    file damaged."""

    def __init__(self, reason: str, path: str) -> None:
        super().__init__(reason)
        self.reason, self.path = reason, path


def json_object(line: str) -> dict[str, Any]:
    """One log line parsed as a JSON object (`UnclearError` for anything else)."""
    try:
        parsed = json.loads(line)
    except ValueError:
        raise UnclearError from None
    if not isinstance(parsed, dict):
        raise UnclearError
    return parsed


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


def parquet_actions(
    data: bytes,
    kinds: dict[str, StructType],
    path: str,
    counted: Sequence[str] = (),
    present: dict[str, int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Each row of a parquet checkpoint part, as `{kind: typed value or None}` for `kinds`
    (action name -> schema). `add.stats_parsed` is unclear too: the Spark path conforms it. Every
    column is decoded, wanted or not, so a part with a page that does not decode is never read as
    valid: `UnreadableParquetError` naming `path`, the file `data` was read from. `present`, when
    given, is increased by the number of rows holding each `counted` kind (its non-null values,
    columns of any spelling of the name added up), before the first row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        schema = parquet.schema_arrow
    except Exception:
        raise UnclearError from None  # not parquet: the Spark path names the file
    columns = []
    for name in schema.names:
        if name.lower() in kinds and name not in kinds:
            raise UnclearError
        if name in kinds:
            arrow_type = schema.field(name).type
            if name == "add" and "stats_parsed" in [f.name.lower() for f in arrow_type]:
                raise UnclearError
            if not arrow_matches(arrow_type, kinds[name]):
                raise UnclearError
            columns.append(name)
    try:
        table = parquet.read()
    except Exception as exc:  # pyarrow's OSError / ArrowException: a page that does not decode
        raise UnreadableParquetError(f"a page does not decode ({exc})", path) from None
    if present is not None:
        lowered = {kind.lower(): kind for kind in counted}
        for i, name in enumerate(table.column_names):
            kind = lowered.get(name.lower())
            if kind is not None:
                column = table.column(i)
                present[kind] = present.get(kind, 0) + len(column) - column.null_count
    if not columns:
        return
    for row in table.select(columns).to_pylist():
        yield {kind: typed(_as_json(row.get(kind), kinds[kind]), kinds[kind]) for kind in kinds}


def arrow_matches(arrow_type: Any, spark_type: DataType) -> bool:
    """Whether Spark reads a parquet column of `arrow_type` as `spark_type`, value for value."""
    import pyarrow as pa

    if isinstance(spark_type, StringType):
        return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))
    if isinstance(spark_type, LongType):
        return bool(pa.types.is_int64(arrow_type))
    if isinstance(spark_type, IntegerType):
        return bool(pa.types.is_int32(arrow_type))
    if isinstance(spark_type, BooleanType):
        return bool(pa.types.is_boolean(arrow_type))
    if isinstance(spark_type, ArrayType):
        return bool(
            (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type))
            and arrow_matches(arrow_type.value_type, spark_type.elementType)
        )
    if isinstance(spark_type, MapType):
        return bool(
            pa.types.is_map(arrow_type)
            and arrow_matches(arrow_type.key_type, spark_type.keyType)
            and arrow_matches(arrow_type.item_type, spark_type.valueType)
        )
    if isinstance(spark_type, StructType):
        if not pa.types.is_struct(arrow_type):
            return False
        expected = {f.name: f.dataType for f in spark_type.fields}
        lowered = {name.lower() for name in expected}
        for child in arrow_type:
            if child.name in expected:
                if not arrow_matches(child.type, expected[child.name]):
                    return False
            elif child.name.lower() in lowered:
                return False  # Spark matches names case-insensitively
        return True
    return False


def _as_json(value: Any, data_type: DataType) -> Any:
    """An Arrow `to_pylist` value as `json.loads` gives it: maps are lists of pairs there."""
    if value is None:
        return None
    if isinstance(data_type, MapType) and isinstance(value, list):
        return {k: _as_json(v, data_type.valueType) for k, v in value}
    if isinstance(data_type, StructType) and isinstance(value, dict):
        types = {f.name: f.dataType for f in data_type.fields}
        return {k: _as_json(v, types[k]) if k in types else v for k, v in value.items()}
    if isinstance(data_type, ArrayType) and isinstance(value, list):
        return [_as_json(v, data_type.elementType) for v in value]
    return value
