"""`spark.readStream.format("delta")`: a table's data as a stream of files, delta-spark's way.

A stream first emits the table as of the version it starts from (the "initial snapshot", unless
`startingVersion` / `startingTimestamp` say to start at a commit), then each later commit's added
files, in order. Its offsets are delta-spark's (`DeltaSourceOffset`): `reservoirId` (the table's
id, checked on every batch: a replaced table fails the query), `reservoirVersion`, `index` (the
file's position within that version; -1: none of it yet) and `isStartingVersion` (the version's
files are its snapshot, not its commit's adds). After a version is read to its end the offset moves
to (next version, -1): restarting from a checkpoint reads exactly the files after it.

What a commit does decides what the stream does with it, as in delta-spark:

- adds with `dataChange=false` (OPTIMIZE, a checkpoint's rewrite) emit nothing;
- a commit that removes data: with adds of data too (UPDATE, MERGE, a delete through deletion
  vectors) it fails with `UpdatedDataInStreamError` unless `skipChangeCommits` (skip the commit)
  or `ignoreChanges` (emit its added files, rows that did not change included); without (a DELETE
  of whole files) it fails with `DeletedDataInStreamError` unless `ignoreDeletes`, `ignoreChanges`
  or `skipChangeCommits`;
- a schema the stream's schema cannot read (a column dropped, renamed or retyped) fails with
  `SchemaChangedInStreamError`; added columns are read as before (restart to see them);
- a version whose commit was cleaned up fails with `StreamDataLossError` unless
  `failOnDataLoss=false` (the stream then goes on from the oldest commit there is).

With `readChangeFeed`, the stream is the table's change data feed: the initial snapshot's rows as
inserts, then each commit's changes (`_change_type`, `_commit_version`, `_commit_timestamp`), read
as `changes.ChangeFeed` reads them in a batch; removes are changes then, not errors.

Admission control (Spark 4.2+, `latestOffset(start, limit)`): `maxFilesPerTrigger` (default 1000)
and `maxBytesPerTrigger`, at least one file per batch; `Trigger.AvailableNow` reads up to the
version current when the query started, in such batches. Offsets are planned in the query's
long-lived Python process, which keeps a few versions' file lists between batches; the initial
snapshot's list is sorted through local files past `spark.deltaspark.stream.snapshotRunFiles`
files (`file_order`), so millions of files are never all in its memory.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType

from deltaspark.datasource.arrow_storage import ArrowStorage
from deltaspark.datasource.batch import FilePartition, FileReading, file_partitions
from deltaspark.datasource.changes import (
    change_partitions,
    change_tasks,
    feed_schema,
    snapshot_tasks,
)
from deltaspark.datasource.file_order import RUN_FILES
from deltaspark.datasource.table_state import (
    TableState,
    commit_actions,
    epoch_ms,
    file_entry,
    in_commit_timestamps,
    load,
    load_in_stream_order,
)
from deltaspark.errors import (
    DeletedDataInStreamError,
    InvalidArgumentError,
    SchemaChangedInStreamError,
    StreamDataLossError,
    StreamTableChangedError,
    UpdatedDataInStreamError,
)
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol, check_readable
from deltaspark.file_io import FileSystemSettings, install
from deltaspark.log.commit_timestamps import (
    InCommitTimestamps,
    first_version_at_or_after,
    monotonic_file_times,
)
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of
from deltaspark.log.paths import path_key
from deltaspark.read.arrow_file_reader import read_change_files
from deltaspark.spark_compat import FileSplitting

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0 / 4.1: every batch reads what is there
    ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


SOURCE_VERSION = 1
DEFAULT_MAX_FILES = 1000
CACHED_VERSIONS = 64  # versions whose file lists the planning process keeps


@dataclass(frozen=True, order=True)
class Position:
    """Where a stream is: every file of `version` up to `index` is read (-1: none of it)."""

    version: int
    index: int
    starting: bool  # the version's files are its snapshot (the initial snapshot), not its adds


@dataclass(frozen=True)
class StreamOptions:
    """delta-spark's source options, read case-insensitively."""

    starting_version: str | None
    starting_timestamp: str | None
    max_files: int | None
    max_bytes: int | None
    ignore_deletes: bool
    ignore_changes: bool
    skip_change_commits: bool
    exclude: re.Pattern[str] | None
    fail_on_data_loss: bool
    change_feed: bool

    @classmethod
    def of(cls, options: dict[str, str]) -> StreamOptions:
        low = {k.lower(): str(v) for k, v in options.items()}

        def flag(name: str, default: bool = False) -> bool:
            value = low.get(name.lower())
            if value is None:
                return default
            if value.lower() not in ("true", "false"):
                raise InvalidArgumentError(f"{name} must be true or false, got {value!r}")
            return value.lower() == "true"

        def positive(name: str) -> int | None:
            value = low.get(name.lower())
            if value is None:
                return None
            number = _bytes(value) if name == "maxBytesPerTrigger" else _int(value, name)
            if number <= 0:
                raise InvalidArgumentError(f"{name} must be positive, got {value!r}")
            return number

        starting_version, starting_timestamp = low.get("startingversion"), low.get("startingtimestamp")
        if starting_version is not None and starting_timestamp is not None:
            raise InvalidArgumentError("Give startingVersion or startingTimestamp, not both")
        if starting_version is not None and starting_version.lower() != "latest":
            _int(starting_version, "startingVersion")
        exclude = low.get("excluderegex")
        return cls(
            starting_version,
            starting_timestamp,
            positive("maxFilesPerTrigger"),
            positive("maxBytesPerTrigger"),
            flag("ignoreDeletes"),
            flag("ignoreChanges"),
            flag("skipChangeCommits"),
            re.compile(exclude) if exclude else None,
            flag("failOnDataLoss", True),
            flag("readChangeFeed"),
        )


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be a whole number, got {value!r}") from None


