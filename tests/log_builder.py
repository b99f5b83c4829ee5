"""Hand-built Delta logs for tests, written with plain Python and pyarrow (never with deltaspark).

Each helper produces exactly the bytes a test asks for, including logs that break the protocol
on purpose, so every reconciliation and error rule can be exercised in isolation.
"""

from __future__ import annotations

import json
import os
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SIMPLE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def protocol(reader: int = 1, writer: int = 2, reader_features=None, writer_features=None) -> dict:
    p: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader_features is not None:
        p["readerFeatures"] = list(reader_features)
    if writer_features is not None:
        p["writerFeatures"] = list(writer_features)
    return {"protocol": p}


def metadata(
    schema: dict | None = None,
    partition_columns: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    table_id: str = "11111111-2222-3333-4444-555555555555",
) -> dict:
    return {
        "metaData": {
            "id": table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema or SIMPLE_SCHEMA),
            "partitionColumns": partition_columns or [],
            "configuration": configuration or {},
            "createdTime": 1_700_000_000_000,
        }
    }


def add(
    path: str, size: int = 100, partition_values=None, dv: dict | None = None, stats=None, **extra
) -> dict:
    a: dict[str, Any] = {
        "path": path,
        "partitionValues": partition_values or {},
        "size": size,
        "modificationTime": 1_700_000_000_000,
        "dataChange": True,
    }
    if stats is not None:
        a["stats"] = stats if isinstance(stats, str) else json.dumps(stats)
    if dv is not None:
        a["deletionVector"] = dv
    a.update(extra)
    return {"add": a}


def remove(path: str, deletion_timestamp: int | None = None, dv: dict | None = None, **extra) -> dict:
    r: dict[str, Any] = {"path": path, "dataChange": True}
    if deletion_timestamp is not None:
        r["deletionTimestamp"] = deletion_timestamp
    if dv is not None:
        r["deletionVector"] = dv
    r.update(extra)
    return {"remove": r}


def txn(app_id: str, version: int, last_updated: int | None = None) -> dict:
    t: dict[str, Any] = {"appId": app_id, "version": version}
    if last_updated is not None:
        t["lastUpdated"] = last_updated
    return {"txn": t}


def domain(name: str, configuration: str, removed: bool = False) -> dict:
    return {"domainMetadata": {"domain": name, "configuration": configuration, "removed": removed}}


def commit_info(**fields) -> dict:
    return {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE", **fields}}


def dv(unique: str, storage_type: str = "u", offset: int | None = 1, cardinality: int = 1) -> dict:
    d: dict[str, Any] = {
        "storageType": storage_type,
        "pathOrInlineDv": unique,
        "sizeInBytes": 34,
        "cardinality": cardinality,
    }
    if offset is not None:
        d["offset"] = offset
    return d


# ---- an independent pyarrow schema of checkpoint files -------------------------------------------
_STR_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
CHECKPOINT_ARROW_SCHEMA = pa.schema(
    [
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("format", pa.struct([("provider", pa.string()), ("options", _STR_MAP)])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("createdTime", pa.int64()),
                    ("configuration", _STR_MAP),
                ]
            ),
        ),
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _STR_MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("deletionVector", _DV),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("deletionVector", _DV),
                ]
            ),
        ),
        (
            "domainMetadata",
            pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
        ),
        ("checkpointMetadata", pa.struct([("version", pa.int64())])),
        (
            "sidecar",
            pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64())]),
        ),
    ]
)


def _arrow_rows(actions: list[dict], schema: pa.Schema) -> pa.Table:
    rows = []
    for action in actions:
        ((kind, body),) = action.items()
        row = {name: None for name in schema.names}
        body = dict(body)
        if kind == "add" or kind == "metaData" or kind == "remove":
            for key in ("partitionValues", "configuration"):
                if key in body and isinstance(body[key], dict):
                    body[key] = list(body[key].items())
            if kind == "metaData":
                body["format"] = {"provider": body["format"]["provider"], "options": []}
        row[kind] = body
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


class LogBuilder:
    """Writes `_delta_log` files of a table directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log = self.root / "_delta_log"
        self.log.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> str:
        return str(self.root)

    def _touch(self, path: Path, mtime_ms: int | None) -> None:
        if mtime_ms is not None:
            os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))

    def raw(self, name: str, text: str | bytes, mtime_ms: int | None = None) -> Path:
        path = self.log / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        self._touch(path, mtime_ms)
        return path

    def commit(self, version: int, *actions: dict, mtime_ms: int | None = None) -> Path:
        text = "".join(json.dumps(a) + "\n" for a in actions)
        return self.raw(f"{version:020d}.json", text, mtime_ms)

    def compaction(self, start: int, end: int, *actions: dict) -> Path:
        text = "".join(json.dumps(a) + "\n" for a in actions)
        return self.raw(f"{start:020d}.{end:020d}.compacted.json", text)

    def parquet(self, relative: str, actions: list[dict]) -> Path:
        path = self.log / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_arrow_rows(actions, CHECKPOINT_ARROW_SCHEMA), path)
        return path

    def classic_checkpoint(self, version: int, actions: list[dict]) -> Path:
        return self.parquet(f"{version:020d}.checkpoint.parquet", actions)

    def multipart_checkpoint(
        self, version: int, parts: list[list[dict]], skip: tuple[int, ...] = ()
    ) -> list[Path]:
        n = len(parts)
        return [
            self.parquet(f"{version:020d}.checkpoint.{i:010d}.{n:010d}.parquet", part)
            for i, part in enumerate(parts, start=1)
            if i not in skip
        ]

    def v2_checkpoint(
        self, version: int, non_file_actions: list[dict], sidecars: list[list[dict]], fmt: str = "json"
    ) -> Path:
        entries = []
        for actions in sidecars:
            name = f"{uuidlib.uuid4()}.parquet"
            path = self.parquet(f"_sidecars/{name}", actions)
            entries.append(
                {"sidecar": {"path": name, "sizeInBytes": path.stat().st_size, "modificationTime": 0}}
            )
        top = [{"checkpointMetadata": {"version": version}}, *non_file_actions, *entries]
        name = f"{version:020d}.checkpoint.{uuidlib.uuid4()}.{fmt}"
        if fmt == "json":
            return self.raw(name, "".join(json.dumps(a) + "\n" for a in top))
        return self.parquet(name, top)

    def last_checkpoint(self, version: int, checksum: str | None = None, **fields: Any) -> Path:
        from deltaspark.log.json_checksum import checksum_of

        document: dict[str, Any] = {"version": version, "size": 1, **fields}
        document["checksum"] = checksum if checksum is not None else checksum_of(document)
        return self.raw("_last_checkpoint", json.dumps(document))


def write_parquet(root: Path, relative: str, table: pa.Table) -> dict:
    """Write a data file under the table root; returns an `add` action for it with real stats."""
    path = Path(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    stats: dict[str, Any] = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name in table.column_names:
        column = table.column(name)
        stats["nullCount"][name] = column.null_count
        if (
            pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)
            or pa.types.is_string(column.type)
        ):
            values = [v for v in column.to_pylist() if v is not None]
            if values:
                stats["minValues"][name] = min(values)
                stats["maxValues"][name] = max(values)
    return add(relative, size=path.stat().st_size, stats=stats)
