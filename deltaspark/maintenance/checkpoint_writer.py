"""Writing checkpoints ("Checkpoints", "Checkpoint Specs", "Checkpoint Naming Scheme") as Spark jobs.

The reconciled state of a snapshot is a DataFrame (`StatePlan.reconciled`); it is shaped
into the protocol's checkpoint schema and written by Spark's parquet writer, one file per task. The
driver never holds the state: it holds the protocol, the metadata, counts, and file names.

Kinds written:

- classic `n.checkpoint.parquet`: one file, for states up to `actionsPerPart` file actions;
- multi-part `n.checkpoint.o.p.parquet` for larger states (V1 spec only): file actions clustered
  by Spark's hash partitioning of `paths.join_key` of their path into
  `ceil(file actions / actionsPerPart)` partitions - the replay's own shuffle, when it ranks the
  whole state. The key is a function of the canonical path, whichever plan replayed the log, so
  racing writers produce the same parts; for a plain relative path it is the path as logged, the
  key Spark's Delta lays its parts out by. Protocol, metadata, txns and domains go in one more
  part, the last;
- V2 (tables with `v2Checkpoint`, unless `delta.checkpointPolicy=classic`): file actions in
  sidecars `_delta_log/_sidecars/<uuid>.parquet`, one per task, and a UUID-named top-level file
  (JSON by default, or parquet) holding `checkpointMetadata`, protocol, metadata, txns, domains
  and the sidecar list.

The state is replayed once, by the write itself. The number of file actions, which sizes the
parts, is taken before it without a replay: exact for a small log replayed on the driver, otherwise
the actions in the segment's files (rows of parquet footers, lines of JSON files), an upper bound.
The exact counts are observed as the rows go into the writer (`Observation`).

Nothing half-written is ever visible: every file is written by Spark into a staging directory
(`_delta_log/_deltaspark_tmp/...`, hidden from readers by its leading `_`), read back and checked
against the observed counts, then renamed into place - parts in order (readers ignore an incomplete
multi-part set), sidecars before the top-level file that references them. An existing log file is
never overwritten: if a checkpoint file with the same name is already there, ours is dropped (both
hold the same state). `_last_checkpoint` is written last, through a temporary file, and never moved
back to an older version.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType

from deltaspark.errors import CheckpointWriteError, InvalidArgumentError, UnsupportedWriterFeatureError
from deltaspark.features.column_mapping import physical_name
from deltaspark.features.partition_values import parse_partition_value, partition_fields
from deltaspark.features.protocol import check_writable
from deltaspark.features.schema import drop_void_fields
from deltaspark.features.stats import parse_stats_json
from deltaspark.log import action_schemas as schemas
from deltaspark.log.json_checksum import checksum_of
from deltaspark.log.last_checkpoint import LAST_CHECKPOINT_NAME
from deltaspark.log.listing import list_log_files, read_last_checkpoint
from deltaspark.log.reconciliation import JOIN_KEY, file_key
from deltaspark.log.replay import count_actions_bound
from deltaspark.log.segment import complete_checkpoints
from deltaspark.maintenance import driver_checkpoint
from deltaspark.spark_compat import is_connect, micros_timestamps
from deltaspark.spark_errors import eager
from deltaspark.storage import FileStatus, Storage, join_path

if TYPE_CHECKING:
    from deltaspark.snapshot import Snapshot

log = logging.getLogger(__name__)

ACTIONS_PER_PART_CONF = "spark.deltaspark.checkpoint.actionsPerPart"
V2_FORMAT_CONF = "spark.deltaspark.checkpoint.v2TopLevelFormat"
# A classic checkpoint stays one file up to a million file actions (a few hundred MB of parquet);
# beyond that it is split so that no single task writes (and no reader reads) one huge file.
DEFAULT_ACTIONS_PER_PART = 1_000_000
# Sidecars are small by design (Spark's Delta uses 50,000 actions per sidecar): many tasks write
# them in parallel, and readers read them in parallel.
DEFAULT_ACTIONS_PER_SIDECAR = 50_000
STAGING_DIR = "_deltaspark_tmp"
SIDECAR_DIR = "_sidecars"

# Checkpoint columns are mostly unique strings (paths, stats JSON): parquet's dictionary encoding
# gives up on them after filling a page, which costs time for nothing, and zstd's level 1 compresses
# these files as small as its default level 3, faster (about a sixth of the write at 10M files).
# Readers do not care: decoding speed does not depend on the level. Set per write, not per session.
_PARQUET_WRITE_OPTIONS = {"parquet.enable.dictionary": "false"}
_ZSTD_LEVEL_OPTION = "parquet.compression.codec.zstd.level"
CHECKPOINT_ZSTD_LEVEL = 1

_PART_NAME = re.compile(r"^part-(\d+)-.*\.(parquet|json)$")
# Written files up to this size in all are read back on the driver to check what they hold.
DRIVER_READ_BACK_BYTES = 8 * 1024 * 1024
_STATS_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timeZone": "UTC"}


@dataclass
class CheckpointResult:
    """What `DeltaTable.checkpoint()` wrote."""

    tablePath: str
    version: int
    kind: str  # "classic", "multi-part" or "v2"
    files: list[str]  # names in _delta_log (for V2: the top-level file)
    sidecars: list[str] = field(default_factory=list)  # names in _delta_log/_sidecars
    numActions: int = 0  # rows in the checkpoint (sidecars included), as in `_last_checkpoint.size`
    numOfAddFiles: int = 0
    numOfRemoves: int = 0  # unexpired tombstones
    numTransactions: int = 0
    numDomains: int = 0
    sizeInBytes: int = 0
    parts: int | None = None
    keptExisting: list[str] = field(default_factory=list)  # names already there (ours dropped)
    lastCheckpointUpdated: bool = False
    seconds: float = 0.0

    def asDict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Plan:
    v2: bool
    v2_format: str  # json | parquet (V2 top-level file)
    actions_per_part: int
    write_stats_json: bool
    write_stats_struct: bool
    codec: str


def _bool_property(configuration: dict[str, str], key: str, default: bool) -> bool:
    value = configuration.get(key)
    return default if value is None else value.strip().lower() == "true"


def _conf(spark: SparkSession, key: str) -> str | None:
    try:
        return spark.conf.get(key, None)
    except Exception:  # pragma: no cover - some sessions reject unknown keys
        return None


def _plan(snapshot: Snapshot, actions_per_part: int | None, v2_format: str | None) -> _Plan:
    conf = snapshot.configuration
    spark = snapshot._spark
    policy = (conf.get("delta.checkpointPolicy") or "").strip().lower()
    v2 = snapshot.protocol.hasFeature("v2Checkpoint") and policy != "classic"
    fmt = (v2_format or _conf(spark, V2_FORMAT_CONF) or "json").strip().lower()
    if fmt not in ("json", "parquet"):
        raise InvalidArgumentError(f"V2 checkpoint top-level format must be json or parquet, not {fmt!r}")
    if actions_per_part is None:
        configured = _conf(spark, ACTIONS_PER_PART_CONF)
        actions_per_part = int(configured) if configured else None
    if actions_per_part is None:
        actions_per_part = DEFAULT_ACTIONS_PER_SIDECAR if v2 else DEFAULT_ACTIONS_PER_PART
    if isinstance(actions_per_part, bool) or not isinstance(actions_per_part, int) or actions_per_part < 1:
        raise InvalidArgumentError(f"actionsPerPart must be a positive integer, got {actions_per_part!r}")
    codec = (conf.get("delta.parquet.compression.codec") or "zstd").strip().lower()
    if codec not in ("none", "uncompressed", "snappy", "gzip", "lz4", "lz4_raw", "zstd"):
        raise InvalidArgumentError(f"delta.parquet.compression.codec={codec!r} is not a known codec")
    return _Plan(
        v2=v2,
        v2_format=fmt,
        actions_per_part=actions_per_part,
        write_stats_json=_bool_property(conf, "delta.checkpoint.writeStatsAsJson", True),
        write_stats_struct=_bool_property(conf, "delta.checkpoint.writeStatsAsStruct", False),
        codec="uncompressed" if codec == "none" else codec,
    )


# ---- literal rows (protocol, metadata, checkpointMetadata, sidecars) ------------------------------


def _literal(value: Any, data_type: DataType) -> Column:
    """A Column holding a Python value as `data_type`: a struct as its JSON text parsed by Spark
    (folded into a constant when planned: no Python on executors, and a handful of calls to the
    JVM however many fields and map entries it has), other types as literals."""
    if value is None:
        return F.lit(None).cast(data_type)
    if isinstance(data_type, StructType):
        return F.from_json(F.lit(json.dumps(value)), data_type)
    if isinstance(data_type, MapType):
        pairs = [c for k, v in value.items() for c in (F.lit(k), _literal(v, data_type.valueType))]
        return (F.create_map(*pairs) if pairs else F.create_map()).cast(data_type)
    if isinstance(data_type, ArrayType):
        items = [_literal(v, data_type.elementType) for v in value]
        return (F.array(*items) if items else F.array()).cast(data_type)
    return F.lit(value).cast(data_type)


def _protocol_value(snapshot: Snapshot) -> dict[str, Any]:
    """The protocol action; feature lists non-null exactly when reader 3 / writer 7 (Checkpoint Schema)."""
    p = snapshot.protocol
    return {
        "minReaderVersion": p.minReaderVersion,
        "minWriterVersion": p.minWriterVersion,
        "readerFeatures": list(p.readerFeatures or ()) if p.supportsReaderFeatures else None,
        "writerFeatures": list(p.writerFeatures or ()) if p.supportsWriterFeatures else None,
    }


def _rows(spark: SparkSession, columns: dict[str, Column]) -> DataFrame:
    return spark.range(1).select(*[c.alias(n) for n, c in columns.items()])


def _nullable(data_type: DataType) -> DataType:
    """The same type with every nested field, element and value nullable: the checkpoint schema has no
    required fields (as Spark's Delta writes it, `schema.asNullable`)."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _nullable(data_type.valueType), True)
    return data_type


def _with_columns(frame: DataFrame, types: dict[str, DataType]) -> DataFrame:
    """`frame` with exactly the columns of `types`, in that order (missing ones as typed nulls), every
    nested field nullable."""
    present = set(frame.columns)
    return frame.select(
        *[(F.col(n) if n in present else F.lit(None)).cast(_nullable(t)).alias(n) for n, t in types.items()]
    )


# ---- the state, shaped as checkpoint actions -----------------------------------------------------


def _partition_values_parsed(snapshot: Snapshot) -> Column | None:
    """Typed partition values keyed by physical name; `None` for an unpartitioned table."""
    mode = snapshot.columnMappingMode
    fields = partition_fields(drop_void_fields(snapshot.schema), snapshot.metadata.partitionColumns)
    if not fields:
        return None
    values = F.col("add.partitionValues")
    source = snapshot._value_source()
    return F.struct(
        *[
            parse_partition_value(values.getItem(physical_name(f, mode)), f, source).alias(
                physical_name(f, mode)
            )
            for f in fields
        ]
    )


def _add_fields(plan: _Plan) -> list[str]:
    """The fields of a checkpoint's `add` (before the parsed ones): `stats` only as JSON is written."""
    return [name for name in schemas.ADD.fieldNames() if name != "stats" or plan.write_stats_json]


def _remove_fields() -> list[str]:
    """The fields of a checkpoint's tombstone: no `stats` and `tags`, which checkpoints must not carry."""
    return [name for name in schemas.REMOVE.fieldNames() if name not in ("stats", "tags")]


def checkpoint_columns(plan: _Plan) -> StructType:
    """A classic checkpoint's columns without parsed statistics, as the Spark route writes them
    (`_classic_layout`): what a checkpoint written on the driver (`driver_checkpoint`) holds."""
    add = StructType([schemas.ADD[name] for name in _add_fields(plan)])
    remove = StructType([schemas.REMOVE[name] for name in _remove_fields()])
    types = [
        ("protocol", schemas.PROTOCOL),
        ("metaData", schemas.METADATA),
        ("txn", schemas.TXN),
        ("add", add),
        ("remove", remove),
        ("domainMetadata", schemas.DOMAIN_METADATA),
    ]
    return StructType([StructField(name, _nullable(t)) for name, t in types])


def _add_action(snapshot: Snapshot, plan: _Plan) -> Column:
    physical_stats, _ = snapshot._stats_schemas
    stats_json = F.coalesce(F.col("add.stats"), F.to_json("checkpoint_stats", _STATS_JSON_OPTIONS))
    columns: list[Column] = []
    for name in _add_fields(plan):
        if name == "stats":
            columns.append(stats_json.alias("stats"))
        elif name == "dataChange":
            columns.append(F.lit(False).alias("dataChange"))  # as Spark's Delta writes checkpoints
        else:
            columns.append(F.col(f"add.{name}").alias(name))
    if plan.write_stats_struct:
        parsed_partitions = _partition_values_parsed(snapshot)
        if parsed_partitions is not None:
            columns.append(parsed_partitions.alias("partitionValues_parsed"))
        parsed = F.coalesce(
            F.col("checkpoint_stats"), parse_stats_json(F.col("add.stats"), physical_stats, physical_stats)
        )
        columns.append(parsed.alias("stats_parsed"))
    return F.when(F.col("is_add"), F.struct(*columns))


def _remove_action() -> Column:
    """A tombstone in checkpoint fields (`_remove_fields`)."""
    columns = []
    for name in _remove_fields():
        value = F.lit(False) if name == "dataChange" else F.col(f"remove.{name}")
        columns.append(value.alias(name))
    return F.when(~F.col("is_add"), F.struct(*columns))


def _checkpointed_rows(snapshot: Snapshot, partitions: int | None = None) -> DataFrame:
    """The reconciled rows a checkpoint keeps: live files and unexpired tombstones."""
    cutoff = snapshot.tombstoneRetentionCutoffMs()
    rows = snapshot.statePlan.reconciled(partitions)
    return rows.where(
        F.col("is_add") | (F.coalesce(F.col("remove.deletionTimestamp"), F.lit(0)) > F.lit(cutoff))
    )


def _file_action_counts() -> list[Column]:
    """Adds and tombstones among `_checkpointed_rows`."""
    is_add = F.col("is_add")
    return [F.count(F.when(is_add, 1)).alias("add"), F.count(F.when(~is_add, 1)).alias("remove")]


def _size(snapshot: Snapshot) -> dict[str, int]:
    """The file actions the checkpoint will hold (`file_actions`), or an upper bound of them, to size
    its parts; and upper bounds of the txn and domainMetadata actions, so that a log without any
    skips their replays.

    A small log replayed on the driver is counted there, without a job: its file actions exactly,
    the txn and domainMetadata actions its files hold as the replay read them. Otherwise counting
    exactly would be one more replay of the log, so the actions in the segment's files are counted
    instead, without parsing any (`count_actions_bound`).
    """
    state = snapshot.statePlan.held
    if state is not None:
        small = {kind: state.counted.get(kind, 0) for kind in ("txn", "domainMetadata")}
        return {"file_actions": state.checkpointed(snapshot.tombstoneRetentionCutoffMs()), **small}
    segment = snapshot.segment
    files: list[Any] = list(segment.tail_files)
    if segment.checkpoint is not None:
        files += segment.checkpoint.files
    files += snapshot.statePlan.sidecars
    bounds = count_actions_bound(snapshot._spark, files, ["txn", "domainMetadata"])
    return {**bounds, "file_actions": bounds["actions"]}


def _observed(live: DataFrame) -> tuple[DataFrame, Observation]:
    """`live` with its adds and tombstones counted as they flow into the writer."""
    observation = Observation(f"deltaspark_checkpoint_{uuid.uuid4().hex}")
    return live.observe(observation, *_file_action_counts()), observation


def _file_actions(snapshot: Snapshot, plan: _Plan, live: DataFrame) -> DataFrame:
    """`live` (`_checkpointed_rows`) as `add` / `remove` columns, plus the `join_key` (the layout
    key) that the union plan's rows carry."""
    carried = [JOIN_KEY] if JOIN_KEY in live.columns else []
    return live.select(_add_action(snapshot, plan).alias("add"), _remove_action().alias("remove"), *carried)


def _non_file_actions(snapshot: Snapshot, types: dict[str, DataType], size: dict[str, int]) -> DataFrame:
    """protocol, metaData, live txns (after `delta.setTransactionRetentionDuration`, as Spark's Delta
    checkpoints them) and live domains, in checkpoint columns. A kind `size` bounds to none is not
    replayed."""
    spark = snapshot._spark
    protocol = _rows(spark, {"protocol": _literal(_protocol_value(snapshot), schemas.PROTOCOL)})
    metadata = _rows(spark, {"metaData": _literal(snapshot.metadata.asDict(), schemas.METADATA)})
    frames = [protocol, metadata]
    if size["txn"]:
        txns = snapshot.transactions().select(F.struct("appId", "version", "lastUpdated").alias("txn"))
        frames.append(txns)
    if size["domainMetadata"]:
        domains = snapshot.domainMetadata().select(
            F.struct("domain", "configuration", F.lit(False).alias("removed")).alias("domainMetadata")
        )
        frames.append(domains)
    return reduce(DataFrame.unionByName, [_with_columns(f, types) for f in frames])


# ---- writing and moving files ---------------------------------------------------------------------


def _write(frame: DataFrame, directory: str, fmt: str, codec: str, max_records: int = 0) -> None:
    writer = frame.write.mode("errorifexists").option("maxRecordsPerFile", max_records)
    if fmt == "parquet":
        writer = writer.options(**_PARQUET_WRITE_OPTIONS)
        if codec == "zstd":
            writer = writer.option(_ZSTD_LEVEL_OPTION, str(CHECKPOINT_ZSTD_LEVEL))
        with micros_timestamps(frame.sparkSession):
            writer.option("compression", codec).parquet(directory)
    else:
        writer.option("compression", "none").option("ignoreNullFields", "true").json(directory)


@dataclass(frozen=True)
class _Written:
    status: FileStatus
    partition: int
    counts: dict[str, int]  # rows, and non-null rows per action kind


def _written_files(
    spark: SparkSession, storage: Storage, directory: str, fmt: str, kinds: list[str]
) -> list[_Written]:
    """The files Spark wrote to `directory`, in partition order, each with its row counts per kind
    (read back on the driver when they are small, else by a Spark job)."""
    statuses = [s for s in storage.list_dir(directory) or [] if _PART_NAME.match(s.name)]
    by_name = _counted_on_driver(storage, statuses, fmt, kinds)
    if by_name is None:
        by_name = _counted_by_spark(spark, directory, fmt, kinds)
    written = []
    for status in statuses:
        m = _PART_NAME.match(status.name)
        assert m is not None
        row = by_name.get(status.name, {"rows": 0})
        written.append(_Written(status, int(m[1]), {k: int(row.get(k) or 0) for k in ["rows", *kinds]}))
    return sorted(written, key=lambda w: w.partition)


def _counted_on_driver(
    storage: Storage, statuses: list[FileStatus], fmt: str, kinds: list[str]
) -> dict[str, dict[str, int]] | None:
    """Rows and rows holding each kind, per file, read on the driver: the files of a small
    checkpoint are read faster here than by a job. None when they are big or unreadable here."""
    if not storage.direct_reads or sum(s.size for s in statuses) > DRIVER_READ_BACK_BYTES:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, dict[str, int]] = {}
    for status in statuses:
        data = storage.read_bytes(status.path)
        if data is None:
            return None
        if fmt == "parquet":
            table = pq.read_table(pa.BufferReader(data))
            present = set(table.column_names)
            counts = {k: len(table) - table.column(k).null_count for k in kinds if k in present}
            out[status.name] = {"rows": len(table), **counts}
        else:
            lines = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
            counts = {k: sum(1 for d in lines if d.get(k) is not None) for k in kinds}
            out[status.name] = {"rows": len(lines), **counts}
    return out


