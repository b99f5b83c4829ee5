"""DELETE: remove the rows matching a condition, as one commit.

Files that cannot hold a matching row are skipped (partition values and statistics); files whose
partition values alone decide the condition are removed whole, without reading them. The other
candidate files are read once to find the files that really hold a matching row (rows where the
condition is NULL stay, as in SQL), and only those change:

- with deletion vectors (`delta.enableDeletionVectors` on a table supporting the feature), the
  matching rows are marked deleted in a new DV per file (`deletion_vector_writer`); a file whose
  every row is then deleted is removed instead;
- otherwise (copy-on-write) the file's remaining rows are written as new files, with the same
  checks and statistics as any write, and the original is removed.

With the change data feed on, the deleted rows of changed files are written as change data files
(`_change_data/`, `_change_type = 'delete'`) and recorded as `cdc` actions; when only whole files
are removed the feed is derived from the `remove` actions, as the protocol allows.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from deltaspark.errors import AppendOnlyTableError, UnsupportedWriterFeatureError
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.features.row_tracking import materialized_columns
from deltaspark.log.paths import canonical_path, path_key
from deltaspark.operations.deletion_vector_writer import DeletionVectorUpdate, write_deletion_vectors
from deltaspark.operations.file_set import FileSet, Total, in_one_task, totals_of
from deltaspark.operations.write import add_of, check_writable_rows, removes_of, write_data_files
from deltaspark.read.predicates import from_filter, references
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import held_frame, is_local, persist_sized
from deltaspark.storage import Storage
from deltaspark.transaction.idempotent import apply_once
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)

FILE_COLUMN = "__deltaspark_file"  # the data file each read row came from (its `path` in the log)


def _partition_only(condition: Any, partition_columns: list[str]) -> bool:
    used = references(from_filter(condition))
    names = {c.lower() for c in partition_columns}
    return used is not None and bool(used) and {u.lower() for u in used} <= names


def writes_deletion_vectors(snapshot: Snapshot) -> bool:
    """Whether DML on this table marks rows deleted with DVs instead of rewriting files."""
    enabled = snapshot.metadata.flag("delta.enableDeletionVectors")
    return enabled and snapshot.protocol.hasFeature("deletionVectors")


def check_rows_changeable(snapshot: Snapshot, table_path: str, verb: str) -> None:
    """Refuse DML that rewrites or deletes rows where the writer or the table does not allow it."""
    check_writable_rows(snapshot.protocol, snapshot.metadata, table_path)
    if snapshot.metadata.flag("delta.appendOnly"):
        raise AppendOnlyTableError(
            f"Cannot {verb} {table_path}: the table is append-only (delta.appendOnly=true)"
        )


def delete(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot,
    condition: Any = None,
    app: tuple[str, int] | None = None,
) -> CommitResult | None:
    """Delete the rows matching `condition` (a SQL string or Column; all rows when None); `app`,
    an idempotent write's (txnAppId, txnVersion): nothing when the table already holds it."""
    started = time.time()
    check_rows_changeable(snapshot, table_path, "delete from")
    use_dvs = writes_deletion_vectors(snapshot)
    now = int(time.time() * 1000)
    txn = Transaction(spark, storage, table_path, snapshot)
    if not apply_once(txn, app, table_path):
        return None
    parameters: dict[str, Any] = {"predicate": [str(condition)] if condition is not None else []}
    metrics: dict[str, Any] = {
        "numRemovedFiles": 0,
        "numAddedFiles": 0,
        "numDeletedRows": 0,
        "numCopiedRows": 0,
        "numAddedChangeFiles": 0,
        "numRemovedBytes": 0,
        "numAddedBytes": 0,
        "numDeletionVectorsAdded": 0,
        "numDeletionVectorsRemoved": 0,
        "numDeletionVectorsUpdated": 0,
    }
    if condition is None:
        txn.readWholeTable()
        files, whole_files = snapshot.files(), True
    else:
        resolve_expression(spark, snapshot.schema, condition, "The delete condition", table_path)
        txn.readPredicate(condition)
        files = snapshot.files(condition)
        # When the partition values decide the condition, every row of a candidate file matches.
        whole_files = _partition_only(condition, snapshot.partitionColumns)
    cached: list[Any] = []
    try:
        # One row per candidate file, used by every step below: replay the log once, not per step.
        candidates = FileSet.of(files, now, cached, snapshot.stateBytes)
        txn.readFiles(candidates.frame)
        if not candidates.count("files"):
            log.info("Nothing to delete from %s: no file can hold a matching row", table_path)
            return None
        if whole_files:
            candidates.remove_from(txn)
            metrics["numRemovedFiles"] = candidates.count("files")
            metrics["numRemovedBytes"] = candidates.count("bytes")
            metrics["numDeletedRows"] = candidates.count("records") - candidates.count("dv_rows")
            metrics["numDeletionVectorsRemoved"] = candidates.count("dvs")
        else:
            expression = F.expr(condition) if isinstance(condition, str) else condition
            matches = F.coalesce(expression, F.lit(False))
            if use_dvs and not candidates.count("no_stats"):
                deleted = _mark_deleted(
                    spark, storage, snapshot, txn, candidates, matches, now, metrics, cached
                )
            else:
                if use_dvs:
                    log.info("Rewriting files of %s: some have no numRecords statistic for a DV", table_path)
                deleted = _rewrite(spark, snapshot, txn, candidates, matches, now, metrics, cached)
            if deleted is None:
                log.info("Nothing to delete from %s: no row matches", table_path)
                return None
            _record_changes(spark, snapshot, txn, deleted, metrics, cached)
        metrics["executionTimeMs"] = int((time.time() - started) * 1000)
        return txn.commit("DELETE", parameters, metrics)
    finally:
        for frame in cached:
            frame.unpersist()


