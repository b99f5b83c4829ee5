"""Rewriting a manifest without some of its files, on the executors (a `mapInArrow`).

An incremental conversion keeps every manifest whose files are all still live and rewrites only
those naming a file that changed: each live entry is copied as EXISTING, with its snapshot id and
sequence numbers made explicit (an EXISTING entry inherits nothing, as the spec requires), and each
entry naming a dropped file is copied once as DELETED in the new snapshot, so Iceberg's changelog
sees the removal. DELETED entries of earlier snapshots are not carried. A delete file is dropped
with the data file it references. The manifest's own Avro schema and header are kept, so entries
written by any earlier conversion round-trip unchanged.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pyarrow as pa

from deltaspark.file_io import carry_settings, open_file
from deltaspark.iceberg.avro_decode import _open_avro, _records

EXISTING, DELETED = 0, 2

REWRITTEN_ROW = pa.schema(
    [
        ("old_path", pa.string()),
        ("manifest_path", pa.string()),
        ("manifest_length", pa.int64()),
        ("existing_files_count", pa.int32()),
        ("existing_rows_count", pa.int64()),
        ("deleted_files_count", pa.int32()),
        ("deleted_rows_count", pa.int64()),
        ("min_sequence_number", pa.int64()),
        ("bytes_before", pa.int64()),  # sizes of the data files live before the rewrite
        ("bytes_after", pa.int64()),  # and after it
    ]
)


def _key(data_file: dict[str, Any]) -> str | None:
    """The data file an entry is about: its own path, or the one a deletion vector references."""
    if (data_file.get("content") or 0) == 0:
        return data_file["file_path"]
    return data_file.get("referenced_data_file")


def rewrite(row: dict[str, Any], snapshot_id: int, metadata_dir: str) -> dict[str, Any]:
    """`row`: `manifest_path`, `sequence_number`, `added_snapshot_id`, `drop` (paths)."""
    location = row["manifest_path"]
    reader = _open_avro(location)
    drop = set(row["drop"] or ())
    manifest_sequence = row["sequence_number"]
    out: list[dict[str, Any]] = []
    existing = deleted = existing_rows = deleted_rows = bytes_before = bytes_after = 0
    min_sequence: int | None = None
    for entry in _records(location, reader):
        if entry["status"] == DELETED:
            continue
        data_file = entry["data_file"]
        sequence = entry.get("sequence_number")
        file_sequence = entry.get("file_sequence_number")
        copied = {
            **entry,
            "sequence_number": manifest_sequence if sequence is None else sequence,
            "file_sequence_number": manifest_sequence if file_sequence is None else file_sequence,
        }
        size = data_file["file_size_in_bytes"] if (data_file.get("content") or 0) == 0 else 0
        bytes_before += size
        if _key(data_file) in drop:
            copied.update(status=DELETED, snapshot_id=snapshot_id)
            deleted += 1
            deleted_rows += data_file["record_count"]
        else:
            inherited = entry.get("snapshot_id")
            copied.update(
                status=EXISTING, snapshot_id=row["added_snapshot_id"] if inherited is None else inherited
            )
            existing += 1
            existing_rows += data_file["record_count"]
            bytes_after += size
            seq = copied["sequence_number"]
            min_sequence = seq if min_sequence is None else min(min_sequence, seq)
        out.append(copied)

    import fastavro

    header = {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}
    buffer = io.BytesIO()
    fastavro.writer(
        buffer, fastavro.parse_schema(reader.writer_schema), out, codec="deflate", metadata=header
    )
    data = buffer.getvalue()
    target = f"{metadata_dir}/{uuid.uuid4()}-r.avro"
    filesystem, path = open_file(target)
    with filesystem.open_output_stream(path) as stream:
        stream.write(data)
    return {
        "old_path": location,
        "manifest_path": target,
        "manifest_length": len(data),
        "existing_files_count": existing,
        "existing_rows_count": existing_rows,
        "deleted_files_count": deleted,
        "deleted_rows_count": deleted_rows,
        "min_sequence_number": min_sequence,
        "bytes_before": bytes_before,
        "bytes_after": bytes_after,
    }


def manifest_rewriter(snapshot_id: int, metadata_dir: str):  # noqa: ANN201 - a mapInArrow function
    """Input rows: `manifest_path`, `sequence_number`, `added_snapshot_id`, `drop`; output: one
    REWRITTEN_ROW per manifest."""

    def run(batches):  # noqa: ANN001, ANN202
        out = [rewrite(row, snapshot_id, metadata_dir) for batch in batches for row in batch.to_pylist()]
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=REWRITTEN_ROW)

    return carry_settings(run)
