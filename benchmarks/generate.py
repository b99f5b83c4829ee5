"""Synthetic Delta logs, written fast enough to make 100M-file tables on a laptop-sized machine.

Every action line is built column-wise with Arrow compute (no per-row Python), JSON commits are
written as text, and a checkpoint is written by pyarrow in the protocol's checkpoint schema, one
row group per million actions so memory stays flat. Data files are not written (the log is what is
measured) unless `touch_data_files` asks for placeholders of their logged sizes, which Spark's file scan
needs to plan a read.

Layout (file `i` is identified by an integer; its path, size and stats derive from it):

- JSON only: commits 0..C-1; commit 0 holds protocol and metaData.
- With a checkpoint: a classic `N.checkpoint.parquet` at version `CHECKPOINT_VERSION` (earlier
  commits "cleaned up"), holding the live files and some tombstones, then C JSON commits.
- Each commit after the first removes `remove_fraction` x its net adds from the previous batch and,
  with deletion vectors, re-adds `dv_fraction` x its net adds of the previous batch with a DV
  (a `remove` of the old key plus an `add` with the DV), so the file count grows by `net` exactly.

Usage: `python -m benchmarks.generate OUT --files 1000000 --commits 100 [--checkpoint] [--dv-fraction 0.01]
[--checksum]`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

CHECKPOINT_VERSION = 10
BASE_TIME_MS = 1_700_000_000_000
ROW_GROUP = 1_000_000
PARTITION_COLUMN = "part"
SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": PARTITION_COLUMN, "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


@dataclass(frozen=True)
class LogSpec:
    """What to generate. `files` is the live file count at the latest version."""

    files: int
    commits: int
    partitions: int = 100
    remove_fraction: float = 0.05
    dv_fraction: float = 0.0
    checkpoint: bool = False
    tail_files_per_commit: int = 1000  # with a checkpoint: net adds per JSON commit after it
    stats: bool = True
    checksum: bool = False  # a `.crc` at the latest version, as delta-spark writes after each commit


@dataclass
class Batch:
    """One commit (or the checkpoint): files added, removed and re-added with a DV, by index range."""

    version: int
    add_start: int
    add_count: int
    remove_start: int = 0
    remove_count: int = 0
    dv_start: int = 0
    dv_count: int = 0
    born_with_dv: int = 0  # the last `born_with_dv` adds of this batch carry a DV (checkpoint only)


@dataclass
class GeneratedTable:
    """What was written, with the counts a reader must find."""

    path: str
    spec: dict
    version: int
    live_files: int
    add_actions: int
    remove_actions: int
    checkpoint_version: int | None
    json_commits: int
    log_bytes: int
    seconds: float


def plan_batches(spec: LogSpec) -> tuple[list[Batch], int]:
    """Index ranges per commit; returns the batches and the tombstone count of the checkpoint."""
    if spec.files < 1 or spec.commits < (0 if spec.checkpoint else 1):
        raise ValueError("need at least one file and one commit (or a checkpoint)")
    batches: list[Batch] = []
    next_index = 0
    tombstones = 0
    if spec.checkpoint:
        net = min(spec.tail_files_per_commit, spec.files // max(spec.commits + 1, 1))
        in_checkpoint = spec.files - net * spec.commits
        tombstones = int(in_checkpoint * spec.remove_fraction)
        next_index = tombstones  # indices [0, tombstones) were removed before the checkpoint
        born = int(in_checkpoint * spec.dv_fraction)
        batches.append(Batch(CHECKPOINT_VERSION, next_index, in_checkpoint, born_with_dv=born))
        next_index += in_checkpoint
        first_version = CHECKPOINT_VERSION + 1
        nets = [net] * spec.commits
    else:
        net, extra = divmod(spec.files, spec.commits)
        nets = [net] * spec.commits
        nets[-1] += extra
        first_version = 0
    for k, net_k in enumerate(nets):
        version = first_version + k
        prev = batches[-1] if batches else None
        removes = dvs = 0
        if prev is not None:
            room = prev.add_count - prev.born_with_dv
            removes = min(int(net_k * spec.remove_fraction), room)
            dvs = min(int(net_k * spec.dv_fraction), room - removes)
        batch = Batch(version, next_index, net_k + removes)
        if prev is not None:
            batch.remove_start, batch.remove_count = prev.add_start, removes
            batch.dv_start, batch.dv_count = prev.add_start + removes, dvs
        next_index += batch.add_count
        batches.append(batch)
    return batches, tombstones


# ---- per-file values, column-wise ------------------------------------------------------------


def _s(values: np.ndarray | pa.Array) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in parts], "")


def partition_values(idx: np.ndarray, spec: LogSpec) -> pa.Array | None:
    if not spec.partitions:
        return None
    return _join("p", pc.utf8_lpad(_s(idx % spec.partitions), 5, "0"))


def file_paths(idx: np.ndarray, spec: LogSpec) -> pa.Array:
    """Paths like Spark writes them: `part=p00042/part-00000-<id>-<hash>-c000.snappy.parquet`."""
    name = _join(
        "part-00000-",
        pc.utf8_lpad(_s(idx), 12, "0"),
        "-",
        pc.utf8_lpad(_s((idx * 2654435761) % 10**10), 10, "0"),
        "-c000.snappy.parquet",
    )
    parts = partition_values(idx, spec)
    return name if parts is None else _join(f"{PARTITION_COLUMN}=", parts, "/", name)


def file_sizes(idx: np.ndarray) -> np.ndarray:
    return 100_000 + (idx * 7919) % 900_000


def stats_json(idx: np.ndarray) -> pa.Array:
    """Per-file stats as Delta writes them (numRecords, min/max, nullCount), distinct per file."""
    records = 1000 + idx % 9000
    low = idx * 10_000
    return _join(
        '{"numRecords":',
        _s(records),
        ',"minValues":{"id":',
        _s(low),
        ',"value":',
        _s((idx % 1000) / 8),
        ',"name":"a',
        _s(idx),
        '"},"maxValues":{"id":',
        _s(low + records - 1),
        ',"value":',
        _s(1000 + (idx % 977) / 4),
        ',"name":"z',
        _s(idx),
        '"},"nullCount":{"id":0,"value":',
        _s(idx % 7),
        ',"name":0}}',
    )


def dv_values(idx: np.ndarray) -> dict[str, pa.Array]:
    """A `u` (UUID-relative) deletion vector per file; 20 Z85 characters encode the UUID."""
    return {
        "storageType": pa.array(np.full(len(idx), "u")),
        "pathOrInlineDv": pc.utf8_lpad(_s(idx), 20, "0"),
        "offset": pa.array(np.ones(len(idx), dtype=np.int32)),
        "sizeInBytes": pa.array(np.full(len(idx), 36, dtype=np.int32)),
        "cardinality": pa.array(1 + idx % 50),
    }


# ---- JSON commits ---------------------------------------------------------------------------


def protocol_action(spec: LogSpec) -> dict:
    if spec.dv_fraction > 0:
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 2}


def metadata_action(spec: LogSpec) -> dict:
    configuration = {"delta.enableDeletionVectors": "true"} if spec.dv_fraction > 0 else {}
    return {
        "id": "00000000-0000-4000-8000-000000000001",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": [PARTITION_COLUMN] if spec.partitions else [],
        "configuration": configuration,
        "createdTime": BASE_TIME_MS,
    }


def _json_str(values: pa.Array) -> pa.Array:
    """Escape a string column as a JSON string body (our values only need `\\` and `"`)."""
    return pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')


def _partition_json(idx: np.ndarray, spec: LogSpec) -> pa.Array | str:
    parts = partition_values(idx, spec)
    return "{}" if parts is None else _join(f'{{"{PARTITION_COLUMN}":"', parts, '"}')


def _dv_json(idx: np.ndarray) -> pa.Array:
    dv = dv_values(idx)
    return _join(
        ',"deletionVector":{"storageType":"u","pathOrInlineDv":"',
        dv["pathOrInlineDv"],
        '","offset":1,"sizeInBytes":36,"cardinality":',
        _s(dv["cardinality"]),
        "}",
    )


def add_lines(idx: np.ndarray, spec: LogSpec, with_dv: bool, mtime: int) -> list[str]:
    if len(idx) == 0:
        return []
    stats = _join(',"stats":"', _json_str(stats_json(idx)), '"') if spec.stats else ""
    line = _join(
        '{"add":{"path":"',
        file_paths(idx, spec),
        '","partitionValues":',
        _partition_json(idx, spec),
        ',"size":',
        _s(file_sizes(idx)),
        f',"modificationTime":{mtime},"dataChange":true',
        stats,
        _dv_json(idx) if with_dv else "",
        "}}",
    )
    return line.to_pylist()


def remove_lines(idx: np.ndarray, spec: LogSpec, deletion_time: int) -> list[str]:
    if len(idx) == 0:
        return []
    line = _join(
        '{"remove":{"path":"',
        file_paths(idx, spec),
        f'","deletionTimestamp":{deletion_time},"dataChange":true,"extendedFileMetadata":true,'
        '"partitionValues":',
        _partition_json(idx, spec),
        ',"size":',
        _s(file_sizes(idx)),
        "}}",
    )
    return line.to_pylist()


def write_commit(log_dir: Path, batch: Batch, spec: LogSpec, first: bool, now_ms: int) -> int:
    """Write one `NNN.json` commit; returns its size in bytes."""
    mtime = BASE_TIME_MS + batch.version * 1000
    lines = [
        json.dumps(
            {
                "commitInfo": {
                    "timestamp": mtime,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append"},
                    "engineInfo": "deltaspark-benchmarks",
                }
            }
        )
    ]
    if first:
        lines.append(json.dumps({"protocol": protocol_action(spec)}))
        lines.append(json.dumps({"metaData": metadata_action(spec)}))
    removed = np.arange(batch.remove_start, batch.remove_start + batch.remove_count, dtype=np.int64)
    dv = np.arange(batch.dv_start, batch.dv_start + batch.dv_count, dtype=np.int64)
    added = np.arange(batch.add_start, batch.add_start + batch.add_count, dtype=np.int64)
    lines += remove_lines(np.concatenate([removed, dv]), spec, now_ms)
    lines += add_lines(dv, spec, with_dv=True, mtime=mtime)
    lines += add_lines(added, spec, with_dv=False, mtime=mtime)
    data = ("\n".join(lines) + "\n").encode()
    path = log_dir / f"{batch.version:020d}.json"
    path.write_bytes(data)
    os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))
    return len(data)


# ---- the parquet checkpoint -----------------------------------------------------------------

STRING_MAP = pa.map_(pa.string(), pa.string())
DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", TXN_TYPE),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("metaData", METADATA_TYPE),
        ("protocol", PROTOCOL_TYPE),
    ]
)


def _partition_map(idx: np.ndarray, spec: LogSpec) -> pa.Array:
    parts = partition_values(idx, spec)
    width = 0 if parts is None else 1
    offsets = pa.array(np.arange(len(idx) + 1, dtype=np.int32) * width)
    keys = pa.array(np.full(len(idx) * width, PARTITION_COLUMN), pa.string())
    values = parts if parts is not None else pa.array([], pa.string())
    return pa.MapArray.from_arrays(offsets, keys, values)


def _dv_struct(idx: np.ndarray, has_dv: np.ndarray) -> pa.Array:
    dv = dv_values(idx)
    return pa.StructArray.from_arrays(
        [dv[f.name].cast(f.type) for f in DV_TYPE], fields=list(DV_TYPE), mask=pa.array(~has_dv)
    )


def _file_action_table(
    idx: np.ndarray, spec: LogSpec, is_add: bool, has_dv: np.ndarray, now: int
) -> pa.Table:
    n = len(idx)
    size = pa.array(file_sizes(idx))
    common = {
        "path": file_paths(idx, spec),
        "partitionValues": _partition_map(idx, spec),
        "size": size,
        "deletionVector": _dv_struct(idx, has_dv),
        "baseRowId": pa.nulls(n, pa.int64()),
        "defaultRowCommitVersion": pa.nulls(n, pa.int64()),
        "dataChange": pa.array(np.full(n, is_add)),
    }
    if is_add:
        columns = {
            **common,
            "modificationTime": pa.array(np.full(n, BASE_TIME_MS, dtype=np.int64)),
            "stats": stats_json(idx) if spec.stats else pa.nulls(n, pa.string()),
            "tags": pa.nulls(n, STRING_MAP),
            "clusteringProvider": pa.nulls(n, pa.string()),
        }
        action_type, name = ADD_TYPE, "add"
    else:
        columns = {
            **common,
            "deletionTimestamp": pa.array(np.full(n, now, dtype=np.int64)),
            "extendedFileMetadata": pa.array(np.ones(n, dtype=bool)),
        }
        action_type, name = REMOVE_TYPE, "remove"
    action = pa.StructArray.from_arrays([columns[f.name] for f in action_type], fields=list(action_type))
    arrays = [action if f.name == name else pa.nulls(n, f.type) for f in CHECKPOINT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=CHECKPOINT_SCHEMA)


def _header_table(spec: LogSpec) -> pa.Table:
    rows = [{"protocol": protocol_action(spec)}, {"metaData": metadata_action(spec)}]
    for row in rows:
        if "metaData" in row:
            meta = dict(row["metaData"])
            meta["format"] = {"provider": "parquet", "options": []}
            meta["configuration"] = list(meta["configuration"].items())
            row["metaData"] = meta
    return pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)


def _chunks(start: int, stop: int, size: int = ROW_GROUP) -> Iterator[np.ndarray]:
    for low in range(start, stop, size):
        yield np.arange(low, min(low + size, stop), dtype=np.int64)


def write_checkpoint(log_dir: Path, batch: Batch, tombstones: int, spec: LogSpec, now_ms: int) -> int:
    """A classic checkpoint: protocol, metaData, the batch's adds (the last `born_with_dv` with a DV)
    and `tombstones` removes. Returns the number of actions written."""
    path = log_dir / f"{batch.version:020d}.checkpoint.parquet"
    actions = 0
    with pq.ParquetWriter(path, CHECKPOINT_SCHEMA, compression="snappy") as writer:
        header = _header_table(spec)
        writer.write_table(header)
        actions += header.num_rows
        dv_from = batch.add_start + batch.add_count - batch.born_with_dv
        for idx in _chunks(batch.add_start, batch.add_start + batch.add_count):
            writer.write_table(_file_action_table(idx, spec, True, idx >= dv_from, now_ms))
            actions += len(idx)
        for idx in _chunks(0, tombstones):
            writer.write_table(_file_action_table(idx, spec, False, np.zeros(len(idx), bool), now_ms))
            actions += len(idx)
    mtime = BASE_TIME_MS + batch.version * 1000
    os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": batch.version, "size": actions}))
    return actions


# ---- the table ------------------------------------------------------------------------------


def live_indices(batches: list[Batch]) -> Iterator[np.ndarray]:
    """Indices of the live files, in chunks (for placeholder data files)."""
    removed: set[int] = set()
    for b in batches:
        removed.update(range(b.remove_start, b.remove_start + b.remove_count))
    for b in batches:
        for idx in _chunks(b.add_start, b.add_start + b.add_count):
            yield idx if not removed else idx[~np.isin(idx, np.fromiter(removed, np.int64))]


def _dv_files(batches: list[Batch]) -> list[str]:
    """Relative paths of the deletion vector files the live files point at."""
    from deltaspark.features.dv_codec import uuid_relative_path

    idx = [np.arange(b.dv_start, b.dv_start + b.dv_count, dtype=np.int64) for b in batches]
    idx += [np.arange(b.add_start + b.add_count - b.born_with_dv, b.add_start + b.add_count) for b in batches]
    ids = dv_values(np.concatenate(idx))["pathOrInlineDv"].to_pylist() if idx else []
    return [uuid_relative_path(i) for i in ids]


def touch_data_files(root: Path, batches: list[Batch], spec: LogSpec) -> int:
    """Placeholder data files (sparse, of their logged sizes) and empty DV files: Spark's scan lists
    the files it reads when a read is planned, and deltaspark checks their sizes against the log's.
    Nothing is ever read from them."""
    count = write_placeholders(root, spec, live_indices(batches))
    for rel in _dv_files(batches):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(root / rel, os.O_CREAT | os.O_WRONLY, 0o644))
        count += 1
    return count


def write_checksum(log_dir: Path, batches: list[Batch], spec: LogSpec, live: int) -> None:
    """The latest version's `.crc` with the protocol's required fields (size and count of the `live`
    files, protocol, metadata); what delta-spark writes after every commit, minus the optional ones."""
    sizes = sum(int(file_sizes(idx).sum()) for idx in live_indices(batches))
    document = {
        "tableSizeBytes": sizes,
        "numFiles": live,
        "numMetadata": 1,
        "numProtocol": 1,
        "metadata": metadata_action(spec),
        "protocol": protocol_action(spec),
    }
    (log_dir / f"{batches[-1].version:020d}.crc").write_text(json.dumps(document))


def generate(out: str | Path, spec: LogSpec, touch: bool = False, overwrite: bool = True) -> GeneratedTable:
    """Write a table at `out` (replacing it) and return what a reader must find."""
    start = time.perf_counter()
    root = Path(out)
    if root.exists():
        if not overwrite:
            raise FileExistsError(root)
        shutil.rmtree(root)
    log_dir = root / "_delta_log"
    log_dir.mkdir(parents=True)
    batches, tombstones = plan_batches(spec)
    now_ms = int(time.time() * 1000)
    log_bytes = 0
    checkpoint_version = None
    json_batches = batches
    if spec.checkpoint:
        write_checkpoint(log_dir, batches[0], tombstones, spec, now_ms)
        checkpoint_version = batches[0].version
        log_bytes += (log_dir / f"{batches[0].version:020d}.checkpoint.parquet").stat().st_size
        json_batches = batches[1:]
    for i, batch in enumerate(json_batches):
        log_bytes += write_commit(log_dir, batch, spec, first=(i == 0 and not spec.checkpoint), now_ms=now_ms)
    adds = sum(b.add_count + b.dv_count for b in batches)
    removes = sum(b.remove_count + b.dv_count for b in batches) + tombstones
    live = sum(b.add_count - b.remove_count for b in batches)
    if spec.checksum:
        write_checksum(log_dir, batches, spec, live)
    if touch:
        touch_data_files(root, batches, spec)
    return GeneratedTable(
        path=str(root),
        spec=asdict(spec),
        version=batches[-1].version,
        live_files=live,
        add_actions=adds,
        remove_actions=removes,
        checkpoint_version=checkpoint_version,
        json_commits=len(json_batches),
        log_bytes=log_bytes,
        seconds=round(time.perf_counter() - start, 3),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic Delta log (no data files).")
    parser.add_argument("out")
    parser.add_argument("--files", type=int, required=True, help="live files at the latest version")
    parser.add_argument("--commits", type=int, default=100, help="JSON commits (after the checkpoint)")
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--remove-fraction", type=float, default=0.05)
    parser.add_argument("--dv-fraction", type=float, default=0.0)
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--tail-files-per-commit", type=int, default=1000)
    parser.add_argument("--no-stats", action="store_true")
    parser.add_argument("--touch-data-files", action="store_true")
    parser.add_argument("--checksum", action="store_true", help="write the latest version's .crc")
    args = parser.parse_args(argv)
    spec = LogSpec(
        files=args.files,
        commits=args.commits,
        partitions=args.partitions,
        remove_fraction=args.remove_fraction,
        dv_fraction=args.dv_fraction,
        checkpoint=args.checkpoint,
        tail_files_per_commit=args.tail_files_per_commit,
        stats=not args.no_stats,
        checksum=args.checksum,
    )
    print(json.dumps(asdict(generate(args.out, spec, touch=args.touch_data_files)), indent=2))


if __name__ == "__main__":
    main()


def write_placeholders(root: Path, spec: LogSpec, chunks: Iterable[np.ndarray]) -> int:
    """A sparse placeholder of its logged size (no disk blocks used) for each file index in
    `chunks`, so that listings and existence checks have real files with real sizes."""
    made: set[str] = set()
    count = 0
    for idx in chunks:
        for rel, size in zip(file_paths(idx, spec).to_pylist(), file_sizes(idx).tolist(), strict=True):
            parent = rel.rpartition("/")[0]
            if parent and parent not in made:
                (root / parent).mkdir(parents=True, exist_ok=True)
                made.add(parent)
            with open(root / rel, "wb") as fh:
                fh.truncate(int(size))
            count += 1
    return count
