"""Writing Iceberg manifests on the executors, from a Delta table's live files (a `mapInArrow`).

Each task writes its files' entries into data manifests of at most `per_manifest` entries, and
when files have deletion vectors, one Puffin file with a `deletion-vector-v1` blob per vector and a
delete manifest naming them. It yields one manifest-list row per manifest written; the driver
writes the manifest list and the table metadata from those rows alone.

Bounds: Delta's statistics become Iceberg's `lower_bounds` / `upper_bounds` where they are true
bounds. Delta truncates timestamp statistics to milliseconds, so a maximum gets 999 microseconds
added; a string maximum is used only when shorter than the table's stats prefix length (a longer
one may have been truncated); NaN is never a bound. Null counts become `null_value_counts`.
"""

from __future__ import annotations

import json
import math
import struct
import uuid
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from deltaspark.errors import DeltaSparkError
from deltaspark.features import dv_codec
from deltaspark.file_io import carry_settings, open_file
from deltaspark.iceberg import avro_encode

MANIFEST_ROW = pa.schema(
    [
        ("manifest_path", pa.string()),
        ("manifest_length", pa.int64()),
        ("content", pa.int32()),
        ("added_files_count", pa.int32()),
        ("added_rows_count", pa.int64()),
        ("data_bytes", pa.int64()),  # the data files' sizes (not a manifest list field)
        (
            "partitions",
            pa.list_(
                pa.struct(
                    [
                        ("contains_null", pa.bool_()),
                        ("contains_nan", pa.bool_()),
                        ("lower_bound", pa.binary()),
                        ("upper_bound", pa.binary()),
                    ]
                )
            ),
        ),
    ]
)


