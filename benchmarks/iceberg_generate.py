"""A synthetic Iceberg table for the planning and count benchmark: metadata only, except the files a
count with deletes must open.

Snapshot 1 appends `files` data files (identity-partitioned on `part`, `partitions` values, column
bounds and counts for three columns) in manifests of `per_manifest` entries; snapshot 2 adds delete
files for every `delete_every`-th data file, each deleting `deleted_per_file` positions:

- format 2: position delete files (Parquet, `file_path` + `pos`), each covering `files_per_delete`
  data files; with `quirks`, some positions are listed twice (by two delete files) and some lie
  beyond the data file's `record_count` (they delete nothing);
- format 3: deletion vectors, `files_per_delete` blobs per Puffin file.

Data files that deletes apply to are written as real Parquet files (`pyiceberg`'s count reads them);
the others exist only in the manifests (`write_all_data` writes them too, for `toDF` checks on small
tables). Manifests are written with fastavro by two processes.

    python -m benchmarks.iceberg_generate /tmp/ice --files 1000000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import struct
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": False, "type": "long"},
        {"id": 2, "name": "part", "required": False, "type": "int"},
        {"id": 3, "name": "value", "required": False, "type": "double"},
        {"id": 4, "name": "name", "required": False, "type": "string"},
    ],
}
SPEC_FIELDS = [{"name": "part", "transform": "identity", "source-id": 2, "field-id": 1000}]
DATA_SNAPSHOT, DELETE_SNAPSHOT = 1001, 1002


@dataclass(frozen=True)
class IcebergSpec:
    files: int
    rows_per_file: int = 100
    partitions: int = 100
    per_manifest: int = 10_000
    delete_every: int = 1000  # every 1000th data file has deletes (0.1%)
    deleted_per_file: int = 10
    files_per_delete: int = 1  # data files per position delete file (1: file-scoped, as Iceberg 1.8+ writes)
    vectors_per_puffin: int = 100
    format_version: int = 2
    quirks: bool = False
    write_all_data: bool = False


@dataclass
class GeneratedIceberg:
    path: str
    metadata_location: str
    files: int  # live data files
    delete_files: int  # delete manifest entries: position delete files, or deletion vectors
    rows: int  # rows of the current snapshot, deletes applied
    rows_before_deletes: int  # rows of snapshot 1
    data_snapshot: int
    seconds: float
    metadata_bytes: int


def _fields(kv: str, key_id: int, value_id: int, value_type: str) -> dict[str, Any]:
    return {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": kv,
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value_type, "field-id": value_id},
            ],
        },
    }


def _entry_schema(format_version: int) -> dict[str, Any]:
    def opt(name: str, type_: Any, field_id: int) -> dict[str, Any]:
        return {"name": name, "type": ["null", type_], "default": None, "field-id": field_id}

    data_file = [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {
            "name": "partition",
            "type": {"type": "record", "name": "r102", "fields": [opt("part", "int", 1000)]},
            "field-id": 102,
        },
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        opt("value_counts", _fields("k119_v120", 119, 120, "long"), 109),
        opt("null_value_counts", _fields("k121_v122", 121, 122, "long"), 110),
        opt("lower_bounds", _fields("k126_v127", 126, 127, "bytes"), 125),
        opt("upper_bounds", _fields("k129_v130", 129, 130, "bytes"), 128),
        opt("equality_ids", {"type": "array", "items": "int", "element-id": 136}, 135),
    ]
    if format_version >= 3:
        data_file += [
            opt("first_row_id", "long", 142),
            opt("referenced_data_file", "string", 143),
            opt("content_offset", "long", 144),
            opt("content_size_in_bytes", "long", 145),
        ]
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            {"name": "status", "type": "int", "field-id": 0},
            opt("snapshot_id", "long", 1),
            opt("sequence_number", "long", 3),
            opt("file_sequence_number", "long", 4),
            {
                "name": "data_file",
                "type": {"type": "record", "name": "r2", "fields": data_file},
                "field-id": 2,
            },
        ],
    }


MANIFEST_LIST_SCHEMA = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
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
        {
            "name": "partitions",
            "type": [
                "null",
                {
                    "type": "array",
                    "element-id": 508,
                    "items": {
                        "type": "record",
                        "name": "r508",
                        "fields": [
                            {"name": "contains_null", "type": "boolean", "field-id": 509},
                            {
                                "name": "contains_nan",
                                "type": ["null", "boolean"],
                                "default": None,
                                "field-id": 518,
                            },
                            {
                                "name": "lower_bound",
                                "type": ["null", "bytes"],
                                "default": None,
                                "field-id": 510,
                            },
                            {
                                "name": "upper_bound",
                                "type": ["null", "bytes"],
                                "default": None,
                                "field-id": 511,
                            },
                        ],
                    },
                },
            ],
            "default": None,
            "field-id": 507,
        },
    ],
}


def _manifest_list_schema(format_version: int) -> dict[str, Any]:
    if format_version < 3:
        return MANIFEST_LIST_SCHEMA
    first_row_id = {"name": "first_row_id", "type": ["null", "long"], "default": None, "field-id": 520}
    return MANIFEST_LIST_SCHEMA | {"fields": MANIFEST_LIST_SCHEMA["fields"] + [first_row_id]}


def data_path(root: str, spec: IcebergSpec, i: int) -> str:
    return f"{root}/data/part={i % spec.partitions}/{i:010d}.parquet"


def _deleted_positions(spec: IcebergSpec, i: int) -> list[int]:
    """The positions deleted in data file `i` (every 7th row from i % 7), distinct, in range."""
    step = max(1, spec.rows_per_file // spec.deleted_per_file)
    return [(i % 7 + k * step) % spec.rows_per_file for k in range(spec.deleted_per_file)][
        : spec.rows_per_file
    ]


def _with_deletes(spec: IcebergSpec) -> list[int]:
    """The data files that get deletes: one in every `delete_every`, spread over the partitions."""
    if not spec.delete_every:
        return []
    picked = (k * spec.delete_every + k % spec.partitions for k in range(spec.files // spec.delete_every))
    return [i for i in picked if i < spec.files]


def _groups(spec: IcebergSpec, targets: list[int], size: int) -> list[list[int]]:
    """Targets per delete file, `size` each: a position delete file (or Puffin file) covers one
    partition."""
    by_part: dict[int, list[int]] = {}
    for i in targets:
        by_part.setdefault(i % spec.partitions, []).append(i)
    return [files[k : k + size] for _, files in sorted(by_part.items()) for k in range(0, len(files), size)]


def _data_entry(root: str, spec: IcebergSpec, i: int) -> dict[str, Any]:
    rows = spec.rows_per_file
    low, high = i * rows, i * rows + rows - 1
    return {
        "status": 1,
        "snapshot_id": None,
        "sequence_number": None,
        "file_sequence_number": None,
        "data_file": {
            "content": 0,
            "file_path": data_path(root, spec, i),
            "file_format": "PARQUET",
            "partition": {"part": i % spec.partitions},
            "record_count": rows,
            # real sizes when every data file exists (written before the manifests), else a stand-in
            "file_size_in_bytes": os.path.getsize(data_path(root, spec, i).removeprefix("file:"))
            if spec.write_all_data
            else 4096,
            "value_counts": [{"key": k, "value": rows} for k in (1, 3, 4)],
            "null_value_counts": [{"key": k, "value": 0} for k in (1, 3, 4)],
            "lower_bounds": [
                {"key": 1, "value": struct.pack("<q", low)},
                {"key": 3, "value": struct.pack("<d", 0.0)},
                {"key": 4, "value": b"a%d" % low},
            ],
            "upper_bounds": [
                {"key": 1, "value": struct.pack("<q", high)},
                {"key": 3, "value": struct.pack("<d", 1.0)},
                {"key": 4, "value": b"z%d" % high},
            ],
            "equality_ids": None,
        },
    }


def _write_avro(path: Path, schema: dict[str, Any], records: Any, meta: dict[str, str]) -> int:
    import fastavro

    with open(path, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), records, codec="deflate", metadata=meta)
    return path.stat().st_size


def _manifest_meta(content: str, format_version: int) -> dict[str, str]:
    return {
        "schema": json.dumps(SCHEMA),
        "schema-id": "0",
        "partition-spec": json.dumps(SPEC_FIELDS),
        "partition-spec-id": "0",
        "format-version": str(format_version),
        "content": content,
    }


def _data_manifest(job: tuple[str, IcebergSpec, int, int, int]) -> dict[str, Any]:
    """Write data manifest `n` (files start..end-1); returns its manifest-list row."""
    root, spec, n, start, end = job
    path = Path(root) / "metadata" / f"data-m{n:05d}.avro"
    entries = (_data_entry(root, spec, i) for i in range(start, end))
    size = _write_avro(
        path, _entry_schema(spec.format_version), entries, _manifest_meta("data", spec.format_version)
    )
    parts = sorted({i % spec.partitions for i in range(start, min(end, start + spec.partitions))})
    row = _list_row(
        str(path), size, 0, 1, DATA_SNAPSHOT, end - start, (end - start) * spec.rows_per_file, parts
    )
    if spec.format_version >= 3:
        row["first_row_id"] = start * spec.rows_per_file
    return row


def _list_row(
    path: str, size: int, content: int, seq: int, snapshot: int, files: int, rows: int, parts: list[int]
) -> dict[str, Any]:
    return {
        "manifest_path": path,
        "manifest_length": size,
        "partition_spec_id": 0,
        "content": content,
        "sequence_number": seq,
        "min_sequence_number": seq,
        "added_snapshot_id": snapshot,
        "added_files_count": files,
        "existing_files_count": 0,
        "deleted_files_count": 0,
        "added_rows_count": rows,
        "existing_rows_count": 0,
        "deleted_rows_count": 0,
        "partitions": [
            {
                "contains_null": False,
                "contains_nan": False,
                "lower_bound": struct.pack("<i", min(parts)),
                "upper_bound": struct.pack("<i", max(parts)),
            }
        ]
        if parts
        else None,
    }


def _write_data_file(path: str, first_id: int, rows: int, part: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def field(name: str, type_: Any, fid: int) -> pa.Field:
        return pa.field(name, type_, metadata={"PARQUET:field_id": str(fid)})

    schema = pa.schema(
        [
            field("id", pa.int64(), 1),
            field("part", pa.int32(), 2),
            field("value", pa.float64(), 3),
            field("name", pa.string(), 4),
        ]
    )
    ids = list(range(first_id, first_id + rows))
    table = pa.table(
        [ids, [part] * rows, [k / rows for k in range(rows)], [f"n{k}" for k in ids]], schema=schema
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _position_delete_files(
    root: str, spec: IcebergSpec, targets: list[int]
) -> list[tuple[str, int, int, tuple[str, str]]]:
    """Write the position delete files; returns (path, partition, rows, file_path bounds) for each
    (engines match a delete file to data files by those bounds)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, metadata={"PARQUET:field_id": "2147483546"}),
            pa.field("pos", pa.int64(), False, metadata={"PARQUET:field_id": "2147483545"}),
        ]
    )
    out = []
    groups = _groups(spec, targets, spec.files_per_delete)
    for g, group in enumerate(groups):
        paths, positions = [], []
        for i in group:
            listed = _deleted_positions(spec, i)
            if spec.quirks and i % 2 == 0:
                listed = sorted(set(listed) | {spec.rows_per_file + 5})  # beyond the file: deletes nothing
            paths += [data_path(root, spec, i)] * len(listed)
            positions += listed
        previous = groups[g - 1][0] if g else None
        if spec.quirks and previous is not None and previous % spec.partitions == group[0] % spec.partitions:
            i = previous  # listed by the previous delete file of this partition too: its positions twice
            again = _deleted_positions(spec, i)[:3]
            paths = [data_path(root, spec, i)] * len(again) + paths
            positions = again + positions
        order = sorted(range(len(paths)), key=lambda k: (paths[k], positions[k]))
        table = pa.table([[paths[k] for k in order], [positions[k] for k in order]], schema=schema)
        path = f"{root}/data/deletes/pos-{g:06d}.parquet"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        listed = table.column("file_path")
        bounds = (listed[0].as_py(), listed[-1].as_py())
        out.append((path, group[0] % spec.partitions, table.num_rows, bounds))
    return out


