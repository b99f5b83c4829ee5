"""Executor-side decoding of Iceberg manifest lists and manifests (Avro, read with fastavro).

Runs inside `mapInArrow` tasks; every function here returns the task function. Inheritance is
applied as the spec says (and as Iceberg's Java reader does): a null `snapshot_id` takes the
manifest's `added_snapshot_id`; null data and file sequence numbers take the manifest's sequence
number when the entry is ADDED or the manifest's sequence number is 0 (v1 manifests); a data file's
null `first_row_id` takes the manifest's `first_row_id` plus the record counts of the files before
it in the manifest that also had none. Paths are relocated here, so everything downstream sees
where the files are now. Partition tuples become canonical JSON keyed by partition field id, so
that two engines' encodings of one partition compare equal.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
from typing import Any

import pyarrow as pa

from deltaspark.file_io import carry_settings
from deltaspark.iceberg.relocation import PathMap
from deltaspark.iceberg.types import to_json

MANIFEST_FIELDS = [
    ("manifest_path", pa.string()),
    ("manifest_length", pa.int64()),
    ("partition_spec_id", pa.int32()),
    ("content", pa.int32()),
    ("sequence_number", pa.int64()),
    ("min_sequence_number", pa.int64()),
    ("added_snapshot_id", pa.int64()),
    ("added_files_count", pa.int32()),
    ("existing_files_count", pa.int32()),
    ("deleted_files_count", pa.int32()),
    ("added_rows_count", pa.int64()),
    ("existing_rows_count", pa.int64()),
    ("deleted_rows_count", pa.int64()),
    ("first_row_id", pa.int64()),
    ("has_key_metadata", pa.bool_()),
    (
        "partitions",  # per partition field of the manifest's spec: summaries of its values
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
_INT_LONG = pa.map_(pa.int32(), pa.int64())
_INT_BIN = pa.map_(pa.int32(), pa.binary())
ENTRY_FIELDS = [
    ("status", pa.int32()),
    ("snapshot_id", pa.int64()),
    ("sequence_number", pa.int64()),
    ("file_sequence_number", pa.int64()),
    ("content", pa.int32()),
    ("file_path", pa.string()),
    ("file_format", pa.string()),
    ("spec_id", pa.int32()),
    ("partition", pa.string()),
    ("record_count", pa.int64()),
    ("file_size_in_bytes", pa.int64()),
    ("column_sizes", _INT_LONG),
    ("value_counts", _INT_LONG),
    ("null_value_counts", _INT_LONG),
    ("nan_value_counts", _INT_LONG),
    ("lower_bounds", _INT_BIN),
    ("upper_bounds", _INT_BIN),
    ("split_offsets", pa.list_(pa.int64())),
    ("equality_ids", pa.list_(pa.int32())),
    ("sort_order_id", pa.int32()),
    ("first_row_id", pa.int64()),
    ("referenced_data_file", pa.string()),
    ("content_offset", pa.int64()),
    ("content_size_in_bytes", pa.int64()),
    ("manifest_path", pa.string()),
]
MANIFEST_SCHEMA = pa.schema(MANIFEST_FIELDS)
ENTRY_SCHEMA = pa.schema(ENTRY_FIELDS)


class ManifestDecodeError(Exception):
    """Raised on executors; the message starts with `deltaspark:` and names the file."""


def _open_avro(path: str) -> Any:
    import fastavro

    from deltaspark.file_io import open_file

    try:
        filesystem, local = open_file(path)
        with filesystem.open_input_stream(local) as handle:
            data = handle.read()
    except FileNotFoundError as exc:
        raise ManifestDecodeError(f"deltaspark: missing Iceberg metadata file {path}: {exc}") from exc
    except OSError as exc:
        raise ManifestDecodeError(f"deltaspark: cannot read Iceberg metadata file {path}: {exc}") from exc
    try:
        return fastavro.reader(io.BytesIO(data))
    except Exception as exc:  # fastavro raises ValueError / SchemaParseException / EOFError
        raise ManifestDecodeError(f"deltaspark: corrupt Iceberg Avro file {path}: {exc}") from exc


def _records(path: str, reader: Any):  # noqa: ANN202
    try:
        yield from reader
    except Exception as exc:
        raise ManifestDecodeError(f"deltaspark: corrupt Iceberg Avro file {path}: {exc}") from exc


def manifest_list_decoder(paths: PathMap):  # noqa: ANN201 - a mapInArrow function
    """Input rows: `manifest_list` (a path); output: one row per manifest (MANIFEST_SCHEMA)."""

    def decode(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            for row in batch.to_pylist():
                location = paths.apply(row["manifest_list"])
                out = []
                for m in _records(location, _open_avro(location)):
                    out.append(
                        {
                            "manifest_path": paths.apply(m["manifest_path"]),
                            "manifest_length": m.get("manifest_length"),
                            "partition_spec_id": m.get("partition_spec_id"),
                            "content": m.get("content") or 0,
                            "sequence_number": m.get("sequence_number") or 0,
                            "min_sequence_number": m.get("min_sequence_number") or 0,
                            "added_snapshot_id": m.get("added_snapshot_id"),
                            "added_files_count": m.get("added_files_count", m.get("added_data_files_count")),
                            "existing_files_count": m.get(
                                "existing_files_count", m.get("existing_data_files_count")
                            ),
                            "deleted_files_count": m.get(
                                "deleted_files_count", m.get("deleted_data_files_count")
                            ),
                            "added_rows_count": m.get("added_rows_count"),
                            "existing_rows_count": m.get("existing_rows_count"),
                            "deleted_rows_count": m.get("deleted_rows_count"),
                            "first_row_id": m.get("first_row_id"),
                            "has_key_metadata": m.get("key_metadata") is not None,
                            "partitions": _summaries(m.get("partitions")),
                        }
                    )
                if out:
                    yield pa.RecordBatch.from_pylist(out, schema=MANIFEST_SCHEMA)

    return carry_settings(decode)


def _summaries(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    keys = ("contains_null", "contains_nan", "lower_bound", "upper_bound")
    return [{k: (s or {}).get(k) for k in keys} for s in value]


def _pairs(value: Any) -> list[tuple[int, Any]] | None:
    """Iceberg's int-keyed maps are Avro arrays of key/value records (fastavro: list of dicts)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return [(int(k), v) for k, v in value.items()]
    return [(int(kv["key"]), kv["value"]) for kv in value]


