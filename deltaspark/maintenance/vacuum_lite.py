"""VACUUM LITE: the candidates from the log instead of a listing, and `_last_vacuum_info`.

A LITE vacuum reads the `remove` actions (and their deletion vector files) and `cdc` actions of
the commits from just after the previous vacuum's watermark up to W, the latest commit at or
before the retention cutoff; it never lists the table, so it never finds untracked files or
empty directories. `_delta_log/_last_vacuum_info` holds the watermark as delta-spark writes it:
`{"latestCommitVersionOutsideOfRetentionWindow": W}` (`{}` when there is none).

Unlike delta-spark (which writes `{}` after a full vacuum), a full vacuum records W too: it has
deleted every expired file of those commits, so a LITE vacuum can go on from there even after the
log's oldest commits are cleaned up. A LITE vacuum is refused (`VacuumLiteError`) when the commits
it needs are gone: the oldest commit left is after the watermark + 1 (delta-spark refuses one
version earlier, when the watermark is exactly the version before the oldest commit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import VacuumLiteError
from deltaspark.features import dv_codec
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import read_json_actions
from deltaspark.spark_compat import check_python_workers
from deltaspark.storage import Storage, join_path

log = logging.getLogger(__name__)

LAST_VACUUM_INFO = "_last_vacuum_info"
WATERMARK_KEY = "latestCommitVersionOutsideOfRetentionWindow"
LITE_REFUSED = (
    "VACUUM LITE cannot delete all eligible files as some files are not referenced by the Delta log "
    "(commits {first} to {last} were cleaned up and no vacuum recorded them). Please run a full vacuum."
)


def read_watermark(storage: Storage, log_dir: str) -> int | None:
    """The previous vacuum's watermark; None when absent, empty or unreadable (as delta-spark)."""
    text = storage.read_text(join_path(log_dir, LAST_VACUUM_INFO))
    if not text:
        return None
    try:
        value = json.loads(text).get(WATERMARK_KEY)
    except (ValueError, AttributeError):
        log.warning("%s/%s is not JSON; treating it as absent", log_dir, LAST_VACUUM_INFO)
        return None
    return int(value) if isinstance(value, int) else None


def write_watermark(storage: Storage, log_dir: str, watermark: int | None) -> None:
    """Record the watermark (through a temporary file: readers never see half of it)."""
    document = {} if watermark is None else {WATERMARK_KEY: watermark}
    temporary = join_path(log_dir, f".{LAST_VACUUM_INFO}.tmp")
    storage.write_text(temporary, json.dumps(document) + "\n", overwrite=True)
    storage.replace(temporary, join_path(log_dir, LAST_VACUUM_INFO))


def lite_commits(
    listing: Sequence[LogFile], previous: int | None, watermark: int | None, latest: int
) -> list[LogFile]:
    """The commit files a LITE vacuum reads: after `previous` up to `watermark` (delta-spark reads
    `min(latest, previous + 1)` on, so it re-reads the last commit when nothing is new)."""
    if watermark is None:
        return []
    commits = sorted((f for f in listing if f.kind is LogFileKind.COMMIT), key=lambda f: f.version)
    earliest = commits[0].version if commits else latest + 1
    start = previous + 1 if previous is not None else 0  # no vacuum recorded: from the first commit
    if start > watermark:
        return []
    if start < earliest:
        raise VacuumLiteError(LITE_REFUSED.format(first=start, last=earliest - 1))
    return [f for f in commits if start <= f.version <= watermark]


def lite_candidates(spark: SparkSession, root: str, commits: Sequence[LogFile]) -> DataFrame:
    """`path, size, modificationTime` of the files the commits removed (a remove's time is its
    `deletionTimestamp`), their deletion vector files, and their change data files (time 0)."""
    schema = "path string, size long, modificationTime long"
    if not commits:
        return spark.createDataFrame([], schema)
    actions = read_json_actions(spark, commits, ["remove", "cdc"])
    removed = actions.where(F.col("remove").isNotNull())
    when_removed = F.coalesce(F.col("remove.deletionTimestamp"), F.lit(0))
    files = removed.select(
        canonical_path("remove.path", root).alias("path"),
        F.coalesce(F.col("remove.size"), F.lit(0)).cast("long").alias("size"),
        when_removed.alias("modificationTime"),
    )
    check_python_workers(spark)
    dvs = (
        removed.select(
            F.col("remove.deletionVector.storageType").alias("storageType"),
            F.col("remove.deletionVector.pathOrInlineDv").alias("pathOrInlineDv"),
            F.col("remove.deletionVector.sizeInBytes").cast("long").alias("size"),
            when_removed.alias("modificationTime"),
        )
        .where(F.col("storageType").isin("u", "p"))
        .groupBy("storageType", "pathOrInlineDv")
        .agg(F.max("size").alias("size"), F.max("modificationTime").alias("modificationTime"))
    )
    dv_files = dvs.mapInArrow(
        dv_codec.dv_path_batches(strict=True, keep=("size", "modificationTime")),
        "path string, size long, modificationTime long",
    ).select(canonical_path("path", root).alias("path"), "size", "modificationTime")
    cdc = actions.where(F.col("cdc").isNotNull()).select(
        canonical_path("cdc.path", root).alias("path"),
        F.coalesce(F.col("cdc.size"), F.lit(0)).cast("long").alias("size"),
        F.lit(0).cast("long").alias("modificationTime"),
    )
    return files.unionByName(dv_files).unionByName(cdc)
