"""RESTORE: make the latest version hold exactly the files of an earlier one, as one commit.

The two snapshots are compared in one full outer join keyed by (canonical path, deletion vector
id): files of the target that are not live now are re-added, files live now that the target lacks
are removed. Each snapshot is replayed once: the join's differing rows (a lean struct of each
side's action, no parsed statistics) are cached, and the existence check, the metrics, the
commit's lines and its checksum all read that cache. The restored table's size comes from the
target version's checksum file (`N.crc`), or one aggregate over the target when it has none.
Nothing per file is collected, except the paths handed to Spark's own existence check of the files
to re-add (a restore must not reference a file VACUUM deleted). The protocol is never downgraded;
the target's metadata comes back. Metrics are delta-spark's.
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
from deltaspark.operations.write import add_of, removes_of
from deltaspark.read.scan import escape_glob
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import persist_sized, read_paths
from deltaspark.storage import Storage
from deltaspark.transaction.checksum import read_checksum
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)


# The columns of `files()` a re-added or removed file needs (`add` fields and the record count).
_LEAN = [f.name for f in schemas.ADD.fields]


def _keyed(files: DataFrame, root: str, side: str) -> DataFrame:
    """`files()` rows as (`__key`, one struct column `side` of the lean action fields)."""
    dv = F.coalesce(dv_unique_id(F.col("deletionVector")), F.lit(""))
    lean = F.struct(*[F.col(name) for name in _LEAN], F.col("stats_parsed.numRecords").alias("num_records"))
    key = F.concat_ws("\0", canonical_path("path", root), dv)
    return files.select(key.alias("__key"), lean.alias(side))


def _check_exist(spark: SparkSession, files: DataFrame, root: str) -> None:
    paths = [r[0] for r in files.select(canonical_path("path", root)).collect()]
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


def _target_totals(storage: Storage, table_path: str, target: Snapshot) -> dict[str, int]:
    """Files and bytes of the target version: its checksum file when it has one, else counted."""
    doc = read_checksum(storage, table_path, target.version)
    if doc and isinstance(doc.get("numFiles"), int) and isinstance(doc.get("tableSizeBytes"), int):
        return {"numFiles": doc["numFiles"], "sizeInBytes": doc["tableSizeBytes"]}
    return target.summary()


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
    joined = _keyed(latest.files(), root, "now").join(_keyed(target.files(), root, "then"), "__key", "full")
    only_then, only_now = F.col("now").isNull(), F.col("then").isNull()
    diff = joined.where(only_then | only_now).select(
        only_then.alias("restored"), F.when(only_then, F.col("then")).otherwise(F.col("now")).alias("file")
    )
    diff = persist_sized(diff, latest.stateBytes + target.stateBytes)
    try:
        counts = diff.groupBy("restored").agg(F.count(F.lit(1)), F.sum("file.size")).collect()
        after = _target_totals(storage, table_path, target)
        by_side = {bool(r[0]): (int(r[1]), int(r[2] or 0)) for r in counts}
        to_add = diff.where("restored").select("file.*")
        to_remove = diff.where("NOT restored").select("file.*")
        if by_side.get(True):
            _check_exist(spark, to_add, root)

        txn = Transaction(spark, storage, table_path, latest)
        txn.readWholeTable()
        txn.updateProtocol(required_protocol(latest.protocol, target.protocol.tableFeatures))
        if target.metadata != latest.metadata:
            txn.updateMetadata(target.metadata)
        # A re-added file is the target's `add` with dataChange set.
        adds = to_add.select(add_of(dataChange=F.lit(True)).alias("add"), F.col("num_records"))
        txn.addFiles(adds)
        txn.removeFiles(removes_of(to_remove, int(time.time() * 1000)))
        removed, added = by_side.get(False, (0, 0)), by_side.get(True, (0, 0))
        metrics = {
            "tableSizeAfterRestore": after["sizeInBytes"],
            "numOfFilesAfterRestore": after["numFiles"],
            "numRemovedFiles": removed[0],
            "numRestoredFiles": added[0],
            "removedFilesSize": removed[1],
            "restoredFilesSize": added[1],
        }
        log.info("Restoring %s to version %d: %s", table_path, target.version, metrics)
        return txn.commit("RESTORE", parameters, metrics)
    finally:
        diff.unpersist()