def _deletion_vector_files(root: str, spec: IcebergSpec, targets: list[int]) -> list[dict[str, Any]]:
    """Puffin files of deletion vectors; returns one manifest data_file record per vector."""
    from deltaspark.features import dv_codec

    records = []
    for g, group in enumerate(_groups(spec, targets, spec.vectors_per_puffin)):
        path = f"{root}/data/deletes/dv-{g:06d}.puffin"
        body, blobs = bytearray(b"PFA1"), []
        for i in group:
            positions = _deleted_positions(spec, i)
            if spec.quirks and i % 2 == 0:
                positions = sorted(set(positions) | {spec.rows_per_file + 5})
            blob = dv_codec.frame(dv_codec.encode_bitmap(positions))
            offset = len(body)
            body += blob
            blobs.append(
                {
                    "type": "deletion-vector-v1",
                    "fields": [2147483645],
                    "snapshot-id": DELETE_SNAPSHOT,
                    "sequence-number": 2,
                    "offset": offset,
                    "length": len(blob),
                    "properties": {
                        "referenced-data-file": data_path(root, spec, i),
                        "cardinality": str(len(positions)),
                    },
                }
            )
            records.append(
                {
                    "file_path": path,
                    "referenced_data_file": data_path(root, spec, i),
                    "content_offset": offset,
                    "content_size_in_bytes": len(blob),
                    "record_count": len(positions),
                    "partition": {"part": i % spec.partitions},
                }
            )
        footer = json.dumps({"blobs": blobs}).encode()
        body += b"PFA1" + footer + struct.pack("<ii", len(footer), 0) + b"PFA1"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(bytes(body))
    return records


