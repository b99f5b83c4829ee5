"""OPTIMIZE as one commit: plan the bins (`bins`), read their rows once (deletion vectors applied),
lay them out (`layout`), write them, and swap the files with `dataChange=false` actions.

The commit reads the rewritten files only, at snapshot isolation: a concurrent blind append never
conflicts (its files were not read), a concurrent delete, update, merge or OPTIMIZE that removed
one of the rewritten files does (`ConcurrentDeleteReadError`), and nothing is lost either way.
Row tracking: every row keeps its row id and row commit version (written into the table's
materialized columns). No change data is written: the rows do not change.
"""

from __future__ import annotations

import contextlib
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
from deltaspark.operations.file_set import FILE_TOTALS, FileSet, Total, held_totals, totals_of
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
    plan_bins,
)
from deltaspark.operations.optimize.layout import (
    SAMPLE_ROWS,
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
    write_data_files,
)
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import persist_sized, range_sample, small_file_reads
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


def _zorder_columns(snapshot: Snapshot, columns: list[str], table_path: str, verb: str) -> list[str]:
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
    check_layout_statistics(found, snapshot.schema, snapshot.configuration, table_path, verb)
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
    verb = "cluster" if kind == CLUSTER else "Z-order"
    columns = (
        _zorder_columns(snapshot, list(zorder_by or []), table_path, verb) if kind in CURVE_KINDS else []
    )
    if kind in CURVE_KINDS and not columns:
        raise InvalidArgumentError(f"Z-order of {table_path} needs at least one column")
    if where is not None:
        check_partition_only(where, snapshot.metadata, table_path, "OPTIMIZE's where")
        resolve_expression(spark, snapshot.schema, where, "OPTIMIZE's where", table_path)
    request = _Request(
        spark, storage, table_path, snapshot, where, kind, columns, BinSizes.of(spark), started
    )
    considered = persist_sized(
        snapshot.files(where) if where is not None else snapshot.files(), snapshot.stateBytes
    )
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


@dataclass(frozen=True)
class _Totals:
    """What the chosen files add up to (one aggregate over them)."""

    files: int
    bytes: int
    smallest: int | None
    largest: int | None
    bins: int
    partitions: int
    dvs: int
    deleted_rows: int
    records: int
    files_without_counts: int

    @classmethod
    def of(cls, binned: FileSet) -> _Totals:
        bins = binned.totals["bins"]
        return cls(
            files=binned.count("files"),
            bytes=binned.count("bytes"),
            smallest=binned.totals["smallest"],
            largest=binned.totals["largest"],
            bins=int(bins) + 1 if bins is not None else 0,
            partitions=binned.count("partitions"),
            dvs=binned.count("dvs"),
            deleted_rows=binned.count("dv_rows"),
            records=binned.count("records"),
            files_without_counts=binned.count("no_stats"),
        )


_TOTALS = (
    *FILE_TOTALS,
    Total("smallest", "min", "size"),
    Total("largest", "max", "size"),
    Total("bins", "max", BIN),
    Total("partitions", "distinct", PARTITION),
)


def _metrics(request: _Request, totals: _Totals, considered_files: int) -> dict[str, Any]:
    """delta-spark's OPTIMIZE metrics before anything is written (the added files come later)."""
    return {
        "numFilesAdded": 0,
        "numFilesRemoved": totals.files,
        "filesAdded": _size_stats(0, 0, None, None),
        "filesRemoved": _size_stats(totals.files, totals.bytes, totals.smallest, totals.largest),
        "partitionsOptimized": totals.partitions,
        "zOrderStats": None,
        "numBatches": 1 if totals.files else 0,
        "totalConsideredFiles": considered_files,
        "totalFilesSkipped": considered_files - totals.files,
        "preserveInsertionOrder": request.kind not in CURVE_KINDS,
        "numFilesSkippedToReduceWriteAmplification": 0,
        "numBytesSkippedToReduceWriteAmplification": 0,
        "startTimeMs": request.started,
        "endTimeMs": int(time.time() * 1000),
        "totalClusterParallelism": request.spark.sparkContext.defaultParallelism,
        "totalScheduledTasks": totals.bins,
        "deletionVectorStats": {
            "numDeletionVectorsRemoved": totals.dvs,
            "numDeletionVectorRowsRemoved": totals.deleted_rows,
        },
        "numTableColumns": len(request.snapshot.schema.fields),
        "numTableColumnsWithStats": len(request.snapshot.schema.fields),
    }


