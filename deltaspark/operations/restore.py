"""RESTORE: make the latest version hold exactly the files of an earlier one, as one commit.

The two snapshots are compared as DataFrames keyed by (canonical path, deletion vector id): files
of the target that are not live now are re-added, files live now that the target lacks are
removed. Nothing per file is collected, except the paths handed to Spark's own existence check of
the files to re-add (a restore must not reference a file VACUUM deleted). The protocol is never
downgraded; the target's metadata comes back. Metrics are delta-spark's.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import InvalidArgumentError, MissingDataFileError
from deltaspark.features.deletion_vectors import dv_unique_id
from deltaspark.features.enablement import required_protocol
from deltaspark.log import action_schemas as schemas
from deltaspark.log.paths import canonical_path
from deltaspark.operations.write import removes_of
from deltaspark.read.scan import escape_glob
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import read_paths
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)


def _keyed(files: DataFrame, root: str) -> DataFrame:
    dv = F.coalesce(dv_unique_id(F.col("deletionVector")), F.lit(""))
    return files.withColumn("__key", F.concat_ws("\0", canonical_path(F.col("path"), root), dv))


def _check_exist(spark: SparkSession, files: DataFrame, root: str) -> None:
    paths = [r[0] for r in files.select(canonical_path(F.col("path"), root)).collect()]
    if not paths:
        return
    try:
        # Resolving the relation checks that every named file exists (in parallel, in the JVM);
        # nothing is read (an empty file would not even yield a row, so rows are not counted).
        read_paths(spark, spark.read.format("binaryFile"), "load", [escape_glob(p) for p in paths])
    except Exception as exc:  # Spark names the first missing path
        text = str(exc)
        if "PATH_NOT_FOUND" in text or "does not exist" in text:
            missing = next((p for p in paths if p in text or p.replace("file:/", "file:///") in text), text)
            raise MissingDataFileError(
                missing, "RESTORE would reference a data file that no longer exists (was it vacuumed?)"
            ) from exc
        raise


def restore(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    latest: Snapshot,
    target: Snapshot,
    parameters: dict[str, object],
) -> CommitResult:
    if target.version >= latest.version:
        raise InvalidArgumentError(
            f"Cannot restore {table_path} to version {target.version}: the latest version is {latest.version}"
        )
    root = latest.tableRoot
    now = latest.files()
    then = target.files()
    current, wanted = _keyed(now, root), _keyed(then, root)
    to_add = wanted.join(current.select("__key"), "__key", "left_anti").drop("__key")
    to_remove = current.join(wanted.select("__key"), "__key", "left_anti").drop("__key")
    _check_exist(spark, to_add, root)

    txn = Transaction(spark, storage, table_path, latest)
    txn.readWholeTable()
    txn.updateProtocol(required_protocol(latest.protocol, target.protocol.tableFeatures))
    if target.metadata != latest.metadata:
        txn.updateMetadata(target.metadata)
    # A re-added file is the target's `add` with dataChange set (the transaction orders the fields).
    kept = [F.col(f.name) for f in schemas.ADD.fields if f.name != "dataChange"]
    adds = to_add.select(
        F.struct(*kept, F.lit(True).alias("dataChange")).alias("add"),
        F.col("stats_parsed.numRecords").alias("num_records"),
    )
    txn.addFiles(adds)
    txn.removeFiles(removes_of(to_remove, int(time.time() * 1000)))
    added = to_add.agg(F.count(F.lit(1)), F.sum("size")).first()
    removed = to_remove.agg(F.count(F.lit(1)), F.sum("size")).first()
    after = then.agg(F.count(F.lit(1)), F.sum("size")).first()
    metrics = {
        "tableSizeAfterRestore": int(after[1] or 0),
        "numOfFilesAfterRestore": int(after[0] or 0),
        "numRemovedFiles": int(removed[0] or 0),
        "numRestoredFiles": int(added[0] or 0),
        "removedFilesSize": int(removed[1] or 0),
        "restoredFilesSize": int(added[1] or 0),
    }
    log.info("Restoring %s to version %d: %s", table_path, target.version, metrics)
    return txn.commit("RESTORE", parameters, metrics)