def _delete_manifest(root: str, spec: IcebergSpec, targets: list[int]) -> tuple[dict[str, Any], int, int]:
    """Write the delete files and their manifest; returns its list row, delete files and rows deleted."""

    def entry(data_file: dict[str, Any]) -> dict[str, Any]:
        base = {
            "content": 1,
            "file_format": "PARQUET",
            "file_size_in_bytes": 1024,
            "value_counts": None,
            "null_value_counts": None,
            "lower_bounds": None,
            "upper_bounds": None,
            "equality_ids": None,
        }
        return {
            "status": 1,
            "snapshot_id": None,
            "sequence_number": None,
            "file_sequence_number": None,
            "data_file": base | data_file,
        }

    deleted = 0
    for i in targets:
        deleted += len(_deleted_positions(spec, i))
    if spec.format_version >= 3:
        vectors = _deletion_vector_files(root, spec, targets)
        entries = [entry(v | {"file_format": "PUFFIN"}) for v in vectors]
    else:
        files = _position_delete_files(root, spec, targets)
        entries = [
            entry(
                {
                    "file_path": p,
                    "record_count": n,
                    "partition": {"part": part},
                    "lower_bounds": [{"key": 2147483546, "value": low.encode()}],
                    "upper_bounds": [{"key": 2147483546, "value": high.encode()}],
                }
            )
            for p, part, n, (low, high) in files
        ]
    parts = sorted({e["data_file"]["partition"]["part"] for e in entries})
    path = Path(root) / "metadata" / "deletes-m00000.avro"
    size = _write_avro(
        path, _entry_schema(spec.format_version), entries, _manifest_meta("deletes", spec.format_version)
    )
    rows = sum(e["data_file"]["record_count"] for e in entries)
    row = _list_row(str(path), size, 1, 2, DELETE_SNAPSHOT, len(entries), rows, parts)
    return row, len(entries), deleted