def _run(request: _Request, considered: DataFrame, cached: list[Any]) -> OptimizeOutcome:
    now = int(time.time() * 1000)
    size_bytes = request.snapshot.stateBytes
    inputs = [t.column for t in _TOTALS if t.column]
    plan = plan_bins(considered, request.kind, request.sizes, cached, size_bytes, inputs)
    # bins planned on the driver give their files' totals and listing there: no aggregate, no job
    known = held_totals(plan.rows, _TOTALS) if plan.rows is not None else None
    binned = FileSet.of(
        plan.files, now, cached, size_bytes, _TOTALS, data_change=False, known=known, listing=plan.rows
    )
    totals = _Totals.of(binned)
    metrics = _metrics(request, totals, totals_of(considered, (Total("files", "count"),))["files"])
    if not totals.files:
        log.info(
            "OPTIMIZE of %s: nothing to rewrite among %d file(s)",
            request.table_path,
            metrics["totalConsideredFiles"],
        )
        return OptimizeOutcome(None, metrics)
    log.info(
        "OPTIMIZE (%s) of %s: rewriting %d of %d file(s) (%d bytes, %d with deletion vectors) "
        "in %d partition(s)",
        request.kind,
        request.table_path,
        totals.files,
        metrics["totalConsideredFiles"],
        totals.bytes,
        totals.dvs,
        totals.partitions,
    )
    txn = Transaction(request.spark, request.storage, request.table_path, request.snapshot)
    if request.where is not None:
        txn.readPredicate(request.where)
    txn.readFiles(binned.frame)
    binned.remove_from(txn)
    written = _rewrite(request, binned, totals, plan.rows)
    cached.append(written)
    adds, lines = _unchanged(written, request.spark, PROVIDER if request.kind == CLUSTER else None)
    txn.addFiles(adds, written.files, lines)  # type: ignore[arg-type]
    commit = _commit(request, txn, totals, written, metrics)
    log.info(
        "OPTIMIZE of %s committed version %d: %d file(s) removed, %d added",
        request.table_path,
        commit.version,
        totals.files,
        written.files,
    )
    return OptimizeOutcome(commit, metrics)