def read_candidates(
    snapshot: Snapshot, files: DataFrame, listed: list[Any] | None = None, row_tracking: bool = False
) -> DataFrame:
    """The rows of `files` (existing DVs applied), each with its position and its file's path
    (and `_metadata.row_id`/`row_commit_version` with `row_tracking`); `listed` as `read_files`
    takes it (then small files are read in one task)."""
    rows = read_files(
        snapshot,
        files.withColumn(FILE_COLUMN, F.col("path")),
        row_tracking=row_tracking,
        carry=[FILE_COLUMN],
        keep_row_index=True,
        listed=listed,
    )
    return in_one_task(rows, listed)


def touched_files(
    snapshot: Snapshot,
    files: DataFrame,
    listed: list[Any] | None,
    matches: Column,
    now: int,
    cached: list[Any],
) -> FileSet:
    """The candidate `files` (`listed`: what a read collects of them, when held) holding a row
    that `matches`, with the number of such rows (`matched`, among their totals): one read of the
    candidates. Candidates held on the driver (a small log's) stay there: each file's count is
    collected and the touched ones picked from them (`FileSet.among`)."""
    return files_of(snapshot, files, read_candidates(snapshot, files, listed).where(matches), now, cached)


def files_of(
    snapshot: Snapshot, files: DataFrame, matched: DataFrame, now: int, cached: list[Any]
) -> FileSet:
    """The `files` holding one of the `matched` rows (`read_candidates` rows), with the number of
    such rows (`matched`, among their totals)."""
    per_file = matched.groupBy(F.col(FILE_COLUMN).alias("__touched")).agg(
        F.count(F.lit(1)).alias("__matched")
    )
    return FileSet.among(files, per_file, now, cached, snapshot.stateBytes)


@dataclass(frozen=True)
class DvMarking:
    """What `mark_rows_deleted` changed (delta-spark's DV metrics are derived from it)."""

    changed_files: int  # files with matched rows: each removed, and added back with its new DV unless emptied
    emptied_files: int  # of those, files whose every row is now deleted: removed only
    emptied_bytes: int
    newly_deleted: int  # rows deleted by the new DVs that were not deleted before
    had_dv: int  # changed files that had a DV before
    emptied_with_dv: int
    dv_files: int

    def record(self, metrics: dict[str, Any]) -> None:
        """delta-spark's DV metrics; "added" and "removed" both count the updated DVs too."""
        metrics["numRemovedFiles"] = self.emptied_files
        metrics["numRemovedBytes"] = self.emptied_bytes
        metrics["numDeletionVectorsAdded"] = self.changed_files - self.emptied_files
        metrics["numDeletionVectorsUpdated"] = self.had_dv - self.emptied_with_dv
        metrics["numDeletionVectorsRemoved"] = self.had_dv


# A marking's totals over the changed files (`DvMarking`'s fields, in its order).
_MARKING_TOTALS = (
    Total("changed", "count"),
    Total("emptied", "count", "__emptied"),
    Total("emptied_bytes", "sum", "__emptiedBytes"),
    Total("deleted", "sum", "__newlyDeleted"),
    Total("old_dvs", "count", "__oldDv"),
    Total("emptied_old_dvs", "count", "__emptiedOldDv"),
)