def _partition_ids(reader: Any) -> dict[str, int]:
    """Partition field name -> field id, from the manifest's own Avro schema."""
    for f in reader.writer_schema["fields"]:
        if f["name"] != "data_file":
            continue
        data_file = f["type"]
        for g in data_file["fields"]:
            if g["name"] == "partition":
                record = g["type"]
                if isinstance(record, list):
                    record = next(t for t in record if isinstance(t, dict))
                return {p["name"]: int(p["field-id"]) for p in record.get("fields", []) if "field-id" in p}
    return {}


def _partition_encoder(ids: dict[str, int], spec: list[list[Any]]):  # noqa: ANN202
    """A function from a manifest entry's partition record to `{"<partition field id>": <JSON single
    value>}` with sorted keys; one per manifest (its Avro names and spec), remembering the tuples it
    has seen: a manifest's files share few partitions."""
    by_id = {int(field_id): result_type for field_id, _, result_type in spec}
    by_name = {name: int(field_id) for field_id, name, _ in spec}
    seen: dict[tuple[Any, ...], str] = {}

    def canonical(values: dict[str, Any] | None) -> str:
        out: dict[str, Any] = {}
        for position, (name, value) in enumerate((values or {}).items()):
            field_id = ids.get(name) or by_name.get(name)
            if field_id is None and position < len(spec):
                field_id = int(spec[position][0])
            out[str(field_id)] = to_json(value, by_id.get(field_id))
        return json.dumps(out, sort_keys=True, separators=(",", ":"))

    def encode(values: dict[str, Any] | None) -> str:
        key = tuple((values or {}).items())
        try:
            return seen[key]
        except KeyError:
            text = canonical(values)
            if len(seen) < 65536:
                seen[key] = text
            return text
        except TypeError:  # an unhashable value
            return canonical(values)

    return encode


