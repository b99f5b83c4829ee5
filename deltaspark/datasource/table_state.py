"""A table's state at a version, read in plain Python: what a Python data source plans from.

The snapshot deltaspark's API loads is Spark's work (jobs, or the driver's shortcuts for small
logs, reached through the JVM). A Python data source's planning runs in a Python process without
a JVM, so this module plans the log segment with the same pure-Python code (`plan_segment`:
listing, `_last_checkpoint`, compactions) over `ArrowStorage` and replays it with `log_replay`.
The live files are kept as plain dicts, in delta-spark's streaming order (modification time, path).
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.datasource.arrow_storage import ArrowStorage
from deltaspark.datasource.file_order import RUN_FILES, FileOrder, stream_key
from deltaspark.datasource.log_replay import Replayed, replay
from deltaspark.errors import (
    DeltaSparkError,
    InvalidArgumentError,
    MissingActionError,
    TableNotFoundError,
    UnsupportedFeatureError,
)
from deltaspark.features.column_mapping import column_mapping_mode, physical_name
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol, check_readable
from deltaspark.features.schema import drop_void_fields
from deltaspark.log.commit_timestamps import InCommitTimestamps, version_at_timestamp
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of, plan_segment, table_root_from
from deltaspark.log.segment import LogSegment


@dataclass(frozen=True)
class TableState:
    """Protocol, metadata and live files of one version, as plain values."""

    table_root: str
    version: int
    protocol: Protocol
    metadata: Metadata
    # one per live file (`file_entry`), delta-spark's streaming order; None when not read
    files: Sequence[dict[str, Any]] | None

    @property
    def schema(self) -> StructType:
        return self.metadata.schema(self.table_root)

    @property
    def mode(self) -> str:
        return column_mapping_mode(self.protocol, self.metadata)

    @property
    def live_files(self) -> Sequence[dict[str, Any]]:
        if self.files is None:
            raise DeltaSparkError(f"deltaspark: the files of {self.table_root} were not read (a bug)")
        return self.files


def load(
    table: str,
    version: int | None = None,
    timestamp: str | None = None,
    time_zone: str = "UTC",
    stats: bool = False,
    files: bool = True,
) -> TableState:
    """The state of `table` at `version` (or as of `timestamp`, or the latest); with `stats`, each
    file keeps its statistics (for data skipping); without `files`, protocol and metadata only
    (what a schema needs: a checkpoint's two columns, the commits' lines other than file actions)."""
    storage, segment, root = _segment(table, version, timestamp, time_zone)
    live: list[dict[str, Any]] | None = [] if files else None
    take = None if live is None else (lambda location, add: live.append(file_entry(add, location)))
    replayed = replay(storage, segment, root, take, stats)
    if live is not None:
        live.sort(key=stream_key)
    return _state(replayed, segment.version, segment.table_path, root, live)


def load_in_stream_order(
    table: str, version: int, keep: Callable[[dict[str, Any]], bool], run_files: int = RUN_FILES
) -> tuple[TableState, Sequence[dict[str, Any]]]:
    """The state of `table` at `version` without its files, and the live files `keep` keeps in
    delta-spark's streaming order, sorted through local files past `run_files` of them: the files
    are never all in memory (a stream's initial snapshot; `log_replay.replay` with `live_adds`)."""
    storage, segment, root = _segment(table, version, None, "UTC")
    order = FileOrder(run_files)

    def take(location: str, add: dict[str, Any]) -> None:
        entry = file_entry(add, location)
        if keep(entry):
            order.add(entry)

    replayed = replay(storage, segment, root, take)
    return _state(replayed, segment.version, segment.table_path, root, None), order.sorted()


def _segment(
    table: str, version: int | None, timestamp: str | None, time_zone: str
) -> tuple[ArrowStorage, LogSegment, str]:
    storage = ArrowStorage()
    path = storage.qualify(table)
    if timestamp is not None:
        if version is not None:
            raise InvalidArgumentError("Give versionAsOf or timestampAsOf, not both")
        version = version_as_of(storage, path, timestamp, time_zone)
    segment = plan_segment(storage, path, version)
    root = table_root_from(list(segment.listing) or list(segment.tail_files), storage, path)
    return storage, segment, root


def _state(
    replayed: Replayed, version: int, path: str, root: str, live: Sequence[dict[str, Any]] | None
) -> TableState:
    if replayed.protocol is None or replayed.metadata is None:
        raise MissingActionError(
            f"{path} has no {'protocol' if replayed.protocol is None else 'metaData'} at version {version}"
        )
    protocol, metadata = Protocol.from_row(replayed.protocol), Metadata.from_row(replayed.metadata)
    check_readable(protocol, path)
    return TableState(root, version, protocol, metadata, live)


def file_entry(add: dict[str, Any], location: str) -> dict[str, Any]:
    """What a read needs of an `add` action; `location` is its canonical absolute path."""
    return {
        "path": location,
        "size": add.get("size"),
        "modificationTime": add.get("modificationTime"),
        "partitionValues": add.get("partitionValues") or {},
        "deletionVector": add.get("deletionVector"),
        "baseRowId": add.get("baseRowId"),
        "defaultRowCommitVersion": add.get("defaultRowCommitVersion"),
        **({"stats": add.get("stats") or add.get("stats_parsed")} if "stats" in add else {}),
    }


def version_as_of(storage: ArrowStorage, path: str, timestamp: str, time_zone: str) -> int:
    listing = list_log_files(storage, log_dir_of(path))
    if listing is None:
        raise TableNotFoundError(path)
    latest = plan_segment(storage, path, None, listing=listing)
    root = table_root_from(listing, storage, path)
    replayed = replay(storage, latest, root)
    protocol = Protocol.from_row(replayed.protocol or {})
    metadata = Metadata.from_row(replayed.metadata or {})
    commits = [f for f in listing if f.kind is LogFileKind.COMMIT]
    ict = InCommitTimestamps.of(protocol, metadata)
    return version_at_timestamp(
        None, commits, ict, epoch_ms(timestamp, time_zone), lambda files: in_commit_timestamps(storage, files)
    )


def commit_actions(storage: ArrowStorage, table_root: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit `version`, in order; None when its file is not there."""
    text = storage.read_text(f"{log_dir_of(table_root)}/{version:020d}.json")
    return None if text is None else [json.loads(line) for line in text.splitlines() if line.strip()]


def in_commit_timestamps(storage: ArrowStorage, files: list[LogFile]) -> dict[int, int]:
    """`inCommitTimestamp` of each commit's `commitInfo` (the first one it holds), where it has
    one: the times of commits made with in-commit timestamps, read without a session."""
    out = {}
    for f in files:
        for line in (storage.read_text(f.path) or "").splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is not None:
                if info.get("inCommitTimestamp") is not None:
                    out[f.version] = int(info["inCommitTimestamp"])
                break
    return out


def epoch_ms(timestamp: str, time_zone: str) -> int:
    """A user's timestamp (ISO 8601 or Spark's `yyyy-MM-dd[ HH:mm:ss[.SSS]]`) in ms; without a zone
    it is read in the session's time zone, as delta-spark reads `timestampAsOf`."""
    text = str(timestamp).strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(f"Cannot interpret {timestamp!r} as a timestamp") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zoneinfo.ZoneInfo(time_zone))
    return int(parsed.timestamp() * 1000)