def _counted_by_spark(
    spark: SparkSession, directory: str, fmt: str, kinds: list[str]
) -> dict[str, dict[str, Any]]:
    reader = spark.read.option("ignoreCorruptFiles", "false").option("ignoreMissingFiles", "false")
    if fmt == "parquet":
        frame = reader.parquet(directory)
    else:
        frame = reader.schema(schemas.action_schema(kinds)).json(directory)
    # Probes: a field that is never null where the action is. `dataChange` is one for the file
    # actions this module writes (always false) and, as a boolean, the cheapest column to decode.
    probes = {"add": "add.dataChange", "remove": "remove.dataChange", "metaData": "metaData.id"}
    counts = (
        frame.groupBy(F.col("_metadata.file_name").alias("name"))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            *[F.count(F.col(probes.get(k, f"{k}"))).alias(k) for k in kinds if k in frame.columns],
        )
        .collect()
    )
    return {r["name"]: r.asDict() for r in counts}


def _total(files: list[_Written], kind: str) -> int:
    return sum(w.counts[kind] for w in files)


def _move(storage: Storage, src: str, dst: str, result: CheckpointResult) -> FileStatus:
    """Rename into `_delta_log` without overwriting; an existing file of that name wins."""
    if not storage.rename(src, dst):
        if storage.status(dst) is None:
            raise CheckpointWriteError(f"could not move {src} to {dst}")
        storage.delete(src)
        result.keptExisting.append(dst.rsplit("/", 1)[-1])
        log.info("%s already exists; keeping it (it holds the same state)", dst)
    status = storage.status(dst)
    if status is None:  # pragma: no cover - a store that lost a file we just renamed
        raise CheckpointWriteError(f"{dst} is missing right after it was written")
    return status


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckpointWriteError(f"checkpoint verification failed: {what}; nothing was made visible")