def _leaves(value: Any, path: tuple[str, ...], out: dict[tuple[str, ...], Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _leaves(inner, path + (key,), out)
    elif value is not None:
        out[path] = value


def _bounds(stats: dict[str, Any] | None, columns: dict[tuple[str, ...], tuple[int, str]], prefix: int):  # noqa: ANN202
    lower: list[dict[str, Any]] = []
    upper: list[dict[str, Any]] = []
    nulls: list[dict[str, Any]] = []
    if not stats:
        return None, None, None
    mins: dict[tuple[str, ...], Any] = {}
    maxs: dict[tuple[str, ...], Any] = {}
    counts: dict[tuple[str, ...], Any] = {}
    _leaves(stats.get("minValues"), (), mins)
    _leaves(stats.get("maxValues"), (), maxs)
    _leaves(stats.get("nullCount"), (), counts)
    for path, (field_id, iceberg_type) in columns.items():
        low, high = mins.get(path), maxs.get(path)
        if isinstance(low, float) and math.isnan(low):
            low = None
        if isinstance(high, float) and math.isnan(high):
            high = None
        if iceberg_type in ("timestamp", "timestamptz") and high is not None:
            high = avro_encode.micros(high) + 999  # Delta keeps milliseconds
            encoded_high = struct.pack("<q", high)
        elif iceberg_type == "string" and high is not None and len(high) >= prefix:
            encoded_high = None  # maybe a truncated prefix: not an upper bound
        else:
            encoded_high = avro_encode.to_bytes(high, iceberg_type)
        encoded_low = avro_encode.to_bytes(low, iceberg_type)
        if encoded_low is not None:
            lower.append({"key": field_id, "value": encoded_low})
        if encoded_high is not None:
            upper.append({"key": field_id, "value": encoded_high})
        if counts.get(path) is not None:
            nulls.append({"key": field_id, "value": int(counts[path])})
    return lower or None, upper or None, nulls or None


def _partition_value(value: Any, iceberg_type: str) -> Any:
    if value is None:
        return None
    if iceberg_type in ("timestamp", "timestamptz"):
        return avro_encode.micros(value)
    return value


def _footer_rows(location: str) -> int:
    import pyarrow.parquet as pq

    try:
        filesystem, path = open_file(location)
        with filesystem.open_input_file(path) as handle:
            return pq.ParquetFile(handle).metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise DeltaSparkError(
            f"deltaspark: cannot read the row count of data file {location}: {exc}"
        ) from exc


def _dv_blob(dv: dict[str, Any], table_root: str, data_file: str) -> bytes:
    """The vector as an Iceberg `deletion-vector-v1` blob (Delta's own record layout), its bitmap
    decoded and checked first; inline and old native-format vectors are re-serialized."""
    where = dv_codec.describe(dv["storageType"], dv["pathOrInlineDv"], None)
    try:
        record = None
        if dv["storageType"] in ("u", "p"):
            if dv["storageType"] == "u":
                location = table_root.rstrip("/") + "/" + dv_codec.uuid_relative_path(dv["pathOrInlineDv"])
            else:
                location = unquote(dv["pathOrInlineDv"])
            where = dv_codec.describe(dv["storageType"], dv["pathOrInlineDv"], location)
            filesystem, path = open_file(location)
            with filesystem.open_input_file(path) as handle:
                handle.seek(dv.get("offset") or 0)
                record = handle.read(dv["sizeInBytes"] + 8)
        bitmap = dv_codec.decode_descriptor(
            dv["storageType"], dv["pathOrInlineDv"], dv.get("offset"), dv.get("sizeInBytes"),
            dv.get("cardinality"), record, where,
        )  # fmt: skip
    except Exception as exc:
        raise dv_codec.contextualize(exc, data_file, where) from exc
    return dv_codec.frame(struct.pack("<I", dv_codec.PORTABLE_MAGIC) + bitmap.serialize())


class _Summary:
    """A manifest's partition summaries, one per partition field."""

    def __init__(self, fields: list[tuple[str, int, str]]) -> None:
        self.fields = fields
        self.nulls = [False] * len(fields)
        self.nans = [False] * len(fields)
        self.low: list[Any] = [None] * len(fields)
        self.high: list[Any] = [None] * len(fields)

    def add(self, values: dict[str, Any]) -> None:
        for i, (name, _, _) in enumerate(self.fields):
            value = values.get(name)
            if value is None:
                self.nulls[i] = True
            elif isinstance(value, float) and math.isnan(value):
                self.nans[i] = True
            else:
                self.low[i] = value if self.low[i] is None or value < self.low[i] else self.low[i]
                self.high[i] = value if self.high[i] is None or value > self.high[i] else self.high[i]

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "contains_null": self.nulls[i],
                "contains_nan": self.nans[i],
                "lower_bound": avro_encode.to_bytes(self.low[i], t),
                "upper_bound": avro_encode.to_bytes(self.high[i], t),
            }
            for i, (_, _, t) in enumerate(self.fields)
        ]


