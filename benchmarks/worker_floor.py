"""The floor: how long pyarrow takes just to decode the log bytes a reader must read.

The same segment a reader replays (the newest checkpoint named by `_last_checkpoint`, then every
JSON commit after it) is decoded into Arrow and dropped batch by batch: JSON commits with
`pyarrow.json` (the file actions' fields, stats left as text), the checkpoint with `pyarrow.parquet`.
No reconciliation, no dedup: any engine that replays the log must at least do this.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from benchmarks.common import Timer, measure_and_emit, repeat

_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)


def json_schema(partition_columns: list[str]) -> pa.Schema:
    """What a replay needs from a commit line (pyarrow's JSON reader has no map type: partition
    values are a struct of the partition columns)."""
    parts = pa.struct([(c, pa.string()) for c in partition_columns])
    add = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", parts),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
            ("deletionVector", _DV),
        ]
    )
    remove = pa.struct(
        [
            ("path", pa.string()),
            ("deletionTimestamp", pa.int64()),
            ("dataChange", pa.bool_()),
            ("partitionValues", parts),
            ("size", pa.int64()),
            ("deletionVector", _DV),
        ]
    )
    return pa.schema([("add", add), ("remove", remove)])


def segment(table: str) -> tuple[list[Path], list[Path]]:
    """Checkpoint files and JSON commits after it, as `_last_checkpoint` and the listing say."""
    log_dir = Path(table) / "_delta_log"
    hint = log_dir / "_last_checkpoint"
    start = -1
    checkpoints: list[Path] = []
    if hint.exists():
        start = int(json.loads(hint.read_text())["version"])
        checkpoints = sorted(log_dir.glob(f"{start:020d}.checkpoint*.parquet"))
    names = (p for p in log_dir.glob("*.json") if len(p.name) == 25 and p.name[:20].isdigit())
    commits = sorted(p for p in names if int(p.name[:20]) > start)
    return checkpoints, commits


def partition_columns(commits: list[Path], checkpoints: list[Path]) -> list[str]:
    for path in commits:
        for line in path.read_text().splitlines()[:5]:
            if line.startswith('{"metaData"'):
                return json.loads(line)["metaData"]["partitionColumns"]
    for path in checkpoints:
        table = pq.read_table(path, columns=["metaData"]).column(0).drop_null()
        if len(table):
            return list(table[0]["partitionColumns"].as_py())
    return []


def decode_run(table: str) -> tuple[Timer, dict[str, Any]]:
    timer = Timer()
    actions = 0
    with timer.phase("plan"):
        checkpoints, commits = segment(table)
        schema = json_schema(partition_columns(commits, checkpoints))
    with timer.phase("checkpoint"):
        for path in checkpoints:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=256 * 1024):
                actions += batch.num_rows
    with timer.phase("json"):
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        for path in commits:
            actions += pj.read_json(path, parse_options=options).num_rows
    return timer, {"actions": actions, "bytes": sum(p.stat().st_size for p in checkpoints + commits)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"engine": "floor", "op": "replay"}
    measure_and_emit(result, lambda: repeat(lambda: decode_run(args.table), args.repeat))


if __name__ == "__main__":
    main()
