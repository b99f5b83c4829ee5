"""A small sample Delta table, written with pyarrow and plain JSON commits, for `deltaspark demo`.

Four commits: create and insert, append, a delete that rewrites a file, and an append carrying an
application transaction id. The change data feed is enabled (without CDC files, so changes are
derived from the added and removed files). Data files are real parquet with real per-file statistics, so every
CLI command has something to show.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        {"name": "customer", "type": "string", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
        {"name": "ordered_at", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "region", "type": "string", "nullable": True, "metadata": {}},
    ],
}
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.float64()),
        ("ordered_at", pa.timestamp("us", tz="UTC")),
    ]
)


def _rows(start: int, count: int, region: str) -> list[dict[str, Any]]:
    base = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    return [
        {
            "id": i,
            "customer": f"customer-{i % 7}",
            "amount": round(10 + (i * 37 % 500) / 3, 2),
            "ordered_at": base + dt.timedelta(hours=i),
        }
        for i in range(start, start + count)
    ]


def _iso(value: dt.datetime) -> str:
    return (
        value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    )


def _write_file(root: Path, region: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    relative = f"region={region}/part-{uuid.uuid4()}.c000.snappy.parquet"
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), target, compression="snappy")
    stats = {
        "numRecords": len(rows),
        "minValues": {
            "id": min(r["id"] for r in rows),
            "customer": min(r["customer"] for r in rows),
            "amount": min(r["amount"] for r in rows),
            "ordered_at": _iso(min(r["ordered_at"] for r in rows)),
        },
        "maxValues": {
            "id": max(r["id"] for r in rows),
            "customer": max(r["customer"] for r in rows),
            "amount": max(r["amount"] for r in rows),
            "ordered_at": _iso(max(r["ordered_at"] for r in rows)),
        },
        "nullCount": {"id": 0, "customer": 0, "amount": 0, "ordered_at": 0},
    }
    return {
        "path": relative,
        "partitionValues": {"region": region},
        "size": target.stat().st_size,
        "modificationTime": int(target.stat().st_mtime * 1000),
        "dataChange": True,
        "stats": json.dumps(stats),
    }


def _commit(
    log_dir: Path, version: int, actions: list[dict[str, Any]], operation: str, **params: Any
) -> None:
    info = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": {
                k: json.dumps(v) if not isinstance(v, str) else v for k, v in params.items()
            },
            "engineInfo": "deltaspark-demo",
        }
    }
    path = log_dir / f"{version:020d}.json"
    with open(path, "x", encoding="utf-8") as fh:  # never overwrite a log entry
        for action in [info, *actions]:
            fh.write(json.dumps(action) + "\n")


def build_demo_table(root: str | os.PathLike[str]) -> str:
    """Write the sample table under `root` (which must not already hold a Delta log); return its path."""
    table = Path(root)
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True, exist_ok=False)
    eu = _write_file(table, "eu", _rows(0, 40, "eu"))
    us = _write_file(table, "us", _rows(40, 60, "us"))
    _commit(
        log_dir,
        0,
        [
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}},
            {
                "metaData": {
                    "id": str(uuid.uuid4()),
                    "name": "orders",
                    "description": "deltaspark demo table",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(SCHEMA),
                    "partitionColumns": ["region"],
                    "configuration": {"delta.checkpointInterval": "10", "delta.enableChangeDataFeed": "true"},
                    "createdTime": int(time.time() * 1000),
                }
            },
            {"add": eu},
            {"add": us},
        ],
        "CREATE TABLE AS SELECT",
        partitionBy=["region"],
    )
    apac = _write_file(table, "apac", _rows(100, 30, "apac"))
    eu2 = _write_file(table, "eu", _rows(130, 20, "eu"))
    _commit(log_dir, 1, [{"add": apac}, {"add": eu2}], "WRITE", mode="Append")
    kept = [r for r in _rows(40, 60, "us") if r["id"] % 5 != 0]
    us_rewritten = _write_file(table, "us", kept)
    now = int(time.time() * 1000)
    remove = {k: us[k] for k in ("path", "partitionValues", "size")} | {
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
    }
    _commit(log_dir, 2, [{"remove": remove}, {"add": us_rewritten}], "DELETE", predicate=["id % 5 = 0"])
    late = _write_file(table, "apac", _rows(150, 10, "apac"))
    _commit(
        log_dir,
        3,
        [{"add": late}, {"txn": {"appId": "demo-stream", "version": 7, "lastUpdated": now}}],
        "STREAMING UPDATE",
        outputMode="Append",
    )
    return str(table)