def _held_changed(files: DataFrame, update: DeletionVectorUpdate, root: str) -> DataFrame | None:
    """The files that got a new DV (`files`' columns, `key`, `__newDv`, `__newStats`,
    `__newlyDeleted`), joined on the driver and held there when the files and the descriptors
    both are: the marking's totals, removes and adds then run no Spark job. None when either is
    not held, or a path's key is not the driver's to compute (Spark joins them)."""
    if update.held is None or not is_local(files):
        return None
    new = {key: rest for key, *rest in update.held}
    rows = []
    for row in files.collect():
        key = path_key(row["path"], root)
        if key in new:
            rows.append((*row, key, *new[key]))
    if len({r[-4] for r in rows}) != len(new) or len(rows) != len(new):
        return None  # a key the driver computes otherwise, or a path listed twice: Spark joins
    descriptor = update.descriptors.schema["deletionVector"].dataType
    schema = StructType(
        [
            *files.schema.fields,
            StructField("key", StringType()),
            StructField("__newDv", descriptor),
            StructField("__newStats", StringType()),
            StructField("__newlyDeleted", LongType()),
        ]
    )
    return held_frame(files.sparkSession, rows, schema)


def mark_rows_deleted(
    spark: SparkSession,
    storage: Storage,
    snapshot: Snapshot,
    txn: Transaction,
    file_set: FileSet,
    matched: DataFrame,
    now: int,
    cached: list[Any],
    held: Any = None,
) -> DvMarking:
    """Mark `matched` rows (of `read_candidates(snapshot, files)`; or each file's rows listed, as
    `write_deletion_vectors` takes them) deleted: a new DV per file holding
    one (its old deleted rows kept), the file removed and added back with it, or removed alone when
    every row is then deleted. Nothing is added to `txn` when no file changes. The new descriptors
    stay cached (in `cached`, for the caller to unpersist after the commit): computing them again
    would write the DV files again. `file_set`'s totals give what the DV writer needs: how many
    files there are, their rows in all (which lets the driver write few DV files itself) and
    whether any has a DV (old deleted rows to keep). `held`: the listed rows as a pyarrow Table
    (`path`, `rows`), when the caller holds them on the driver."""
    files = file_set.frame
    update = write_deletion_vectors(
        spark,
        storage,
        snapshot,
        files,
        matched
        if "rows" in matched.columns
        else matched.select(F.col(FILE_COLUMN).alias("path"), F.col("_row_index").alias("row_index")),
        file_set.count("files"),
        file_set.records(),
        file_set.count("dvs") > 0,
        held,
    )
    cached.append(update)
    changed = _held_changed(files, update, snapshot.tableRoot)
    if changed is None:
        new = update.descriptors.select(
            "key",
            F.col("deletionVector").alias("__newDv"),
            F.col("stats").alias("__newStats"),
            F.col("newlyDeleted").alias("__newlyDeleted"),
        )
        changed = files.withColumn("key", canonical_path("path", snapshot.tableRoot)).join(new, "key")
        # its totals, removes and adds: one join, not three
        changed = persist_sized(changed, snapshot.stateBytes)
        cached.append(changed)
    emptied = F.col("__newDv.cardinality") >= F.col("stats_parsed.numRecords")
    measured = changed.select(
        F.when(emptied, 1).alias("__emptied"),
        F.when(emptied, F.col("size")).alias("__emptiedBytes"),
        "__newlyDeleted",
        F.when(F.col("deletionVector").isNotNull(), 1).alias("__oldDv"),
        F.when(emptied & F.col("deletionVector").isNotNull(), 1).alias("__emptiedOldDv"),
    )
    totals = totals_of(measured, _MARKING_TOTALS)
    marking = DvMarking(*(int(totals[t.name] or 0) for t in _MARKING_TOTALS), update.dv_files)
    if marking.changed_files:
        # the counts let the transaction hold few actions on the driver (no Spark job at commit)
        txn.removeFiles(removes_of(changed, now), marking.changed_files)
        add = add_of(dataChange=F.lit(True), stats=F.col("__newStats"), deletionVector=F.col("__newDv"))
        num_records = F.col("stats_parsed.numRecords").alias("num_records")
        kept = marking.changed_files - marking.emptied_files
        txn.addFiles(changed.where(~emptied).select(add.alias("add"), num_records), kept)
    return marking


def _mark_deleted(
    spark: SparkSession,
    storage: Storage,
    snapshot: Snapshot,
    txn: Transaction,
    candidates: FileSet,
    matches: Column,
    now: int,
    metrics: dict[str, Any],
    cached: list[Any],
) -> DataFrame | None:
    """Deletion vectors for the files holding matching rows; returns the deleted rows (for CDF)."""
    matched = read_candidates(snapshot, candidates.frame, candidates.listed).where(matches)
    marking = mark_rows_deleted(spark, storage, snapshot, txn, candidates, matched, now, cached)
    if not marking.changed_files:
        return None
    marking.record(metrics)
    metrics["numDeletedRows"] = marking.newly_deleted
    log.info(
        "Deletion vectors for %d file(s) of %s (%d emptied and removed), %d row(s) deleted, in %d DV file(s)",
        marking.changed_files,
        snapshot.tableRoot,
        marking.emptied_files,
        marking.newly_deleted,
        marking.dv_files,
    )
    return matched


