"""A table's rows derived independently: the reference replay's file list, each data file read with
pyarrow, the protocol's rules applied in plain Python (no Spark, no deltaspark).

Partition values are parsed from the log's strings, column mapping resolves by physical name
(`name`) or parquet field id (`id`), deletion vectors are decoded with pyroaring, widened types
are converted to the table's type. Values are normalised (`normalize`) so they compare with the
rows Spark returns.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
import uuid
import zlib
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyroaring import BitMap64

from tests.reference_replay import ReferenceState, replay

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(text: str) -> bytes:
    out = b""
    for i in range(0, len(text), 5):
        group = text[i : i + 5]
        tail = group.startswith("#")  # a short tail padded with '#' (delta-rs): n + 1 digits, n bytes
        digits = group.lstrip("#") if tail else group
        n = 0
        for ch in digits:
            n = n * 85 + _Z85.index(ch)
        out += n.to_bytes(len(digits) - 1, "big") if tail else (n % 2**32).to_bytes(4, "big")
    return out


def deleted_rows(table_dir: str, dv: dict | None) -> set[int]:
    if not dv:
        return set()
    size = dv["sizeInBytes"]
    if dv["storageType"] == "i":
        data = _z85(dv["pathOrInlineDv"])[:size]
    else:
        if dv["storageType"] == "u":
            prefix, encoded = dv["pathOrInlineDv"][:-20], dv["pathOrInlineDv"][-20:]
            name = f"deletion_vector_{uuid.UUID(bytes=_z85(encoded))}.bin"
            location = os.path.join(table_dir, prefix, name)
        else:
            location = unquote(dv["pathOrInlineDv"]).replace("file://", "").replace("file:", "")
        with open(location, "rb") as fh:
            fh.seek(dv.get("offset") or 0)
            (length,) = struct.unpack(">i", fh.read(4))
            data = fh.read(length)
            assert struct.unpack(">I", fh.read(4))[0] == zlib.crc32(data) & 0xFFFFFFFF
    assert struct.unpack("<I", data[:4])[0] == 1681511377
    return set(BitMap64.deserialize(data[4:]))


def _parse_partition(value: str | None, type_name: Any) -> Any:
    if value is None or value == "":
        return None
    if not isinstance(type_name, str):
        raise NotImplementedError(type_name)
    if type_name == "string":
        return value
    if type_name in ("integer", "long", "short", "byte"):
        return int(value)
    if type_name in ("float", "double"):
        return float(value)
    if type_name.startswith("decimal"):
        return Decimal(value)
    if type_name == "boolean":
        return value.lower() == "true"
    if type_name == "date":
        return dt.date.fromisoformat(value)
    if type_name in ("timestamp", "timestamp_ntz"):
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if type_name == "timestamp" and parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)  # tests run Spark in UTC
        return parsed
    if type_name == "binary":
        return value.encode("utf-8")
    raise NotImplementedError(type_name)


def _physical(field: dict, mode: str) -> str:
    return (
        field["metadata"].get("delta.columnMapping.physicalName", field["name"])
        if mode != "none"
        else field["name"]
    )


def _convert(value: Any, type_json: Any, mode: str) -> Any:
    """A pyarrow Python value of the physical layout as the logical value."""
    if value is None:
        return None
    if isinstance(type_json, dict):
        kind = type_json["type"]
        if kind == "struct":
            return {
                f["name"]: _convert(value.get(_physical(f, mode)), f["type"], mode)
                for f in type_json["fields"]
                if f["type"] != "void"
            }
        if kind == "array":
            return [_convert(v, type_json["elementType"], mode) for v in value]
        if kind == "map":
            return {
                _convert(k, type_json["keyType"], mode): _convert(v, type_json["valueType"], mode)
                for k, v in value
            }
        raise NotImplementedError(kind)
    if type_json == "timestamp_ntz" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return dt.datetime(value.year, value.month, value.day)  # widened from date
    if type_json in ("double", "float") and isinstance(value, (int, Decimal)):
        return float(value)
    if str(type_json).startswith("decimal") and isinstance(value, int):
        return Decimal(value)
    if type_json == "variant" and isinstance(value, dict):
        return (bytes(value.get("value") or b""), bytes(value.get("metadata") or b""))
    return value


def _column_by_id(table: Any, field_id: int) -> Any:
    for i, f in enumerate(table.schema):
        if f.metadata and int(f.metadata.get(b"PARQUET:field_id", b"-1")) == field_id:
            return table.column(i)
    return None


def reference_rows(table_dir: str, state: ReferenceState | None = None) -> list[dict[str, Any]]:
    state = state or replay(table_dir)
    schema = json.loads(state.metadata["schemaString"])
    configuration = state.metadata.get("configuration") or {}
    reader_features = state.protocol.get("readerFeatures") or []
    cm_supported = state.protocol.get("minReaderVersion") == 2 or "columnMapping" in reader_features
    mode = configuration.get("delta.columnMapping.mode", "none") if cm_supported else "none"
    partitions = {c.lower() for c in state.metadata.get("partitionColumns") or []}
    fields = [f for f in schema["fields"] if f["type"] != "void"]
    rows: list[dict[str, Any]] = []
    for (path, _), add in sorted(state.files.items()):
        location = path if path.startswith("/") else os.path.join(table_dir, path)
        table = pq.read_table(location)
        deleted = deleted_rows(table_dir, add.get("deletionVector"))
        columns: dict[str, list[Any]] = {}
        for field in fields:
            if field["name"].lower() in partitions:
                raw = (add.get("partitionValues") or {}).get(_physical(field, mode))
                columns[field["name"]] = [_parse_partition(raw, field["type"])] * table.num_rows
                continue
            if mode == "id":
                column = _column_by_id(table, int(field["metadata"]["delta.columnMapping.id"]))
            else:
                name = _physical(field, mode)
                column = table.column(name) if name in table.column_names else None
            values = column.to_pylist() if column is not None else [None] * table.num_rows
            columns[field["name"]] = [_convert(v, field["type"], mode) for v in values]
        for index in range(table.num_rows):
            if index not in deleted:
                rows.append({name: values[index] for name, values in columns.items()})
    return rows


def normalize(value: Any) -> Any:
    """A hashable, comparable form of a row value from Spark or from pyarrow."""
    if value is None:
        return None
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if type(value).__name__ == "VariantVal":
        return ("variant", bytes(value.value), bytes(value.metadata))
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, bytes) for v in value):
        return ("variant", value[0], value[1])
    if isinstance(value, dict) and set(value) == {"value", "metadata"} and isinstance(value["value"], bytes):
        return ("variant", value["value"], value["metadata"])  # delta-rs returns variants as structs
    if isinstance(value, dict):
        return tuple(sorted((str(k), normalize(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(normalize(v) for v in value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return ("ts", value.isoformat())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, float):
        return round(value, 12)
    if isinstance(value, Decimal):
        return ("dec", value.normalize() if value != 0 else Decimal(0))
    return value


def normalized_rows(rows: list[dict[str, Any]]) -> list[tuple]:
    return sorted((tuple((k, normalize(v)) for k, v in sorted(r.items())) for r in rows), key=repr)