def _check_file_actions(written: list[_Written], observed: dict[str, Any], result: CheckpointResult) -> None:
    """The files hold exactly the adds and tombstones that went into the writer; records them."""
    adds, removes = int(observed["add"]), int(observed["remove"])
    _check(_total(written, "add") == adds, f"{_total(written, 'add')} adds written, {adds} live")
    _check(
        _total(written, "remove") == removes,
        f"{_total(written, 'remove')} tombstones written, {removes} unexpired",
    )
    result.numOfAddFiles, result.numOfRemoves = adds, removes


def _classic_parts(snapshot: Snapshot, plan: _Plan, file_actions: int) -> int:
    """Hash partitions of the file actions; multi-part checkpoints are forbidden with v2Checkpoint."""
    if snapshot.protocol.hasFeature("v2Checkpoint"):
        return 1
    return max(1, math.ceil(file_actions / plan.actions_per_part))


def _classic_layout(snapshot: Snapshot, files: DataFrame, parts: int, size: dict[str, int]) -> DataFrame:
    """Every action in checkpoint columns, one Spark partition per part (an empty partition writes
    no file, or an empty one, which `_write_classic` leaves out).

    With several parts, the file actions are hash partitioned by `paths.join_key` of their logged
    path into `parts` partitions. The union plan's window shuffled them that way already (by the
    `join_key` column it carries), and Spark drops this repartition then; the other plans shuffle
    here, computing the same key in the shuffle, so that no canonical path is built. The non-file
    actions follow as one more partition, so every hash partition stays one part.
    """
    columns: dict[str, DataType] = {
        "protocol": schemas.PROTOCOL,
        "metaData": schemas.METADATA,
        "txn": schemas.TXN,
        "add": files.schema["add"].dataType,
        "remove": files.schema["remove"].dataType,
        "domainMetadata": schemas.DOMAIN_METADATA,
    }
    carried = JOIN_KEY in files.columns
    file_rows = _with_columns(files, {**columns, **({JOIN_KEY: StringType()} if carried else {})})
    non_file = _non_file_actions(snapshot, columns, size)
    if parts == 1:
        return file_rows.select(*columns).unionByName(non_file).coalesce(1)
    key = F.col(JOIN_KEY) if carried else file_key(snapshot.tableRoot)
    return file_rows.repartition(parts, key).select(*columns).unionByName(non_file.coalesce(1))