def manifest_writer(
    table_root: str,
    metadata_dir: str,
    snapshot_id: int,
    format_version: int,
    partition: list[tuple[str, int, str]],
    columns: dict[tuple[str, ...], tuple[int, str]],
    header: dict[str, str],
    delete_header: dict[str, str],
    string_prefix: int,
    per_manifest: int = 100_000,
):  # noqa: ANN201 - a mapInArrow function
    """Input rows: `file_path` (absolute), `size`, `partition` (values by column name),
    `record_count`, `stats` (Delta's parsed statistics), `deletion_vector`, `base_row_id`; output:
    MANIFEST_ROW per manifest written. `columns` maps a stats path (logical names) to its field id
    and Iceberg type; `partition` lists (name, partition field id, type)."""
    schema = avro_encode.entry_schema(format_version, partition)
    types = {name: t for name, _, t in partition}

    def write(entries: list[dict[str, Any]], summary: _Summary, content: int, rows: int) -> dict[str, Any]:
        name = f"{uuid.uuid4()}-m{content}.avro"
        data = avro_encode.avro_bytes(schema, entries, header if content == 0 else delete_header)
        location = f"{metadata_dir}/{name}"
        filesystem, path = open_file(location)
        with filesystem.open_output_stream(path) as out:
            out.write(data)
        return {
            "manifest_path": location,
            "manifest_length": len(data),
            "content": content,
            "added_files_count": len(entries),
            "added_rows_count": rows,
            "data_bytes": sum(e["data_file"]["file_size_in_bytes"] for e in entries) if content == 0 else 0,
            "partitions": summary.rows() if partition else None,
        }

    def run(batches):  # noqa: ANN001, ANN202
        entries: list[dict[str, Any]] = []
        deletes: list[dict[str, Any]] = []
        summary, delete_summary = _Summary(partition), _Summary(partition)
        rows = deleted = 0
        puffin = bytearray(b"PFA1")
        blobs: list[dict[str, Any]] = []
        puffin_path = f"{metadata_dir}/{uuid.uuid4()}-deletion-vectors.puffin"
        out: list[dict[str, Any]] = []
        for batch in batches:
            for row in batch.to_pylist():
                values = row["partition"] or {}
                record_count = row["record_count"]
                if record_count is None:
                    record_count = _footer_rows(row["file_path"])
                lower, upper, nulls = _bounds(row["stats"], columns, string_prefix)
                partition_record = {name: _partition_value(values.get(name), types[name]) for name in types}
                data_file = {
                    "content": 0,
                    "file_path": row["file_path"],
                    "file_format": "PARQUET",
                    "partition": partition_record,
                    "record_count": record_count,
                    "file_size_in_bytes": row["size"],
                    "value_counts": None,
                    "null_value_counts": nulls,
                    "lower_bounds": lower,
                    "upper_bounds": upper,
                    "equality_ids": None,
                }
                if format_version >= 3:
                    data_file["first_row_id"] = row.get("base_row_id")
                entries.append({"status": 1, "snapshot_id": snapshot_id, "data_file": data_file})
                summary.add(values)
                rows += record_count
                dv = row.get("deletion_vector")
                if dv:
                    blob = _dv_blob(dv, table_root, row["file_path"])
                    offset = len(puffin)
                    puffin += blob
                    cardinality = int(dv["cardinality"])
                    blobs.append(
                        {
                            "type": "deletion-vector-v1",
                            "fields": [2147483645],
                            "snapshot-id": -1,  # the spec's value for vectors: not known when written
                            "sequence-number": -1,
                            "offset": offset,
                            "length": len(blob),
                            "properties": {
                                "referenced-data-file": row["file_path"],
                                "cardinality": str(cardinality),
                            },
                        }
                    )
                    deletes.append(
                        {
                            "status": 1,
                            "snapshot_id": snapshot_id,
                            "data_file": {
                                "content": 1,
                                "file_path": puffin_path,
                                "file_format": "PUFFIN",
                                "partition": partition_record,
                                "record_count": cardinality,
                                "file_size_in_bytes": 0,  # set when the Puffin file is complete
                                "value_counts": None,
                                "null_value_counts": None,
                                "lower_bounds": None,
                                "upper_bounds": None,
                                "equality_ids": None,
                                "first_row_id": None,
                                "referenced_data_file": row["file_path"],
                                "content_offset": offset,
                                "content_size_in_bytes": len(blob),
                            },
                        }
                    )
                    delete_summary.add(values)
                    deleted += cardinality
                if len(entries) >= per_manifest:
                    out.append(write(entries, summary, 0, rows))
                    entries, summary, rows = [], _Summary(partition), 0
        if entries:
            out.append(write(entries, summary, 0, rows))
        if deletes:
            footer = json.dumps({"blobs": blobs}).encode()
            puffin += b"PFA1" + footer + struct.pack("<ii", len(footer), 0) + b"PFA1"
            filesystem, path = open_file(puffin_path)
            with filesystem.open_output_stream(path) as stream:
                stream.write(bytes(puffin))
            for entry in deletes:
                entry["data_file"]["file_size_in_bytes"] = len(puffin)
            out.append(write(deletes, delete_summary, 1, deleted))
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=MANIFEST_ROW)

    return carry_settings(run)
