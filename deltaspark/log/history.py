"""Table history: the `commitInfo` of every commit still in the log, with its commit timestamp.

The column set follows `DESCRIBE HISTORY` of Spark's Delta; the whole `commitInfo` object is also
kept as JSON text (`commitInfo`) because writers are free to put anything in it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from deltaspark.log import torn_writes
from deltaspark.log.commit_timestamps import MISSING_ICT, InCommitTimestamps, monotonic_file_times
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.replay import read_json_actions
from deltaspark.spark_compat import is_local, local_frame
from deltaspark.spark_errors import CORRUPT_LOG, own_error
from deltaspark.storage import Storage

_STRINGS = MapType(StringType(), StringType())

COMMIT_INFO = StructType(
    [
        StructField("inCommitTimestamp", LongType()),
        StructField("timestamp", LongType()),
        StructField("userId", StringType()),
        StructField("userName", StringType()),
        StructField("operation", StringType()),
        StructField("operationParameters", _STRINGS),
        StructField(
            "job",
            StructType(
                [
                    StructField("jobId", StringType()),
                    StructField("jobName", StringType()),
                    StructField("jobRunId", StringType()),
                    StructField("runId", StringType()),
                    StructField("jobOwnerId", StringType()),
                    StructField("triggerType", StringType()),
                ]
            ),
        ),
        StructField("notebook", StructType([StructField("notebookId", StringType())])),
        StructField("clusterId", StringType()),
        StructField("readVersion", LongType()),
        StructField("isolationLevel", StringType()),
        StructField("isBlindAppend", BooleanType()),
        StructField("operationMetrics", _STRINGS),
        StructField("userMetadata", StringType()),
        StructField("engineInfo", StringType()),
        StructField("clientVersion", StringType()),
        StructField("txnId", StringType()),
    ]
)


_BASE = StructType(
    [
        StructField("version", LongType(), False),
        StructField("fileTimestampMs", LongType(), False),
        StructField("_commit_file", StringType(), False),
    ]
)
_HELD = StructType([*_BASE.fields, StructField("commitInfo", StringType(), True)])
TWO_COMMIT_INFOS = "the commit holds two different `commitInfo` actions"


def history_frame(
    spark: SparkSession,
    listing: Sequence[LogFile],
    ict: InCommitTimestamps,
    limit: int | None = None,
    storage: Storage | None = None,
) -> DataFrame:
    """One row per commit file (newest first): version, timestamp, the commitInfo fields. With
    `storage`, each commit read is first checked for a torn last line (`torn_writes`)."""
    commits = sorted((f for f in listing if f.kind is LogFileKind.COMMIT), key=lambda f: f.version)
    file_times = monotonic_file_times(commits)
    if limit is not None:
        commits = commits[-limit:] if limit > 0 else []
    if storage is not None:
        torn_writes.check_files(spark, storage, commits)
    lines = read_json_actions(spark, commits, ["commitInfo"]) if commits else None
    held = _infos_on_driver(lines) if lines is not None else None
    if held is not None:
        # A small log's commit infos, held on the driver: the rows are made there, newest first.
        newest_first = sorted(commits, key=lambda c: -c.version)
        columns = {
            "version": [c.version for c in newest_first],
            "fileTimestampMs": [file_times[c.version] for c in newest_first],
            "_commit_file": [c.path for c in newest_first],
            "commitInfo": [held.get(c.version) for c in newest_first],
        }
        joined = local_frame(spark, columns, _HELD)
    else:
        base = spark.createDataFrame([(c.version, file_times[c.version], c.path) for c in commits], _BASE)
        if lines is None:
            info = spark.createDataFrame([], "version long, commitInfo string")
        else:
            # One commitInfo per commit: a line written twice is one; two that differ are damage.
            info = lines.groupBy("version").agg(
                F.min("commitInfo").alias("_info"),
                F.count_distinct("commitInfo").alias("_kinds"),
                F.first("file").alias("_file"),
            )
            twice = own_error(CORRUPT_LOG, F.col("_file"), TWO_COMMIT_INFOS)
            info = info.select(
                "version", F.when(F.col("_kinds") > 1, twice).otherwise(F.col("_info")).alias("commitInfo")
            )
        joined = base.join(info, "version", "left")
    joined = joined.withColumn("ci", F.from_json("commitInfo", COMMIT_INFO))
    stamp_ms = F.col("fileTimestampMs")
    if ict.enabled:
        # From the enablement version on, every commit must carry its in-commit timestamp.
        applies = F.col("version") >= F.lit(ict.enablement_version)
        missing = own_error(
            CORRUPT_LOG, F.col("_commit_file"), MISSING_ICT.format(version=ict.enablement_version)
        )
        stamp_ms = (
            F.when(~applies, stamp_ms)
            .when(F.col("ci.inCommitTimestamp").isNull(), missing)
            .otherwise(F.col("ci.inCommitTimestamp"))
        )
    history = joined.select(
        "version",
        F.timestamp_millis(stamp_ms).alias("timestamp"),
        *[F.col(f"ci.{f.name}").alias(f.name) for f in COMMIT_INFO.fields if f.name not in ("timestamp",)],
        "commitInfo",
    )
    return history if held is not None else history.orderBy(F.col("version").desc())


def _infos_on_driver(lines: DataFrame) -> dict[int, str] | None:
    """Each commit's `commitInfo` from its lines, when they are held on the driver (a small log:
    collecting them runs no job) and clean; None otherwise, and the Spark plan reads them (and
    names a damaged file when its rows are evaluated)."""
    if not is_local(lines):
        return None
    try:
        rows = lines.select("version", "commitInfo").collect()
    except Exception:  # noqa: BLE001 - a corrupt line: the Spark plan raises it when evaluated
        return None
    found: dict[int, set[str]] = {}
    for row in rows:
        if row["commitInfo"] is not None:
            found.setdefault(int(row["version"]), set()).add(row["commitInfo"])
    if any(len(infos) > 1 for infos in found.values()):
        return None  # two different commit infos in one commit: damage, which the plan names
    return {version: next(iter(infos)) for version, infos in found.items()}
