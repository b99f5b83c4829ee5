"""OPTIMIZE as one commit: plan the bins (`bins`), read their rows once (deletion vectors applied),
lay them out (`layout`), write them, and swap the files with `dataChange=false` actions.

The commit reads the rewritten files only, at snapshot isolation: a concurrent blind append never
conflicts (its files were not read), a concurrent delete, update, merge or OPTIMIZE that removed
one of the rewritten files does (`ConcurrentDeleteReadError`), and nothing is lost either way.
Row tracking: every row keeps its row id and row commit version (written into the table's
materialized columns). No change data is written: the rows do not change.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.clustering import PROVIDER, clustering_fields
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.operations.delete import materialized_row_tracking
from deltaspark.operations.file_stats import check_layout_statistics
from deltaspark.operations.optimize.bins import (
    BIN,
    CLUSTER,
    COMPACTION,
    CURVE_KINDS,
    PARTITION,
    PURGE,
    ZORDER,
    BinSizes,
    binned_files,
)
from deltaspark.operations.optimize.layout import (
    along_curve,
    files_for,
    one_task_per_bin,
    quantile_boundaries,
    rank_bits,
    rank_of,
    sort_key,
)
from deltaspark.operations.write import (
    WrittenFiles,
    check_partition_only,
    check_writable_rows,
    removes_of,
    write_data_files,
)
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import small_file_reads
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizeOutcome:
    """The commit (None when nothing needed rewriting) and delta-spark's OPTIMIZE metrics."""

    commit: CommitResult | None
    metrics: dict[str, Any] = field(default_factory=dict)


def _size_stats(count: int, total: int, smallest: int | None, largest: int | None) -> dict[str, Any]:
    return {
        "min": smallest,
        "max": largest,
        "avg": float(total) / count if count else 0.0,
        "totalFiles": count,
        "totalSize": total,
    }


def _zorder_columns(snapshot: Snapshot, columns: list[str], table_path: str) -> list[str]:
    """The table's names of the Z-order columns (top-level, not partition columns)."""
    by_name = {f.name.lower(): f.name for f in snapshot.schema.fields}
    partitions = {c.lower() for c in snapshot.partitionColumns}
    found = []
    for column in columns:
        if not isinstance(column, str) or column.lower() not in by_name:
            raise InvalidArgumentError(
                f"Cannot Z-order {table_path} by {column!r}: no such top-level column "
                f"(columns: {', '.join(f.name for f in snapshot.schema.fields)})"
            )
        if column.lower() in partitions:
            raise InvalidArgumentError(
                f"Cannot Z-order {table_path} by {column!r}: it is a partition column (every file "
                "already holds one value of it)"
            )
        found.append(by_name[column.lower()])
    if len(set(found)) != len(found):
        raise InvalidArgumentError(f"Z-order columns of {table_path} repeat: {columns}")
    check_layout_statistics(found, snapshot.schema, snapshot.configuration, table_path, "Z-order")
    return found


def _unchanged(
    written: WrittenFiles, spark: SparkSession, provider: str | None
) -> tuple[DataFrame | None, list[Any] | None]:
    """The written adds marked `dataChange=false` (the rows only moved), and with `provider` as
    their `clusteringProvider` when clustering laid them out."""
    if written.lines is not None:
        lines = []
        for line, records in written.lines:
            action = json.loads(line)
            action["add"]["dataChange"] = False
            if provider:
                action["add"]["clusteringProvider"] = provider
            lines.append((json.dumps(action, separators=(",", ":")), records))
        return None, lines
    add = F.col("add").withField("dataChange", F.lit(False))
    if provider:
        add = add.withField("clusteringProvider", F.lit(provider))
    return written.adds_frame(spark).withColumn("add", add), None


