"""deltaspark: the Delta Lake transaction log as distributed PySpark DataFrame transforms.

from deltaspark import DeltaTable
dt = DeltaTable.forPath(spark, "/path/to/table")
snap = dt.snapshot()            # or snapshot(version=5) / snapshot(timestamp="2024-05-01")
snap.files().show()             # live files, as a DataFrame
"""

from deltaspark.errors import (
    ChangeDataNotRecordedError,
    CheckpointWriteError,
    CorruptDataFileError,
    CorruptLogError,
    DeletionVectorError,
    DeltaSparkError,
    InvalidArgumentError,
    MissingActionError,
    MissingDataFileError,
    NonContiguousVersionsError,
    PermissionDeniedError,
    StorageError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
    UnsupportedFileSystemError,
    UnsupportedSessionError,
    UnsupportedWriterFeatureError,
    VersionNotFoundError,
    WorkerEnvironmentError,
)
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol
from deltaspark.snapshot import Snapshot
from deltaspark.table import DeltaTable

__version__ = "0.1.0"

__all__ = [
    "ChangeDataNotRecordedError",
    "CheckpointWriteError",
    "CorruptDataFileError",
    "CorruptLogError",
    "DeletionVectorError",
    "DeltaSparkError",
    "DeltaTable",
    "InvalidArgumentError",
    "Metadata",
    "MissingActionError",
    "MissingDataFileError",
    "NonContiguousVersionsError",
    "PermissionDeniedError",
    "Protocol",
    "Snapshot",
    "StorageError",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "UnsupportedFeatureError",
    "UnsupportedFileSystemError",
    "UnsupportedSessionError",
    "UnsupportedWriterFeatureError",
    "VersionNotFoundError",
    "WorkerEnvironmentError",
    "__version__",
]
