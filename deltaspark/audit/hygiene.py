"""Hygiene: what works but costs - orphaned files, small files and partition skew, statistics
coverage, rows deleted by deletion vectors (rewrite candidates), tombstones, commits since the
last checkpoint, the log's size. Findings are `info` (a `warning` only where readers pay for it);
the figures also go into the report's metrics.
"""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltaspark.audit.context import AuditContext
from deltaspark.audit.file_checks import live_files
from deltaspark.audit.findings import Finding, findings_of, from_findings
from deltaspark.features import dv_codec
from deltaspark.features.durations import DEFAULT_DELETED_FILE_RETENTION, parse_interval_ms
from deltaspark.log.files import LogFileKind
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import read_json_actions
from deltaspark.log.segment import complete_checkpoints
from deltaspark.spark_compat import held_frame, is_local, map_in_arrow

cloudpickle.register_pickle_by_value(dv_codec)

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
DAY_MS = 86_400_000
DV_REWRITE_RATIO = 0.5
SKEW_FACTOR = 10
DEFAULT_CHECKPOINT_INTERVAL = 10


def _retention_ms(ctx: AuditContext) -> int:
    config = ctx.snapshot.configuration if ctx.snapshot is not None else {}
    return parse_interval_ms(config.get("delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION))


def referenced_files(ctx: AuditContext) -> DataFrame:
    """`path` of every file some version in the log refers to: data files of every retained add and
    remove, their deletion vector files, and CDC files. The replay gives the state from its base
    on (a checkpoint's tombstones included); retained commits it does not read (before a gap,
    after the audited version) are read for their paths too."""
    intervals = ctx.timeline.intervals
    dv = F.when(F.col("is_add"), F.col("add.deletionVector")).otherwise(F.col("remove.deletionVector"))
    data = intervals.select(F.col("path_key").alias("path"))
    descriptors = intervals.select(
        dv.getField("storageType").alias("storageType"),
        dv.getField("pathOrInlineDv").alias("pathOrInlineDv"),
    )
    replayed = {c.version for c in ctx.timeline.commits}
    others = [c for c in ctx.files_of(LogFileKind.COMMIT) if c.version not in replayed]
    if others:
        actions = read_json_actions(ctx.spark, others, ["add", "remove"]).where(
            F.col("add").isNotNull() | F.col("remove").isNotNull()
        )
        logged = "coalesce(add.path, remove.path)"
        data = data.unionByName(actions.select(canonical_path(logged, ctx.root).alias("path")))
        descriptors = descriptors.unionByName(
            actions.select(
                *[
                    F.coalesce(f"add.deletionVector.{name}", f"remove.deletionVector.{name}").alias(name)
                    for name in ("storageType", "pathOrInlineDv")
                ]
            )
        )
    ids = descriptors.where(F.col("storageType").isin("u", "p"))
    # distinct on the driver when the descriptors are held there: the DV paths are then made there
    # (in the order read: a descriptor of a damaged log may hold a null, which `sorted` cannot order)
    ids = (
        held_frame(ctx.spark, list(dict.fromkeys(ids.collect())), ids.schema)
        if is_local(ids)
        else ids.distinct()
    )
    dv_files = map_in_arrow(ids, dv_codec.dv_path_batches(strict=False), "path string").select(
        canonical_path("path", ctx.root).alias("path")
    )
    frames = [data, dv_files]
    commits = ctx.files_of(LogFileKind.COMMIT)
    if commits:
        cdc = read_json_actions(ctx.spark, commits, ["cdc"]).where(F.col("cdc").isNotNull())
        frames.append(cdc.select(canonical_path("cdc.path", ctx.root).alias("path")))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out.distinct()


def orphans(ctx: AuditContext) -> DataFrame:
    """Files under the table (as vacuum lists them) that no version in the log refers to, with their
    size and age; those younger than the retention period may belong to a write in progress."""
    files = ctx.table_files.where(~F.col("isDir"))
    unreferenced = files.join(referenced_files(ctx), "path", "left_anti")
    age_days = (F.lit(ctx.now_ms) - F.col("modificationTime")) / F.lit(DAY_MS)
    young = F.col("modificationTime") > F.lit(ctx.now_ms - _retention_ms(ctx))
    detail = F.concat(
        F.lit("not referenced by any version in the log: "),
        F.col("size").cast("string"),
        F.lit(" bytes, "),
        F.format_number(age_days, 1),
        F.lit(" days old"),
        F.when(young, F.lit(" (within the retention period: vacuum keeps it)")).otherwise(F.lit("")),
    )
    return findings_of(unreferenced, "hygiene.orphans", "info", detail, None, F.col("path"), F.col("size"))


def file_layout(ctx: AuditContext) -> DataFrame:
    """Small files (under a quarter of the target size) per partition, and partitions much larger
    than the median one (skew)."""
    small = _small_file_bytes(ctx)
    per_partition = file_summary(ctx).where("is_add").select("partition", "files", "small", "bytes")
    small_files = findings_of(
        per_partition.where("small >= 2"),
        "hygiene.small_files",
        "info",
        F.concat(
            F.lit("partition "),
            F.col("partition"),
            F.lit(": "),
            F.col("small").cast("string"),
            F.lit(
                f" of its files are under {small} bytes (compaction candidate: "
                "dt.optimize().executeCompaction(), or deltaspark optimize PATH)"
            ),
        ),
        value=F.col("small"),
    )
    stats = per_partition.agg(
        F.count(F.lit(1)).alias("n"), F.percentile_approx("bytes", 0.5).alias("median")
    ).first()
    if stats is None or stats["n"] < 4 or not stats["median"]:
        return small_files
    skewed = findings_of(
        per_partition.where(F.col("bytes") > F.lit(SKEW_FACTOR * stats["median"])),
        "hygiene.partition_skew",
        "info",
        F.concat(
            F.lit("partition "),
            F.col("partition"),
            F.lit(" holds "),
            F.col("bytes").cast("string"),
            F.lit(f" bytes, more than {SKEW_FACTOR}x the median partition ({stats['median']} bytes)"),
        ),
        value=F.col("bytes"),
    )
    return small_files.unionByName(skewed)


def _small_file_bytes(ctx: AuditContext) -> int:
    """Files under a quarter of the target size are small."""
    assert ctx.snapshot is not None
    return int(ctx.snapshot.configuration.get("delta.targetFileSize", DEFAULT_TARGET_FILE_SIZE)) // 4


def _stats_columns(ctx: AuditContext) -> list[str]:
    """The columns the live files' statistics have min/max values of."""
    stats_type = live_files(ctx).schema["stats"].dataType
    return (
        [f.name for f in stats_type["minValues"].dataType.fields]
        if "minValues" in stats_type.fieldNames()
        else []
    )


def file_summary(ctx: AuditContext) -> DataFrame:
    """The audited version's file actions summed per partition, in one pass over them, kept for
    the checks and metrics that read it (a row per partition: as many as the table has): live
    files (`is_add`; `partition`, `files`, `small`, `bytes`, `deleted`, `records`, `no_stats`,
    `c<i>` the files with a min value of the i-th of `_stats_columns`) and tombstones (one row,
    not `is_add`: `files`, `expired` past the retention period, `oldest` deletion time)."""

    def build() -> DataFrame:
        snapshot = ctx.snapshot
        assert snapshot is not None
        add, live = F.col("add"), F.col("is_add")
        partition = (
            F.to_json(add.getField("partitionValues")) if snapshot.partitionColumns else F.lit("(table)")
        )
        records = F.col("stats.numRecords")
        deleted_at = F.coalesce(F.col("remove.deletionTimestamp"), F.lit(0))
        cutoff = ctx.now_ms - _retention_ms(ctx)

        def live_count(condition: Any) -> Any:
            return F.sum(F.when(live & condition, 1).otherwise(0))

        columns = _stats_columns(ctx)
        return ctx.file_actions.groupBy("is_add", F.when(live, partition).alias("partition")).agg(
            F.count(F.lit(1)).alias("files"),
            live_count(add.getField("size") < _small_file_bytes(ctx)).alias("small"),
            F.sum(add.getField("size")).alias("bytes"),
            F.sum(F.coalesce(add.getField("deletionVector").getField("cardinality"), F.lit(0))).alias(
                "deleted"
            ),
            F.sum(records).alias("records"),
            live_count(records.isNull()).alias("no_stats"),
            *[
                live_count(F.col("stats.minValues").getField(c).isNotNull()).alias(f"c{i}")
                for i, c in enumerate(columns)
            ],
            F.sum(F.when(~live & (deleted_at <= cutoff), 1).otherwise(0)).alias("expired"),
            F.min(F.col("remove.deletionTimestamp")).alias("oldest"),
        )

    return ctx.shared("hygiene.file_summary", build)


def stats_coverage(ctx: AuditContext) -> DataFrame:
    """Files without statistics, and columns with min/max in only some files (data skipping then
    reads every file lacking them)."""
    columns = _stats_columns(ctx)
    sums = [F.sum("files").alias("files"), F.sum("no_stats").alias("no_stats")]
    sums += [F.sum(f"c{i}").alias(f"c{i}") for i in range(len(columns))]
    row = file_summary(ctx).where("is_add").agg(*sums).first()
    out: list[Finding] = []
    if row is None or not row["files"]:
        return from_findings(ctx.spark, out)
    total = int(row["files"])
    if row["no_stats"]:
        out.append(
            Finding(
                "hygiene.stats_coverage",
                "info",
                f"{row['no_stats']} of {total} files have no statistics",
                value=float(row["no_stats"]),
            )
        )
    for i, column in enumerate(columns):
        covered = int(row[f"c{i}"] or 0)
        if 0 < covered < total:
            out.append(
                Finding(
                    "hygiene.stats_coverage",
                    "info",
                    f"column {column} has min/max statistics in {covered} of {total} files",
                    value=covered / total,
                )
            )
    return from_findings(ctx.spark, out)


def deletion_vector_ratio(ctx: AuditContext) -> DataFrame:
    """Files whose deletion vector deletes at least half their rows: rewrite candidates."""
    files = live_files(ctx).where(F.col("add.deletionVector").isNotNull() & (F.col("numRecords") > 0))
    ratio = F.col("add.deletionVector.cardinality") / F.col("numRecords")
    detail = F.concat(
        F.col("add.deletionVector.cardinality").cast("string"),
        F.lit(" of "),
        F.col("numRecords").cast("string"),
        F.lit(
            " rows deleted by its deletion vector (rewrite candidate: dt.optimize().purgeDeletionVectors(), "
            "or deltaspark optimize PATH --purge)"
        ),
    )
    return findings_of(
        files.where(ratio >= DV_REWRITE_RATIO),
        "hygiene.deletion_vectors",
        "info",
        detail,
        F.col("version"),
        F.col("path"),
        ratio,
    )


def log_health(ctx: AuditContext) -> list[Finding]:
    """Tombstones past retention (vacuum candidates), commits since the newest checkpoint against
    `delta.checkpointInterval`, and the size of `_delta_log`."""
    out: list[Finding] = []
    snapshot = ctx.snapshot
    if snapshot is not None:
        row = (
            file_summary(ctx)
            .where("not is_add")
            .agg(
                F.sum("files").alias("n"), F.sum("expired").alias("expired"), F.min("oldest").alias("oldest")
            )
            .first()
        )
        if row is not None and row["n"]:
            oldest_days = (ctx.now_ms - int(row["oldest"] or 0)) / DAY_MS
            out.append(
                Finding(
                    "hygiene.tombstones",
                    "info",
                    f"{row['n']} tombstones, the oldest {oldest_days:.1f} days old; "
                    f"{row['expired']} past the retention period (their files can be vacuumed)",
                    snapshot.version,
                    value=float(row["expired"]),
                )
            )
        interval = int(snapshot.configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
        checkpoints = [v for v in complete_checkpoints(ctx.listing) if v <= snapshot.version]
        since = snapshot.version - max(checkpoints, default=-1)
        if since > 2 * interval:
            out.append(
                Finding(
                    "hygiene.checkpoint_lag",
                    "info",
                    f"{since} commits since the last checkpoint (checkpointInterval {interval}): "
                    "every reader replays them",
                    snapshot.version,
                    value=float(since),
                )
            )
    commits = ctx.files_of(LogFileKind.COMMIT)
    total = sum(f.size for f in ctx.listing)
    out.append(
        Finding(
            "hygiene.log_size",
            "info",
            f"_delta_log holds {len(ctx.listing)} files ({total} bytes), {len(commits)} commits",
            value=float(total),
        )
    )
    return out


def metrics(ctx: AuditContext, totals: dict[str, tuple[int, float]]) -> dict[str, Any]:
    """The table's vital signs for the summary (one job over the files); `totals`: per finding
    `check`, the number of findings and the sum of their values."""
    out: dict[str, Any] = {"logFiles": len(ctx.listing), "logBytes": sum(f.size for f in ctx.listing)}
    if ctx.snapshot is None:
        return out
    row = (
        file_summary(ctx)
        .where("is_add")
        .agg(*[F.sum(c).alias(c) for c in ("files", "bytes", "deleted", "records")])
        .first()
    )
    checkpoints = [v for v in complete_checkpoints(ctx.listing) if v <= ctx.snapshot.version]
    out.update(
        commitsSinceCheckpoint=ctx.snapshot.version - max(checkpoints, default=-1),
        numFiles=int(row["files"] or 0),
        sizeInBytes=int(row["bytes"] or 0),
        numRecords=int(row["records"] or 0),
        deletedRecords=int(row["deleted"] or 0),
    )
    tombstones = totals.get("hygiene.tombstones")
    out["expiredTombstones"] = int(tombstones[1]) if tombstones else 0
    orphans_found = totals.get("hygiene.orphans")
    if orphans_found:
        out.update(orphanFiles=orphans_found[0], orphanBytes=int(orphans_found[1]))
    return out