@contextlib.contextmanager
def _no_cyclic_gc():  # noqa: ANN202
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def manifest_decoder(paths: PathMap, specs: dict[int, list[list[Any]]]):  # noqa: ANN201 - mapInArrow
    """Input rows: manifests (MANIFEST_SCHEMA); output: their entries with inheritance applied.

    `specs` maps spec id to `[field id, name, result type]` of each partition field."""

    def decode(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            for manifest in batch.to_pylist():
                with _no_cyclic_gc():  # millions of small acyclic dicts: collection is pure cost (~30%)
                    rows = list(_entries(manifest, paths, specs))
                for start in range(0, len(rows), 8192):
                    yield pa.RecordBatch.from_pylist(rows[start : start + 8192], schema=ENTRY_SCHEMA)

    return carry_settings(decode)


def _entries(manifest: dict[str, Any], paths: PathMap, specs: dict[int, list[list[Any]]]):  # noqa: ANN202
    location = manifest["manifest_path"]
    if manifest.get("has_key_metadata"):
        raise ManifestDecodeError(f"deltaspark: encrypted Iceberg manifest {location} is not supported")
    reader = _open_avro(location)
    spec_id = manifest.get("partition_spec_id")
    if spec_id is None:
        spec_id = int(reader.metadata.get("partition-spec-id", 0))
    spec = specs.get(int(spec_id))
    if spec is None:
        raise ManifestDecodeError(
            f"deltaspark: Iceberg manifest {location} uses partition spec {spec_id}, which the table "
            "metadata does not define"
        )
    partition_of = _partition_encoder(_partition_ids(reader), spec)
    manifest_seq = manifest.get("sequence_number") or 0
    next_row_id = manifest.get("first_row_id")
    for entry in _records(location, reader):
        data = entry["data_file"]
        status = entry["status"]
        inherit = status == 1 or manifest_seq == 0
        seq = entry.get("sequence_number")
        file_seq = entry.get("file_sequence_number")
        if seq is None and inherit:
            seq = manifest_seq
        if file_seq is None and inherit:
            file_seq = manifest_seq
        content = data.get("content") or 0
        first_row_id = data.get("first_row_id")
        if content == 0 and first_row_id is None and next_row_id is not None:
            first_row_id = next_row_id
            next_row_id += data["record_count"]
        if data.get("key_metadata") is not None:
            raise ManifestDecodeError(
                f"deltaspark: Iceberg file {data['file_path']} (manifest {location}) is encrypted, "
                "which is not supported"
            )
        yield {
            "status": status,
            "snapshot_id": entry.get("snapshot_id")
            if entry.get("snapshot_id") is not None
            else manifest.get("added_snapshot_id"),
            "sequence_number": seq,
            "file_sequence_number": file_seq,
            "content": content,
            "file_path": paths.apply(data["file_path"]),
            "file_format": str(data["file_format"]).upper(),
            "spec_id": int(spec_id),
            "partition": partition_of(data.get("partition")),
            "record_count": data["record_count"],
            "file_size_in_bytes": data["file_size_in_bytes"],
            "column_sizes": _pairs(data.get("column_sizes")),
            "value_counts": _pairs(data.get("value_counts")),
            "null_value_counts": _pairs(data.get("null_value_counts")),
            "nan_value_counts": _pairs(data.get("nan_value_counts")),
            "lower_bounds": _pairs(data.get("lower_bounds")),
            "upper_bounds": _pairs(data.get("upper_bounds")),
            "split_offsets": data.get("split_offsets"),
            "equality_ids": data.get("equality_ids"),
            "sort_order_id": data.get("sort_order_id"),
            "first_row_id": first_row_id if content == 0 else None,
            "referenced_data_file": paths.apply(data.get("referenced_data_file")),
            "content_offset": data.get("content_offset"),
            "content_size_in_bytes": data.get("content_size_in_bytes"),
            "manifest_path": location,
        }
