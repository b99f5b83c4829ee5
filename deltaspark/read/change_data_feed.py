"""Change data feed ("Add CDC File", "Reader Requirements for AddCDCFile").

For each commit in the range: if it has `cdc` actions, its changes are exactly the rows of those
files (with their `_change_type`); otherwise the rows of its `add` files are inserts and the rows
of its `remove` files are deletes (actions with `dataChange = false` change no data). Deletion
vectors are honoured row by row: when a commit removes a file with one DV and re-adds it with
another, the rows the new DV deletes are deletes and the rows it no longer deletes are inserts;
unchanged rows are not reported. Every row carries `_change_type`, `_commit_version` and
`_commit_timestamp`. A range touching a version where `delta.enableChangeDataFeed` was not true
is refused.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from deltaspark.errors import ChangeDataNotRecordedError, InvalidArgumentError, VersionNotFoundError
from deltaspark.features.deletion_vectors import dv_unique_id
from deltaspark.features.partition_values import ValueSource, typed_partition_values
from deltaspark.log.action_schemas import DELETION_VECTOR
from deltaspark.log.commit_timestamps import in_commit_timestamps, monotonic_file_times
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import keep_actions, read_json_actions
from deltaspark.read.scan import TableReader, deleted_rows, deletion_key, read_files
from deltaspark.spark_compat import held_frame

ENABLE_KEY = "delta.enableChangeDataFeed"
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"


def _enabled(configuration: dict[str, Any] | None) -> bool:
    return str((configuration or {}).get(ENABLE_KEY, "false")).lower() == "true"


def check_recorded(spark: Any, start_snapshot: Any, commits: list[LogFile]) -> None:
    """Refuse the range if the feed was off at any of its versions (the metadata in effect after
    each commit decides)."""
    later = commits[1:]
    changes = (
        read_json_actions(spark, later, ["metaData"])
        .where(F.col("metaData").isNotNull())
        .select("version", F.col("metaData.configuration").alias("configuration"))
        .collect()
        if later
        else []
    )
    by_version = {int(r["version"]): r["configuration"] for r in changes}
    enabled = _enabled(start_snapshot.configuration)
    off = [] if enabled else [start_snapshot.version]
    for commit in later:
        if commit.version in by_version:
            enabled = _enabled(by_version[commit.version])
        if not enabled:
            off.append(commit.version)
    if off:
        raise ChangeDataNotRecordedError(
            start_snapshot.tableRoot, commits[0].version, commits[-1].version, off
        )


def commit_timestamps(spark: Any, snapshot: Any, commits: list[LogFile], listing: list[LogFile]) -> DataFrame:
    """`(_commit_version, _commit_timestamp)`: in-commit timestamps where enabled, else file times."""
    file_times = monotonic_file_times(listing)
    stamps = {c.version: file_times[c.version] for c in commits}
    ict = snapshot.inCommitTimestamps
    stamps.update(in_commit_timestamps(spark, [c for c in commits if ict.applies_to(c.version)]))
    rows = [(v, dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)) for v, ms in sorted(stamps.items())]
    schema = StructType(
        [StructField(COMMIT_VERSION, LongType(), False), StructField(COMMIT_TIMESTAMP, TimestampType(), True)]
    )
    return held_frame(spark, rows, schema)


def _as_file(path: Column, partition_values: Column, reader: TableReader, log_file: Column) -> list[Column]:
    """The `Snapshot.files()` columns `read_files` needs, for a file named by an action of the
    commit `log_file`."""
    source = ValueSource(log_file, path)
    return [
        path.alias("path"),
        typed_partition_values(partition_values, reader.partition_fields, reader.mode, source).alias(
            "partitionValues_parsed"
        ),
        F.lit(None).cast(DELETION_VECTOR).alias("deletionVector"),  # DVs are applied per side, below
        F.lit(None).cast("bigint").alias("baseRowId"),
        F.lit(None).cast("bigint").alias("defaultRowCommitVersion"),
    ]


def _in_dv(rows: DataFrame, deleted: DataFrame, dv_column: str, flag: str) -> DataFrame:
    """Add `flag`: whether the row's position is deleted by the DV named in `dv_column`."""
    key = deletion_key(F.col("_file"), F.col(dv_column))
    hits = deleted.select(
        F.col("key").alias("_hit_key"), F.col("row_index").alias("_hit_row"), F.lit(True).alias(flag)
    )
    joined = rows.join(hits, (key == F.col("_hit_key")) & (F.col("_row_index") == F.col("_hit_row")), "left")
    return joined.drop("_hit_key", "_hit_row").withColumn(flag, F.coalesce(F.col(flag), F.lit(False)))


