"""VACUUM: delete the data files no version within the retention period needs, with delta-spark's
`VacuumCommand` semantics, as distributed transforms.

1. Retention: `retentionHours` (rounded to a whole hour, as delta-spark) or the table's
   `delta.deletedFileRetentionDuration` (default 7 days). A retention shorter than the table's is
   refused unless `spark.databricks.delta.retentionDurationCheck.enabled=false`; a negative one
   always. The cutoff is now minus the retention. The table's writer protocol is checked first
   (so `vacuumProtocolCheck` is honoured and catalog-managed tables are refused), dry run too.
2. Kept: every live `add`, every `remove` whose `deletionTimestamp` is at or after the cutoff, the
   deletion vector files of both (`u` relative ones as delta-spark, and `p` absolute ones inside
   the table too - delta-spark leaves those unprotected, which could break a live file), and every
   directory above a kept path. Paths are compared decoded and absolute (`log.paths`); a path
   outside the table root is never touched.
3. Candidates (full mode): files of the table's listing (`table_listing`: hidden `_`/`.` names
   skipped except `_delta_index`, `_change_data` and `<partition column>=` directories; never
   `_delta_log`, nor a top-level `metadata` folder) modified before the cutoff and not kept -
   untracked files, expired tombstones, change data files past retention - and directories with
   nothing under them to keep. LITE mode reads candidates from the log (`vacuum_lite`); inventory
   mode takes the files from a DataFrame (`vacuum_inventory`).
4. Deletion (not a dry run): a `VACUUM START` commit (`numFilesToDelete`, `sizeOfDataToDelete`),
   files deleted in Spark tasks, then directories deepest first (one pass, where delta-spark may
   need two for nested empty ones), a `VACUUM END` commit (`numDeletedFiles`,
   `numVacuumedDirectories`; status `FAILED` if deleting failed), then `_last_vacuum_info`. Both
   commits go through the transaction path; like delta-spark they are written for file, HDFS, GCS
   and Azure tables and not for S3 unless `spark.databricks.delta.vacuum.logging.enabled` says so.
   Files a commit after the vacuum's snapshot adds again (a RESTORE running meanwhile, committed
   before the deletes start) are kept.

The result is a DataFrame `path, size, modificationTime, isDir, reason` (+ `deleted`, `error` when
files were deleted), materialized once: looking at it again never lists or deletes again.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import InvalidArgumentError, TableNotFoundError, VacuumRetentionError
from deltaspark.features import dv_codec
from deltaspark.features.durations import DEFAULT_DELETED_FILE_RETENTION, parse_interval_ms
from deltaspark.features.protocol import check_writable
from deltaspark.log.commit_timestamps import latest_version_at_or_before
from deltaspark.log.files import LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of
from deltaspark.log.paths import canonical_path, normalize_root
from deltaspark.log.replay import read_json_actions
from deltaspark.maintenance import file_deletion, table_listing
from deltaspark.maintenance.post_commit import checkpoint_if_due
from deltaspark.maintenance.table_listing import LISTING_COLUMNS, list_table_files
from deltaspark.maintenance.vacuum_inventory import inventory_files
from deltaspark.maintenance.vacuum_lite import lite_candidates, lite_commits, read_watermark, write_watermark
from deltaspark.read import arrow_file_reader
from deltaspark.snapshot import Snapshot, load_version
from deltaspark.spark_compat import check_python_workers, conf_get
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import Transaction

cloudpickle.register_pickle_by_value(file_deletion)
cloudpickle.register_pickle_by_value(table_listing)  # the listing's tasks
cloudpickle.register_pickle_by_value(arrow_file_reader)
cloudpickle.register_pickle_by_value(dv_codec)

log = logging.getLogger(__name__)

RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
LOGGING_CONF = "spark.databricks.delta.vacuum.logging.enabled"
LOGGED_SCHEMES = frozenset({"file", "hdfs", "gs", "abfs", "abfss", "wasbs", "wasbss", "adl"})
HOUR_MS = 3_600_000
CANDIDATE_COLUMNS = ["path", "size", "modificationTime", "isDir", "reason"]
TOO_SHORT = """Are you sure you would like to vacuum files with such a low retention period? If you have
writers that are currently writing to this table, there is a risk that you may corrupt the
state of your Delta table.