_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


def _bytes(value: str) -> int:
    """`maxBytesPerTrigger`: a number of bytes, or with a unit as Spark's byte strings (`10m`)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
    if match is None or match.group(2).lower() not in ("", *_UNITS):
        raise InvalidArgumentError(f"maxBytesPerTrigger must be a size such as 1048576 or 1g, got {value!r}")
    return int(match.group(1)) * _UNITS.get(match.group(2).lower(), 1)


def _readable_with(stream: StructType, schema: StructType, all_present: bool) -> bool:
    """Whether rows written under `schema` can be read as the stream's schema: every stream column
    `schema` has (all of them, with `all_present`) has the same type there."""
    fields = {f.name.lower(): f for f in schema.fields}
    for field in stream.fields:
        other = fields.get(field.name.lower())
        if (other is None and all_present) or (other is not None and other.dataType != field.dataType):
            return False
    return True


class DeltaStreamReader(FileReading, SupportsTriggerAvailableNow, DataSourceStreamReader):
    """The micro-batch reader: offsets from the log, files read as in a batch read."""

    def __init__(
        self,
        path: str,
        state: TableState,
        options: dict[str, str],
        time_zone: str,
        settings: FileSystemSettings | None,
        splitting: FileSplitting,
        run_files: int = RUN_FILES,
    ) -> None:
        super().__init__(state, settings)
        self.splitting, self.run_files = splitting, run_files
        self.path, self.time_zone = path, time_zone
        self.options = StreamOptions.of(options)
        if self.options.change_feed:
            self.schema_json = feed_schema(state).json()
        self._stamps: dict[int, int] = {}
        self.table_id = state.metadata.id
        self.stream_schema = state.schema
        self._state = state  # the table when the source was made: schema, partition columns
        self._storage: ArrowStorage | None = None
        self._files: OrderedDict[tuple[int, bool], Sequence[dict[str, Any]]] = OrderedDict()
        self._target: int | None = None  # Trigger.AvailableNow: the newest version to read

    def __getstate__(self) -> dict[str, Any]:  # what Spark ships to the tasks: the read only
        return {**self.__dict__, "_files": OrderedDict(), "_storage": None}

    # ---- the log ------------------------------------------------------------------------------
    @property
    def storage(self) -> ArrowStorage:
        if self._storage is None:
            install(self.settings)
            self._storage = ArrowStorage()
        return self._storage

    def _commits(self) -> list[LogFile]:
        listing = list_log_files(self.storage, log_dir_of(self.table_root)) or []
        return [f for f in listing if f.kind is LogFileKind.COMMIT]

    def _latest(self) -> int:
        commits = self._commits()
        latest = commits[-1].version if commits else -1
        return latest if self._target is None else min(latest, self._target)

    def _version_files(self, version: int, starting: bool) -> Sequence[dict[str, Any]] | None:
        """The files a version contributes to the stream, in order; None when it does not exist
        (yet, or no more: see `_missing`)."""
        key = (version, starting)
        if key in self._files:
            self._files.move_to_end(key)
            return self._files[key]
        if starting:
            files = self._snapshot_files(version)
        else:
            actions = commit_actions(self.storage, self.table_root, version)
            if actions is None:
                return None
            files = self._commit_files(version, actions)
        self._files[key] = files
        while len(self._files) > CACHED_VERSIONS:
            self._files.popitem(last=False)
        return files

    def _snapshot_files(self, version: int) -> Sequence[dict[str, Any]]:
        """The initial snapshot's files in delta-spark's order; past `file_order.RUN_FILES` they
        are sorted and kept in a local file, each batch reading its slice."""
        if self.options.change_feed:
            state = load(self.table_root, version, None, self.time_zone)
            self._check_table(state.metadata, state.protocol, version, earlier=False)
            return [t for t in snapshot_tasks(state, self._stamp(version)) if not self._excluded(t["path"])]
        state, files = load_in_stream_order(
            self.table_root, version, lambda f: not self._excluded(f["path"]), self.run_files
        )
        self._check_table(state.metadata, state.protocol, version, earlier=False)
        return files

    def _stamp(self, version: int) -> int:
        """The commit's time (file times made monotonic, or in-commit timestamps where enabled)."""
        if version not in self._stamps:
            commits = self._commits()
            self._stamps = monotonic_file_times(commits)
            ict = InCommitTimestamps.of(self._state.protocol, self._state.metadata)
            if ict.applies_to(version):
                self._stamps.update(self._ict([c for c in commits if c.version == version]))
        return self._stamps.get(version, 0)

    def _excluded(self, path: str) -> bool:
        return self.options.exclude is not None and self.options.exclude.search(path) is not None

    def _commit_files(self, version: int, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A commit's added data files, after its removes and metadata are weighed (module doc);
        with `readChangeFeed`, its changes (removes are changes then, not errors)."""
        if self.options.change_feed:
            for action in actions:
                if action.get("metaData") is not None or action.get("protocol") is not None:
                    metadata = Metadata.from_row(action["metaData"]) if action.get("metaData") else None
                    protocol = Protocol.from_row(action["protocol"]) if action.get("protocol") else None
                    self._check_table(metadata, protocol, version)
            tasks = change_tasks(self._state, version, actions, self.table_root, self._stamp(version))
            return [t for t in tasks if not self._excluded(t["path"])]
        adds, removed = [], None
        for action in actions:
            if action.get("metaData") is not None or action.get("protocol") is not None:
                metadata = Metadata.from_row(action["metaData"]) if action.get("metaData") else None
                protocol = Protocol.from_row(action["protocol"]) if action.get("protocol") else None
                self._check_table(metadata, protocol, version)
            add, remove = action.get("add"), action.get("remove")
            if add is not None and add.get("dataChange", True):
                adds.append(add)
            if remove is not None and remove.get("dataChange", True) and removed is None:
                removed = remove.get("path")
        if removed is not None:
            options = self.options
            if options.skip_change_commits:
                return []
            if adds and not options.ignore_changes:
                raise UpdatedDataInStreamError(
                    f"deltaspark: Detected a data update (for example {removed}) in the source table at "
                    f"version {version}. This is currently not supported. If this is going to happen "
                    "regularly and you are okay to skip changes, set the option 'skipChangeCommits' to "
                    "'true' ('ignoreChanges' emits the rewritten files instead, rows that did not change "
                    "included). If you would like the data update to be reflected, restart this query "
                    f"with a fresh checkpoint directory. The source table can be found at path {self.path}."
                )
            if not adds and not (options.ignore_deletes or options.ignore_changes):
                raise DeletedDataInStreamError(
                    f"deltaspark: Detected deleted data (for example {removed}) from streaming source at "
                    f"version {version}. This is currently not supported. If you'd like to ignore "
                    "deletes, set the option 'ignoreDeletes' to 'true'. The source table can be found "
                    f"at path {self.path}."
                )
        out = []
        for add in adds:
            location = path_key(add["path"], self.table_root)
            if location is None:
                raise StreamDataLossError(
                    f"deltaspark: version {version} of {self.path} names a path it cannot decode"
                )
            if not self._excluded(add["path"]):
                out.append(file_entry(add, location))
        return out

    def _check_table(
        self, metadata: Metadata | None, protocol: Protocol | None, version: int, earlier: bool = True
    ) -> None:
        """Refuse what the stream cannot read at `version`: an unreadable protocol, another table,
        a schema the stream's cannot read (with `earlier`, the one before `version` too)."""
        if protocol is not None:
            check_readable(protocol, self.path)
        if metadata is None:
            return
        if metadata.id != self.table_id:
            raise StreamTableChangedError(
                f"deltaspark: the table at {self.path} was replaced at version {version} (its id is "
                f"{metadata.id}, the stream's {self.table_id}): start the query with a new checkpoint"
            )
        schema = metadata.schema(self.path)
        if not _readable_with(self.stream_schema, schema, all_present=True):
            self._schema_changed(version, schema)
        if earlier and version > 0:  # a restarted stream has the latest schema: earlier rows must fit
            before = load(self.table_root, version - 1, None, self.time_zone, files=False).schema
            if not _readable_with(self.stream_schema, before, all_present=False):
                self._schema_changed(version, before)

    def _schema_changed(self, version: int, schema: StructType) -> None:
        raise SchemaChangedInStreamError(
            f"deltaspark: the schema of {self.path} changed at version {version} in a way the stream "
            f"cannot read (the stream's: {self.stream_schema.simpleString()}; the table's: "
            f"{schema.simpleString()}): restart the query to read with the new schema (a new "
            "checkpoint if the query's own output cannot follow)"
        )

    def _missing(self, version: int) -> Position | None:
        """A version whose commit is not there: None when it is not written yet; the oldest commit
        when it was cleaned up and `failOnDataLoss` is false; else `StreamDataLossError`."""
        commits = self._commits()
        if not commits or version > commits[-1].version:
            return None
        oldest = min(f.version for f in commits if f.version > version) if commits else version
        if self.options.fail_on_data_loss:
            raise StreamDataLossError(
                f"deltaspark: version {version} of {self.path} was cleaned up before the stream read it "
                f"(the oldest commit there is: {oldest}); data would be lost. Set failOnDataLoss to false "
                "to go on from there, or start the query with a new checkpoint"
            )
        return Position(oldest, -1, False)

    # ---- offsets ------------------------------------------------------------------------------
    def _offset(self, position: Position) -> dict[str, Any]:
        return {
            "sourceVersion": SOURCE_VERSION,
            "reservoirId": self.table_id,
            "reservoirVersion": position.version,
            "index": position.index,
            "isStartingVersion": position.starting,
        }

    def _position(self, offset: dict[str, Any]) -> Position:
        if offset.get("reservoirId") != self.table_id:
            raise StreamTableChangedError(
                f"deltaspark: the query's checkpoint holds offsets of table {offset.get('reservoirId')}, "
                f"but {self.path} is table {self.table_id}: the location was replaced; start the query "
                "with a new checkpoint"
            )
        if int(offset.get("sourceVersion", SOURCE_VERSION)) > SOURCE_VERSION:
            raise InvalidArgumentError(f"deltaspark: unknown Delta source offset version in {offset}")
        return Position(
            int(offset["reservoirVersion"]), int(offset["index"]), bool(offset["isStartingVersion"])
        )

    def initialOffset(self) -> dict[str, Any]:
        options = self.options
        if options.starting_version is not None:
            if options.starting_version.lower() == "latest":
                return self._offset(Position(self._latest() + 1, -1, False))
            return self._offset(Position(int(options.starting_version), -1, False))
        if options.starting_timestamp is not None:
            commits = self._commits()
            ict = InCommitTimestamps.of(self._state.protocol, self._state.metadata)
            first = first_version_at_or_after(
                None, commits, ict, epoch_ms(options.starting_timestamp, self.time_zone), self._ict
            )
            return self._offset(Position(first, -1, False))
        return self._offset(Position(self._state.version, -1, True))

    def _ict(self, files: list[LogFile]) -> dict[int, int]:
        return in_commit_timestamps(self.storage, files)

    def getDefaultReadLimit(self):  # noqa: ANN201 - a pyspark ReadLimit
        if ReadMaxFiles is None:
            return None
        if self.options.max_bytes is not None and self.options.max_files is None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadMaxFiles(self.options.max_files or DEFAULT_MAX_FILES)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The offset after the next batch's files, at most `limit` of them (and at least one)."""
        max_files, max_bytes = None, self.options.max_bytes
        if ReadMaxFiles is not None and isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        elif ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            max_bytes, max_files = limit.max_bytes, self.options.max_files
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            max_bytes = None
        if start is None:  # Spark 4.0 / 4.1: no start given; read from the initial offset on
            start = getattr(self, "_last_end", None) or self.initialOffset()
        position = self._position(start)
        count, size = 0, 0
        for at, files in self._versions(position, self._latest()):
            position = at
            for index in range(at.index + 1, len(files)):
                length = files[index]["size"] or 0
                full = (max_files is not None and count >= max_files) or (
                    max_bytes is not None and count > 0 and size + length > max_bytes
                )
                if full:
                    return self._end(start, position)
                count, size = count + 1, size + length
                position = Position(at.version, index, at.starting)
            position = Position(at.version + 1, -1, False)  # the version is read to its end
        return self._end(start, position)

    def _versions(
        self, position: Position, through: int
    ) -> Iterator[tuple[Position, Sequence[dict[str, Any]]]]:
        """(where the stream is at each version's start, the version's files) from `position` on,
        through version `through`, skipping what `_missing` says was cleaned up; it stops at a
        version not written yet."""
        while position.version <= through:
            files = self._version_files(position.version, position.starting)
            if files is None:
                skipped = self._missing(position.version)
                if skipped is None:
                    return
                position = skipped
                continue
            yield position, files
            position = Position(position.version + 1, -1, False)

    def _end(self, start: dict[str, Any], position: Position) -> dict[str, Any]:
        end = self._offset(position) if position != self._position(start) else start
        self._last_end = end
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FilePartition]:
        """The files after `start` up to and including `end`'s, in stream order."""
        first, last = self._position(start), self._position(end)
        chosen: list[dict[str, Any]] = []
        through = last.version if last.index >= 0 else last.version - 1  # (v, -1): nothing of v
        for at, files in self._versions(first, through):
            upper = len(files) - 1 if at.version < last.version else last.index
            chosen += files[at.index + 1 : upper + 1]
        if self.options.change_feed:
            return change_partitions(chosen)  # type: ignore[return-value]
        return file_partitions(self._state, self.splitting, chosen)

    def read(self, partition: Any):  # noqa: ANN201 - Arrow record batches
        if self.options.change_feed:
            return self.read_with(read_change_files, getattr(partition, "tasks", []))
        return super().read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        for key in [k for k in self._files if k[0] < int(end["reservoirVersion"])]:
            del self._files[key]
