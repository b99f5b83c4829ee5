"""Metadata cleanup ("Metadata Cleanup"): deleting log files no retained version needs.

1. The cutoff is midnight UTC of the day `delta.logRetentionDuration` (default 30 days) ago. The
   newest commit not newer than it is the cutoff commit (commit times are file modification times,
   made monotonic, as Spark's Delta does).
2. The newest complete checkpoint not newer than the cutoff commit is kept, with the commit JSON at
   its version and everything after it - once it is proven usable (`checkpoint_check`: all of it
   read, every part and sidecar, its counts consistent with `_last_checkpoint`). Deleting the
   commits it replaces makes it the only way to those versions, so a checkpoint that fails the
   proof is passed over, with a warning naming it, for an older one; without one nothing is deleted.
3. Deleted: commits, checkpoints (of any kind, complete or not) and `.crc` files older than that
   checkpoint, log compactions starting at or before it, staged commits at or before it.
4. Sidecars in `_delta_log/_sidecars` are deleted when no remaining checkpoint references them and
   they are older than a day (as of midnight UTC), so an in-progress V2 checkpoint is never broken.
   deltaspark's own staging directories older than a day go too.

Files are deleted oldest version first, so a cleanup that is interrupted leaves a log whose
retained versions all still load. `delta.enableExpiredLogCleanup=false` turns cleanup off.
`checkpointProtection` is honoured by construction: cleanup never creates a checkpoint and never
deletes one at or after the version it truncates to (exception (a) of that feature).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import DeltaSparkError, TableNotFoundError
from deltaspark.features.durations import DEFAULT_LOG_RETENTION, parse_interval_ms
from deltaspark.features.protocol import check_writable
from deltaspark.log.action_schemas import action_schema
from deltaspark.log.checkpoint_check import verify_checkpoint
from deltaspark.log.commit_timestamps import monotonic_file_times
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of, read_last_checkpoint
from deltaspark.log.replay import read_json_actions, read_parquet_actions
from deltaspark.log.segment import complete_checkpoints
from deltaspark.maintenance.checkpoint_writer import SIDECAR_DIR, STAGING_DIR
from deltaspark.snapshot import load_version
from deltaspark.spark_compat import is_connect
from deltaspark.spark_errors import eager
from deltaspark.storage import FileStatus, Storage, join_path, name_of

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
_STAGED_COMMIT = re.compile(
    r"^(\d{20})\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\.json$"
)
# Within one version: the commit goes before the checkpoint made from it, the checksum with it.
_DELETE_ORDER = {
    LogFileKind.COMMIT: 0,
    LogFileKind.CHECKSUM: 1,
    LogFileKind.COMPACTION: 2,
    LogFileKind.CHECKPOINT_MULTIPART: 3,
    LogFileKind.CHECKPOINT_CLASSIC: 4,
    LogFileKind.CHECKPOINT_UUID: 5,
}


@dataclass
class LogCleanupResult:
    """What `DeltaTable.cleanupLog()` deleted (or, in a dry run, would delete)."""

    tablePath: str
    dryRun: bool
    logRetentionDuration: str
    cutoffTimestamp: str | None = None  # midnight UTC, ISO-8601
    cutoffCommitVersion: int | None = None
    checkpointVersion: int | None = None  # the oldest checkpoint kept; versions from it on are kept
    files: list[str] = field(default_factory=list)  # full paths, in deletion order
    skipped: str | None = None  # why nothing was deleted, if so
    warnings: list[str] = field(default_factory=list)  # checkpoints passed over as the boundary, and why
    seconds: float = 0.0

    @property
    def numFiles(self) -> int:
        return len(self.files)

    def asDict(self) -> dict[str, Any]:
        return {**asdict(self), "numFiles": self.numFiles}


def _midnight_utc(ms: int) -> int:
    return ms - ms % DAY_MS


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat()


def _referenced_sidecars(spark: SparkSession, checkpoints: list[LogFile]) -> set[str]:
    """Names of the sidecars that the given (retained) checkpoint files reference."""
    frames: list[DataFrame] = []
    json_files = [f for f in checkpoints if f.file_format == "json"]
    parquet_files = [
        f
        for f in checkpoints
        if f.file_format == "parquet" and f.kind is not LogFileKind.CHECKPOINT_MULTIPART
    ]
    if json_files:
        frames.append(read_json_actions(spark, json_files, ["sidecar"]).select("version", "sidecar.path"))
    if parquet_files:
        schema = action_schema(["sidecar"])
        frames.append(read_parquet_actions(spark, parquet_files, schema, 0).select("version", "sidecar.path"))
    if not frames:
        return set()
    rows = reduce(DataFrame.unionByName, frames).where(F.col("path").isNotNull()).distinct().collect()
    return {name_of(unquote(r["path"])) for r in rows}


def _cutoff_checkpoint(
    storage: Storage, log_dir: str, listing: list[LogFile], cutoff_version: int, warnings: list[str]
) -> int | None:
    """The newest complete checkpoint at or before `cutoff_version` that is proven usable; the ones
    passed over are named in `warnings`. A checkpoint with nothing older to delete needs no proof."""
    last = read_last_checkpoint(storage, log_dir)
    oldest = min(f.start_version if f.start_version is not None else f.version for f in listing)
    checkpoints = complete_checkpoints(listing)
    for version in sorted((v for v in checkpoints if v <= cutoff_version), reverse=True):
        if version <= oldest:
            return version
        try:
            verify_checkpoint(storage.spark, storage, checkpoints[version], last)
            return version
        except DeltaSparkError as exc:
            message = f"checkpoint {version} is not used as the cleanup boundary: {exc}"
            log.warning("Metadata cleanup: %s", message)
            warnings.append(message)
    return None


@eager
def cleanup_log(
    storage: Storage, table_path: str, dry_run: bool = True, now_ms: int | None = None
) -> LogCleanupResult:
    """Metadata cleanup of the table at `table_path` (see the module docstring)."""
    started = time.time()
    if is_connect(storage.spark):
        raise storage._cannot_write("clean up the log")
    log_dir = log_dir_of(table_path)
    listing = list_log_files(storage, log_dir)
    if listing is None:
        raise TableNotFoundError(table_path)
    latest = load_version(storage.spark, storage, table_path, None, listing)
    check_writable(latest.protocol, latest.tableRoot, "clean up the log of")
    retention = latest.configuration.get("delta.logRetentionDuration", DEFAULT_LOG_RETENTION)
    result = LogCleanupResult(tablePath=latest.tableRoot, dryRun=dry_run, logRetentionDuration=retention)

    def done(reason: str | None) -> LogCleanupResult:
        result.skipped = reason
        result.seconds = round(time.time() - started, 3)
        if reason:
            log.info("Metadata cleanup of %s: nothing to delete (%s)", table_path, reason)
        return result

    if latest.configuration.get("delta.enableExpiredLogCleanup", "true").strip().lower() == "false":
        return done("delta.enableExpiredLogCleanup is false")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = _midnight_utc(now - parse_interval_ms(retention))
    result.cutoffTimestamp = _iso(cutoff)
    times = monotonic_file_times([f for f in listing if f.kind is LogFileKind.COMMIT])
    expired = [v for v, t in times.items() if t <= cutoff]
    if not expired:
        return done(f"no commit is older than the cutoff {result.cutoffTimestamp}")
    result.cutoffCommitVersion = max(expired)
    keep_from = _cutoff_checkpoint(storage, log_dir, listing, result.cutoffCommitVersion, result.warnings)
    if keep_from is None:
        return done(f"no usable checkpoint at or before version {result.cutoffCommitVersion}")
    result.checkpointVersion = keep_from

    doomed = [
        f
        for f in listing
        if (f.kind is LogFileKind.COMPACTION and (f.start_version or 0) <= keep_from)
        or (f.kind is not LogFileKind.COMPACTION and f.version < keep_from)
    ]
    doomed.sort(
        key=lambda f: (
            f.start_version if f.start_version is not None else f.version,
            _DELETE_ORDER[f.kind],
            f.name,
        )
    )
    paths = [f.path for f in doomed]

    staged = storage.list_dir(join_path(log_dir, "_staged_commits")) or []
    paths += [s.path for s in staged if (m := _STAGED_COMMIT.match(s.name)) and int(m[1]) <= keep_from]

    day_cutoff = _midnight_utc(now) - DAY_MS  # "less than a day old, as of midnight UTC" is kept
    sidecars = storage.list_dir(join_path(log_dir, SIDECAR_DIR)) or []
    old_sidecars = [s for s in sidecars if s.modification_time < day_cutoff]
    if old_sidecars:
        doomed_paths = set(paths)
        retained = [f for f in listing if f.is_checkpoint and f.path not in doomed_paths]
        referenced = _referenced_sidecars(storage.spark, retained)
        paths += [s.path for s in old_sidecars if s.name not in referenced]
    stale_staging: list[FileStatus] = [
        d for d in storage.list_subdirs(join_path(log_dir, STAGING_DIR)) if d.modification_time < day_cutoff
    ]
    paths += [d.path for d in stale_staging]
    result.files = paths

    log.info(
        "Metadata cleanup of %s: retention %s, cutoff %s (commit %d), keeping checkpoint %d and later: "
        "%d file(s) %s",
        table_path,
        retention,
        result.cutoffTimestamp,
        result.cutoffCommitVersion,
        keep_from,
        len(paths),
        "would be deleted (dry run)" if dry_run else "to delete",
    )
    if not dry_run:
        _delete(storage, table_path, paths, {d.path for d in stale_staging}, log_dir)
    return done(None)


def _delete(storage: Storage, table_path: str, paths: list[str], directories: set[str], log_dir: str) -> None:
    # Tools writing through Hadoop's local ChecksumFileSystem leave `.<name>.crc` next to each file;
    # remove those with their file so that nothing is orphaned.
    hidden = {s.name: s.path for s in storage.list_dir(log_dir) or [] if s.name.startswith(".")}
    for i, path in enumerate(paths, start=1):
        storage.delete(path, recursive=path in directories)
        sidecar_crc = hidden.get(f".{name_of(path)}.crc")
        if sidecar_crc:
            storage.delete(sidecar_crc)
        if i % 1000 == 0:
            log.info("Deleted %d of %d log files", i, len(paths))
    log.info("Deleted %d log file(s) of %s", len(paths), table_path)