If you are certain that there are no operations being performed on this table, such as
insert/upsert/delete/optimize, then you may turn off this check by setting:
spark.databricks.delta.retentionDurationCheck.enabled = false

If you are not sure, please use a value not less than "{hours} hours"."""


@dataclass(frozen=True)
class Retention:
    """When files become deletable: `cutoff_ms` = now - the retention in force."""

    cutoff_ms: int
    table_ms: int
    specified_ms: int | None
    check_enabled: bool


def retention_for(
    spark: SparkSession, snapshot: Snapshot, retention_hours: float | None, now_ms: int
) -> Retention:
    """The retention in force and its safety check (see the module docstring)."""
    table_ms = parse_interval_ms(
        snapshot.configuration.get("delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION)
    )
    check = conf_get(spark, RETENTION_CHECK_CONF, "true").strip().lower() != "false"
    specified = None
    if retention_hours is not None:
        if retention_hours < 0 or math.isnan(retention_hours):
            raise VacuumRetentionError(
                f"Retention for vacuum can't be less than 0 hours (got {retention_hours})"
            )
        specified = math.floor(retention_hours + 0.5) * HOUR_MS  # Java's Math.round, as delta-spark
        if check and specified < table_ms:
            raise VacuumRetentionError(TOO_SHORT.format(hours=math.ceil(table_ms / HOUR_MS)))
    in_force = specified if specified is not None else table_ms
    return Retention(now_ms - in_force, table_ms, specified, check)


def ancestors(path: Column, root: str) -> Column:
    """The directories strictly between the table root and `path` (none outside the root)."""
    prefix = root + "/"
    parts = F.split(F.substring(path, len(prefix) + 1, 1 << 30), "/")
    count = F.size(parts)
    return F.when(
        path.startswith(prefix) & (count > 1),
        F.transform(
            F.sequence(F.lit(1), count - 1),
            lambda i: F.concat(F.lit(prefix), F.array_join(F.slice(parts, F.lit(1), i), "/")),
        ),
    ).otherwise(F.array().cast("array<string>"))


def known_paths(spark: SparkSession, snapshot: Snapshot, root: str, cutoff_ms: int) -> DataFrame:
    """Every path the snapshot's file actions name - data files and deletion vector files - with
    `kept` (a live file, or a tombstone within retention), `removedVersion` (expired tombstones)
    and `pathHash` (the path's `xxhash64`, to join on), one row per path."""
    actions = snapshot.fileActions()
    kept = F.col("is_add") | (F.coalesce(F.col("remove.deletionTimestamp"), F.lit(0)) >= F.lit(cutoff_ms))
    removed_version = F.when(~kept, F.col("version"))
    data = actions.select(
        F.col("path_key").alias("path"),
        kept.alias("kept"),
        removed_version.alias("removedVersion"),
        F.lit(False).alias("isDv"),
    )
    frames = [data]
    if snapshot.protocol.hasFeature("deletionVectors"):
        dv = F.when(F.col("is_add"), F.col("add.deletionVector")).otherwise(F.col("remove.deletionVector"))
        ids = actions.select(
            dv.getField("storageType").alias("storageType"),
            dv.getField("pathOrInlineDv").alias("pathOrInlineDv"),
            kept.alias("kept"),
            removed_version.alias("removedVersion"),
        ).where(F.col("storageType").isin("u", "p"))
        check_python_workers(spark)
        dv_files = ids.mapInArrow(
            dv_codec.dv_path_batches(strict=True, keep=("kept", "removedVersion")),
            "path string, kept boolean, removedVersion long",
        )
        frames.append(
            dv_files.select(
                canonical_path("path", root).alias("path"),
                "kept",
                "removedVersion",
                F.lit(True).alias("isDv"),
            )
        )
    # Paths share the table root as a long prefix, which defeats the sorter's 8-byte key prefix:
    # joins on this table lead with a hash of the path (a function of it, so no match changes).
    if len(frames) == 1:
        return data.withColumn("pathHash", F.xxhash64("path"))  # without DVs a path is one row
    union = frames[0].unionByName(frames[1])
    return union.groupBy(F.xxhash64("path").alias("pathHash"), "path").agg(
        F.max("kept").alias("kept"),
        F.max("removedVersion").alias("removedVersion"),
        F.max("isDv").alias("isDv"),
    )


def _file_reason(root: str) -> Column:
    removed = F.col("removedVersion").cast("string")
    return (
        F.when(
            F.col("isDv"),
            F.concat(
                F.lit("deletion vector of a file removed in version "), removed, F.lit(", past retention")
            ),
        )
        .when(
            F.col("removedVersion").isNotNull(),
            F.concat(F.lit("removed in version "), removed, F.lit(", past retention")),
        )
        .when(
            F.substring(F.col("path"), len(root) + 2, 1 << 30).rlike(r"(^|/)_change_data"),
            F.lit("change data file past retention"),
        )
        .otherwise(F.lit("not referenced by the table (untracked), older than the retention period"))
    )


def full_candidates(listing: DataFrame, known: DataFrame, root: str, cutoff_ms: int) -> tuple[DataFrame, int]:
    """Files (and directories) of `listing` vacuum deletes (`CANDIDATE_COLUMNS`), materialized,
    and the number of directories listed.

    One pass over one join: the listing full-outer-joined with the known paths, each row then
    either a candidate file, the directory of something that stays (a file kept or too young, a
    kept path even when it is missing from the listing) or a listed directory. An aggregate keeps
    the candidates and the listed directories as they are and collapses the staying directories
    to one row each, so the listing and the replay behind `known` each run once and nothing of
    their size is cached; the directories are then decided on that small result."""
    listed_rows = listing.select(
        *LISTING_COLUMNS, F.xxhash64("path").alias("pathHash"), F.lit(True).alias("listed")
    )
    joined = listed_rows.join(known, ["pathHash", "path"], "full")
    listed = F.coalesce(F.col("listed"), F.lit(False))
    kept = F.coalesce(F.col("kept"), F.lit(False))
    listed_file = listed & ~F.col("isDir")
    deletable = listed_file & ~kept & (F.col("modificationTime") < F.lit(cutoff_ms))
    listed_dir = listed & F.col("isDir")
    parent = F.regexp_extract(F.col("path"), r"^(.*)/[^/]*$", 1)
    kind = F.when(listed_dir, F.lit("dir")).when(deletable, F.lit("file")).otherwise(F.lit("staying"))
    own_row = listed_dir | deletable
    summary = _materialize(
        joined.where(listed | kept)
        .select(
            F.when(own_row, F.col("path")).otherwise(parent).alias("path"),
            kind.alias("kind"),
            F.when(own_row, F.col("size")).alias("size"),
            F.when(own_row, F.col("modificationTime")).alias("modificationTime"),
            F.when(deletable, _file_reason(root)).alias("reason"),
        )
        .dropDuplicates(["path", "kind"])
    )
    candidate_files = summary.where(F.col("kind") == "file").select(
        "path", "size", "modificationTime", F.lit(False).alias("isDir"), "reason"
    )
    # A directory goes only when nothing under it stays.
    staying = summary.where(F.col("kind") == "staying").select(F.col("path").alias("dir"))
    with_ancestors = F.concat(F.array(F.col("dir")), ancestors(F.col("dir"), root))
    blocked = staying.select(F.explode(with_ancestors).alias("path"))
    candidate_dirs = (
        summary.where(F.col("kind") == "dir")
        .join(blocked, "path", "left_anti")
        .select(
            "path",
            "size",
            "modificationTime",
            F.lit(True).alias("isDir"),
            F.lit("directory with nothing to keep").alias("reason"),
        )
    )
    listed_dirs = summary.where(F.col("kind") == "dir").count()
    return _materialize(candidate_files.unionByName(candidate_dirs)), listed_dirs


def _materialize(frame: DataFrame) -> DataFrame:
    """`frame` computed once and kept (a local checkpoint: its plan is never re-run, so deletes
    are never repeated); a persisted copy where local checkpoints are not available."""
    try:
        return frame.localCheckpoint(eager=True)
    except (NotImplementedError, AttributeError):  # Spark Connect 3.5 has no localCheckpoint
        kept = frame.persist()
        kept.count()
        return kept


def _should_log(spark: SparkSession, root: str) -> bool:
    setting = conf_get(spark, LOGGING_CONF, "").strip().lower()
    if setting in ("true", "false"):
        return setting == "true"
    scheme = root.split(":", 1)[0].lower() if ":" in root else "file"
    return scheme in LOGGED_SCHEMES


@dataclass
class VacuumContext:
    spark: SparkSession
    storage: Storage
    table_path: str
    root: str
    snapshot: Snapshot
    retention: Retention
    watermark: int | None  # the latest commit at or before the cutoff


def _readded_since(ctx: VacuumContext) -> DataFrame | None:
    """Paths that commits after the vacuum's snapshot add (a RESTORE running meanwhile)."""
    newer = list_log_files(ctx.storage, log_dir_of(ctx.table_path), ctx.snapshot.version + 1) or []
    commits = [f for f in newer if f.kind is LogFileKind.COMMIT and f.version > ctx.snapshot.version]
    if not commits:
        return None
    adds = read_json_actions(ctx.spark, commits, ["add"]).where(F.col("add").isNotNull())
    return adds.select(canonical_path("add.path", ctx.root).alias("path"), "version").distinct()


def _delete(ctx: VacuumContext, candidates: DataFrame) -> DataFrame:
    """Delete files, then directories deepest first, in Spark tasks; the outcome per candidate."""
    readded = _readded_since(ctx)
    skip = F.lit(None).cast("string")
    frame = candidates
    if readded is not None:
        flagged = readded.groupBy("path").agg(F.min("version").alias("readdedIn"))
        frame = frame.join(flagged, "path", "left")
        skip = F.when(
            F.col("readdedIn").isNotNull(),
            F.concat(F.lit("kept: added again by version "), F.col("readdedIn").cast("string")),
        )
    frame = frame.select(*CANDIDATE_COLUMNS, skip.alias("skip"))
    schema = ", ".join(
        [
            "path string",
            "size long",
            "modificationTime long",
            "isDir boolean",
            "reason string",
            "deleted boolean",
            "error string",
        ]
    )
    deleter = file_deletion.deletion_batches(ctx.root)
    outcomes = [_materialize(frame.where(~F.col("isDir")).mapInArrow(deleter, schema))]
    depth = F.size(F.split(F.col("path"), "/"))
    dirs = frame.where(F.col("isDir")).withColumn("depth", depth)
    for (level,) in sorted(dirs.select("depth").distinct().collect(), reverse=True):
        batch = dirs.where(F.col("depth") == level).drop("depth")
        outcomes.append(_materialize(batch.mapInArrow(deleter, schema)))
    out = outcomes[0]
    for other in outcomes[1:]:
        out = out.unionByName(other)
    return out


def _commit(ctx: VacuumContext, operation: str, parameters: dict, metrics: dict) -> None:
    txn = Transaction(ctx.spark, ctx.storage, ctx.table_path, ctx.snapshot)
    result = txn.commit(operation, parameters, metrics, dataChange=False)
    interval = ctx.snapshot.configuration.get("delta.checkpointInterval")
    checkpoint_if_due(ctx.spark, ctx.storage, ctx.table_path, result.version, interval)


def vacuum(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    retentionHours: float | None = None,
    dryRun: bool = False,
    lite: bool = False,
    inventory: DataFrame | str | None = None,
) -> DataFrame:
    """Vacuum the table at `table_path` (see the module docstring); the candidates (dry run) or
    what was deleted, as a DataFrame."""
    if lite and inventory is not None:
        raise InvalidArgumentError("A vacuum takes either lite=True or an inventory, not both")
    started = time.time()
    listing = list_log_files(storage, log_dir_of(table_path))
    if listing is None:
        raise TableNotFoundError(table_path)
    snapshot = load_version(spark, storage, table_path, None, listing)
    check_writable(snapshot.protocol, table_path, "vacuum")
    now_ms = int(time.time() * 1000)
    retention = retention_for(spark, snapshot, retentionHours, now_ms)
    root = normalize_root(snapshot.tableRoot)
    watermark = latest_version_at_or_before(spark, listing, snapshot.inCommitTimestamps, retention.cutoff_ms)
    ctx = VacuumContext(spark, storage, table_path, root, snapshot, retention, watermark)
    known = known_paths(spark, snapshot, root, retention.cutoff_ms)
    mode = "LITE" if lite else ("INVENTORY" if inventory is not None else "FULL")
    listed_dirs: int | None = None
    if lite:
        previous = read_watermark(storage, log_dir_of(table_path))
        commits = lite_commits(listing, previous, watermark, snapshot.version)
        log.info(
            "VACUUM LITE of %s: reading %d commits (%s to %s)",
            table_path,
            len(commits),
            commits[0].version if commits else None,
            commits[-1].version if commits else None,
        )
        logged = lite_candidates(spark, root, commits).where(
            F.col("modificationTime") < F.lit(retention.cutoff_ms)
        )
        candidates = _materialize(
            logged.groupBy("path")
            .agg(F.max("size").alias("size"), F.max("modificationTime").alias("modificationTime"))
            .join(known, "path", "left")
            .where(~F.coalesce(F.col("kept"), F.lit(False)))
            .select(
                "path",
                "size",
                "modificationTime",
                F.lit(False).alias("isDir"),
                _file_reason(root).alias("reason"),
            )
        )
    else:
        if inventory is not None:
            files = inventory_files(spark, inventory, root, snapshot.partitionColumns)
        else:
            files = list_table_files(spark, root, snapshot.partitionColumns)
        candidates, listed_dirs = full_candidates(files, known, root, retention.cutoff_ms)
    totals = candidates.agg(
        F.count(F.lit(1)).alias("n"), F.coalesce(F.sum("size"), F.lit(0)).alias("bytes")
    ).first()
    to_delete, size = int(totals["n"]), int(totals["bytes"])
    log.info(
        "VACUUM %s of %s (version %d, cutoff %d ms, %s): %d files and directories (%d bytes) %s",
        mode,
        table_path,
        snapshot.version,
        retention.cutoff_ms,
        "dry run" if dryRun else "deleting",
        to_delete,
        size,
        "would be deleted" if dryRun else "to delete",
    )
    if dryRun:
        return candidates
    logging_on = _should_log(spark, root)
    parameters = {
        "retentionCheckEnabled": retention.check_enabled,
        "defaultRetentionMillis": retention.table_ms,
    }
    if retention.specified_ms is not None:
        parameters["specifiedRetentionMillis"] = retention.specified_ms
    parameters["vacuumType"] = mode
    if logging_on:
        _commit(ctx, "VACUUM START", parameters, {"numFilesToDelete": to_delete, "sizeOfDataToDelete": size})
    try:
        outcome = _delete(ctx, candidates)
        deleted = outcome.where("deleted").count()
    except Exception:
        if logging_on:
            _commit(ctx, "VACUUM END", {"status": "FAILED"}, {})
        raise
    if logging_on:
        _commit(
            ctx,
            "VACUUM END",
            {"status": "COMPLETED"},
            {"numDeletedFiles": deleted, "numVacuumedDirectories": (listed_dirs or 0) + 1},
        )
    write_watermark(storage, log_dir_of(table_path), watermark)
    log.info(
        "VACUUM %s of %s deleted %d of %d in %.1f s",
        mode,
        table_path,
        deleted,
        to_delete,
        time.time() - started,
    )
    return outcome