def _rewrite(request: _Request, chosen: FileSet, totals: _Totals, planned: list[Any] | None) -> WrittenFiles:
    """The chosen files' rows (deletion vectors applied, row ids and commit versions kept), laid
    out as the kind says, written as new data files. `planned`: the chosen files with their `BIN`
    and `size`, when the driver planned the bins."""
    snapshot, kind = request.snapshot, request.kind
    tracked = row_tracking_enabled(snapshot.protocol, snapshot.metadata)
    hidden: tuple[str, ...] = materialized_row_tracking(snapshot) if tracked else ()
    curve = kind in CURVE_KINDS
    # compaction needs each row's bin (its file's); a curve's groups are the partitions themselves
    binned = chosen.frame
    rows = read_files(
        snapshot, binned, row_tracking=tracked, carry=[] if curve else [BIN], listed=chosen.listed
    )
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
        live = totals.records - totals.deleted_rows if not totals.files_without_counts else rows.count()
        bits = rank_bits(len(request.columns))
        keys = [sort_key(F.col(f"`{c}`"), snapshot.schema[c].dataType) for c in request.columns]
        boundaries = quantile_boundaries(rows, [key for key, _ in keys], live, bits)
        ranks = [rank_of(key, numeric, cuts) for (key, numeric), cuts in zip(keys, boundaries, strict=True)]
        # each group's bytes: from the bins' rows when the driver planned them, else one job
        per_group: dict[int, int] = {}
        if planned is not None:
            for file in planned:
                per_group[file[BIN]] = per_group.get(file[BIN], 0) + (file["size"] or 0)
        else:
            grouped = binned.groupBy(BIN).agg(F.sum("size").alias("size")).collect()
            per_group = {r[BIN]: int(r["size"] or 0) for r in grouped}
        files = sum(files_for(size, request.sizes.max_file_size) for size in per_group.values())
        laid = along_curve(rows, list(snapshot.partitionColumns), ranks, files, bits)
        # the files' boundaries on the curve from as many rows as the quantiles (all, when few)
        sampled = range_sample(request.spark, min(live, SAMPLE_ROWS), files)
    else:
        laid = one_task_per_bin(rows, totals.bins).drop(BIN)
        sampled = contextlib.nullcontext()
    with sampled, small_file_reads(request.spark, totals.bytes // totals.files):
        return write_data_files(
            request.spark,
            snapshot.tableRoot,
            snapshot.schema,
            snapshot.partitionColumns,
            snapshot.configuration,
            laid,
            check_rows=False,
            mode=snapshot.columnMappingMode,
            hidden_columns=hidden,
            storage=request.storage,
        )


def _commit(
    request: _Request, txn: Transaction, totals: _Totals, written: WrittenFiles, metrics: dict[str, Any]
) -> CommitResult:
    """Fill in the added files' metrics and commit (`OPTIMIZE`, or `REORG` for a purge) with
    `dataChange=false`: snapshot isolation."""
    kind, columns = request.kind, request.columns
    added_sizes = _added_sizes(written, request.spark)
    metrics["numFilesAdded"] = written.files
    metrics["filesAdded"] = _size_stats(written.files, written.bytes, *added_sizes)
    if kind == ZORDER:
        metrics["zOrderStats"] = {
            "strategyName": "all",
            "inputCubeFiles": {"num": 0, "size": 0},
            "inputOtherFiles": {"num": totals.files, "size": totals.bytes},
            "inputNumCubes": 0,
            "mergedFiles": {"num": totals.files, "size": totals.bytes},
            "numOutputCubes": written.files,
        }
    metrics["endTimeMs"] = int(time.time() * 1000)
    commit_metrics = {
        "numRemovedFiles": totals.files,
        "numRemovedBytes": totals.bytes,
        "numAddedFiles": written.files,
        "numAddedBytes": written.bytes,
        "minFileSize": added_sizes[0],
        "maxFileSize": added_sizes[1],
        "numDeletionVectorsRemoved": totals.dvs,
        "executionTimeMs": metrics["endTimeMs"] - request.started,
    }
    predicate = [str(request.where)] if request.where is not None else []
    if kind == PURGE:
        parameters: dict[str, Any] = {"predicate": predicate, "applyPurge": "true"}
        return txn.commit("REORG", parameters, commit_metrics, dataChange=False)
    parameters = {
        "predicate": predicate,
        "zOrderBy": columns if kind == ZORDER else [],
        "clusterBy": columns if kind == CLUSTER else [],
        "auto": False,
    }
    return txn.commit("OPTIMIZE", parameters, commit_metrics, dataChange=False)


def _added_sizes(written: WrittenFiles, spark: SparkSession) -> tuple[int | None, int | None]:
    if written.lines is not None:
        sizes = [int(json.loads(line)["add"]["size"]) for line, _ in written.lines]
        return (min(sizes), max(sizes)) if sizes else (None, None)
    row = written.adds_frame(spark).agg(F.min("add.size"), F.max("add.size")).first()
    return row[0], row[1]
