"""DELETE: remove the rows matching a condition, as one commit (copy-on-write).

Files that cannot hold a matching row are skipped (partition values and statistics); files whose
partition values alone decide the condition are removed whole, without reading them. The other
candidate files are read, their remaining rows written as new files (same checks and statistics
as any write) and the originals removed. Rows where the condition is NULL stay, as in SQL.

With the change data feed on, the deleted rows of rewritten files are written as change data files
(`_change_data/`, `_change_type = 'delete'`) and recorded as `cdc` actions; when only whole files
are removed the feed is derived from the `remove` actions, as the protocol allows.

Deletion vectors are not produced yet (files are rewritten even when `delta.enableDeletionVectors`
is on, which the protocol permits); tables with row tracking are refused by name, since rewritten
rows would need their materialized row ids.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from deltaspark.errors import InvalidArgumentError, UnsupportedWriterFeatureError
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.operations.write import check_writable_rows, removes_of, write_data_files
from deltaspark.read.predicates import from_filter, references
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)


def _partition_only(condition: Any, partition_columns: list[str]) -> bool:
    used = references(from_filter(condition))
    names = {c.lower() for c in partition_columns}
    return used is not None and bool(used) and {u.lower() for u in used} <= names


def delete(
    spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot, condition: Any = None
) -> CommitResult | None:
    """Delete the rows matching `condition` (a SQL string or Column; all rows when None)."""
    metadata, protocol = snapshot.metadata, snapshot.protocol
    check_writable_rows(protocol, metadata, table_path)
    if row_tracking_enabled(protocol, metadata) or protocol.hasFeature("rowTracking"):
        raise UnsupportedWriterFeatureError(
            f"Cannot delete from {table_path} yet: `rowTracking` needs the rewritten rows' materialized "
            "row ids, which deltaspark does not write",
            ["rowTracking"],
        )
    now = int(time.time() * 1000)
    txn = Transaction(spark, storage, table_path, snapshot)
    parameters: dict[str, Any] = {"predicate": [str(condition)] if condition is not None else []}
    metrics: dict[str, Any] = {
        "numRemovedFiles": 0,
        "numAddedFiles": 0,
        "numDeletedRows": 0,
        "numCopiedRows": 0,
    }
    if condition is None:
        txn.readWholeTable()
        files = snapshot.files()
        whole, partial = files, None
    else:
        if not isinstance(condition, (str, Column)):
            raise InvalidArgumentError("delete() takes the condition as a SQL string or a Column")
        txn.readPredicate(condition)
        files = snapshot.files(condition)
        if _partition_only(condition, snapshot.partitionColumns):
            whole, partial = files, None  # the partition values decide every row of these files
        else:
            whole, partial = None, files
    removed = whole if whole is not None else partial
    assert removed is not None
    txn.readFiles(removed)
    counts = removed.agg(F.count(F.lit(1)), F.sum("stats_parsed.numRecords"), F.sum("size")).first()
    if not counts[0]:
        log.info("Nothing to delete from %s: no file can hold a matching row", table_path)
        return None
    metrics["numRemovedFiles"] = int(counts[0])
    metrics["numRemovedBytes"] = int(counts[2] or 0)
    txn.removeFiles(removes_of(removed, now))
    cached = []
    try:
        if partial is not None:
            rows = read_files(snapshot, partial)
            expression = F.expr(condition) if isinstance(condition, str) else condition
            matches = F.coalesce(expression, F.lit(False))
            schema = snapshot.schema
            kept = rows.where(~matches).select(*[F.col(f"`{f.name}`") for f in schema.fields])
            adds, per_file = write_data_files(
                spark,
                snapshot.tableRoot,
                schema,
                snapshot.partitionColumns,
                snapshot.configuration,
                kept,
            )
            cached.append(per_file)
            txn.addFiles(adds)
            written = adds.agg(F.count(F.lit(1)), F.sum("num_records"), F.sum("add.size")).first()
            metrics["numAddedFiles"] = int(written[0] or 0)
            metrics["numCopiedRows"] = int(written[1] or 0)
            metrics["numAddedBytes"] = int(written[2] or 0)
            deleted = rows.where(matches)
            if snapshot.configuration.get("delta.enableChangeDataFeed", "").lower() == "true":
                change_schema = StructType([*schema.fields, StructField("_change_type", StringType(), True)])
                changes = deleted.select(
                    *[F.col(f"`{f.name}`") for f in schema.fields], F.lit("delete").alias("_change_type")
                )
                cdc, cdc_files = write_data_files(
                    spark,
                    snapshot.tableRoot,
                    change_schema,
                    snapshot.partitionColumns,
                    {"delta.dataSkippingNumIndexedCols": "0"},
                    changes,
                    directory="_change_data/",
                    check_rows=False,
                )
                cached.append(cdc_files)
                change_files = 0
                for row in cdc.select(
                    "add.path", "add.partitionValues", "add.size", "num_records"
                ).collect():  # one per changed partition and task: few
                    txn.addAction(
                        {
                            "cdc": {
                                "path": row["path"],
                                "partitionValues": dict(row["partitionValues"] or {}),
                                "size": int(row["size"]),
                                "dataChange": False,
                            }
                        }
                    )
                    metrics["numDeletedRows"] += int(row["num_records"])
                    change_files += 1
                metrics["numAddedChangeFiles"] = change_files
            else:
                metrics["numDeletedRows"] = int(deleted.count())
        else:
            metrics["numDeletedRows"] = int(counts[1] or 0)
        return txn.commit("DELETE", parameters, metrics)
    finally:
        for frame in cached:
            frame.unpersist()
