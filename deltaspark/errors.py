"""deltaspark's exception hierarchy.

Every failure a user can act on is one of these, so callers can catch ``DeltaSparkError`` and
tell "your table is broken / unsupported" apart from a bug or a cluster problem.
"""

from __future__ import annotations

from collections.abc import Iterable


class DeltaSparkError(Exception):
    """Base class of every error deltaspark raises on purpose."""


class TableNotFoundError(DeltaSparkError):
    """The path is not a Delta table: no `_delta_log`, or a log without any commit or checkpoint."""

    def __init__(self, path: str, reason: str = "no _delta_log directory") -> None:
        self.path = path
        super().__init__(f"Not a Delta table: {path} ({reason})")


class NotADeltaTableError(TableNotFoundError):
    """A catalog name that is not a Delta table: a view, or a table of another format."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, reason)


class VersionNotFoundError(DeltaSparkError):
    """The requested version cannot be reconstructed from the log that is present."""

    def __init__(self, version: int, earliest: int | None, latest: int | None, detail: str = "") -> None:
        self.version, self.earliest, self.latest = version, earliest, latest
        msg = f"Version {version} is not available"
        if earliest is not None and latest is not None:
            msg += f"; versions {earliest} to {latest} can be read"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class TimestampOutOfRangeError(DeltaSparkError):
    """A timestamp for time travel lies before the first or after the last commit."""


class NonContiguousVersionsError(DeltaSparkError):
    """Commits needed to reconstruct a version are missing from `_delta_log`."""

    def __init__(self, path: str, missing: Iterable[int], detail: str = "") -> None:
        self.path = path
        self.missing = sorted(missing)
        shown = ", ".join(str(v) for v in self.missing[:20])
        more = f" and {len(self.missing) - 20} more" if len(self.missing) > 20 else ""
        super().__init__(
            f"Versions are not contiguous in {path}: missing commit(s) {shown}{more}"
            + (f" ({detail})" if detail else "")
        )


class CorruptLogError(DeltaSparkError):
    """A log file (commit, checkpoint, sidecar, `_last_checkpoint`) cannot be interpreted."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Corrupt Delta log file {path}: {reason}")


class MissingActionError(DeltaSparkError):
    """The log reconstructs a version without a `protocol` or `metaData` action."""

    def __init__(self, path: str, version: int, action: str) -> None:
        self.path, self.version, self.action = path, version, action
        super().__init__(f"Table {path} at version {version} has no `{action}` action in its log")


class UnsupportedFeatureError(DeltaSparkError):
    """The table needs a protocol version or table feature that deltaspark does not implement."""

    def __init__(self, message: str, features: Iterable[str] = ()) -> None:
        self.features = sorted(features)
        super().__init__(message)


class InvalidArgumentError(DeltaSparkError, ValueError):
    """An argument to a deltaspark API is malformed or contradictory."""


class ChangeDataNotRecordedError(DeltaSparkError):
    """The change data feed was not enabled (`delta.enableChangeDataFeed`) at versions of a range."""

    def __init__(self, path: str, start: int, end: int, versions: Iterable[int]) -> None:
        self.path, self.start, self.end = path, start, end
        self.versions = sorted(versions)
        shown = ", ".join(str(v) for v in self.versions[:20]) + (" ..." if len(self.versions) > 20 else "")
        super().__init__(
            f"Change data of {path} for versions {start} to {end} is not available: "
            f"delta.enableChangeDataFeed was not true at version(s) {shown}"
        )