def read_changes(start_snapshot: Any, latest: Any, listing: list[LogFile]) -> DataFrame:
    """The changes from `start_snapshot`'s version to `latest`'s (both `Snapshot`s), inclusive;
    `listing` is the `_delta_log` listing both were loaded from."""
    spark = latest._spark
    start, end = start_snapshot.version, latest.version
    if start < 0 or start > end:
        raise InvalidArgumentError(f"startingVersion {start} must be between 0 and the ending version {end}")
    commits = sorted(
        (f for f in listing if f.kind is LogFileKind.COMMIT and start <= f.version <= end),
        key=lambda f: f.version,
    )
    present = {c.version for c in commits}
    missing = [v for v in range(start, end + 1) if v not in present]
    if missing:
        raise VersionNotFoundError(missing[0], min(present, default=None), end, "its commit file is gone")
    check_recorded(spark, start_snapshot, commits)

    reader = TableReader(latest)
    root = latest.tableRoot
    actions = read_json_actions(spark, commits, ["add", "remove", "cdc"], select_lines=False)
    # Filters keep corrupt lines (`keep_actions`), whose `version` fails naming the commit: this
    # eager scan of every line in the range, or the lazy read of the rows, never drops one.
    cdc_versions = [
        r[0] for r in keep_actions(actions, F.col("cdc").isNotNull()).select("version").distinct().collect()
    ]
    without_cdc = ~F.col("version").isin(cdc_versions) if cdc_versions else F.lit(True)

    # Commits with CDC files: their rows, as written.
    cdc_files = actions.where(F.col("cdc").isNotNull()).select(
        *_as_file(F.col("cdc.path"), F.col("cdc.partitionValues"), reader, F.col("file")),
        F.col("version").alias(COMMIT_VERSION),
    )
    cdc_rows = read_files(
        latest,
        cdc_files,
        extra=[StructField(CHANGE_TYPE, StringType(), True)],
        carry=[COMMIT_VERSION],
        apply_deletion_vectors=False,
    )

    # Other commits: adds and removes paired per file, so that a DV change yields only the rows it changes.
    def side(kind: str, alias: str) -> DataFrame:
        action = F.col(kind)
        return keep_actions(
            actions, without_cdc & action.isNotNull() & F.coalesce(action.getField("dataChange"), F.lit(True))
        ).select(
            "version",
            canonical_path(f"{kind}.path", root).alias("_file"),
            action.alias(alias),
            F.col("file").alias(f"{alias}_log"),
        )

    adds, removes = side("add", "a"), side("remove", "r")
    pairs = adds.join(removes, ["version", "_file"], "full_outer")
    entries = pairs.select(
        *_as_file(
            F.coalesce(F.col("a.path"), F.col("r.path")),
            F.coalesce(F.col("a.partitionValues"), F.col("r.partitionValues")),
            reader,
            F.coalesce(F.col("a_log"), F.col("r_log")),
        ),
        F.col("version").alias(COMMIT_VERSION),
        "_file",
        F.col("a").isNotNull().alias("_has_add"),
        F.col("r").isNotNull().alias("_has_remove"),
        dv_unique_id(F.col("a.deletionVector")).alias("_add_dv"),
        dv_unique_id(F.col("r.deletionVector")).alias("_remove_dv"),
    )
    carried = [COMMIT_VERSION, "_file", "_has_add", "_has_remove", "_add_dv", "_remove_dv"]
    rows = read_files(latest, entries, carry=carried, apply_deletion_vectors=False, keep_row_index=True)

    dv_files = (
        adds.select(F.col("a.path").alias("path"), F.col("a.deletionVector").alias("deletionVector"))
        .unionByName(
            removes.select(F.col("r.path").alias("path"), F.col("r.deletionVector").alias("deletionVector"))
        )
        .where(F.col("deletionVector").isNotNull())
    )
    deleted = deleted_rows(latest, dv_files, by_dv=True)
    rows = _in_dv(_in_dv(rows, deleted, "_add_dv", "_in_add_dv"), deleted, "_remove_dv", "_in_remove_dv")
    # A row is present after the commit if an add lists its file and its DV spares it; present
    # before if a remove lists the file and that DV spared it. Changes are the differences.
    after = F.col("_has_add") & ~F.col("_in_add_dv")
    before = F.col("_has_remove") & ~F.col("_in_remove_dv")
    data_changes = rows.withColumn(
        CHANGE_TYPE, F.when(after & ~before, F.lit("insert")).when(before & ~after, F.lit("delete"))
    ).where(F.col(CHANGE_TYPE).isNotNull())

    columns = [F.col("`" + f.name.replace("`", "``") + "`") for f in reader.logical_schema.fields]
    changes = data_changes.select(*columns, CHANGE_TYPE, COMMIT_VERSION).unionByName(
        cdc_rows.select(*columns, CHANGE_TYPE, COMMIT_VERSION)
    )
    stamps = commit_timestamps(spark, latest, commits, listing)
    return changes.join(F.broadcast(stamps), COMMIT_VERSION, "left").select(
        *columns, CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP
    )