def _rewrite(
    spark: SparkSession,
    snapshot: Snapshot,
    txn: Transaction,
    candidates: FileSet,
    matches: Column,
    now: int,
    metrics: dict[str, Any],
    cached: list[Any],
) -> DataFrame | None:
    """Copy-on-write: the files holding matching rows are rewritten without them. One read of the
    candidates counts each file's matching rows; the files holding one are read again to copy
    the others. On a table with row tracking the copied rows keep their row ids and commit
    versions, written into the materialized columns the table names (as delta-spark does)."""
    touched = touched_files(snapshot, candidates.frame, candidates.listed, matches, now, cached)
    if not touched.count("files"):
        return None
    metrics["numRemovedFiles"] = touched.count("files")
    metrics["numRemovedBytes"] = touched.count("bytes")
    metrics["numDeletionVectorsRemoved"] = touched.count("dvs")
    metrics["numDeletedRows"] = touched.count("matched")
    touched.remove_from(txn)
    tracked = row_tracking_enabled(snapshot.protocol, snapshot.metadata)
    rows = read_files(snapshot, touched.frame.drop("__matched"), row_tracking=tracked, listed=touched.listed)
    schema = snapshot.schema
    hidden: tuple[str, ...] = materialized_row_tracking(snapshot) if tracked else ()
    kept = rows.where(~matches).select(
        *[F.col(f"`{f.name}`") for f in schema.fields],
        *[
            F.col(f"_metadata.{source}").alias(name)
            for source, name in zip(("row_id", "row_commit_version"), hidden, strict=False)
        ],
    )
    written = write_data_files(
        spark,
        snapshot.tableRoot,
        schema,
        snapshot.partitionColumns,
        snapshot.configuration,
        kept,
        mode=snapshot.columnMappingMode,
        hidden_columns=hidden,
    )
    cached.append(written)
    txn.addFiles(written.adds, written.files, written.lines)  # type: ignore[arg-type]
    metrics["numAddedFiles"] = written.files
    metrics["numCopiedRows"] = written.rows
    metrics["numAddedBytes"] = written.bytes
    return rows.where(matches)


def materialized_row_tracking(snapshot: Snapshot) -> tuple[str, str]:
    """The materialized row id and row commit version column names a row-tracking table sets."""
    row_id, commit_version = materialized_columns(snapshot.metadata)
    if not row_id or not commit_version:
        raise UnsupportedWriterFeatureError(
            f"Cannot rewrite rows of {snapshot.tableRoot}: row tracking is enabled but the table names "
            "no materialized row id / row commit version column "
            "(delta.rowTracking.materializedRowIdColumnName, ...MaterializedRowCommitVersionColumnName)",
            ["rowTracking"],
        )
    return row_id, commit_version


def write_change_files(
    spark: SparkSession,
    snapshot: Snapshot,
    txn: Transaction,
    changes: DataFrame,
    cached: list[Any],
    schema: StructType | None = None,
) -> tuple[int, int]:
    """`changes` (the table's columns - `schema` when the commit changes them - and
    `_change_type`) written under `_change_data/` and added to `txn` as `cdc` actions; (change
    files, rows)."""
    schema = schema or snapshot.schema
    change_schema = StructType([*schema.fields, StructField("_change_type", StringType(), True)])
    cdc = write_data_files(
        spark,
        snapshot.tableRoot,
        change_schema,
        snapshot.partitionColumns,
        {"delta.dataSkippingNumIndexedCols": "0"},
        changes,
        directory="_change_data/",
        check_rows=False,
        mode=snapshot.columnMappingMode,
    )
    cached.append(cdc)
    rows, files = 0, 0
    for add, records in cdc.add_rows():  # one per changed partition and task: few
        txn.addAction(
            {
                "cdc": {
                    "path": add["path"],
                    "partitionValues": dict(add.get("partitionValues") or {}),
                    "size": int(add["size"]),
                    "dataChange": False,
                }
            }
        )
        rows += records
        files += 1
    return files, rows


def _record_changes(
    spark: SparkSession,
    snapshot: Snapshot,
    txn: Transaction,
    deleted: DataFrame,
    metrics: dict[str, Any],
    cached: list[Any],
) -> None:
    """The deleted rows as change data files when the feed is on; else just their count."""
    if snapshot.configuration.get("delta.enableChangeDataFeed", "").lower() != "true":
        if not metrics["numDeletedRows"]:
            metrics["numDeletedRows"] = int(deleted.count())
        return
    columns = [F.col(f"`{f.name}`") for f in snapshot.schema.fields]
    changes = deleted.select(*columns, F.lit("delete").alias("_change_type"))
    change_files, deleted_rows = write_change_files(spark, snapshot, txn, changes, cached)
    metrics["numAddedChangeFiles"] = change_files
    if not metrics["numDeletedRows"]:
        metrics["numDeletedRows"] = deleted_rows