def generate_iceberg(root: str | Path, spec: IcebergSpec) -> GeneratedIceberg:
    start = time.perf_counter()
    root = str(Path(root).resolve())
    meta_dir = Path(root) / "metadata"
    meta_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        (root, spec, n, s, min(s + spec.per_manifest, spec.files))
        for n, s in enumerate(range(0, spec.files, spec.per_manifest))
    ]
    targets = _with_deletes(spec)
    written = range(spec.files) if spec.write_all_data else targets
    for i in written:
        _write_data_file(
            data_path(root, spec, i), i * spec.rows_per_file, spec.rows_per_file, i % spec.partitions
        )
    with multiprocessing.get_context("fork").Pool(2) as pool:
        data_rows = pool.map(_data_manifest, jobs, chunksize=1)
    delete_rows: list[dict[str, Any]] = []
    delete_files = deleted = 0
    if targets:
        row, delete_files, deleted = _delete_manifest(root, spec, targets)
        delete_rows = [row]
    lists = {}
    for snapshot, rows in ((DATA_SNAPSHOT, data_rows), (DELETE_SNAPSHOT, data_rows + delete_rows)):
        path = meta_dir / f"snap-{snapshot}-1-{uuid.uuid4()}.avro"
        meta = {
            "snapshot-id": str(snapshot),
            "sequence-number": str(snapshot - 1000),
            "format-version": str(spec.format_version),
        }
        if snapshot == DELETE_SNAPSHOT:
            meta["parent-snapshot-id"] = str(DATA_SNAPSHOT)
        _write_avro(path, _manifest_list_schema(spec.format_version), rows, meta)
        lists[snapshot] = str(path)
    total = spec.files * spec.rows_per_file
    now = int(time.time() * 1000)
    snapshots = [
        {
            "snapshot-id": DATA_SNAPSHOT,
            "sequence-number": 1,
            "timestamp-ms": now - 1000,
            "manifest-list": lists[DATA_SNAPSHOT],
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
        {
            "snapshot-id": DELETE_SNAPSHOT,
            "parent-snapshot-id": DATA_SNAPSHOT,
            "sequence-number": 2,
            "timestamp-ms": now,
            "manifest-list": lists[DELETE_SNAPSHOT],
            "summary": {"operation": "delete"},
            "schema-id": 0,
        },
    ]
    if spec.format_version >= 3:
        snapshots[0] |= {"first-row-id": 0, "added-rows": total}
        snapshots[1] |= {"first-row-id": total, "added-rows": 0}
    metadata = {
        "format-version": spec.format_version,
        "table-uuid": str(uuid.uuid4()),
        "location": root,
        "last-sequence-number": 2,
        "last-updated-ms": now,
        "last-column-id": 4,
        "current-schema-id": 0,
        "schemas": [SCHEMA],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": SPEC_FIELDS}],
        "last-partition-id": 1000,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": DELETE_SNAPSHOT,
        "refs": {"main": {"snapshot-id": DELETE_SNAPSHOT, "type": "branch"}},
        "snapshots": snapshots,
        "snapshot-log": [
            {"timestamp-ms": s["timestamp-ms"], "snapshot-id": s["snapshot-id"]} for s in snapshots
        ],
        "metadata-log": [],
    }
    if spec.format_version >= 3:
        metadata["next-row-id"] = total
    location = meta_dir / "v1.metadata.json"
    location.write_text(json.dumps(metadata))
    (meta_dir / "version-hint.text").write_text("1")
    size = sum(p.stat().st_size for p in meta_dir.iterdir())
    return GeneratedIceberg(
        path=root,
        metadata_location=str(location),
        files=spec.files,
        delete_files=delete_files,
        rows=total - deleted,
        rows_before_deletes=total,
        data_snapshot=DATA_SNAPSHOT,
        seconds=round(time.perf_counter() - start, 1),
        metadata_bytes=size,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path")
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--format-version", type=int, default=2, choices=[2, 3])
    parser.add_argument("--delete-every", type=int, default=1000)
    parser.add_argument("--quirks", action="store_true")
    parser.add_argument("--write-all-data", action="store_true")
    args = parser.parse_args(argv)
    spec = IcebergSpec(
        files=args.files,
        format_version=args.format_version,
        delete_every=args.delete_every,
        quirks=args.quirks,
        write_all_data=args.write_all_data,
    )
    print(json.dumps(asdict(generate_iceberg(args.path, spec)), indent=2))


if __name__ == "__main__":
    main()