class MissingDataFileError(DeltaSparkError):
    """A data file the log lists as part of the table does not exist."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        super().__init__(
            f"Data file listed in the Delta log does not exist: {path}" + (f" ({detail})" if detail else "")
        )


class UnsupportedWriterFeatureError(UnsupportedFeatureError):
    """The table lists a writer feature deltaspark does not implement, so deltaspark must not change
    its log (write a checkpoint, delete expired log files); `features` names them."""


class UnsupportedSessionError(DeltaSparkError):
    """The operation needs a classic Spark session: files are moved into `_delta_log` through Hadoop's
    FileSystem over py4j, which a Spark Connect session does not expose."""


class CheckpointWriteError(DeltaSparkError):
    """A checkpoint could not be written, or what was written failed verification; nothing of it was
    made visible in `_delta_log`."""


class CorruptDataFileError(DeltaSparkError):
    """A data file the log points at cannot be read (not parquet, truncated, unreadable footer)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Corrupt data file {path}: {reason}")


class DeletionVectorError(DeltaSparkError, ValueError):
    """A deletion vector cannot be decoded or fails its checks (checksum, size, cardinality, Z85).

    Raised on executors as well (inside `mapInArrow`), where the message - which starts with
    `deltaspark:` and names the data file and the DV - is what reaches the user."""


class StorageError(DeltaSparkError):
    """The file system refused an operation deltaspark needs (listing, reading, renaming)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{reason}: {path}" if path else reason)


class PermissionDeniedError(StorageError):
    """The session's credentials may not read (or write) a file or directory of the table."""


class UnsupportedFileSystemError(StorageError):
    """The cluster has no Hadoop FileSystem for the path's scheme (e.g. `s3a://` without hadoop-aws)."""


class WorkerEnvironmentError(DeltaSparkError):
    """Spark's Python workers cannot run deltaspark's executor code (a module is missing there)."""


# ---- commits ------------------------------------------------------------------------------------


class CommitError(DeltaSparkError):
    """A commit could not be made; nothing of it is visible in `_delta_log`."""


class UnsafeCommitStoreError(CommitError):
    """The file system cannot create a log entry only if it is absent (put-if-absent), so concurrent
    writers could overwrite each other's commits; deltaspark refuses to commit rather than risk it."""


class CommitOutcomeUnknownError(CommitError):
    """Writing the commit file failed in a way that leaves open whether it landed (e.g. an object
    store's request failed after the upload); `version` names the commit to check."""

    def __init__(self, path: str, version: int, reason: str) -> None:
        self.path, self.version = path, version
        super().__init__(
            f"Commit of version {version} to {path} failed and may or may not have landed: {reason}. "
            f"Read the table again before retrying: if version {version} holds this transaction's "
            "commitInfo (its txnId), it landed"
        )


class ConcurrentModificationError(CommitError):
    """A concurrent commit conflicts with this transaction (delta-spark's ConcurrentModificationException);
    `version` is the winning commit that conflicts. Re-read the table and retry the operation."""

    def __init__(self, message: str, version: int) -> None:
        self.version = version
        super().__init__(f"{message} (conflicting commit: version {version}). Re-read the table and retry")


class ProtocolChangedError(ConcurrentModificationError):
    """A concurrent commit changed the table's protocol."""


class MetadataChangedError(ConcurrentModificationError):
    """A concurrent commit changed the table's metadata (schema, partitioning, properties)."""


class ConcurrentAppendError(ConcurrentModificationError):
    """A concurrent commit added files that this transaction's reads would have seen."""


class ConcurrentDeleteReadError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction read."""


class ConcurrentDeleteDeleteError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction also removes."""


class ConcurrentTransactionError(ConcurrentModificationError):
    """A concurrent commit updated an application transaction (`txn` appId) or a metadata domain this
    transaction read or writes."""


class TooManyCommitAttemptsError(CommitError):
    """Every retry lost the race for the next version to another writer."""


class TableAlreadyExistsError(DeltaSparkError):
    """`create` found a Delta table (a log with commits) at the location."""

    def __init__(self, path: str, message: str | None = None) -> None:
        self.path = path
        super().__init__(message or f"A Delta table already exists at {path}")


class InvariantViolationError(DeltaSparkError):
    """Rows being written violate a CHECK constraint, a column invariant, a NOT NULL column or a
    generated column's expression; nothing was committed."""


