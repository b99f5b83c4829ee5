"""Proving a checkpoint usable: every part and sidecar present, every value of it decodable, its
counts consistent.

A read passes over a checkpoint it cannot read (for an older one, or the commits), so a damaged
checkpoint costs a reader time, never its answer. Metadata cleanup is different: it deletes the
commits a checkpoint replaces, after which nothing can pass over it. So before cleanup trusts a
checkpoint as its boundary, this module reads all of it in one Spark job - not only the columns
a snapshot load needs, and not only its footers, whose row groups may still hold pages that do
not decode - and compares what it read with what the log says about it:

- each part and sidecar is there, not empty, and sidecars have the `sizeInBytes` their `sidecar`
  action records;
- every column of every row decodes (each value is hashed; page checksums are verified where the
  writer wrote them), and the V2 top-level JSON parses;
- exactly one `protocol` and one `metaData`;
- when `_last_checkpoint` describes this checkpoint: its `size` (all actions, sidecars included),
  `numOfAddFiles`, `parts` and, without sidecars, `sizeInBytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from deltaspark.errors import CorruptLogError
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.last_checkpoint import LastCheckpoint
from deltaspark.log.paths import absolute_path
from deltaspark.log.replay import STRICT_READ_OPTIONS, read_json_actions
from deltaspark.log.segment import Checkpoint
from deltaspark.spark_compat import read_paths
from deltaspark.spark_errors import note_role, raise_translated
from deltaspark.storage import Storage, join_path, name_of, parent_of


@dataclass(frozen=True)
class CheckpointContents:
    """What a full read of a checkpoint found."""

    actions: int  # rows of its own files and sidecars (as `_last_checkpoint.size` counts them)
    adds: int
    sidecars: tuple[str, ...]  # full paths


def _hashable(column: Column, data_type: DataType) -> Column:
    """`column` with every map turned into its entries: Spark hashes structs and arrays, not maps."""
    if isinstance(data_type, MapType):
        entries = F.map_entries(column)
        if isinstance(data_type.valueType, (MapType, StructType, ArrayType)):
            value_type = data_type.valueType
            return F.transform(
                entries,
                lambda e: F.struct(e["key"].alias("key"), _hashable(e["value"], value_type).alias("value")),
            )
        return entries
    if isinstance(data_type, StructType):
        if not any(_has_map(f.dataType) for f in data_type.fields):
            return column
        return F.struct(
            *[_hashable(column.getField(f.name), f.dataType).alias(f.name) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType) and _has_map(data_type.elementType):
        element_type = data_type.elementType
        return F.transform(column, lambda e: _hashable(e, element_type))
    return column


def _has_map(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_map(data_type.elementType)
    return False


def _counts(frame: DataFrame) -> list[Column]:
    """Aggregates of a frame of actions: rows, adds, protocols, metadata, a hash of every value
    (which makes Spark decode every column) and the `sidecar` actions."""
    kinds = set(frame.columns)

    def count_of(kind: str) -> Column:
        return F.count(F.col(kind)) if kind in kinds else F.lit(0).cast("long")

    values = [_hashable(F.col(f"`{f.name}`"), f.dataType) for f in frame.schema.fields]
    # Kept small: a sum of 64-bit hashes would overflow, which ANSI mode refuses.
    digest = F.sum(F.xxhash64(*values) % 1024) if values else F.lit(0)
    sidecar = F.struct(F.col("sidecar.path").alias("path"), F.col("sidecar.sizeInBytes").alias("size"))
    sidecars = (
        F.collect_list(F.when(F.col("sidecar").isNotNull(), sidecar))
        if "sidecar" in kinds
        else F.array().cast("array<struct<path:string,size:long>>")
    )
    return [
        F.count(F.lit(1)).alias("rows"),
        count_of("add").alias("adds"),
        count_of("protocol").alias("protocols"),
        count_of("metaData").alias("metadata"),
        digest.alias("digest"),
        sidecars.alias("sidecars"),
    ]


_COUNTS = ("rows", "adds", "protocols", "metadata")
_VERIFY_PAGES = {"mergeSchema": "true", "parquet.page.verify-checksum.enabled": "true"}
Sidecars = list[tuple[str, "int | None"]]  # (path as logged, sizeInBytes as recorded)


def _decode(spark: SparkSession, paths: list[str]) -> tuple[dict[str, int], Sidecars]:
    """Every value of every column of parquet log files, read in one Spark job: the counts of
    `rows`, `adds`, `protocols` and `metadata`, and the `sidecar` actions. `CorruptLogError`
    names a file that does not decode."""
    try:
        # Page checksums, where the writer wrote them, catch a damaged page that still decodes.
        reader = spark.read.options(**STRICT_READ_OPTIONS, **_VERIFY_PAGES)
        frame = read_paths(spark, reader, "parquet", paths)
        row = frame.agg(*_counts(frame)).first()
    except Exception as exc:  # Spark names the file it could not read
        raise_translated(exc, spark, paths[0])
        raise  # not reached: raise_translated raises
    assert row is not None
    return {k: int(row[k] or 0) for k in _COUNTS}, [(s["path"], s["size"]) for s in row["sidecars"]]


def decode_parquet(spark: SparkSession, paths: list[str]) -> dict[str, int]:
    """Read every value of every column of parquet log files in one Spark job: counts of `rows`,
    `adds`, `protocols` and `metadata`. `CorruptLogError` names a file that does not decode."""
    return _decode(spark, paths)[0]


def _decode_json(spark: SparkSession, checkpoint: Checkpoint) -> tuple[dict[str, int], Sidecars]:
    """Counts and sidecars of a V2 checkpoint's top-level JSON file; every line must parse."""
    frame = read_json_actions(spark, checkpoint.files, None, select_lines=False)
    try:
        rows = frame.select("version", "add", "protocol", "metaData", "sidecar").collect()
    except Exception as exc:
        raise_translated(exc, spark, checkpoint.files[0].path)
        raise
    kinds = {"adds": "add", "protocols": "protocol", "metadata": "metaData"}
    counts = {"rows": len(rows), **{k: sum(r[kind] is not None for r in rows) for k, kind in kinds.items()}}
    return counts, [(r["sidecar"]["path"], r["sidecar"]["sizeInBytes"]) for r in rows if r["sidecar"]]


