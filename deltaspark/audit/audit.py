"""`audit_table`: build the shared context, run the checks of the level asked for, report."""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from deltaspark.audit import file_checks, hygiene, log_checks, state_checks
from deltaspark.audit.context import AuditContext
from deltaspark.audit.findings import Finding
from deltaspark.audit.report import AuditReport, Check, run_checks
from deltaspark.errors import InvalidArgumentError, TableNotFoundError
from deltaspark.log.files import LogFileKind
from deltaspark.log.history import history_frame
from deltaspark.log.listing import list_log_files, log_dir_of, table_root_from
from deltaspark.snapshot import Snapshot, load_version
from deltaspark.spark_compat import held_frame
from deltaspark.storage import Storage

log = logging.getLogger(__name__)

LEVELS = ("quick", "full")

CHECKS: list[Check] = [
    Check("log.snapshot", "log", lambda ctx: _snapshot_loads(ctx)),
    Check("log.versions", "log", log_checks.versions),
    Check("log.last_checkpoint", "log", log_checks.last_checkpoint),
    Check("log.protocol", "log", log_checks.protocol_and_properties),
    Check("log.in_commit_timestamps", "log", log_checks.in_commit_timestamps),
    Check("log.reconciliation", "log", state_checks.reconciliation),
    Check("log.checkpoint", "log", state_checks.checkpoints),
    Check("log.compaction", "log", state_checks.compactions),
    Check("log.checksum", "log", state_checks.checksums),
    Check("files.exist", "files", file_checks.data_files_exist, full_only=True),
    Check("files.deletion_vectors", "files", file_checks.deletion_vectors, full_only=True),
    Check("files.footers", "files", file_checks.footers, full_only=True),
    Check("files.statistics", "files", file_checks.statistics),
    Check("files.partition_values", "files", file_checks.partition_values),
    Check("files.change_data", "files", file_checks.change_data_files, full_only=True),
    Check("hygiene.orphans", "hygiene", hygiene.orphans, full_only=True),
    Check("hygiene.file_layout", "hygiene", hygiene.file_layout),
    Check("hygiene.stats_coverage", "hygiene", hygiene.stats_coverage),
    Check("hygiene.deletion_vectors", "hygiene", hygiene.deletion_vector_ratio),
    Check("hygiene.log", "hygiene", hygiene.log_health),
]
# Checks that need the audited version's snapshot (they cannot run when it does not load).
_NEED_SNAPSHOT = {c.name for c in CHECKS if c.category != "log"} - {"hygiene.log"}


def audit_context(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    startVersion: int | None = None,
    endVersion: int | None = None,
) -> AuditContext:
    """What the checks share: the log listing and the audited version's snapshot (None when it
    cannot be loaded; the log checks then say why)."""
    listing = list_log_files(storage, log_dir_of(table_path))
    if not listing:
        raise TableNotFoundError(table_path)
    root = table_root_from(listing, storage, table_path)
    latest = max(f.version for f in listing)
    end = latest if endVersion is None else int(endVersion)
    start = 0 if startVersion is None else int(startVersion)
    if start > end or end > latest or start < 0:
        raise InvalidArgumentError(f"the version range [{start}, {end}] is not within [0, {latest}]")
    snapshot: Snapshot | None
    error = None
    try:
        snapshot = load_version(spark, storage, table_path, end, listing)
    except Exception as exc:  # noqa: BLE001 - reported by the log.snapshot check
        log.warning("Version %s of %s cannot be loaded: %s", end, table_path, exc)
        snapshot, error = None, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return AuditContext(spark, storage, table_path, root, listing, snapshot, start, end, snapshot_error=error)


def _snapshot_loads(ctx: AuditContext) -> list[Finding]:
    """The audited version loads (protocol and metadata found, readable, checkpoint usable)."""
    if ctx.snapshot_error is None:
        return []
    return [
        Finding(
            "log.snapshot",
            "error",
            f"version {ctx.end_version} cannot be loaded: {ctx.snapshot_error}",
            ctx.end_version,
        )
    ]


def audit_table(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    level: str = "full",
    startVersion: int | None = None,
    endVersion: int | None = None,
    checks: list[str] | None = None,
    timed: bool = False,
) -> AuditReport:
    """Audit the table at `table_path` (see `DeltaTable.audit`); `checks` keeps only the checks whose
    names start with one of the given prefixes (e.g. `["log.", "files.exist"]`); `timed` evaluates
    the checks one after another, each one's seconds measured (see `run_checks`)."""
    if level not in LEVELS:
        raise InvalidArgumentError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    if checks is not None:
        unknown = [c for c in checks if not any(check.name.startswith(c) for check in CHECKS)]
        if unknown:
            known = ", ".join(c.name for c in CHECKS)
            raise InvalidArgumentError(
                f"no audit check starts with {', '.join(unknown)}; the checks: {known}"
            )
    started = time.time()
    ctx = audit_context(spark, storage, table_path, startVersion, endVersion)
    snapshot = ctx.snapshot
    chosen = [c for c in CHECKS if checks is None or any(c.name.startswith(p) for p in checks)]
    chosen = [c for c in chosen if snapshot is not None or c.name not in _NEED_SNAPSHOT]
    outcome = run_checks(ctx, chosen, level, timed)
    report = AuditReport(
        table=ctx.root,
        version=snapshot.version if snapshot is not None else None,
        level=level,
        findings=outcome.findings,
        checks=outcome.checks,
        metrics=hygiene.metrics(ctx, outcome.totals),
        frames=_frames(ctx),
        _persisted=ctx.persisted,
    )
    report.seconds = time.time() - started
    return report


def _frames(ctx: AuditContext) -> dict[str, DataFrame]:
    """Lazy DataFrames behind the findings, for plots and joins: `files` (one row per live file),
    `partitions` (files, bytes, rows and deleted rows per partition) and `commits` (each retained
    commit's time, operation and size, and the log's size as it grew)."""
    commits = sorted(ctx.files_of(LogFileKind.COMMIT), key=lambda f: f.version)
    commit_rows = held_frame(
        ctx.spark,
        [(f.version, f.size, f.modification_time) for f in commits],
        "version long, bytes long, fileTime long",
    )
    upto = Window.orderBy("version").rowsBetween(Window.unboundedPreceding, 0)
    frames: dict[str, DataFrame] = {}
    if ctx.snapshot is not None:
        history = history_frame(ctx.spark, ctx.listing, ctx.snapshot.inCommitTimestamps).select(
            "version", "timestamp", "operation"
        )
        commit_rows = commit_rows.join(history, "version", "left")
        files = file_checks.live_files(ctx).select(
            "path",
            F.to_json("add.partitionValues").alias("partition"),
            F.col("add.size").alias("size"),
            "numRecords",
            F.coalesce(F.col("add.deletionVector.cardinality"), F.lit(0)).alias("deletedRows"),
            F.col("add.modificationTime").alias("modificationTime"),
        )
        frames["files"] = files
        frames["partitions"] = files.groupBy("partition").agg(
            F.count(F.lit(1)).alias("files"),
            F.sum("size").alias("bytes"),
            F.sum("numRecords").alias("rows"),
            F.sum("deletedRows").alias("deletedRows"),
        )
    frames["commits"] = commit_rows.withColumn("logBytes", F.sum("bytes").over(upto))
    return frames
