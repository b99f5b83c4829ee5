"""`DeltaTable`: the entry point users import, named after delta-spark's Python API."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .commit_timestamps import first_version_at_or_after, to_epoch_ms, version_at_timestamp
from .errors import InvalidArgumentError, TableNotFoundError
from .history import history_frame
from .log_files import LogFile, LogFileKind
from .log_listing import list_log_files, log_dir_of, plan_segment, read_last_checkpoint, table_root_from
from .snapshot import Snapshot, load_snapshot
from .spark_compat import conf_get
from .storage import Storage, storage_for

log = logging.getLogger(__name__)

USE_COMPACTIONS_CONF = "spark.deltaspark.replay.useLogCompaction"

TimestampLike = str | dt.datetime | dt.date | int


class DeltaTable:
    """A Delta table at a path. Every method reads the log as it is when called."""

    def __init__(self, spark: SparkSession, path: str, storage: Storage | None = None) -> None:
        self._spark = spark
        self._path = path.rstrip("/") or "/"
        self._storage = storage or storage_for(spark)

    @classmethod
    def forPath(cls, spark: SparkSession, path: str) -> DeltaTable:
        """The Delta table at `path`; raises `TableNotFoundError` if there is none."""
        table = cls(spark, path)
        log_dir = log_dir_of(table._path)
        hint = read_last_checkpoint(table._storage, log_dir)
        # With a hint only the tail of the log is listed; without one (or if it lies) all of it.
        for start in ([hint.version] if hint else []) + [None]:
            listing = list_log_files(table._storage, log_dir, from_version=start)
            if listing is None:
                raise TableNotFoundError(path)
            if any(f.kind is LogFileKind.COMMIT or f.is_checkpoint for f in listing):
                return table
        raise TableNotFoundError(path, "no commit or checkpoint files in _delta_log")

    @classmethod
    def isDeltaTable(cls, spark: SparkSession, path: str) -> bool:
        try:
            cls.forPath(spark, path)
        except TableNotFoundError:
            return False
        return True

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"DeltaTable({self._path!r})"

    def _use_compactions(self) -> bool:
        return conf_get(self._spark, USE_COMPACTIONS_CONF, "true").lower() == "true"

    def snapshot(self, version: int | None = None, timestamp: TimestampLike | None = None) -> Snapshot:
        """The table at the latest version, at `version`, or as of `timestamp`."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("Give a version or a timestamp, not both")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise InvalidArgumentError(f"version must be an integer, got {version!r}")
        listing = None
        if timestamp is not None:
            listing = list_log_files(self._storage, log_dir_of(self._path))
            if listing is None:
                raise TableNotFoundError(self._path)
            latest = self._load(None, listing)
            wanted = to_epoch_ms(self._spark, timestamp)
            version = version_at_timestamp(self._spark, listing, latest.inCommitTimestamps, wanted)
            log.info("Timestamp %s resolves to version %d", timestamp, version)
        return self._load(version, listing)

    def _load(self, version: int | None, listing: list[LogFile] | None) -> Snapshot:
        segment = plan_segment(
            self._storage, self._path, version, use_compactions=self._use_compactions(), listing=listing
        )
        root = table_root_from(list(segment.listing), self._storage, self._path)
        return load_snapshot(self._spark, self._storage, segment, root)

    def toDF(self, filter: Any = None, rowTracking: bool = False) -> DataFrame:  # noqa: A002
        """The latest version's rows; see `Snapshot.toDF`."""
        return self.snapshot().toDF(filter, rowTracking=rowTracking)

    def changes(
        self,
        startingVersion: int | None = None,
        endingVersion: int | None = None,
        startingTimestamp: TimestampLike | None = None,
        endingTimestamp: TimestampLike | None = None,
    ) -> DataFrame:
        """The change data feed between two versions (inclusive; the end defaults to the latest),
        or between two timestamps: the table's columns plus `_change_type`, `_commit_version` and
        `_commit_timestamp`. See `deltaspark.change_data_feed`."""
        from .change_data_feed import read_changes

        if (startingVersion is None) == (startingTimestamp is None):
            raise InvalidArgumentError("Give exactly one of startingVersion and startingTimestamp")
        if endingVersion is not None and endingTimestamp is not None:
            raise InvalidArgumentError("Give at most one of endingVersion and endingTimestamp")
        if startingTimestamp is not None or endingTimestamp is not None:
            listing = list_log_files(self._storage, log_dir_of(self._path)) or []
            latest = self._load(None, listing)
            ict = latest.inCommitTimestamps
            if startingTimestamp is not None:
                wanted = to_epoch_ms(self._spark, startingTimestamp)
                startingVersion = first_version_at_or_after(self._spark, listing, ict, wanted)
            if endingTimestamp is not None:
                wanted = to_epoch_ms(self._spark, endingTimestamp)
                endingVersion = version_at_timestamp(self._spark, listing, ict, wanted)
        assert startingVersion is not None
        return read_changes(self, startingVersion, endingVersion)

    def detail(self) -> DataFrame:
        """One row describing the table, like DESCRIBE DETAIL."""
        from .table_detail import detail_frame

        return detail_frame(self.snapshot())

    def history(self, limit: int | None = None) -> DataFrame:
        """`commitInfo` of every commit in the log, newest first (like DESCRIBE HISTORY)."""
        listing = list_log_files(self._storage, log_dir_of(self._path))
        if listing is None:
            raise TableNotFoundError(self._path)
        latest = self._load(None, listing)
        return history_frame(self._spark, listing, latest.inCommitTimestamps, limit)

    def checkpoint(  # noqa: ANN201
        self, version: int | None = None, actionsPerPart: int | None = None, v2Format: str | None = None
    ):
        """Write a checkpoint of the latest version (or `version`) as a distributed write; returns a
        `CheckpointResult`. See `deltaspark.checkpoint_writer`."""
        from .checkpoint_writer import checkpoint_table

        return checkpoint_table(self, version, actionsPerPart, v2Format)

    def cleanupLog(self, dryRun: bool = True):  # noqa: ANN201
        """Metadata cleanup: delete log files older than `delta.logRetentionDuration` that no retained
        version needs; with `dryRun` (the default) only list them. Returns a `LogCleanupResult`."""
        from .log_cleanup import cleanup_log

        return cleanup_log(self, dryRun)