def optimize(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot,
    where: Any = None,
    kind: str = COMPACTION,
    zorder_by: list[str] | None = None,
) -> OptimizeOutcome:
    """Rewrite the files `kind` picks (compaction, zorder or purge) in the partitions `where`
    selects (a predicate over partition columns; every partition when None)."""
    started = int(time.time() * 1000)
    check_writable_rows(snapshot.protocol, snapshot.metadata, table_path)
    clustered_by = clustering_fields(snapshot)
    if snapshot.protocol.hasFeature("clustering") and kind == ZORDER:
        raise InvalidArgumentError(
            f"Cannot Z-order {table_path}: it is a clustered table; OPTIMIZE (executeCompaction) "
            "clusters it by its clustering columns (change them with clusterBy)"
        )
    if clustered_by and kind == COMPACTION:
        kind, zorder_by = CLUSTER, [f.name for f in clustered_by]
    columns = _zorder_columns(snapshot, list(zorder_by or []), table_path) if kind in CURVE_KINDS else []
    if kind in CURVE_KINDS and not columns:
        raise InvalidArgumentError(f"Z-order of {table_path} needs at least one column")
    if where is not None:
        check_partition_only(where, snapshot.metadata, table_path, "OPTIMIZE's where")
        resolve_expression(spark, snapshot.schema, where, "OPTIMIZE's where", table_path)
    request = _Request(
        spark, storage, table_path, snapshot, where, kind, columns, BinSizes.of(spark), started
    )
    considered = (snapshot.files(where) if where is not None else snapshot.files()).persist()
    cached: list[Any] = [considered]
    try:
        return _run(request, considered, cached)
    finally:
        for frame in cached:
            frame.unpersist()


@dataclass(frozen=True)
class _Request:
    """One OPTIMIZE's inputs, checked."""

    spark: SparkSession
    storage: Storage
    table_path: str
    snapshot: Snapshot
    where: Any
    kind: str
    columns: list[str]  # Z-order or clustering columns
    sizes: BinSizes
    started: int