def _write_classic(
    snapshot: Snapshot,
    plan: _Plan,
    files: DataFrame,
    parts: int,
    size: dict[str, int],
    counts: Observation,
    staging: str,
    log_dir: str,
    result: CheckpointResult,
) -> None:
    laid_out = _classic_layout(snapshot, files, parts, size)
    directory = join_path(staging, "checkpoint")
    log.info("Writing the checkpoint of version %d as %d part(s)", snapshot.version, parts)
    _write(laid_out, directory, "parquet", plan.codec)
    _publish_classic(snapshot, directory, counts.get, log_dir, result)


def _publish_classic(
    snapshot: Snapshot, directory: str, observed: dict[str, Any], log_dir: str, result: CheckpointResult
) -> None:
    """Check the parts written to `directory` against the `observed` file actions, then move them
    into `_delta_log` under their checkpoint names."""
    storage = snapshot._storage
    kinds = ["add", "remove", "protocol", "metaData", "txn", "domainMetadata"]
    written = [
        w for w in _written_files(snapshot._spark, storage, directory, "parquet", kinds) if w.counts["rows"]
    ]
    _check_file_actions(written, observed, result)
    _check(
        _total(written, "protocol") == 1 and _total(written, "metaData") == 1,
        "protocol/metaData not written once",
    )
    # Empty hash partitions leave no file (or an empty one, left out above); the remaining parts
    # are numbered in partition order, which is the same for any writer of this state.
    p = len(written)
    names = (
        [f"{snapshot.version:020d}.checkpoint.parquet"]
        if p == 1
        else [f"{snapshot.version:020d}.checkpoint.{o:010d}.{p:010d}.parquet" for o in range(1, p + 1)]
    )
    statuses = [
        _move(storage, w.status.path, join_path(log_dir, n), result)
        for w, n in zip(written, names, strict=True)
    ]
    result.kind = "classic" if p == 1 else "multi-part"
    result.parts = p if p > 1 else None
    result.files = names
    result.numActions = _total(written, "rows")
    result.numTransactions = _total(written, "txn")
    result.numDomains = _total(written, "domainMetadata")
    result.sizeInBytes = sum(s.size for s in statuses)


