"""Type widening ("Type Widening"): reading files written before a column's type was widened.

`delta.typeChanges` in a field's metadata records each change. Readers must support every change
recorded, refuse a table with one they do not, and return values in the current (wider) type.
Spark 4's parquet reader widens most types itself; for integer -> decimal changes its vectorized
reader needs room for 10 (int) or 20 (long) integer digits, so such columns are read as a wider
decimal and cast back to the table's type (the values fit by construction).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql.types import ArrayType, DataType, DecimalType, MapType, StructField, StructType

from deltaspark.errors import UnsupportedFeatureError

TYPE_CHANGES_KEY = "delta.typeChanges"
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_INTEGER_ORDER = ["byte", "short", "integer", "long"]
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def _canon(name: str) -> str:
    name = name.strip().lower().replace(" ", "")
    return {"int": "integer", "bigint": "long", "smallint": "short", "tinyint": "byte"}.get(name, name)


def is_supported_change(from_type: str, to_type: str) -> bool:
    """Whether a recorded change is one the protocol allows (and deltaspark can read)."""
    source, target = _canon(from_type), _canon(to_type)
    if source == target:
        return True
    if source in _INTEGER_ORDER and target in _INTEGER_ORDER:
        return _INTEGER_ORDER.index(source) < _INTEGER_ORDER.index(target)
    if source == "float" and target == "double":
        return True
    if source in ("byte", "short", "integer") and target == "double":
        return True
    if source == "date" and target == "timestamp_ntz":
        return True
    target_decimal = _DECIMAL.match(target)
    if target_decimal:
        precision, scale = int(target_decimal[1]), int(target_decimal[2])
        source_decimal = _DECIMAL.match(source)
        if source_decimal:
            p, s = int(source_decimal[1]), int(source_decimal[2])
            return precision - p >= scale - s >= 0
        if source in _INTEGRAL_DIGITS:
            # Enough integer digits for every value of the source type (the protocol's 10 + k1 /
            # 20 + k2 rule, as written by Spark's Delta, which also widens byte/short to fewer).
            return precision - scale >= _INTEGRAL_DIGITS[source]
    return False


def type_changes(field: StructField) -> list[dict[str, Any]]:
    raw = field.metadata.get(TYPE_CHANGES_KEY)
    if raw is None:
        return []
    changes = json.loads(raw) if isinstance(raw, str) else raw
    return [dict(c) for c in changes]


def widened_from_float(field: StructField) -> bool:
    """Whether `field` (a `double` now) was a `float`: statistics of files written before the
    change are float32 values in shortest text, which read as doubles are not the values the
    files hold (3.4 against 3.4000000953674316)."""
    return any(
        _canon(str(c.get("fromType", ""))) == "float" and not c.get("fieldPath") for c in type_changes(field)
    )


def has_type_changes(schema: StructType) -> bool:
    """Whether any column, at any depth, records a type change."""

    def visit(struct: StructType) -> bool:
        return any(
            type_changes(f) or any(visit(nested) for nested in _structs_in(f.dataType)) for f in struct.fields
        )

    return visit(schema)


def check_type_changes(schema: StructType, where: str) -> None:
    """Refuse a table recording a type change this reader cannot apply, naming it."""
    unsupported = []

    def visit(struct: StructType, prefix: str) -> None:
        for field in struct.fields:
            for change in type_changes(field):
                if not is_supported_change(str(change.get("fromType")), str(change.get("toType"))):
                    path = (
                        prefix + field.name + (f".{change['fieldPath']}" if change.get("fieldPath") else "")
                    )
                    unsupported.append(f"{path}: {change.get('fromType')} -> {change.get('toType')}")
            for nested in _structs_in(field.dataType):
                visit(nested, prefix + field.name + ".")

    visit(schema, "")
    if unsupported:
        raise UnsupportedFeatureError(
            f"Table {where} records type change(s) deltaspark cannot read: " + "; ".join(unsupported),
            features=["typeWidening"],
        )


def _structs_in(data_type: DataType) -> list[StructType]:
    if isinstance(data_type, StructType):
        return [data_type]
    if isinstance(data_type, ArrayType):
        return _structs_in(data_type.elementType)
    if isinstance(data_type, MapType):
        return _structs_in(data_type.keyType) + _structs_in(data_type.valueType)
    return []


def _readable(data_type: DataType, sources: list[str]) -> DataType:
    if isinstance(data_type, DecimalType):
        digits = max((_INTEGRAL_DIGITS[s] for s in sources if s in _INTEGRAL_DIGITS), default=0)
        if digits:
            needed = 10 if digits <= 10 else 20
            precision = min(38, max(data_type.precision, needed + data_type.scale))
            return DecimalType(precision, data_type.scale)
    return data_type


def _at_path(data_type: DataType, path: list[str], sources: list[str]) -> DataType:
    """`data_type` with the element at `path` ("element", "key", "value", ...) made readable."""
    if not path:
        return _readable(data_type, sources)
    head, rest = path[0], path[1:]
    if head == "element" and isinstance(data_type, ArrayType):
        return ArrayType(_at_path(data_type.elementType, rest, sources), data_type.containsNull)
    if head in ("key", "value") and isinstance(data_type, MapType):
        key, value = data_type.keyType, data_type.valueType
        if head == "key":
            key = _at_path(key, rest, sources)
        else:
            value = _at_path(value, rest, sources)
        return MapType(key, value, data_type.valueContainsNull)
    return data_type


def readable_type(field: StructField) -> DataType:
    """The type to request from parquet for `field` so that every file written before a widening
    can be read by Spark's vectorized reader (then cast to `field.dataType`)."""
    data_type = field.dataType
    by_path: dict[str, list[str]] = {}
    for change in type_changes(field):
        by_path.setdefault(change.get("fieldPath") or "", []).append(_canon(str(change.get("fromType"))))
    for path, sources in by_path.items():
        data_type = _at_path(data_type, path.split(".") if path else [], sources)
    if isinstance(data_type, StructType):
        data_type = StructType(
            [StructField(f.name, readable_type(f), f.nullable, f.metadata) for f in data_type.fields]
        )
    elif isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StructType):
        element = data_type.elementType
        data_type = ArrayType(
            StructType(
                [StructField(f.name, readable_type(f), f.nullable, f.metadata) for f in element.fields]
            ),
            data_type.containsNull,
        )
    return data_type