def _run(request: _Request, considered: DataFrame, cached: list[Any]) -> OptimizeOutcome:
    spark, storage, table_path, snapshot = (
        request.spark,
        request.storage,
        request.table_path,
        request.snapshot,
    )
    where, kind, columns, sizes, started = (
        request.where,
        request.kind,
        request.columns,
        request.sizes,
        request.started,
    )
    binned = binned_files(considered, kind, sizes).persist()
    cached.append(binned)
    row = binned.agg(
        F.count(F.lit(1)),
        F.sum("size"),
        F.min("size"),
        F.max("size"),
        F.max(BIN),
        F.countDistinct(PARTITION),
        F.count(F.col("deletionVector")),
        F.sum("deletionVector.cardinality"),
        F.sum("stats_parsed.numRecords"),
        F.count(F.when(F.col("stats_parsed.numRecords").isNull(), 1)),
    ).first()
    considered_files = considered.count()
    removed, removed_bytes = int(row[0]), int(row[1] or 0)
    bins = int(row[4]) + 1 if row[4] is not None else 0
    metrics: dict[str, Any] = {
        "numFilesAdded": 0,
        "numFilesRemoved": removed,
        "filesAdded": _size_stats(0, 0, None, None),
        "filesRemoved": _size_stats(removed, removed_bytes, row[2], row[3]),
        "partitionsOptimized": int(row[5]),
        "zOrderStats": None,
        "numBatches": 1 if removed else 0,
        "totalConsideredFiles": considered_files,
        "totalFilesSkipped": considered_files - removed,
        "preserveInsertionOrder": kind not in CURVE_KINDS,
        "numFilesSkippedToReduceWriteAmplification": 0,
        "numBytesSkippedToReduceWriteAmplification": 0,
        "startTimeMs": started,
        "endTimeMs": started,
        "totalClusterParallelism": spark.sparkContext.defaultParallelism,
        "totalScheduledTasks": bins,
        "deletionVectorStats": {
            "numDeletionVectorsRemoved": int(row[6]),
            "numDeletionVectorRowsRemoved": int(row[7] or 0),
        },
        "numTableColumns": len(snapshot.schema.fields),
        "numTableColumnsWithStats": len(snapshot.schema.fields),
    }
    if not removed:
        log.info("OPTIMIZE of %s: nothing to rewrite among %d file(s)", table_path, considered_files)
        metrics["endTimeMs"] = int(time.time() * 1000)
        return OptimizeOutcome(None, metrics)
    log.info(
        "OPTIMIZE (%s) of %s: rewriting %d of %d file(s) (%d bytes, %d with deletion vectors) "
        "in %d partition(s)",
        kind,
        table_path,
        removed,
        considered_files,
        removed_bytes,
        int(row[6]),
        int(row[5]),
    )
    now = int(time.time() * 1000)
    txn = Transaction(spark, storage, table_path, snapshot)
    if where is not None:
        txn.readPredicate(where)
    txn.readFiles(binned)
    removes = removes_of(binned, now)
    txn.removeFiles(
        removes.withColumn("remove", F.col("remove").withField("dataChange", F.lit(False))), removed
    )

    tracked = row_tracking_enabled(snapshot.protocol, snapshot.metadata)
    hidden: tuple[str, ...] = materialized_row_tracking(snapshot) if tracked else ()
    curve = kind in CURVE_KINDS
    # compaction needs each row's bin (its file's); a curve's groups are the partitions themselves
    rows = read_files(snapshot, binned, row_tracking=tracked, carry=[] if curve else [BIN])
    # each row's id and commit version taken as plain columns before any shuffle
    rows = rows.select(
        *[F.col(f"`{f.name}`") for f in snapshot.schema.fields],
        *[
            F.col(f"_metadata.{source}").alias(name)
            for source, name in zip(("row_id", "row_commit_version"), hidden, strict=False)
        ],
        *([] if curve else [F.col(BIN)]),
    )
    if curve:
        # rows to sample from: from the statistics, or counted when a file has none
        live_rows = int(row[8] or 0) - int(row[7] or 0) if not row[9] else rows.count()
        bits = rank_bits(len(columns))
        keys = [sort_key(F.col(f"`{c}`"), snapshot.schema[c].dataType) for c in columns]
        boundaries = quantile_boundaries(rows, [key for key, _ in keys], live_rows, bits)
        ranks = [rank_of(key, numeric, cuts) for (key, numeric), cuts in zip(keys, boundaries, strict=True)]
        per_partition = binned.groupBy(BIN).agg(F.sum("size").alias("size"))
        files = int(per_partition.agg(F.sum(files_for(F.col("size"), sizes.max_file_size))).first()[0])
        laid = along_curve(rows, list(snapshot.partitionColumns), ranks, files, bits)
    else:
        laid = one_task_per_bin(rows, bins).drop(BIN)
    with small_file_reads(spark, removed_bytes // removed):
        written = write_data_files(
            spark,
            snapshot.tableRoot,
            snapshot.schema,
            snapshot.partitionColumns,
            snapshot.configuration,
            laid,
            check_rows=False,
            mode=snapshot.columnMappingMode,
            hidden_columns=hidden,
            storage=storage,
        )
    cached.append(written)
    adds, lines = _unchanged(written, spark, PROVIDER if kind == CLUSTER else None)
    txn.addFiles(adds, written.files, lines)  # type: ignore[arg-type]
    added_sizes = _added_sizes(written, spark)
    metrics["numFilesAdded"] = written.files
    metrics["filesAdded"] = _size_stats(written.files, written.bytes, *added_sizes)
    if kind == ZORDER:
        metrics["zOrderStats"] = {
            "strategyName": "all",
            "inputCubeFiles": {"num": 0, "size": 0},
            "inputOtherFiles": {"num": removed, "size": removed_bytes},
            "inputNumCubes": 0,
            "mergedFiles": {"num": removed, "size": removed_bytes},
            "numOutputCubes": written.files,
        }
    metrics["endTimeMs"] = int(time.time() * 1000)
    commit_metrics = {
        "numRemovedFiles": removed,
        "numRemovedBytes": removed_bytes,
        "numAddedFiles": written.files,
        "numAddedBytes": written.bytes,
        "minFileSize": added_sizes[0],
        "maxFileSize": added_sizes[1],
        "numDeletionVectorsRemoved": int(row[6]),
        "executionTimeMs": metrics["endTimeMs"] - started,
    }
    predicate = [str(where)] if where is not None else []
    if kind == PURGE:
        commit = txn.commit(
            "REORG", {"predicate": predicate, "applyPurge": "true"}, commit_metrics, dataChange=False
        )
    else:
        parameters = {
            "predicate": predicate,
            "zOrderBy": columns if kind == ZORDER else [],
            "clusterBy": columns if kind == CLUSTER else [],
            "auto": False,
        }
        commit = txn.commit("OPTIMIZE", parameters, commit_metrics, dataChange=False)
    log.info(
        "OPTIMIZE of %s committed version %d: %d file(s) removed, %d added",
        table_path,
        commit.version,
        removed,
        written.files,
    )
    return OptimizeOutcome(commit, metrics)


def _added_sizes(written: WrittenFiles, spark: SparkSession) -> tuple[int | None, int | None]:
    if written.lines is not None:
        sizes = [int(json.loads(line)["add"]["size"]) for line, _ in written.lines]
        return (min(sizes), max(sizes)) if sizes else (None, None)
    row = written.adds_frame(spark).agg(F.min("add.size"), F.max("add.size")).first()
    return row[0], row[1]
