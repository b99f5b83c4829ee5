"""Iceberg types as Spark types, and Iceberg's JSON single values (defaults, partition values) as
Python values of those types.

Mapping: `uuid` is read as its lowercase string; `fixed[L]` as binary; `time` as a long of
microseconds since midnight (Spark 3.5 has no TIME type); `timestamp` as TIMESTAMP_NTZ and
`timestamptz` as TIMESTAMP. Nanosecond timestamps, geometry and geography have no lossless Spark
type and are refused by name; `variant` needs Spark 4; `unknown` is a NULL column.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import struct
import uuid
from typing import Any

from pyspark.sql import types as T

from deltaspark.errors import UnsupportedFeatureError

FIELD_ID_KEY = "parquet.field.id"  # as Spark's own parquet field-id support names it
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
_FIXED = re.compile(r"^fixed\[\s*(\d+)\s*\]$")
_EPOCH = dt.date(1970, 1, 1)
_EPOCH_TS = dt.datetime(1970, 1, 1)
_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "date": T.DateType(),
    "time": T.LongType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
    "string": T.StringType(),
    "uuid": T.StringType(),
    "binary": T.BinaryType(),
    "unknown": T.NullType(),
}
REFUSED = ("timestamp_ns", "timestamptz_ns", "geometry", "geography")


def _refuse(type_name: str, where: str, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"Iceberg column {where} has type {type_name}, which deltaspark cannot read: {why}",
        [f"iceberg-type-{type_name.split('(')[0]}"],
    )


def spark_type(iceberg_type: Any, where: str) -> T.DataType:
    """The Spark type of an Iceberg type (JSON form); `where` names the column in errors."""
    if isinstance(iceberg_type, str):
        if iceberg_type in _PRIMITIVES:
            return _PRIMITIVES[iceberg_type]
        if match := _DECIMAL.match(iceberg_type):
            return T.DecimalType(int(match.group(1)), int(match.group(2)))
        if _FIXED.match(iceberg_type):
            return T.BinaryType()
        if iceberg_type == "variant":
            if hasattr(T, "VariantType"):
                return T.VariantType()
            raise _refuse(iceberg_type, where, "Spark 3.5 has no VARIANT type (Spark 4 reads it)")
        if iceberg_type.split("(")[0] in REFUSED:
            raise _refuse(iceberg_type, where, "Spark has no type that holds it without loss")
        raise _refuse(iceberg_type, where, "unknown Iceberg type")
    kind = iceberg_type.get("type")
    if kind == "struct":
        return struct_type(iceberg_type, where)
    if kind == "list":
        return T.ArrayType(
            spark_type(iceberg_type["element"], where + ".element"),
            not iceberg_type.get("element-required", False),
        )
    if kind == "map":
        return T.MapType(
            spark_type(iceberg_type["key"], where + ".key"),
            spark_type(iceberg_type["value"], where + ".value"),
            not iceberg_type.get("value-required", False),
        )
    raise _refuse(str(kind), where, "unknown Iceberg type")


def struct_type(schema: dict[str, Any], where: str = "") -> T.StructType:
    return T.StructType(
        [
            T.StructField(
                f["name"],
                spark_type(f["type"], (where + "." if where else "") + f["name"]),
                not f.get("required", False),
                {FIELD_ID_KEY: int(f["id"])},
            )
            for f in schema.get("fields", [])
        ]
    )


def is_uuid(iceberg_type: Any) -> bool:
    return iceberg_type == "uuid"


# ---- JSON single values (Appendix D) -------------------------------------------------------------
def _micros(text: str) -> int:
    """Microseconds since the epoch of an ISO timestamp (an offset, if any, must be +00:00)."""
    text = text.strip().replace(" ", "T")
    offset = None
    match = re.search(r"([+-]\d\d:\d\d|Z)$", text)
    if match:
        offset = match.group(1)
        text = text[: match.start()]
    if offset not in (None, "Z", "+00:00", "-00:00"):
        raise ValueError(f"timestamp offset must be +00:00: {offset}")
    date_part, _, time_part = text.partition("T")
    seconds_part, _, fraction = time_part.partition(".")
    base = dt.datetime.fromisoformat(date_part + "T" + (seconds_part or "00:00:00"))
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return ((base - _EPOCH_TS) // dt.timedelta(microseconds=1)) + micros


def from_json(value: Any, iceberg_type: Any) -> Any:
    """An Iceberg JSON single value as the Python value Spark/Arrow use for the mapped type."""
    if value is None:
        return None
    if isinstance(iceberg_type, dict):
        kind = iceberg_type["type"]
        if kind == "struct":
            given = value if isinstance(value, dict) else {}
            return {
                f["name"]: from_json(given.get(str(f["id"]), f.get("initial-default")), f["type"])
                for f in iceberg_type["fields"]
            }
        if kind == "list":
            return [from_json(v, iceberg_type["element"]) for v in value]
        if kind == "map":
            keys = [from_json(k, iceberg_type["key"]) for k in value["keys"]]
            values = [from_json(v, iceberg_type["value"]) for v in value["values"]]
            return list(zip(keys, values, strict=True))
        raise ValueError(kind)
    if iceberg_type in ("boolean", "int", "long", "unknown"):
        return value
    if iceberg_type in ("float", "double"):
        return float(value)
    if iceberg_type.startswith("decimal"):
        scale = int(_DECIMAL.match(iceberg_type).group(2))
        wide = decimal.Context(prec=80)  # decimal(38, s) needs more than the default 28 digits
        return wide.quantize(decimal.Decimal(str(value)), decimal.Decimal(1).scaleb(-scale, wide))
    if iceberg_type == "date":
        return dt.date.fromisoformat(value) if isinstance(value, str) else _EPOCH + dt.timedelta(days=value)
    if iceberg_type == "time":
        if isinstance(value, int):
            return value
        clock, _, fraction = value.partition(".")
        h, m, s = (int(x) for x in (clock.split(":") + ["0", "0"])[:3])
        return ((h * 60 + m) * 60 + s) * 1_000_000 + (int((fraction + "000000")[:6]) if fraction else 0)
    if iceberg_type in ("timestamp", "timestamptz"):
        micros = value if isinstance(value, int) else _micros(value)
        stamp = _EPOCH_TS + dt.timedelta(microseconds=micros)
        return stamp.replace(tzinfo=dt.timezone.utc) if iceberg_type == "timestamptz" else stamp
    if iceberg_type == "string":
        return str(value)
    if iceberg_type == "uuid":
        return str(uuid.UUID(str(value)))
    if iceberg_type == "binary" or iceberg_type.startswith("fixed"):
        return bytes.fromhex(value) if isinstance(value, str) else bytes(value)
    raise ValueError(f"no JSON single value for type {iceberg_type}")


def to_json(value: Any, iceberg_type: Any) -> Any:
    """A value decoded from Avro (fastavro's logical types) as its canonical JSON single value, so that
    partition tuples written by different engines compare equal."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if iceberg_type in ("int", "long"):  # hour transform written with a timestamp logical type
            value = (
                value.replace(tzinfo=None)
                if value.tzinfo is None
                else value.astimezone(dt.timezone.utc).replace(tzinfo=None)
            )
            return (value - _EPOCH_TS) // dt.timedelta(hours=1)
        naive = value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        text = naive.isoformat(timespec="microseconds")
        return text + "+00:00" if iceberg_type == "timestamptz" else text
    if isinstance(value, dt.date):
        if iceberg_type in ("int", "long"):  # day transform written with the date logical type
            return (value - _EPOCH).days
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.isoformat(timespec="microseconds")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        if iceberg_type == "uuid" and len(value) == 16:
            return str(uuid.UUID(bytes=bytes(value)))
        return bytes(value).hex()
    if isinstance(value, float) and iceberg_type in ("float", "double"):
        return value
    if isinstance(value, int) and iceberg_type in ("timestamp", "timestamptz"):
        return to_json(_EPOCH_TS + dt.timedelta(microseconds=value), iceberg_type)
    if isinstance(value, int) and iceberg_type == "date":
        return (_EPOCH + dt.timedelta(days=value)).isoformat()
    return value


# ---- binary single values (Appendix D): column bounds and partition summaries --------------------
def from_bytes(data: bytes | None, iceberg_type: Any) -> Any:
    """A bound serialized as Iceberg's binary single value, as the Python value of the mapped Spark
    type; None for types without an order Spark shares and for lengths that do not fit the type.

    Promoted columns keep the bounds their files were written with: a 4-byte bound of a `long`
    column is an `int`, of a `double` a `float`, of a timestamp a `date`."""
    if data is None or not isinstance(iceberg_type, str):
        return None
    size = len(data)
    if iceberg_type in ("int", "date") and size == 4:
        days_or_int = struct.unpack("<i", data)[0]
        return days_or_int if iceberg_type == "int" else _EPOCH + dt.timedelta(days=days_or_int)
    if iceberg_type in ("long", "time") and size in (4, 8):
        return struct.unpack("<i" if size == 4 else "<q", data)[0]
    if iceberg_type in ("float", "double") and size in (4, 8):
        return struct.unpack("<f" if size == 4 else "<d", data)[0]
    if iceberg_type in ("timestamp", "timestamptz") and size in (4, 8):
        micros = struct.unpack("<q", data)[0] if size == 8 else struct.unpack("<i", data)[0] * 86_400_000_000
        stamp = _EPOCH_TS + dt.timedelta(microseconds=micros)
        return stamp.replace(tzinfo=dt.timezone.utc) if iceberg_type == "timestamptz" else stamp
    if iceberg_type == "string":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if iceberg_type == "uuid" and size == 16:
        return str(uuid.UUID(bytes=bytes(data)))
    if match := _DECIMAL.match(iceberg_type):
        if not 0 < size <= 16:
            return None
        unscaled = int.from_bytes(data, "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-int(match.group(2)), decimal.Context(prec=80))
    return None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def partition_result_type(transform: str, source_type: Any) -> Any:
    """The type of a partition field's values (identity and truncate keep the source type)."""
    if transform in ("identity",) or transform.startswith("truncate"):
        return source_type
    if transform in ("year", "month", "day", "hour") or transform.startswith("bucket"):
        return "int"
    return None  # void and unknown transforms: values are not interpreted


def field_index(schema: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Every field of a schema (nested ones too) by id."""
    out: dict[int, dict[str, Any]] = {}

    def walk(t: Any) -> None:
        if not isinstance(t, dict):
            return
        if t.get("type") == "struct":
            for f in t["fields"]:
                out[int(f["id"])] = f
                walk(f["type"])
        elif t.get("type") == "list":
            out[int(t["element-id"])] = {"id": t["element-id"], "name": "element", "type": t["element"]}
            walk(t["element"])
        elif t.get("type") == "map":
            out[int(t["key-id"])] = {"id": t["key-id"], "name": "key", "type": t["key"]}
            out[int(t["value-id"])] = {"id": t["value-id"], "name": "value", "type": t["value"]}
            walk(t["key"])
            walk(t["value"])

    walk(schema)
    return out
