"""`repair`: remove the log's references to data files (or their deletion vector files) that no
longer exist, like Databricks' `FSCK REPAIR TABLE`, with one commit through the transaction path.

A dry run returns what would be removed. The commit records the files as read, so a concurrent
writer that removed or rewrote them conflicts instead of the repair undoing its work.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltaspark.audit.context import AuditContext
from deltaspark.audit.file_checks import data_files_exist, deletion_vectors
from deltaspark.errors import DeltaSparkError
from deltaspark.operations.write import removes_of
from deltaspark.transaction.transaction import Transaction

log = logging.getLogger(__name__)

REPAIR_COLUMNS = ["path", "dataFileMissing", "deletionVectorPath", "deletionVectorFileMissing"]
_DV_MISSING = r"^deletion vector file (.*) does not exist$"


def missing_references(ctx: AuditContext) -> DataFrame:
    """Live files whose data file or deletion vector file is missing: `path` (as logged),
    `dataFileMissing`, `deletionVectorPath`, `deletionVectorFileMissing`, plus the `add`."""
    data = (
        data_files_exist(ctx)
        .where(F.col("detail") == "data file does not exist")
        .select(F.col("path").alias("_key"), F.lit(True).alias("dataFileMissing"))
    )
    dvs = (
        deletion_vectors(ctx)
        .where(F.col("detail").rlike(_DV_MISSING))
        .select(
            F.col("path").alias("_key"),
            F.regexp_extract("detail", _DV_MISSING, 1).alias("deletionVectorPath"),
            F.lit(True).alias("deletionVectorFileMissing"),
        )
    )
    missing = data.join(dvs, "_key", "full_outer")
    # The whole `add`, stats included (the audit caches it lean): a remove carries what its add had.
    live = ctx.snapshot.fileActions().where("is_add").select(F.col("path_key").alias("_key"), "add")
    return live.join(missing, "_key").select(
        F.col("add.path").alias("path"),
        F.coalesce("dataFileMissing", F.lit(False)).alias("dataFileMissing"),
        "deletionVectorPath",
        F.coalesce("deletionVectorFileMissing", F.lit(False)).alias("deletionVectorFileMissing"),
        "add",
    )


def repair(ctx: AuditContext, dry_run: bool = True) -> DataFrame:
    """The references to missing files (`REPAIR_COLUMNS`); unless `dry_run`, removed in one commit."""
    if ctx.snapshot is None:
        raise DeltaSparkError(
            f"{ctx.table_path}: version {ctx.end_version} cannot be loaded, so it cannot be repaired"
        )
    found = ctx.keep(missing_references(ctx))
    count = found.count()
    log.info("%d file reference(s) in %s point to missing files", count, ctx.table_path)
    if dry_run or count == 0:
        return found.select(*REPAIR_COLUMNS)
    files = found.select("add.*")
    txn = Transaction(ctx.spark, ctx.storage, ctx.table_path, ctx.snapshot)
    txn.readFiles(files)
    txn.removeFiles(removes_of(files, int(time.time() * 1000)))
    metrics = {
        "numFilesRemoved": count,
        "numMissingDataFiles": found.where("dataFileMissing").count(),
        "numMissingDeletionVectorFiles": found.where("deletionVectorFileMissing").count(),
    }
    result = txn.commit("FSCK", {"dryRun": False}, metrics)
    log.info("Repair of %s committed version %d: %s", ctx.table_path, result.version, metrics)
    return found.select(*REPAIR_COLUMNS)