def _write_v2(
    snapshot: Snapshot,
    plan: _Plan,
    files: DataFrame,
    size: dict[str, int],
    counts: Observation,
    staging: str,
    log_dir: str,
    result: CheckpointResult,
) -> FileStatus:
    spark, storage = snapshot._spark, snapshot._storage
    sidecars = max(1, math.ceil(size["file_actions"] / plan.actions_per_part))
    directory = join_path(staging, "sidecars")
    log.info("Writing the V2 checkpoint of version %d: up to %d sidecar(s)", snapshot.version, sidecars)
    # Sidecars are named by UUID and listed by the top-level file, so their layout need not be
    # reproducible: no shuffle, the replay's tasks write them (merged down to `sidecars` tasks,
    # and no file holds more than `actionsPerPart` actions).
    _write(
        files.coalesce(sidecars).select("add", "remove"),
        directory,
        "parquet",
        plan.codec,
        max_records=plan.actions_per_part,
    )
    written = [
        w for w in _written_files(spark, storage, directory, "parquet", ["add", "remove"]) if w.counts["rows"]
    ]
    _check_file_actions(written, counts.get, result)

    sidecar_dir = join_path(log_dir, SIDECAR_DIR)
    storage.mkdirs(sidecar_dir)
    entries = []
    for w in written:  # sidecars first: the top-level file that references them comes last
        name = f"{uuid.uuid4()}.parquet"
        status = _move(storage, w.status.path, join_path(sidecar_dir, name), result)
        entries.append(
            {"path": name, "sizeInBytes": status.size, "modificationTime": status.modification_time}
        )
        result.sidecars.append(name)

    top_types: dict[str, DataType] = {
        "checkpointMetadata": schemas.CHECKPOINT_METADATA,
        "protocol": schemas.PROTOCOL,
        "metaData": schemas.METADATA,
        "txn": schemas.TXN,
        "domainMetadata": schemas.DOMAIN_METADATA,
        "sidecar": schemas.SIDECAR,
    }
    if plan.v2_format == "parquet":  # as Spark's Delta, keep the file-action columns (all null)
        top_types.update(add=files.schema["add"].dataType, remove=files.schema["remove"].dataType)
    rows = [
        _rows(
            spark,
            {"checkpointMetadata": _literal({"version": snapshot.version}, schemas.CHECKPOINT_METADATA)},
        ),
        _non_file_actions(snapshot, top_types, size),
    ]
    if entries:
        rows.append(
            spark.range(1).select(
                F.explode(F.array(*[_literal(e, schemas.SIDECAR) for e in entries])).alias("sidecar")
            )
        )
    top = reduce(DataFrame.unionByName, [_with_columns(r, top_types) for r in rows]).coalesce(1)
    top_dir = join_path(staging, "top")
    _write(top, top_dir, plan.v2_format, plan.codec)
    kinds = ["checkpointMetadata", "protocol", "metaData", "txn", "domainMetadata", "sidecar"]
    tops = _written_files(spark, storage, top_dir, plan.v2_format, kinds)
    _check(len(tops) == 1, f"{len(tops)} top-level files written")
    _check(tops[0].counts["checkpointMetadata"] == 1, "checkpointMetadata not written exactly once")
    _check(tops[0].counts["sidecar"] == len(entries), "sidecar list differs from the sidecars written")
    name = f"{snapshot.version:020d}.checkpoint.{uuid.uuid4()}.{plan.v2_format}"
    status = _move(storage, tops[0].status.path, join_path(log_dir, name), result)
    result.kind = "v2"
    result.files = [name]
    result.numActions = _total(written, "rows") + tops[0].counts["rows"]
    result.numTransactions = tops[0].counts["txn"]
    result.numDomains = tops[0].counts["domainMetadata"]
    result.sizeInBytes = sum(w.status.size for w in written) + status.size
    return status


