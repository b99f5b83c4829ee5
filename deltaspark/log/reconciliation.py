"""Action reconciliation ("Action Reconciliation") as DataFrame transforms.

Files are keyed by `(canonical path, deletionVector.uniqueId)`; the newest reference to a key
wins. Two surviving `add`s of one path (a file added again with another deletion vector, or
without one, and its older logical file never removed) are a damaged log: read as the protocol
says, the data file's rows would be counted twice; keeping either add would silently bring back
deleted rows or drop live ones. Such a state fails, naming the path and both versions. `txn` is the newest
per `appId`, `domainMetadata` the newest per domain with `removed` tombstones dropped. Both plans
match paths by `paths.join_key`, equal exactly when the canonical paths are, but built as a string
only for the few paths not logged plainly; `path_key` is computed where a consumer reads it.

Two plans give the same answer:

- `union` - checkpoint and tail rows are shuffled together by that key and ranked with a window;
  the general plan, right for a JSON-only log or a long tail.
- `broadcast` - the checkpoint is already reconciled, so only the (small) tail is ranked; the
  checkpoint rows are filtered with broadcast anti-joins against the tail's keys. A billion-row
  checkpoint then streams through without a shuffle.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from deltaspark.features.deletion_vectors import dv_unique_id
from deltaspark.log.paths import canonical_path, join_key
from deltaspark.log.replay import keep_actions
from deltaspark.spark_errors import CORRUPT_LOG, own_error

KEY = ["path_key", "dv_id"]
JOIN_KEY = "join_key"  # the layout key of a multi-part checkpoint (`newest_per_file`)
LogFileOf = Callable[[Column], Column]  # the log file an action of a version came from, for errors


def commit_file_of(table_root: str) -> LogFileOf:
    """The commit JSON of a version: the log file named by a reconciliation error when the caller
    knows no better (a snapshot passes its own, which knows its checkpoint and compactions)."""
    log_dir = table_root.rstrip("/") + "/_delta_log/"
    return lambda version: F.concat(F.lit(log_dir), F.lpad(version.cast("string"), 20, "0"), F.lit(".json"))


# The failure of a path with two live adds, from Spark's plans and from the driver's replay alike.
TWO_LIVE_ADDS = (
    "the data file %s is added at version %s (%s) while its add at version %s (%s) was never removed: "
    "two live logical files of one data file (a writer that changes a file's deletion vector must "
    "remove the old one)"
)


def dv_description(dv_id: str) -> str:
    return "deletion vector " + dv_id if dv_id else "no deletion vector"


def _dv_text(dv_id: Column) -> Column:
    return F.when(dv_id == "", F.lit("no deletion vector")).otherwise(
        F.concat(F.lit("deletion vector "), dv_id)
    )


def two_live_adds(
    log_file_of: LogFileOf,
    path: Column,
    version: Column,
    dv_id: Column,
    other_version: Column,
    other_dv: Column,
) -> Column:
    """The failure of a path with two live `add`s (the newer at `version`)."""
    reason = F.format_string(
        TWO_LIVE_ADDS,
        path,
        version.cast("string"),
        _dv_text(dv_id),
        other_version.cast("string"),
        _dv_text(other_dv),
    )
    return own_error(CORRUPT_LOG, log_file_of(version), reason)


def file_action_rows(
    actions: DataFrame,
    table_root: str,
    extra: list[Column] | None = None,
    deletion_vectors: bool = True,
) -> DataFrame:
    """One row per add/remove: `version, is_add, path_key, dv_id, add, remove` (+ `extra`);
    `actions` has the log file each action came from in `file`. Without `deletion_vectors` (the
    protocol does not support them) a file action that carries one is a damaged log."""
    files = keep_actions(actions, F.col("add").isNotNull() | F.col("remove").isNotNull())
    has_add = F.col("add").isNotNull()
    path = logged_path()
    dv = F.when(has_add, F.col("add.deletionVector")).otherwise(F.col("remove.deletionVector"))
    # A damaged file action fails the query naming its log file; it is never counted. The checks
    # live in `is_add`, which every plan evaluates, and not around `path_key`: Spark does not
    # share common subexpressions inside a CASE branch, so wrapping the canonical path in one
    # would decode every path several times.
    damaged = [
        (
            path.isNull(),
            F.when(has_add, F.lit("an `add` action has no path")).otherwise(
                F.lit("a `remove` action has no path")
            ),
        ),
        (
            F.col("remove").isNotNull() & has_add,
            F.lit("a line holds both an `add` and a `remove` action (one action per line)"),
        ),
    ]
    if not deletion_vectors:
        unsupported = "a file action has a deletionVector, but the protocol does not support deletionVectors"
        damaged.append((dv.isNotNull(), F.lit(unsupported)))
    (first, first_reason), *others = damaged
    checked = F.when(first, own_error(CORRUPT_LOG, F.col("file"), first_reason))
    for condition, reason in others:
        checked = checked.when(condition, own_error(CORRUPT_LOG, F.col("file"), reason))
    return files.select(
        "version",
        checked.otherwise(has_add).alias("is_add"),
        canonical_path(LOGGED_PATH, table_root).alias("path_key"),
        dv_unique_id(dv).alias("dv_id"),
        "add",
        "remove",
        *(extra or []),
    )


LOGGED_PATH = "CASE WHEN add IS NOT NULL THEN add.path ELSE remove.path END"  # as SQL text


def logged_path() -> Column:
    """The path of a file action row, as logged."""
    return F.expr(LOGGED_PATH)


def file_key(table_root: str) -> Column:
    """`paths.join_key` of a file action row's logged path: the one key every plan groups, matches
    and lays out files by (equal exactly when the canonical paths are)."""
    return join_key(LOGGED_PATH, table_root)


def newest_per_file(
    rows: DataFrame,
    deletion_vectors: bool = True,
    partitions: int | None = None,
    *,
    table_root: str,
    log_file_of: LogFileOf | None = None,
) -> DataFrame:
    """Keep the newest reference to each logical file; a path with two live adds fails (named
    with `log_file_of`, by default the commit of the newer add). The rows gain a `join_key`
    column, `paths.join_key` of their logged path under `table_root`.

    Files are grouped by that key, not by `path_key`: two paths' keys are equal exactly when their
    canonical paths are, and the key builds no string for a plain relative path, so `path_key` is
    computed only where a consumer reads it (a file list or a count reads none).
    `partitions`: shuffle into exactly that many partitions by `join_key` (Spark's hash
    partitioning), so that a consumer laying the result out the same way (a multi-part
    checkpoint) reuses this shuffle instead of adding its own; by default Spark's shuffle
    partitions.

    Within one version a `remove` beats an `add` of the same key. A valid commit never holds
    both; a log compaction file that was not fully reconciled can, and there the removal is the
    later event (delta-rs resolves such files the same way). Without deletion vectors a path is
    a key, so no path can have two live adds and the second window (a second sort) is skipped.
    """
    keyed = rows.withColumn(JOIN_KEY, file_key(table_root))
    shuffled = keyed.repartition(partitions, JOIN_KEY) if partitions else keyed.repartition(JOIN_KEY)
    # The windows sort by their partition columns. Paths share long common prefixes (partition
    # directories, or the table root), which defeat the sorter's 8-byte key prefix and make every
    # comparison a full string compare; leading with a hash of the key (a function of it, so no
    # group changes) restores cheap prefix sorting. Partitioning the windows by the key the rows
    # were shuffled by lets them reuse that shuffle.
    groups = ["_path_hash", JOIN_KEY]
    by_key = Window.partitionBy(*groups, "dv_id").orderBy(F.col("version").desc(), F.col("is_add").asc())
    newest = (
        shuffled.withColumn("_path_hash", F.xxhash64(JOIN_KEY))  # one shuffle serves both windows
        .withColumn("_key_rank", F.row_number().over(by_key))
        .where(F.col("_key_rank") == 1)
        .drop("_key_rank")
    )
    if not deletion_vectors:
        return newest.drop("_path_hash")
    adds_by_path = Window.partitionBy(*groups, "is_add").orderBy(
        F.col("version").desc(), F.col("dv_id").desc()
    )
    # The newest add of a path is checked against the next one: there must be none. The check
    # lives in `is_add`, which every consumer evaluates.
    older_version, older_dv = F.lead("version").over(adds_by_path), F.lead("dv_id").over(adds_by_path)
    failure = two_live_adds(
        log_file_of or commit_file_of(table_root),
        logged_path(),
        F.col("version"),
        F.col("dv_id"),
        F.col("_older_version"),
        F.col("_older_dv"),
    )
    checked = F.when(F.col("is_add") & F.col("_older_version").isNotNull(), failure).otherwise(
        F.col("is_add")
    )
    return (
        newest.withColumn("_older_version", older_version)
        .withColumn("_older_dv", older_dv)
        .withColumn("_path_rank", F.row_number().over(adds_by_path))
        .where(~F.col("is_add") | (F.col("_path_rank") == 1))
        .withColumn("is_add", checked)
        .drop("_path_rank", "_path_hash", "_older_version", "_older_dv")
    )


def reconcile_files(
    checkpoint_rows: DataFrame | None,
    tail_rows: DataFrame | None,
    broadcast_tail: bool,
    deletion_vectors: bool = True,
    partitions: int | None = None,
    *,
    table_root: str,
    log_file_of: LogFileOf | None = None,
) -> DataFrame:
    """The reconciled file actions (adds and removes) of a snapshot, one row per logical file.

    `deletion_vectors=False` (the table's protocol does not support them, so every `dv_id` is
    empty) lets the ranking skip the one-add-per-path window. `partitions`: the union plan's
    shuffle count (`newest_per_file`), whose rows then carry `join_key`; the other plans do not
    shuffle the whole state.
    `table_root`: rows are matched by `paths.join_key` of their logged path, equal exactly when
    `path_key`s are but not built for plain relative paths; `path_key` is then computed only where
    a consumer reads it. `log_file_of`: the log file of a version, named when a path has two
    live adds (`newest_per_file`).
    """
    if checkpoint_rows is None and tail_rows is None:
        raise ValueError("nothing to reconcile")
    ranked = {"table_root": table_root, "log_file_of": log_file_of}
    if checkpoint_rows is None:
        assert tail_rows is not None  # for the type checker: one of the two is given
        return _without_key(newest_per_file(tail_rows, deletion_vectors, partitions, **ranked), partitions)
    if tail_rows is None:
        return checkpoint_rows
    if not broadcast_tail:
        rows = checkpoint_rows.unionByName(tail_rows)
        return _without_key(newest_per_file(rows, deletion_vectors, partitions, **ranked), partitions)
    tail = newest_per_file(tail_rows, deletion_vectors, **ranked)
    # The key is a column of its own so that Spark computes it once per row, in a projection.
    keyed = checkpoint_rows.withColumn("_join_key", file_key(table_root))
    if not deletion_vectors:
        # A path is a logical file: one broadcast of the ranked tail's keys drops every checkpoint
        # row the tail supersedes. The ranked tail is then evaluated twice (this broadcast and the
        # union), not once per filter.
        tail_keys = F.broadcast(tail.select(F.col(JOIN_KEY).alias("_t_path")))
        survivors = keyed.join(tail_keys, F.col("_join_key") == F.col("_t_path"), "left_anti")
        return survivors.drop("_join_key").unionByName(tail.drop(JOIN_KEY))
    # With deletion vectors, one broadcast of the ranked tail per path: the DV ids it references
    # (any action) and its add. A checkpoint row whose key the tail references is superseded; a
    # checkpoint add of a path the tail adds under another key was never removed (two live adds).
    per_path = tail.groupBy(F.col(JOIN_KEY).alias("_t_path")).agg(
        F.collect_set("dv_id").alias("_t_dvs"),
        F.max(F.when(F.col("is_add"), F.col("version"))).alias("_t_add_version"),
        F.max(F.when(F.col("is_add"), F.col("dv_id"))).alias("_t_add_dv"),
    )
    joined = keyed.join(F.broadcast(per_path), F.col("_join_key") == F.col("_t_path"), "left")
    superseded = F.coalesce(F.array_contains("_t_dvs", F.col("dv_id")), F.lit(False))
    failure = two_live_adds(
        log_file_of or commit_file_of(table_root),
        logged_path(),
        F.col("_t_add_version"),
        F.col("_t_add_dv"),
        F.col("version"),
        F.col("dv_id"),
    )
    checked = F.when(F.col("is_add") & F.col("_t_add_version").isNotNull(), failure).otherwise(
        F.col("is_add")
    )
    survivors = joined.where(~superseded).withColumn("is_add", checked)
    return survivors.drop("_join_key", "_t_path", "_t_dvs", "_t_add_version", "_t_add_dv").unionByName(
        tail.drop(JOIN_KEY)
    )


def _without_key(rows: DataFrame, partitions: int | None) -> DataFrame:
    """`newest_per_file`'s rows without their `join_key`, unless a layout by it follows."""
    return rows if partitions else rows.drop(JOIN_KEY)


def newest_per(actions: DataFrame, column: str, key_field: str) -> DataFrame:
    """The newest action of kind `column` per `key_field` (e.g. txn per appId)."""
    rows = keep_actions(actions, F.col(column).isNotNull()).select("version", column)
    window = Window.partitionBy(F.col(f"{column}.{key_field}")).orderBy(F.col("version").desc())
    return rows.withColumn("_rank", F.row_number().over(window)).where("_rank = 1").drop("_rank")
