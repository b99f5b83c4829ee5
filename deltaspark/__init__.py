"""deltaspark: the Delta Lake transaction log as distributed PySpark DataFrame transforms.

from deltaspark import DeltaTable
dt = DeltaTable.forPath(spark, "/path/to/table")
snap = dt.snapshot()            # or snapshot(version=5) / snapshot(timestamp="2024-05-01")
snap.files().show()             # live files, as a DataFrame
"""

from .errors import (
    ChangeDataNotRecordedError,
    CheckpointWriteError,
    CorruptLogError,
    DeltaSparkError,
    InvalidArgumentError,
    MissingActionError,
    MissingDataFileError,
    NonContiguousVersionsError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
    UnsupportedSessionError,
    UnsupportedWriterFeatureError,
    VersionNotFoundError,
)
from .metadata import Metadata
from .protocol import Protocol
from .snapshot import Snapshot
from .table import DeltaTable

__version__ = "0.1.0"

__all__ = [
    "ChangeDataNotRecordedError",
    "CheckpointWriteError",
    "CorruptLogError",
    "DeltaSparkError",
    "DeltaTable",
    "InvalidArgumentError",
    "Metadata",
    "MissingActionError",
    "MissingDataFileError",
    "NonContiguousVersionsError",
    "Protocol",
    "Snapshot",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "UnsupportedFeatureError",
    "UnsupportedSessionError",
    "UnsupportedWriterFeatureError",
    "VersionNotFoundError",
    "__version__",
]