def _written_on_driver(
    snapshot: Snapshot, plan: _Plan, staging: str, log_dir: str, result: CheckpointResult
) -> bool:
    """Write a small state's classic checkpoint on the driver (`driver_checkpoint`) and publish
    it as the Spark route does; False (nothing written) when it is the Spark route's to write."""
    state = snapshot.statePlan.held
    if state is None or plan.write_stats_struct or not snapshot._storage.direct_reads:
        return False
    directory = join_path(staging, "checkpoint")
    written = driver_checkpoint.write(
        snapshot,
        state,
        checkpoint_columns(plan),
        _protocol_value(snapshot),
        plan.codec,
        CHECKPOINT_ZSTD_LEVEL,
        directory,
    )
    if written is None:
        return False
    _publish_classic(snapshot, directory, written, log_dir, result)
    return True


def _write_last_checkpoint(
    storage: Storage, log_dir: str, staging: str, result: CheckpointResult, v2_top: FileStatus | None
) -> bool:
    """Point `_last_checkpoint` at the new checkpoint unless it already points at a newer one that
    exists (a hint naming a checkpoint that is not there breaks readers that trust it: delta-rs)."""
    current = read_last_checkpoint(storage, log_dir)
    if current is not None and current.version > result.version:
        newer = list_log_files(storage, log_dir, from_version=current.version) or []
        if current.version in complete_checkpoints(newer):
            log.info("_last_checkpoint already points at version %d; leaving it", current.version)
            return False
        log.warning(
            "_last_checkpoint names version %d, which has no complete checkpoint: pointing it at %d",
            current.version,
            result.version,
        )
    document: dict[str, Any] = {
        "version": result.version,
        "size": result.numActions,
        "sizeInBytes": result.sizeInBytes,
        "numOfAddFiles": result.numOfAddFiles,
    }
    if result.parts:
        document["parts"] = result.parts
    if v2_top is not None:
        document["v2Checkpoint"] = {
            "path": v2_top.name,
            "sizeInBytes": v2_top.size,
            "modificationTime": v2_top.modification_time,
        }
    document["checksum"] = checksum_of(document)
    temporary = join_path(staging, LAST_CHECKPOINT_NAME)
    storage.write_text(temporary, json.dumps(document))
    storage.replace(temporary, join_path(log_dir, LAST_CHECKPOINT_NAME))
    return True


