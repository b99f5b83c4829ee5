"""`spark.read.format("delta").option("readChangeFeed", "true")`: the change data feed, planned in
plain Python (the rules of `read.change_data_feed`, which `DeltaTable.changes` runs as Spark jobs).

Each commit of the range contributes its CDC files when it has any, else its added and removed
data files paired by path (a deletion vector change yields only the rows it changes). Every row
carries `_change_type`, `_commit_version` and `_commit_timestamp` (the in-commit timestamp where
enabled, else the commit file's time, made monotonic). A range over a version where
`delta.enableChangeDataFeed` was not true is refused (`ChangeDataNotRecordedError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from deltaspark.datasource.arrow_storage import ArrowStorage
from deltaspark.datasource.batch import FileReading
from deltaspark.datasource.table_state import (
    TableState,
    commit_actions,
    epoch_ms,
    in_commit_timestamps,
    load,
    output_schema,
    typed_partition_values,
)
from deltaspark.errors import ChangeDataNotRecordedError, InvalidArgumentError, VersionNotFoundError
from deltaspark.features.metadata import Metadata
from deltaspark.file_io import FileSystemSettings
from deltaspark.log.commit_timestamps import (
    InCommitTimestamps,
    first_version_at_or_after,
    monotonic_file_times,
    version_at_timestamp,
)
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of
from deltaspark.log.paths import absolute_path, path_key
from deltaspark.read.arrow_file_reader import read_change_files

ENABLE_KEY = "delta.enableChangeDataFeed"
FEED_FIELDS = [
    StructField("_change_type", StringType(), True),
    StructField("_commit_version", LongType(), True),
    StructField("_commit_timestamp", TimestampType(), True),
]
FILES_PER_TASK = 16


@dataclass
class ChangePartition(InputPartition):
    tasks: list[dict[str, Any]]


def feed_schema(state: TableState) -> StructType:
    return StructType([*output_schema(state).fields, *FEED_FIELDS])


def _enabled(metadata: Metadata) -> bool:
    return str(metadata.configuration.get(ENABLE_KEY, "false")).lower() == "true"


class ChangeFeed:
    """The versions a change feed read covers, and what each contributes."""

    def __init__(self, path: str, options: dict[str, str], time_zone: str) -> None:
        self.storage = ArrowStorage()
        self.path = self.storage.qualify(path)
        self.commits = [
            f
            for f in list_log_files(self.storage, log_dir_of(self.path)) or []
            if f.kind is LogFileKind.COMMIT
        ]
        if not self.commits:
            raise VersionNotFoundError(0, None, None, "the table has no commit files")
        latest = load(self.path, None, None, time_zone, files=False)
        ict = InCommitTimestamps.of(latest.protocol, latest.metadata)
        self.times = monotonic_file_times(self.commits)
        self.times.update(self._ict([c for c in self.commits if ict.applies_to(c.version)]))
        self.start, self.end = self._range(options, time_zone, ict, latest.version)
        self.state = load(self.path, self.end, None, time_zone, files=False)  # the schema rows are read with

    def _ict(self, files: list[LogFile]) -> dict[int, int]:
        return in_commit_timestamps(self.storage, files)

    def _range(
        self, options: dict[str, str], time_zone: str, ict: InCommitTimestamps, latest: int
    ) -> tuple[int, int]:
        def number(name: str) -> int | None:
            value = options.get(name.lower())
            if value is None:
                return None
            try:
                return int(value)
            except ValueError:
                raise InvalidArgumentError(f"{name} must be a whole number, got {value!r}") from None

        start, end = number("startingVersion"), number("endingVersion")
        if options.get("startingtimestamp") is not None:
            stamp = epoch_ms(options["startingtimestamp"], time_zone)
            start = first_version_at_or_after(None, self.commits, ict, stamp, self._ict)
        if options.get("endingtimestamp") is not None:
            stamp = epoch_ms(options["endingtimestamp"], time_zone)
            end = version_at_timestamp(None, self.commits, ict, stamp, self._ict)
        if start is None:
            raise InvalidArgumentError("readChangeFeed needs startingVersion or startingTimestamp")
        end = latest if end is None else min(end, latest)
        if start < 0 or start > end:
            raise InvalidArgumentError(
                f"startingVersion {start} must be between 0 and the ending version {end}"
            )
        present = {c.version for c in self.commits}
        missing = [v for v in range(start, end + 1) if v not in present]
        if missing:
            raise VersionNotFoundError(missing[0], min(present), end, "its commit file is gone")
        return start, end

    def tasks(self) -> list[dict[str, Any]]:
        """Every file a task reads, in version order; refuses a range the feed was off in."""
        enabled = _enabled(load(self.path, self.start, None, files=False).metadata)
        off = [] if enabled else [self.start]
        root, out = self.state.table_root, []
        for version in range(self.start, self.end + 1):
            actions = commit_actions(self.storage, self.path, version) or []
            for action in actions:
                if action.get("metaData") is not None and version > self.start:
                    enabled = _enabled(Metadata.from_row(action["metaData"]))
            if not enabled and version not in off:
                off.append(version)
            out += self._version_tasks(version, actions, root)
        if off:
            raise ChangeDataNotRecordedError(self.path, self.start, self.end, off)
        return out

    def _version_tasks(self, version: int, actions: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
        return change_tasks(self.state, version, actions, root, self.times[version])


def change_tasks(
    state: TableState, version: int, actions: list[dict[str, Any]], root: str, stamp: int
) -> list[dict[str, Any]]:
    """What commit `version` (its `actions`, committed at `stamp` ms) contributes to the feed: its
    CDC files when it has any, else its data files added and/or removed, paired by path."""

    def task(path: str, partition_values: dict[str, Any], size: Any, **rest: Any) -> dict[str, Any]:
        entry = {"path": path, "partitionValues": partition_values or {}}
        return {
            "path": path,
            "size": size,
            "partitionValues_parsed": typed_partition_values(state, entry),
            "version": version,
            "timestamp": stamp,
            "baseRowId": None,
            "defaultRowCommitVersion": None,
            **rest,
        }

    def location(path: str) -> str:
        return path_key(path, root) or absolute_path(path, root)

    cdc = [a["cdc"] for a in actions if a.get("cdc")]
    if cdc:
        return [task(location(c["path"]), c.get("partitionValues"), c.get("size"), cdc=True) for c in cdc]
    pairs: dict[str, dict[str, Any]] = {}
    for action in actions:
        for side in ("add", "remove"):
            value = action.get(side)
            if value is None or not value.get("dataChange", True):
                continue
            pair = pairs.setdefault(location(value["path"]), {"values": value.get("partitionValues")})
            pair[side] = value
    return [
        task(
            path,
            pair["values"],
            (pair.get("add") or pair.get("remove") or {}).get("size"),
            cdc=False,
            has_add="add" in pair,
            has_remove="remove" in pair,
            add_dv=pair.get("add", {}).get("deletionVector"),
            remove_dv=pair.get("remove", {}).get("deletionVector"),
        )
        for path, pair in pairs.items()
    ]


def snapshot_tasks(state: TableState, stamp: int) -> list[dict[str, Any]]:
    """A stream's initial snapshot as a feed: every live row an insert at the snapshot's version."""
    actions = [{"add": {**f, "path": f["path"], "dataChange": True}} for f in state.live_files]
    return change_tasks(state, state.version, actions, state.table_root, stamp)


class ChangeFeedReader(FileReading, DataSourceReader):
    """Reads the feed's files as Arrow batches (`arrow_file_reader.read_change_files`)."""

    def __init__(self, feed: ChangeFeed, settings: FileSystemSettings | None) -> None:
        super().__init__(feed.state, settings)
        self.schema_json = feed_schema(feed.state).json()
        self._tasks: list[dict[str, Any]] | None = feed.tasks()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tasks": None}

    def partitions(self) -> list[ChangePartition]:
        return change_partitions(self._tasks or [])

    def read(self, partition: ChangePartition):  # noqa: ANN201 - Arrow record batches
        return self.read_with(read_change_files, getattr(partition, "tasks", []))


def change_partitions(tasks: list[dict[str, Any]]) -> list[ChangePartition]:
    """A change feed's files, `FILES_PER_TASK` to a task, in order."""
    return [ChangePartition(tasks[i : i + FILES_PER_TASK]) for i in range(0, len(tasks), FILES_PER_TASK)]
