"""deltaspark: the Delta Lake transaction log as distributed PySpark DataFrame transforms.

from deltaspark import DeltaTable
dt = DeltaTable.forPath(spark, "/path/to/table")
snap = dt.snapshot()            # or snapshot(version=5) / snapshot(timestamp="2024-05-01")
snap.files().show()             # live files, as a DataFrame
"""

from deltaspark.audit.report import AuditReport
from deltaspark.errors import (
    AppendOnlyTableError,
    ChangeDataNotRecordedError,
    CheckpointWriteError,
    CommitError,
    CommitOutcomeUnknownError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    ConcurrentTransactionError,
    CorruptDataFileError,
    CorruptIcebergMetadataError,
    CorruptLogError,
    DeletionVectorError,
    DeltaSparkError,
    IcebergTableNotFoundError,
    InvalidArgumentError,
    InvalidInventoryError,
    InvariantViolationError,
    MetadataChangedError,
    MissingActionError,
    MissingDataFileError,
    NonContiguousVersionsError,
    PermissionDeniedError,
    ProtocolChangedError,
    SnapshotNotFoundError,
    StorageError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    TooManyCommitAttemptsError,
    UnsafeCommitStoreError,
    UnsupportedFeatureError,
    UnsupportedFileSystemError,
    UnsupportedSessionError,
    UnsupportedWriterFeatureError,
    VacuumLiteError,
    VacuumRetentionError,
    VersionNotFoundError,
    WorkerEnvironmentError,
)
from deltaspark.features.identity_columns import IdentityGenerator
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol
from deltaspark.iceberg import IcebergSnapshot, IcebergTable
from deltaspark.snapshot import Snapshot
from deltaspark.table import CommitResult, DeltaTable, DeltaTableBuilder, write

__version__ = "0.1.0"

__all__ = [
    "CorruptIcebergMetadataError",
    "IcebergSnapshot",
    "IcebergTable",
    "IcebergTableNotFoundError",
    "SnapshotNotFoundError",
    "AppendOnlyTableError",
    "AuditReport",
    "ChangeDataNotRecordedError",
    "CheckpointWriteError",
    "CommitError",
    "CommitOutcomeUnknownError",
    "CommitResult",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentModificationError",
    "ConcurrentTransactionError",
    "CorruptDataFileError",
    "CorruptLogError",
    "IdentityGenerator",
    "DeletionVectorError",
    "DeltaSparkError",
    "DeltaTable",
    "DeltaTableBuilder",
    "InvalidArgumentError",
    "InvalidInventoryError",
    "InvariantViolationError",
    "Metadata",
    "MetadataChangedError",
    "MissingActionError",
    "MissingDataFileError",
    "NonContiguousVersionsError",
    "PermissionDeniedError",
    "Protocol",
    "ProtocolChangedError",
    "Snapshot",
    "StorageError",
    "TableAlreadyExistsError",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "TooManyCommitAttemptsError",
    "UnsafeCommitStoreError",
    "UnsupportedFeatureError",
    "UnsupportedFileSystemError",
    "UnsupportedSessionError",
    "UnsupportedWriterFeatureError",
    "VacuumLiteError",
    "VacuumRetentionError",
    "VersionNotFoundError",
    "WorkerEnvironmentError",
    "write",
    "__version__",
]
