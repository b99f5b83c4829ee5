"""Writing Iceberg's Avro files: manifest and manifest-list schemas (with the spec's field ids, which
readers resolve fields by) and values as Iceberg's binary single values (column bounds).

The decoder (`avro_decode`) reads any writer's files; these schemas are the ones deltaspark writes:
format 2, plus format 3's row lineage and deletion-vector fields.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
from typing import Any

from deltaspark.iceberg.types import _DECIMAL

_EPOCH = dt.date(1970, 1, 1)
_EPOCH_TS = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def to_bytes(value: Any, iceberg_type: str) -> bytes | None:
    """`value` (a Python value of the mapped Spark type) as Iceberg's binary single value; None for
    types Iceberg keeps no bounds of here."""
    if value is None:
        return None
    if iceberg_type == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg_type == "int":
        return struct.pack("<i", int(value))
    if iceberg_type == "long":
        return struct.pack("<q", int(value))
    if iceberg_type == "float":
        return struct.pack("<f", float(value))
    if iceberg_type == "double":
        return struct.pack("<d", float(value))
    if iceberg_type == "date":
        return struct.pack("<i", (value - _EPOCH).days)
    if iceberg_type in ("timestamp", "timestamptz"):
        return struct.pack("<q", micros(value))
    if iceberg_type == "string":
        return str(value).encode("utf-8")
    if iceberg_type == "binary":
        return bytes(value)
    if match := _DECIMAL.match(iceberg_type):
        unscaled = int(decimal.Decimal(value).scaleb(int(match.group(2))).to_integral_value())
        return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
    return None


def micros(value: dt.datetime) -> int:
    """Microseconds since the epoch: aware values from UTC, naive ones as wall time."""
    if value.tzinfo is not None:
        return (value - _EPOCH_TZ) // dt.timedelta(microseconds=1)
    return (value - _EPOCH_TS) // dt.timedelta(microseconds=1)


def avro_type(iceberg_type: str, name: str = "value") -> Any:
    """The Avro type of a partition value of `iceberg_type` (the spec's Avro mapping); `name` makes
    a named Avro type (`fixed`) unique within the schema."""
    simple = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double"}
    if iceberg_type in simple:
        return simple[iceberg_type]
    if iceberg_type == "string":
        return "string"
    if iceberg_type == "binary":
        return "bytes"
    if iceberg_type == "date":
        return {"type": "int", "logicalType": "date"}
    if iceberg_type in ("timestamp", "timestamptz"):
        adjust = iceberg_type == "timestamptz"
        return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": adjust}
    if match := _DECIMAL.match(iceberg_type):
        # the spec's Avro form is `fixed` of the fewest bytes the precision needs (readers that
        # resolve by their own schema, like pyiceberg, misread `bytes`)
        precision, scale = int(match.group(1)), int(match.group(2))
        return {
            "type": "fixed",
            "name": f"decimal_{precision}_{scale}_{name}",
            "size": decimal_bytes(precision),
            "logicalType": "decimal",
            "precision": precision,
            "scale": scale,
        }
    raise ValueError(f"no Avro partition type for {iceberg_type}")


def decimal_bytes(precision: int) -> int:
    """The fewest bytes whose two's complement holds every unscaled value of `precision` digits."""
    size = 1
    while 2 ** (8 * size - 1) - 1 < 10**precision - 1:
        size += 1
    return size


def _opt(name: str, type_: Any, field_id: int) -> dict[str, Any]:
    return {"name": name, "type": ["null", type_], "default": None, "field-id": field_id}


def _int_map(record: str, key_id: int, value_id: int, value_type: str) -> dict[str, Any]:
    return {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": record,
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value_type, "field-id": value_id},
            ],
        },
    }


def entry_schema(format_version: int, partition: list[tuple[str, int, str]]) -> dict[str, Any]:
    """The manifest entry schema; `partition` is (name, partition field id, result type) per field."""
    partition_fields = [_opt(name, avro_type(t, str(fid)), fid) for name, fid, t in partition]
    data_file = [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {
            "name": "partition",
            "type": {"type": "record", "name": "r102", "fields": partition_fields},
            "field-id": 102,
        },
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        _opt("value_counts", _int_map("k119_v120", 119, 120, "long"), 109),
        _opt("null_value_counts", _int_map("k121_v122", 121, 122, "long"), 110),
        _opt("lower_bounds", _int_map("k126_v127", 126, 127, "bytes"), 125),
        _opt("upper_bounds", _int_map("k129_v130", 129, 130, "bytes"), 128),
        _opt("equality_ids", {"type": "array", "items": "int", "element-id": 136}, 135),
    ]
    if format_version >= 3:
        data_file += [
            _opt("first_row_id", "long", 142),
            _opt("referenced_data_file", "string", 143),
            _opt("content_offset", "long", 144),
            _opt("content_size_in_bytes", "long", 145),
        ]
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            {"name": "status", "type": "int", "field-id": 0},
            _opt("snapshot_id", "long", 1),
            _opt("sequence_number", "long", 3),
            _opt("file_sequence_number", "long", 4),
            {
                "name": "data_file",
                "type": {"type": "record", "name": "r2", "fields": data_file},
                "field-id": 2,
            },
        ],
    }


def manifest_list_schema(format_version: int) -> dict[str, Any]:
    summary = {
        "type": "record",
        "name": "r508",
        "fields": [
            {"name": "contains_null", "type": "boolean", "field-id": 509},
            _opt("contains_nan", "boolean", 518),
            _opt("lower_bound", "bytes", 510),
            _opt("upper_bound", "bytes", 511),
        ],
    }
    fields = [
        {"name": "manifest_path", "type": "string", "field-id": 500},
        {"name": "manifest_length", "type": "long", "field-id": 501},
        {"name": "partition_spec_id", "type": "int", "field-id": 502},
        {"name": "content", "type": "int", "field-id": 517},
        {"name": "sequence_number", "type": "long", "field-id": 515},
        {"name": "min_sequence_number", "type": "long", "field-id": 516},
        {"name": "added_snapshot_id", "type": "long", "field-id": 503},
        {"name": "added_files_count", "type": "int", "field-id": 504},
        {"name": "existing_files_count", "type": "int", "field-id": 505},
        {"name": "deleted_files_count", "type": "int", "field-id": 506},
        {"name": "added_rows_count", "type": "long", "field-id": 512},
        {"name": "existing_rows_count", "type": "long", "field-id": 513},
        {"name": "deleted_rows_count", "type": "long", "field-id": 514},
        _opt("partitions", {"type": "array", "element-id": 508, "items": summary}, 507),
    ]
    if format_version >= 3:
        fields.append(_opt("first_row_id", "long", 520))
    return {"type": "record", "name": "manifest_file", "fields": fields}


def manifest_metadata(
    schema: dict[str, Any], spec: list[dict[str, Any]], spec_id: int, format_version: int, content: str
) -> dict[str, str]:
    """The key-value metadata Iceberg stores in a manifest's Avro header."""
    return {
        "schema": json.dumps(schema),
        "schema-id": str(schema.get("schema-id", 0)),
        "partition-spec": json.dumps(spec),
        "partition-spec-id": str(spec_id),
        "format-version": str(format_version),
        "content": content,
    }


def avro_bytes(schema: dict[str, Any], records: Any, metadata: dict[str, str]) -> bytes:
    """An Avro container file (deflate) of `records`."""
    import fastavro

    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, codec="deflate", metadata=metadata)
    return out.getvalue()
