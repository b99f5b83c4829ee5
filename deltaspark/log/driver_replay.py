"""The reconciled file actions of a small log, replayed on the driver.

A Spark replay costs a notebook user several jobs (a window over the commits, then collecting the
paths Spark's scan needs) of a few tenths of a second each, even for a table of three commits.
When the log is small - its JSON files and parquet checkpoint within
`spark.deltaspark.replay.driverMaxBytes` - the driver reads it itself and reconciles with the rules
of `reconciliation`:

- the newest action per logical file `(canonical path, deletionVector.uniqueId)` wins, and within
  one version a `remove` beats an `add`;
- a path with two surviving adds is a damaged log: `CorruptLogError` naming the path and both
  versions, as Spark's plans name it (two adds inside one checkpoint too, which the broadcast plan
  takes as reconciled).

The result is a `LocalRelation` with the columns of `reconciliation.file_action_rows`. Its `add`
and `remove` structs are parsed by Spark's `from_json` from the typed actions, so every later
transform (partition values, statistics, pruning, the read) is the Spark path's own, folded by
Spark into the relation: collecting the file list runs no job.

The driver answers only when every line and row it reads is clean and typed exactly as the action
schema says (`typed_json`). A corrupt line, an unexpected type, a path Java would decode otherwise,
a deletion vector the protocol does not allow, parsed statistics or sidecars in the checkpoint:
`None`, and the Spark path reads the log and gives the answer or the error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, LongType, StringType, StructField, StructType

from deltaspark.errors import CorruptLogError, DeltaSparkError
from deltaspark.features.deletion_vectors import dv_unique_id_of
from deltaspark.log import action_schemas as schemas
from deltaspark.log import held_bytes
from deltaspark.log.checkpoint_check import decode_parquet
from deltaspark.log.files import LogFile
from deltaspark.log.paths import path_key
from deltaspark.log.reconciliation import TWO_LIVE_ADDS, dv_description
from deltaspark.log.segment import LogSegment
from deltaspark.log.segment_cache import SegmentCache
from deltaspark.log.typed_json import (
    UnclearError,
    UnreadableParquetError,
    json_object,
    parquet_actions,
    typed,
)
from deltaspark.spark_compat import conf_get, local_frame
from deltaspark.storage import LINE_BREAK, Storage

MAX_BYTES_CONF = "spark.deltaspark.replay.driverMaxBytes"
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# A parquet checkpoint is compressed; its bytes count this many times against the limit.
PARQUET_WEIGHT = 8
# Characters a held file action takes beside its JSON and key (the entry itself), counted for each
# line of a JSON file when judging, before parsing it, whether its actions fit the limit.
LINE_CHARS = 64


class TooBigError(Exception):
    """The log holds more than the driver replay's limit: Spark's replay reads it."""


FileKey = tuple[str, str]  # (canonical path, DV unique id)
# Non-file actions the replay counts as it reads (`FileState.counted`), and keeps the newest of
# per key (`FileState.newest`): txn per appId, domainMetadata per domain.
COUNTED_KINDS = ("txn", "domainMetadata")
_COUNTED = {kind.lower(): kind for kind in COUNTED_KINDS}
_KEY_FIELDS = {"txn": "appId", "domainMetadata": "domain"}
_SMALL_SCHEMAS = {"txn": schemas.TXN, "domainMetadata": schemas.DOMAIN_METADATA}
# A non-file action the replay read, or `None` for one the driver cannot read as Spark's
# `Snapshot.transactions()` / `domainMetadata()` would (see `FileState.newest`).
SmallAction = tuple[str, dict[str, Any]] | None

FRAME_SCHEMA = StructType(
    [
        StructField("version", LongType(), False),
        StructField("is_add", BooleanType(), False),
        StructField("path_key", StringType(), False),
        StructField("dv_id", StringType(), False),
        StructField("add_json", StringType(), True),
        StructField("remove_json", StringType(), True),
    ]
)


@dataclass
class FileState:
    """The newest action per logical file after some log files: the first step of reconciliation,
    which later commits update (the second, one add per path, is taken when rows are made)."""

    table_root: str
    deletion_vectors: bool  # whether the protocol allows them (an action with one is refused if not)
    entries: dict[FileKey, tuple[int, bool, str]] = field(default_factory=dict)
    chars: int = 0  # about the memory it holds, for the bounds
    # How many actions of each `COUNTED_KINDS` kind the log files read hold (not reconciled): an
    # upper bound of the live ones, so a checkpoint skips replaying a kind the log has none of.
    counted: dict[str, int] = field(default_factory=dict)
    # The newest txn per appId and domainMetadata per domain, typed, as `(version, value)` keyed by
    # `(kind, key)`: what a checkpoint written on the driver holds. `None` once a file held one the
    # driver cannot read exactly as Spark's replay of them would (another spelling of the key, a
    # line whose first action is another, a value of another type, two values at one version).
    newest: dict[tuple[str, str], tuple[int, dict[str, Any]]] | None = field(default_factory=dict)

    def copy(self) -> FileState:
        newest = None if self.newest is None else dict(self.newest)
        return FileState(
            self.table_root, self.deletion_vectors, dict(self.entries), self.chars, dict(self.counted), newest
        )

    def apply_small(self, version: int, action: SmallAction) -> None:
        """Keep `action` if it is the newest of its key (see `newest`)."""
        if self.newest is None:
            return
        if action is None:
            self.newest = None
            return
        kind, value = action
        key = value.get(_KEY_FIELDS[kind])
        if not isinstance(key, str):
            self.newest = None  # Spark groups null keys its own way
            return
        held = self.newest.get((kind, key))
        if held is not None and held[0] == version and held[1] != value:
            self.newest = None  # two values at one version: Spark's pick is arbitrary
            return
        if held is None or version >= held[0]:
            if held is None:
                self.chars += len(key) + 64
            self.newest[(kind, key)] = (version, value)

    def apply(self, version: int, is_add: bool, key: FileKey, action: str) -> None:
        held = self.entries.get(key)
        if held is None or version > held[0] or (version == held[0] and (held[1] or not is_add)):
            if held is None:
                self.chars += len(key[0]) + len(key[1]) + LINE_CHARS
            else:
                self.chars -= len(held[2])
            self.chars += len(action)
            self.entries[key] = (version, is_add, action)

    def two_live_adds(self) -> tuple[tuple[int, str, str], tuple[int, str, str]] | None:
        """Two live adds of one path (different DV ids), as `(version, dv id, action)`, newer
        first: a damaged log (`reconciliation.TWO_LIVE_ADDS`); None when there are none."""
        if not self.deletion_vectors:
            return None  # every key has the empty DV id: a path is a key
        added: dict[str, tuple[int, str, str]] = {}
        for (path, dv_id), (version, is_add, action) in self.entries.items():
            if not is_add:
                continue
            if path in added:
                pair = sorted([added[path], (version, dv_id, action)], reverse=True)
                return pair[0], pair[1]
            added[path] = (version, dv_id, action)
        return None

    def checkpointed(self, cutoff_ms: int) -> int:
        """How many file actions a checkpoint keeps: the live files and the tombstones deleted
        after `cutoff_ms` (a missing `deletionTimestamp` counts as 0, as the Spark path reads it)."""
        kept = 0
        for _, is_add, action in self.entries.values():
            if is_add or (json.loads(action).get("deletionTimestamp") or 0) > cutoff_ms:
                kept += 1
        return kept

    def rows(self) -> list[tuple[int, bool, str, str, str | None, str | None]]:
        """The reconciled rows, in `FRAME_SCHEMA` order."""
        return [
            (version, is_add, path, dv_id, action if is_add else None, None if is_add else action)
            for (path, dv_id), (version, is_add, action) in self.entries.items()
        ]


def max_bytes(spark: SparkSession) -> int:
    try:
        return int(conf_get(spark, MAX_BYTES_CONF, str(DEFAULT_MAX_BYTES)))
    except ValueError:
        return DEFAULT_MAX_BYTES


def weighted_bytes(files: list[LogFile]) -> int:
    return sum(f.size * (PARQUET_WEIGHT if f.file_format == "parquet" else 1) for f in files)


# States of recently read small logs, so that a table read again after a commit reads only the
# new commit; bounded in total (a large table's state is never held: it is not replayed here).
MAX_CACHED_CHARS = 64 * 1024 * 1024
_states: SegmentCache[FileState] = SegmentCache(
    max_bases=16, per_base=3, size_of=lambda state: state.chars, max_size=MAX_CACHED_CHARS
)


def file_state(
    spark: SparkSession, storage: Storage, segment: LogSegment, table_root: str, deletion_vectors: bool
) -> FileState | None:
    """The reconciled file actions of `segment` replayed on the driver, reading only the files a
    held state does not cover; `None` when the log is too big for the driver or unclear to it."""
    limit = max_bytes(spark)
    if limit <= 0 or not storage.direct_reads:
        return None
    held, newer, exact = _states.lookup(segment)
    if held is not None and (held.table_root != table_root or held.deletion_vectors != deletion_vectors):
        held, exact = None, False
    if held is not None and exact:
        return held
    if held is None:
        newer = [*(segment.checkpoint.files if segment.checkpoint else ()), *segment.tail_files]
    if weighted_bytes(newer) > limit:
        return None
    try:
        state = replay(storage, segment, table_root, deletion_vectors, held, newer, limit)
    except UnreadableParquetError as exc:
        # Damage, or a page pyarrow cannot decode: `CorruptLogError` naming the part when Spark
        # cannot decode it either, else Spark's replay reads it.
        decode_parquet(spark, [exc.path])
        return None
    if state is None or state.chars > limit:
        return None
    pair = state.two_live_adds()
    if pair is not None:
        (version, dv_id, action), (other_version, other_dv, _) = pair
        path = json.loads(action)["path"]
        reason = TWO_LIVE_ADDS % (
            path,
            version,
            dv_description(dv_id),
            other_version,
            dv_description(other_dv),
        )
        raise CorruptLogError(_log_file(segment, version), reason)
    _states.store(segment, state)
    return state


def _log_file(segment: LogSegment, version: int) -> str:
    """The log file of `segment` an action of `version` came from (for errors)."""
    for f in segment.tail_files:
        if f.version == version:
            return f.path
    assert segment.checkpoint is not None
    return segment.checkpoint.files[0].path


def clear_cache() -> None:
    _states.clear()


def replay(
    storage: Storage,
    segment: LogSegment,
    table_root: str,
    deletion_vectors: bool,
    base: FileState | None,
    files: list[LogFile],
    limit: int | None = None,
) -> FileState | None:
    """`base` (the state before `files`, or None to start from nothing) updated with `files`: the
    checkpoint's files (all of one version) and JSON commits or compactions, oldest first; `None`
    when the driver cannot give the Spark path's answer, or as soon as the state would hold more
    than `limit` characters (so that a log too big for the driver is not parsed there in vain)."""
    state = FileState(table_root, deletion_vectors) if base is None else base.copy()
    checkpoint_version = segment.checkpoint.version if segment.checkpoint is not None else None
    checkpoint_keys: set[FileKey] = set()
    try:
        for f in files:
            version = checkpoint_version if f.is_checkpoint else f.version
            assert version is not None
            small: list[SmallAction] = []
            budget = None if limit is None else limit - state.chars
            actions = file_actions(storage, f, table_root, deletion_vectors, state.counted, small, budget)
            for is_add, key, action in actions:
                if f.is_checkpoint:
                    if key in checkpoint_keys:
                        raise UnclearError  # a damaged checkpoint: Spark's replay shows it as written
                    checkpoint_keys.add(key)
                state.apply(version, is_add, key, action)
                if limit is not None and state.chars > limit:
                    return None
            for found in small:
                state.apply_small(version, found)
    except (UnclearError, DeltaSparkError, TooBigError):
        return None  # the Spark path reads these files again and reports what is wrong
    return state


def file_actions(
    storage: Storage,
    f: LogFile,
    root: str,
    deletion_vectors: bool,
    counted: dict[str, int] | None = None,
    small: list[SmallAction] | None = None,
    budget: int | None = None,
) -> Iterator[tuple[bool, FileKey, str]]:
    """`(is_add, key, action JSON)` of each file action of a log file, typed exactly as Spark's
    replay reads it; `UnclearError` where the driver cannot be sure to (Spark then decides).
    `counted`, when given, is increased by the file's actions of each `COUNTED_KINDS` kind (any
    spelling of the key, so that it bounds what Spark reads); `small`, when given, receives them
    typed (`SmallAction`). `budget`: the characters a state may still take; a JSON file whose
    text and lines would take more (`LINE_CHARS` a line: what a state holds beside each action)
    raises `TooBigError` before any line is parsed."""
    if f.file_format == "parquet":
        data = held_bytes.take(f) or storage.read_bytes(f.path)
        if data is None:
            raise UnclearError  # vanished since listing
        kinds = {"add": schemas.ADD, "remove": schemas.REMOVE}
        if small is not None:
            kinds.update(_SMALL_SCHEMAS)
        for row in parquet_actions(data, kinds, f.path, COUNTED_KINDS, counted):
            if small is not None:
                small += [(kind, row[kind]) for kind in _SMALL_SCHEMAS if row[kind] is not None]
            yield from _file_action(row["add"], row["remove"], root, deletion_vectors)
        return
    held = held_bytes.take(f)  # read for protocol and metadata just before: not read again
    text = held.decode("utf-8", "replace") if held is not None else storage.read_text(f.path)
    if text is None or "\ufffd" in text:
        raise UnclearError  # vanished, or bytes that are not UTF-8: Spark decides
    lines = LINE_BREAK.split(text)
    if budget is not None and len(text) + LINE_CHARS * len(lines) > budget:
        raise TooBigError(f.path)
    for line in lines:
        if line.strip(" \t") == "":
            continue  # Spark's JSON reader skips blank lines
        parsed = json_object(line)
        if counted is not None or small is not None:
            _small_actions(parsed, counted, small)
        yield from _file_action(parsed.get("add"), parsed.get("remove"), root, deletion_vectors)


def _small_actions(
    parsed: dict[str, Any], counted: dict[str, int] | None, small: list[SmallAction] | None
) -> None:
    """Count a line's `COUNTED_KINDS` actions and type them into `small`: Spark's replay of them
    parses a line only when its first key is the kind (`replay.read_json_actions`), spelled so."""
    for name, value in parsed.items():
        kind = _COUNTED.get(name.lower())
        if kind is None or value is None:
            continue
        if counted is not None:
            counted[kind] = counted.get(kind, 0) + 1
        if small is None:
            continue
        if name != kind or next(iter(parsed)) != name:
            small.append(None)
            continue
        try:
            small.append((kind, typed(value, _SMALL_SCHEMAS[kind])))
        except UnclearError:
            small.append(None)


def _file_action(
    add: Any, remove: Any, root: str, deletion_vectors: bool
) -> Iterator[tuple[bool, FileKey, str]]:
    if add is None and remove is None:
        return
    if add is not None and remove is not None:
        raise UnclearError  # a damaged line: the Spark path names its file
    is_add = add is not None
    action = typed(add if is_add else remove, schemas.ADD if is_add else schemas.REMOVE)
    dv = action["deletionVector"]
    if action["path"] is None or (dv is not None and not deletion_vectors):
        raise UnclearError
    key = path_key(action["path"], root)
    if key is None:
        raise UnclearError
    yield is_add, (key, dv_unique_id_of(dv)), json.dumps(action, separators=(",", ":"))


def listed_adds(state: FileState) -> list[Row]:
    """The live files of `state` as a read collects them from `reconciled_frame` (`path`, `hasDv`,
    `deleted`, `deletionVector`, `size`), without building the frame: the typed actions are what Spark's
    `from_json` parses them to, so the rows are the same. Each row also carries what the read ties
    to the file's rows (`ENTRY_FIELDS`): its canonical path, version, partition values (as logged,
    a JSON object) and row tracking fields, so that the read needs no file list frame at all."""
    dv_fields = schemas.ADD["deletionVector"].dataType.fieldNames()  # type: ignore[attr-defined]
    listed = []
    for version, is_add, key, _, action, _ in state.rows():
        if not is_add:
            continue
        add = json.loads(action)  # type: ignore[arg-type]
        dv = add.get("deletionVector")
        descriptor = None if dv is None else Row(**{name: dv.get(name) for name in dv_fields})
        deleted = None if dv is None else dv.get("cardinality")
        listed.append(
            Row(
                path=add["path"],
                hasDv=dv is not None,
                deleted=deleted,
                deletionVector=descriptor,
                size=add.get("size"),
                fileKey=key,
                version=version,
                partitionValues=json.dumps(add.get("partitionValues") or {}),
                baseRowId=add.get("baseRowId"),
                defaultRowCommitVersion=add.get("defaultRowCommitVersion"),
            )
        )
    return listed


# The fields of `listed_adds` rows beyond what a read collects, in `ENTRIES_SCHEMA` order.
ENTRY_FIELDS = ("fileKey", "path", "version", "partitionValues", "baseRowId", "defaultRowCommitVersion")
ENTRIES_SCHEMA = (
    "fileKey string, path string, version long, partitionValues string, baseRowId long, "
    "defaultRowCommitVersion long"
)


def reconciled_frame(spark: SparkSession, state: FileState, checkpoint_stats: DataType) -> DataFrame:
    """The state as `reconciliation.file_action_rows` rows (plus a null `checkpoint_stats`)."""
    rows = state.rows()
    columns = {f.name: [row[i] for row in rows] for i, f in enumerate(FRAME_SCHEMA.fields)}
    return local_frame(spark, columns, FRAME_SCHEMA).select(
        "version",
        "is_add",
        "path_key",
        "dv_id",
        F.from_json("add_json", schemas.ADD).alias("add"),
        F.from_json("remove_json", schemas.REMOVE).alias("remove"),
        F.lit(None).cast(checkpoint_stats).alias("checkpoint_stats"),
    )