def check_sidecars(storage: Storage, checkpoint_file: LogFile, sidecars: Sidecars) -> list[str]:
    """The full paths of a checkpoint's sidecars, each checked present with the size its `sidecar`
    action records; `CorruptLogError` naming the first that is not (a missing, truncated or
    replaced sidecar), so that a read passes over the checkpoint."""
    name = checkpoint_file.name
    paths = []
    for logged, _ in sidecars:
        if not logged:
            raise CorruptLogError(checkpoint_file.path, "a `sidecar` action has no path")
        paths.append(absolute_path(logged, join_path(parent_of(checkpoint_file.path), "_sidecars")))
    statuses = storage.statuses(paths)
    missing = [p for p, status in zip(paths, statuses, strict=True) if status is None]
    if missing:
        raise CorruptLogError(
            missing[0], f"{len(missing)} sidecar(s) referenced by checkpoint {name} do not exist"
        )
    for (_, recorded), path, status in zip(sidecars, paths, statuses, strict=True):
        assert status is not None
        if recorded is not None and status.size != recorded:
            reason = f"the sidecar has {status.size} bytes where checkpoint {name} records {recorded}"
            raise CorruptLogError(path, reason + " (truncated or replaced)")
    for path in paths:
        note_role(path, f"a sidecar of checkpoint {checkpoint_file.path}")
    return paths


def verify_checkpoint(
    spark: SparkSession, storage: Storage, checkpoint: Checkpoint, last: LastCheckpoint | None
) -> CheckpointContents:
    """Read all of `checkpoint` (see the module docstring); `CorruptLogError` naming the file (or
    `_last_checkpoint`) and what is wrong when it cannot be trusted."""
    first = checkpoint.files[0]
    log_dir = parent_of(first.path)
    for f in checkpoint.files:
        if f.size == 0:
            raise CorruptLogError(f.path, "the file is empty (0 bytes)")
    if first.file_format == "json":
        counts, sidecars = _decode_json(spark, checkpoint)
    else:
        counts, sidecars = _decode(spark, [f.path for f in checkpoint.files])
    paths = check_sidecars(storage, first, sidecars)
    if paths:
        side = decode_parquet(spark, paths)
        counts = {k: counts[k] + side[k] for k in _COUNTS}
    if counts["protocols"] != 1 or counts["metadata"] != 1:
        raise CorruptLogError(
            first.path,
            f"a checkpoint holds exactly one protocol and one metaData action; this one holds "
            f"{counts['protocols']} and {counts['metadata']}",
        )
    contents = CheckpointContents(counts["rows"], counts["adds"], tuple(paths))
    _compare_with_hint(checkpoint, contents, last, log_dir)
    return contents


def _describes(last: LastCheckpoint, checkpoint: Checkpoint) -> bool:
    """Whether `_last_checkpoint` was written for this very checkpoint (not another one of the
    same version, which holds the same state in other files)."""
    if last.version != checkpoint.version:
        return False
    if last.v2_checkpoint_path is not None:
        return name_of(last.v2_checkpoint_path) == checkpoint.files[0].name
    if checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART:
        return last.parts == len(checkpoint.files)
    return checkpoint.kind is not LogFileKind.CHECKPOINT_UUID and last.parts in (None, 1)


def _compare_with_hint(
    checkpoint: Checkpoint, contents: CheckpointContents, last: LastCheckpoint | None, log_dir: str
) -> None:
    if last is None or last.version != checkpoint.version:
        return
    where = join_path(log_dir, "_last_checkpoint")
    name = checkpoint.files[0].name

    def disagree(field: str, recorded: int, found: int) -> CorruptLogError:
        return CorruptLogError(
            where, f"it records {field}={recorded} for checkpoint {name}, which holds {found}"
        )

    # Every checkpoint of one version holds the same state, so the same number of adds.
    if last.num_of_add_files is not None and last.num_of_add_files != contents.adds:
        raise disagree("numOfAddFiles", last.num_of_add_files, contents.adds)
    if not _describes(last, checkpoint):
        return
    if last.size is not None and last.size != contents.actions:
        raise disagree("size", last.size, contents.actions)
    if last.size_in_bytes is not None and not contents.sidecars:
        total = sum(f.size for f in checkpoint.files)
        if last.size_in_bytes != total:
            raise disagree("sizeInBytes", last.size_in_bytes, total)