class MergeCardinalityError(DeltaSparkError):
    """MERGE: several source rows matched one target row under an update or delete clause, so the
    row's new value is ambiguous (SQL's rule); nothing was committed. `key` names the target row."""

    def __init__(self, table_path: str, key: str, matches: int) -> None:
        self.key, self.matches = key, matches
        super().__init__(
            f"Cannot merge into {table_path}: {matches} source rows matched the target row {key} and "
            "would update or delete it (at most one may); make the source's keys unique "
            "(e.g. with dropDuplicates) or the merge condition more selective"
        )


class MergeSourceLostError(DeltaSparkError):
    """MERGE: the source's rows, kept once so that every pass reads the same rows, were lost
    (their executors gone, or evicted) in every attempt; nothing was committed."""

    def __init__(self, table_path: str, attempts: int) -> None:
        self.attempts = attempts
        super().__init__(
            f"Cannot merge into {table_path}: the source's kept rows were lost in each of {attempts} "
            "attempts (executors lost or their blocks evicted); nothing was committed. Retry when "
            "the cluster is stable, or give the executors more memory or disk"
        )


class AppendOnlyTableError(DeltaSparkError):
    """The table is append-only (`delta.appendOnly`): files may be added, never removed."""


class VacuumRetentionError(InvalidArgumentError):
    """A vacuum asked for a retention shorter than the table's (or a negative one)."""


class VacuumLiteError(DeltaSparkError):
    """VACUUM LITE cannot see every file a full vacuum would delete (the log was cleaned up)."""


class InvalidInventoryError(InvalidArgumentError):
    """A vacuum inventory without the columns `path, length, isDir, modificationTime`."""


class IcebergTableNotFoundError(TableNotFoundError):
    """The path holds no Iceberg table metadata (no `metadata/` folder or no metadata JSON in it)."""

    def __init__(self, path: str, reason: str = "no metadata/*.metadata.json") -> None:
        self.path = path
        DeltaSparkError.__init__(self, f"Not an Iceberg table: {path} ({reason})")


class CorruptIcebergMetadataError(DeltaSparkError):
    """An Iceberg metadata file (table metadata JSON, manifest list, manifest, Puffin) cannot be
    interpreted; the message names the file."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"Corrupt Iceberg metadata file {path}: {reason}")


class SnapshotNotFoundError(DeltaSparkError):
    """An Iceberg snapshot id, ref name or timestamp that names no snapshot of the table."""


class IcebergCommitConflictError(CommitError):
    """Another writer created the Iceberg metadata file this conversion was about to write."""


class IcebergExportMismatchError(DeltaSparkError):
    """The Iceberg metadata a conversion was about to commit does not count what the Delta snapshot
    holds (files, rows, deleted rows); nothing was committed."""


class StreamingSourceError(DeltaSparkError):
    """A streaming read of a Delta table cannot go on as asked (raised where Spark plans the
    micro-batch: the query fails with this message)."""


class DeletedDataInStreamError(StreamingSourceError):
    """A commit the stream reaches removed data without adding any (a DELETE of whole files, a
    partition overwrite): `ignoreDeletes`, `ignoreChanges` or `skipChangeCommits` let it go on."""


class UpdatedDataInStreamError(StreamingSourceError):
    """A commit the stream reaches rewrote data (UPDATE, MERGE, DELETE of some rows, deletion
    vectors): `skipChangeCommits` skips such commits, `ignoreChanges` emits their rewritten files."""


class SchemaChangedInStreamError(StreamingSourceError):
    """A commit the stream reaches changed the schema in a way the stream's schema cannot read (a
    column dropped, renamed or retyped): restart the query to read with the new schema."""


class StreamDataLossError(StreamingSourceError):
    """Log entries the stream still needs were cleaned up (`failOnDataLoss=false` skips ahead)."""


class StreamTableChangedError(StreamingSourceError):
    """The checkpoint's offsets belong to another table (`reservoirId`): the location was replaced."""