# ---- partition values --------------------------------------------------------------------------
def partition_value(text: str | None, data_type: DataType, where: str) -> Any:
    """A partition value as the protocol serializes it ("Partition Value Serialization"), typed."""
    if text is None or (text == "" and not isinstance(data_type, StringType)):
        return None
    try:
        if isinstance(data_type, StringType):
            return text
        if isinstance(data_type, ByteType | ShortType | IntegerType | LongType):
            return int(text)
        if isinstance(data_type, FloatType | DoubleType):
            return float(text)
        if isinstance(data_type, BooleanType):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(data_type, DecimalType):
            return Decimal(text)
        if isinstance(data_type, DateType):
            return dt.date.fromisoformat(text[:10])
        if isinstance(data_type, TimestampType):
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.timezone.utc)
        if isinstance(data_type, TimestampNTZType):
            return dt.datetime.fromisoformat(text)
        if isinstance(data_type, BinaryType):
            return text.encode("utf-8")
    except ValueError as exc:
        raise DeltaSparkError(
            f"deltaspark: partition value {text!r} of {where} is not a {data_type.simpleString()}"
        ) from exc
    raise UnsupportedFeatureError(f"deltaspark: partition column type {data_type.simpleString()} in {where}")


def typed_partition_values(state: TableState, entry: dict[str, Any]) -> dict[str, Any]:
    """A file's partition values by logical column name, typed (keys in the log are physical
    names on a column-mapped table)."""
    schema, mode = state.schema, state.mode
    raw = entry["partitionValues"] or {}
    out = {}
    for name in state.metadata.partitionColumns:
        field = next((f for f in schema.fields if f.name.lower() == name.lower()), None)
        if field is None:
            continue
        key = physical_name(field, mode)
        out[field.name] = partition_value(raw.get(key), field.dataType, entry["path"])
    return out


def output_schema(state: TableState) -> StructType:
    """The rows' schema: the logical schema without the log's own field metadata."""
    fields = drop_void_fields(state.schema).fields  # as `toDF`: a void column holds no value
    return StructType([StructField(f.name, f.dataType, f.nullable) for f in fields])