@eager
def write_checkpoint(
    snapshot: Snapshot,
    actionsPerPart: int | None = None,
    v2Format: str | None = None,
    protectedBeforeVersion: int | None = None,
) -> CheckpointResult:
    """Write a checkpoint of `snapshot` (see the module docstring); returns what was written."""
    started = time.time()
    spark, storage = snapshot._spark, snapshot._storage
    if is_connect(spark):
        raise storage._cannot_write("write a checkpoint")
    check_writable(snapshot.protocol, snapshot.tableRoot, "write a checkpoint of")
    if protectedBeforeVersion is not None and snapshot.version < protectedBeforeVersion:
        raise UnsupportedWriterFeatureError(
            f"Cannot write a checkpoint of version {snapshot.version} of {snapshot.tableRoot}: "
            "`checkpointProtection` forbids checkpoints before "
            f"delta.requireCheckpointProtectionBeforeVersion={protectedBeforeVersion}",
            features=["checkpointProtection"],
        )
    plan = _plan(snapshot, actionsPerPart, v2Format)
    log_dir = join_path(snapshot.tableRoot, "_delta_log")
    staging = join_path(log_dir, f"{STAGING_DIR}/{snapshot.version:020d}-{uuid.uuid4()}")
    result = CheckpointResult(tablePath=snapshot.tableRoot, version=snapshot.version, kind="", files=[])
    try:
        size = _size(snapshot)
        parts = 1 if plan.v2 else _classic_parts(snapshot, plan, size["file_actions"])
        log.info(
            "Checkpointing %s at version %d: at most %d file actions (%s)",
            snapshot.tableRoot,
            snapshot.version,
            size["file_actions"],
            "V2 with sidecars" if plan.v2 else "classic",
        )
        v2_top = None
        single = not plan.v2 and parts == 1
        if not (single and _written_on_driver(snapshot, plan, staging, log_dir, result)):
            live, counts = _observed(_checkpointed_rows(snapshot, parts if parts > 1 else None))
            files = _file_actions(snapshot, plan, live)
            if plan.v2:
                v2_top = _write_v2(snapshot, plan, files, size, counts, staging, log_dir, result)
            else:
                _write_classic(snapshot, plan, files, parts, size, counts, staging, log_dir, result)
        result.lastCheckpointUpdated = _write_last_checkpoint(storage, log_dir, staging, result, v2_top)
    finally:
        try:
            storage.delete(staging, recursive=True)
            with contextlib.suppress(Exception):  # only when empty: other writers may be staging
                storage.delete(join_path(log_dir, STAGING_DIR), recursive=False)
        except Exception as exc:  # leftovers are removed by cleanupLog after a day
            log.warning("Could not remove the staging directory %s: %s", staging, exc)
    result.seconds = round(time.time() - started, 3)
    log.info(
        "Wrote %s checkpoint of version %d: %s (%d actions: %d live files, %d unexpired tombstones; "
        "%d bytes) in %.1fs",
        result.kind,
        result.version,
        ", ".join(result.files),
        result.numActions,
        result.numOfAddFiles,
        result.numOfRemoves,
        result.sizeInBytes,
        result.seconds,
    )
    return result


def protected_before_version(snapshot: Snapshot) -> int | None:
    """`delta.requireCheckpointProtectionBeforeVersion` when the table supports checkpointProtection."""
    if not snapshot.protocol.hasFeature("checkpointProtection"):
        return None
    value = snapshot.configuration.get("delta.requireCheckpointProtectionBeforeVersion")
    return int(value) if value else None
