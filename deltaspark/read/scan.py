"""Reading a snapshot's rows (`toDF`).

1. `Snapshot.files(filter)` prunes files by partition values and statistics (`data_skipping`).
2. The data files are read with Spark's own parquet reader, asking for physical column names (or
   parquet field ids, in column-mapping `id` mode) and for types wide enough for files written
   before a type widening; values are cast to the table's logical names and types.
3. Each row is tied back to its file through `_metadata.file_path`; partition values, and for row
   tracking `baseRowId`/`defaultRowCommitVersion`, come from the log, never from directory names.
4. Rows of files with deletion vectors carry `_metadata.row_index` and are anti-joined with the
   deleted row positions, which are decoded on the executors (`dv_codec`, via `mapInArrow`).
5. The filter is applied to the rows as well, so pruning only ever saves work.

Spark's file scan needs the paths it reads on the driver; above
`spark.deltaspark.read.maxDriverFiles` files the read switches to `distributed_read`, where
executors open the files themselves and the file list never leaves the cluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, LongType, MapType, StringType, StructField, StructType

from deltaspark import errors
from deltaspark.errors import DeletionVectorError, InvalidArgumentError, MissingDataFileError
from deltaspark.features import dv_codec
from deltaspark.features.column_mapping import (
    FIELD_ID_KEY,
    ID_KEY,
    physical_name,
    physical_type,
    with_field_ids,
)
from deltaspark.features.deletion_vectors import dv_unique_id, dv_unique_id_of
from deltaspark.features.partition_values import ValueSource, partition_fields, typed_partition_values
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.features.row_tracking import materialized_columns, row_commit_version, row_id
from deltaspark.features.schema import drop_void_fields
from deltaspark.features.type_widening import check_type_changes, has_type_changes, readable_type
from deltaspark.log.driver_replay import ENTRIES_SCHEMA, ENTRY_FIELDS
from deltaspark.log.paths import absolute_path, canonical_path, path_key
from deltaspark.log.replay import STRICT_READ_OPTIONS
from deltaspark.spark_compat import (
    check_python_workers,
    conf_get,
    held_frame,
    is_connect,
    is_local,
    local_frame,
    read_paths,
    spark_version,
)

log = logging.getLogger(__name__)

# A file list (rows shaped like `Snapshot.files()`), or what builds it when a read needs it.
FileList = DataFrame | Callable[[], DataFrame]


def _frame(files: FileList) -> DataFrame:
    return files() if callable(files) else files


# Executors decode deletion vectors with these functions; shipping them by value means the
# cluster needs only pyarrow and pyroaring, not deltaspark itself.
cloudpickle.register_pickle_by_value(dv_codec)
cloudpickle.register_pickle_by_value(errors)

MAX_DRIVER_FILES_CONF = "spark.deltaspark.read.maxDriverFiles"
DEFAULT_MAX_DRIVER_FILES = 200_000
BROADCAST_FILES_LIMIT = 200_000
BROADCAST_DELETED_ROWS_CONF = "spark.deltaspark.read.broadcastDeletedRows"
DEFAULT_BROADCAST_DELETED_ROWS = 2_000_000
# A read of few files decodes its DVs on the driver up to these bounds (0 rows: never). The rows
# then travel in the plan as a local relation of (path, row) pairs, which costs more than decoding
# them in tasks somewhere between 67k and 200k rows (measured: docs/reads.md).
DRIVER_DELETED_ROWS_CONF = "spark.deltaspark.read.driverDeletedRows"
DEFAULT_DRIVER_DELETED_ROWS = 100_000
DRIVER_DV_BYTES = 16 * 1024 * 1024
_DELETED_ROWS_SCHEMA = StructType(
    [StructField("key", StringType(), False), StructField("row_index", LongType(), False)]
)
_GLOB_CHAR = re.compile(r"[{}\[\]*?\\]")
# A read whose entries come from the file list's frame ties rows to files by hash from this size of
# data (below it, building each row's canonical path costs less than the hashes' broadcast job).
HASH_JOIN_MIN_BYTES = 64 * 1024 * 1024
# `read_files(locate=True)`: each row's data file as the scan names it (see `tie_to_files`).
LOCATION = "__deltaspark_location"


def _col(name: str) -> Column:
    """A top-level column by its exact name (dots and backticks in names are data, not syntax)."""
    return F.col("`" + name.replace("`", "``") + "`")


def escape_glob(path: str) -> str:
    """Spark treats read paths as globs; data file names may contain glob characters (one regex
    pass: a read of 20,000 files spent half a second escaping them character by character)."""
    return _GLOB_CHAR.sub(lambda m: "\\" + m.group(0), path)


class TableReader:
    """How to read one snapshot's data files: the physical read schema and the logical projection."""

    def __init__(self, snapshot: Any) -> None:
        self.snapshot = snapshot
        self.spark = snapshot._spark
        self.mode = snapshot.columnMappingMode
        schema = drop_void_fields(snapshot.schema)
        check_type_changes(schema, snapshot.tableRoot)
        self.logical_schema = schema
        self.partition_fields = partition_fields(schema, snapshot.metadata.partitionColumns)
        self.partition_names = {f.name.lower() for f in self.partition_fields}
        self.data_fields = [f for f in schema.fields if f.name.lower() not in self.partition_names]
        self.materialized = materialized_columns(snapshot.metadata)
        if self.mode == "id":
            # Spark resolves columns by parquet field id only with this session setting.
            self.spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")

    def read_field(self, field: StructField) -> StructField:
        data_type = physical_type(readable_type(field), self.mode)
        if self.mode == "id":
            data_type = with_field_ids(data_type)
            metadata = {FIELD_ID_KEY: int(field.metadata[ID_KEY])} if ID_KEY in field.metadata else {}
        else:
            metadata = {}
        return StructField(physical_name(field, self.mode), data_type, True, metadata)

    def read_schema(self, row_tracking: bool, extra: list[StructField]) -> StructType:
        fields = [self.read_field(f) for f in self.data_fields]
        if row_tracking:
            fields += [StructField(name, LongType(), True) for name in self.materialized if name]
        return StructType(fields + extra)

    def logical_column(self, field: StructField) -> Column:
        read = self.read_field(field)
        column = _col(read.name)
        # Physical names become logical ones by a cast; Spark refuses to cast a nullable nested
        # field to a NOT NULL one, and a file's columns are read nullable, so nested fields stay so.
        return column if read.dataType == field.dataType else column.cast(_nullable(field.dataType))


def _nullable(data_type: DataType) -> DataType:
    """`data_type` with every nested field, element and value nullable."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def deletion_key(path_key: Column, dv_id: Column | None) -> Column:
    """The key deleted rows are matched on: the file, and the DV when a file may be listed with
    several DVs (a change feed lists a file once per commit that touched it)."""
    return path_key if dv_id is None else F.concat(path_key, F.lit("\u0001"), dv_id)


def deleted_rows(
    snapshot: Any, dv_files: FileList, by_dv: bool = False, listed: list[Any] | None = None
) -> DataFrame:
    """`(key, row_index)` for every row deleted by the DVs of `dv_files` (rows of `files()`),
    decoded on the executors; `key` is `deletion_key(...)`. DV files are read with Spark's
    `binaryFile` source (Hadoop FileSystem, cluster credentials); only their distinct paths
    visit the driver. A DV that fails a check fails the query, naming the data file and the DV.

    `listed`: the same files already collected (rows with `path` and `deletionVector`), for a read
    of few files. The descriptors and their DV file locations then come from the driver: finding
    the DV files runs no job, and the query neither replays the log again nor shuffles."""
    spark, root = snapshot._spark, snapshot.tableRoot
    if listed is not None:
        distinct = {(r["path"], r["deletionVector"]): None for r in listed}  # Rows hash by value
        local = [(path, dv, _local_location(path, dv, root)) for path, dv in distinct]
        on_driver = _deleted_rows_on_driver(snapshot, local, by_dv)
        if on_driver is not None:
            return on_driver
        schema = _frame(dv_files).select("path", "deletionVector").schema.add("location", "string")
        dv_files = spark.createDataFrame(local, schema)
    dv = F.col("deletionVector")
    path_key = canonical_path("path", root)
    descriptors = _frame(dv_files).select(
        deletion_key(path_key, dv_unique_id(dv) if by_dv else None).alias("key"),
        path_key.alias("file"),
        dv.getField("storageType").alias("storageType"),
        dv.getField("pathOrInlineDv").alias("pathOrInlineDv"),
        F.coalesce(dv.getField("offset"), F.lit(0)).alias("offset"),
        dv.getField("sizeInBytes").alias("sizeInBytes"),
        dv.getField("cardinality").alias("cardinality"),
        *([F.col("location")] if listed is not None else []),
    )
    if listed is not None:
        locations = sorted({loc for _, _, loc in local if loc is not None})
        placed = descriptors.where(F.col("storageType") != "i")
    else:
        descriptors = descriptors.distinct()
        on_disk_ids = (
            descriptors.where(F.col("storageType") != "i")
            .groupBy("storageType", "pathOrInlineDv")
            .agg(F.min("file").alias("file"))
            .collect()
        )
        located = [
            (row["storageType"], row["pathOrInlineDv"], _dv_location(row, root)) for row in on_disk_ids
        ]
        locations = [loc for _, _, loc in located]
        if located:
            files = spark.createDataFrame(
                located, "storageType string, pathOrInlineDv string, location string"
            )
            placed = descriptors.where(F.col("storageType") != "i").join(
                files, ["storageType", "pathOrInlineDv"]
            )
    columns = ["key", "file", "storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality"]
    inline = descriptors.where(F.col("storageType") == "i").select(
        *columns, F.lit(None).cast("binary").alias("record"), F.lit(None).cast("string").alias("where")
    )
    records = inline
    if locations:
        try:
            contents = (
                spark.read.format("binaryFile")
                .options(**STRICT_READ_OPTIONS)
                .load([escape_glob(loc) for loc in locations])
                .select(canonical_path("path", root).alias("location"), "content")
            )
        except Exception as exc:
            missing = re.search(r"Path does not exist: (\S+?)\.?(\s|$)", str(exc))
            if missing:
                raise DeletionVectorError(
                    f"deltaspark: deletion vector {missing.group(1)}: the file does not exist"
                ) from exc
            raise
        on_disk = placed.join(contents, "location", "left").select(
            *columns,
            # The DV record at its offset (a negative offset is refused by the decoder).
            F.when(F.col("offset") >= 0, F.expr("substring(content, offset + 1, sizeInBytes + 8)")).alias(
                "record"
            ),
            F.concat(F.col("location"), F.lit("@"), F.col("offset").cast("string")).alias("where"),
        )
        records = records.unionByName(on_disk)
    check_python_workers(spark)
    return records.mapInArrow(dv_codec.deleted_row_batches, "key string, row_index long")


def _deleted_rows_on_driver(
    snapshot: Any, local: list[tuple[Any, Any, str | None]], by_dv: bool
) -> DataFrame | None:
    """`deleted_rows` of a few DVs, decoded on the driver (the same checks, by the same code the
    executors run): the query then needs no Python worker and no job to find or read DV files.
    `None` when they are too many, too big, or the storage cannot be read from the driver."""
    storage, root = snapshot._storage, snapshot.tableRoot
    limit = int(conf_get(snapshot._spark, DRIVER_DELETED_ROWS_CONF, str(DEFAULT_DRIVER_DELETED_ROWS)))
    if not storage.direct_reads or limit <= 0 or sum(dv["cardinality"] or 0 for _, dv, _ in local) > limit:
        return None
    contents: dict[str, bytes] = {}
    for location in sorted({loc for _, _, loc in local if loc is not None}):
        status = storage.status(location)
        if status is None:
            raise DeletionVectorError(f"deltaspark: deletion vector {location}: the file does not exist")
        if status.size + sum(len(c) for c in contents.values()) > DRIVER_DV_BYTES:
            return None
        content = storage.read_bytes(location)
        if content is None:
            raise DeletionVectorError(f"deltaspark: deletion vector {location}: the file does not exist")
        contents[location] = content
    keys: list[str] = []
    indexes: list[int] = []
    for path, dv, location in local:
        file_key = path_key(path, root)
        if file_key is None:
            return None  # a path Java decodes otherwise: the Spark path computes the keys
        offset = dv["offset"] or 0
        record = None
        if location is not None and offset >= 0 and dv["sizeInBytes"] is not None:
            record = contents[location][offset : offset + dv["sizeInBytes"] + 8]
        row = {
            "file": file_key,
            "storageType": dv["storageType"],
            "pathOrInlineDv": dv["pathOrInlineDv"],
            "offset": offset,
            "sizeInBytes": dv["sizeInBytes"],
            "cardinality": dv["cardinality"],
            "record": record,
            "where": None if location is None else f"{location}@{offset}",
        }
        bitmap = dv_codec.decode_row(row)
        key = file_key + ("\u0001" + dv_unique_id_of(dv.asDict()) if by_dv else "")
        keys += [key] * len(bitmap)
        indexes += list(bitmap)
    return local_frame(snapshot._spark, {"key": keys, "row_index": indexes}, _DELETED_ROWS_SCHEMA)


def _local_location(path: str, dv: Any, root: str) -> str | None:
    """`_dv_location` of a descriptor on the driver (None for an inline DV)."""
    if dv["storageType"] == "i":
        return None
    row = {"storageType": dv["storageType"], "pathOrInlineDv": dv["pathOrInlineDv"], "file": path}
    return _dv_location(row, root)


def _dv_location(row: Any, root: str) -> str:
    """Where an on-disk DV lives, from its descriptor (`u`: relative UUID path, `p`: absolute)."""
    storage_type, value = row["storageType"], row["pathOrInlineDv"]
    try:
        if storage_type == "u":
            return absolute_path(dv_codec.uuid_relative_path(value), root)
        if storage_type == "p":
            return absolute_path(value, root)
        raise DeletionVectorError(f"unknown storageType {storage_type!r}")
    except Exception as exc:
        raise dv_codec.contextualize(exc, row["file"], dv_codec.describe(storage_type, value, None)) from exc


def read_files(
    snapshot: Any,
    files: FileList,
    row_tracking: bool = False,
    extra: list[StructField] | None = None,
    carry: list[str] | None = None,
    apply_deletion_vectors: bool = True,
    keep_row_index: bool = False,
    listed: list[Any] | None = None,
    locate: bool = False,
) -> DataFrame:
    """Rows of `files` (shaped like `Snapshot.files()`), in the table's logical schema.

    `extra` physical columns (e.g. `_change_type` of CDC files) are read and passed through;
    `carry` names columns of `files` copied onto each of the file's rows. `files` may list a path
    more than once (with different DVs or carried values): each listing yields its own rows.
    `keep_row_index` adds `_row_index`, each row's position in its file. `listed`: the rows the
    read would collect from `files` (`path`, `hasDv`, `deleted`, `deletionVector`), when the
    driver holds them already; `files` is then built only if the read needs it. `locate` adds
    `LOCATION`, each row's data file as the scan names it, for `tie_to_files` to turn into its
    path once a filter or a join has left few rows: carrying the path joins every row read.
    """
    reader = TableReader(snapshot)
    extra, carry = extra or [], carry or []
    if row_tracking and not row_tracking_enabled(snapshot.protocol, snapshot.metadata):
        raise InvalidArgumentError(
            f"Row tracking is not enabled on {snapshot.tableRoot} (delta.enableRowTracking is not true)"
        )
    carried = [_frame(files).schema[c] for c in carry]
    if locate:
        carried.append(StructField(LOCATION, StringType()))
    output = _output_schema(reader, row_tracking, extra, carried, keep_row_index)
    limit = int(conf_get(snapshot._spark, MAX_DRIVER_FILES_CONF, str(DEFAULT_MAX_DRIVER_FILES)))
    if spark_version(snapshot._spark) < (4, 0) and has_type_changes(reader.logical_schema):
        # Spark 3.5's parquet reader cannot read a file written before a widening as the wider type
        # (INT32 as bigint); the executor-side reader converts each file's columns itself.
        log.info(
            "Reading a type-widened table on Spark %s with the executor-side reader", snapshot._spark.version
        )
        limit = 0
    if listed is None:
        # One job: the paths Spark's scan needs (at most `limit` + 1 of them reach the driver).
        listed = _frame(files).select(*listing_columns(_frame(files))).limit(limit + 1).collect()
    if not listed:
        return snapshot._spark.createDataFrame([], output)
    if len(listed) > limit:
        from deltaspark.read.distributed_read import read_distributed

        log.info(
            "Reading more than %d file(s) with the distributed reader (%s)", limit, MAX_DRIVER_FILES_CONF
        )
        # the executors' reader names each file by its path: its location is carried as such
        frame = _frame(files).withColumn(LOCATION, F.col("path")) if locate else _frame(files)
        return read_distributed(
            snapshot,
            reader,
            frame,
            row_tracking,
            extra,
            [*carry, LOCATION] if locate else carry,
            apply_deletion_vectors,
            keep_row_index,
            output,
        )
    with_dv = [r for r in listed if r["hasDv"]] if apply_deletion_vectors else []
    deleted = sum(r["deleted"] or 0 for r in with_dv)
    log.info(
        "Reading %d data files (%d with deletion vectors, %d deleted rows)",
        len(listed),
        len(with_dv),
        deleted,
    )
    return _read_native(
        snapshot, reader, files, listed, row_tracking, keep_row_index, extra, carry, with_dv, output, locate
    )


def listing_columns(files: DataFrame) -> list[Column | str]:
    """What a read collects of `files` (its `listed`): paths, whether each has a DV and how many
    rows it deletes, the DV descriptors (so that the deleted rows need no second replay), sizes."""
    return [
        "path",
        F.col("deletionVector").isNotNull().alias("hasDv"),
        F.col("deletionVector.cardinality").alias("deleted"),
        "deletionVector",
        _size_of(files),
    ]


def _size_of(files: DataFrame) -> Column:
    """The logged size of each file, where the file list has one (change data files have none)."""
    return (F.col("size") if "size" in files.columns else F.lit(None).cast("long")).alias("size")


def _check_sizes(storage: Any, frames: list[DataFrame], logged: dict[str, int | None]) -> None:
    """The data files Spark is about to read are the ones the log describes: present, with their
    logged sizes. Spark's parquet reader skips a file of 0 bytes as if it held no rows, and reads a
    file replaced by another without a word, so a damaged file would read as a wrong answer.
    Spark's own listing of the files (done already, for its scan) gives their total size in one
    py4j call; only when it differs from the log's are the files looked at one by one, to name
    the culprit. Without sizes in the log, or on Spark Connect, Spark's behaviour stands."""
    if not logged or any(size is None for size in logged.values()):
        return
    try:
        actual = sum(
            int(
                frame._jdf.queryExecution()
                .analyzed()
                .collectLeaves()
                .head()
                .relation()
                .location()
                .sizeInBytes()
            )
            for frame in frames
        )
    except Exception:  # Spark Connect, or a plan of another shape: no listing to compare
        return
    if actual == sum(size or 0 for size in logged.values()):
        return
    locations = list(logged)
    for location, status in zip(locations, storage.statuses(locations), strict=True):
        if status is None:
            raise MissingDataFileError(location)
        if status.size != logged[location]:
            what = "is empty (0 bytes)" if status.size == 0 else f"has {status.size} bytes"
            raise errors.CorruptDataFileError(
                location,
                f"the file {what} where the log records {logged[location]}: it was truncated or replaced",
            )


def _output_schema(
    reader: TableReader,
    row_tracking: bool,
    extra: list[StructField],
    carried: list[StructField],
    keep_row_index: bool = False,
) -> StructType:
    fields = [StructField(f.name, f.dataType, True, f.metadata) for f in reader.logical_schema.fields]
    fields += [StructField(f.name, f.dataType, True) for f in [*extra, *carried]]
    if keep_row_index:
        fields.append(StructField("_row_index", LongType(), True))
    if row_tracking:
        fields.append(
            StructField(
                "_metadata",
                StructType(
                    [
                        StructField("row_id", LongType(), True),
                        StructField("row_commit_version", LongType(), True),
                    ]
                ),
                True,
            )
        )
    return StructType(fields)


def _read_native(
    snapshot: Any,
    reader: TableReader,
    files: FileList,
    listed: list[Any],
    row_tracking: bool,
    keep_row_index: bool,
    extra: list[StructField],
    carry: list[str],
    with_dv: list[Any],
    output: StructType,
    locate: bool = False,
) -> DataFrame:
    spark, root = snapshot._spark, snapshot.tableRoot
    read_schema = reader.read_schema(row_tracking, extra)
    has_dvs = bool(with_dv)
    deleted_count = sum(r["deleted"] or 0 for r in with_dv)
    indexed_everywhere = row_tracking or keep_row_index
    paths: dict[str, bool] = {}  # each data file is scanned once, with row indexes if any listing needs them
    for r in listed:
        location = absolute_path(r["path"], root)
        paths[location] = paths.get(location, False) or indexed_everywhere or (has_dvs and bool(r["hasDv"]))
    repeated = len(paths) < len(listed)

    def scan(locations: list[str], with_index: bool) -> DataFrame:
        try:
            return read_paths(
                spark,
                spark.read.options(**STRICT_READ_OPTIONS).schema(read_schema),
                "parquet",
                [escape_glob(p) for p in locations],
            )
        except Exception as exc:
            missing = re.search(r"Path does not exist: (\S+?)\.?(\s|$)", str(exc))
            if missing:
                raise MissingDataFileError(missing.group(1)) from exc
            raise

    groups = [[p for p, indexed in paths.items() if indexed is flag] for flag in (False, True)]
    scans = [(scan(group, flag), flag) for group, flag in zip(groups, (False, True), strict=True) if group]
    frames = [frame for frame, _ in scans]
    _check_sizes(snapshot._storage, frames, {absolute_path(r["path"], root): r["size"] for r in listed})
    joined = bool(reader.partition_fields) or row_tracking or bool(carry) or (has_dvs and repeated)
    # A joined read ties rows to their files' entries by a hash of the path Spark reports, where
    # the driver can vouch for it (`_file_hashes`); else by each row's canonical path. Entries not
    # held on the driver get their hashes in a broadcast of its own (a job, which a small read's
    # rows do not repay); a read joined for nothing else keys its deleted rows by each row's
    # canonical path (one join fewer).
    held_entries = not (carry or repeated) and bool(listed) and hasattr(listed[0], "fileKey")
    worth = held_entries or sum(getattr(r, "size", None) or 0 for r in listed) >= HASH_JOIN_MIN_BYTES
    hashes = _file_hashes(spark, list(paths)) if joined and worth else None
    if hashes is not None and any(path_key(r["path"], root) not in hashes for r in listed):
        hashes = None  # a listed path whose key is not its location: the per-row route
    file_path = F.col("_metadata.file_path")
    parts = [
        frame.select(
            *[_col(f.name) for f in read_schema.fields],
            (file_path if hashes is not None else canonical_path("_metadata.file_path", root)).alias("_key"),
            *([F.xxhash64(file_path).alias("_file_hash")] if hashes is not None else []),
            (F.col("_metadata.row_index") if flag else F.lit(None).cast("long")).alias("_row_index"),
            *([file_path.alias(LOCATION)] if locate else []),
        )
        for frame, flag in scans
    ]
    rows = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])

    if joined:
        entries = _held_entries(snapshot, reader, listed, hashes) if held_entries else None
        if entries is None:
            dv_id = dv_unique_id(F.col("deletionVector")) if has_dvs else F.lit("")
            entries = _frame(files).select(
                canonical_path("path", root).alias("_file_key"),
                dv_id.alias("_dv_id"),
                F.col("partitionValues_parsed").alias("_partition"),
                F.col("baseRowId").alias("_base_row_id"),
                F.col("defaultRowCommitVersion").alias("_default_commit_version"),
                *[_col(c) for c in carry],
            )
            if hashes is not None:
                by_key = local_frame(
                    spark,
                    {"_hashed_key": list(hashes), "_entry_hash": list(hashes.values())},
                    "_hashed_key string, _entry_hash long",
                )
                entries = entries.join(
                    F.broadcast(by_key), entries["_file_key"] == by_key["_hashed_key"]
                ).drop("_hashed_key")
        if len(listed) <= BROADCAST_FILES_LIMIT:
            entries = F.broadcast(entries)
        if hashes is not None:
            rows = rows.join(entries, rows["_file_hash"] == entries["_entry_hash"], "left")
        else:
            rows = rows.join(entries, rows["_key"] == entries["_file_key"], "left")
    if has_dvs:
        by_dv = joined and repeated
        deleted = deleted_rows(
            snapshot,
            lambda: _frame(files).where(F.col("deletionVector").isNotNull()),
            by_dv=by_dv,
            listed=with_dv,
        )
        broadcast_limit = int(
            conf_get(spark, BROADCAST_DELETED_ROWS_CONF, str(DEFAULT_BROADCAST_DELETED_ROWS))
        )
        if deleted_count <= broadcast_limit:
            deleted = F.broadcast(deleted)
        # the canonical key: the entries' where rows were tied by hash (their `_key` is as Spark has it)
        file_key = F.col("_file_key") if hashes is not None else F.col("_key")
        key = deletion_key(file_key, F.col("_dv_id") if by_dv else None)
        rows = rows.withColumn("_deletion_key", key)
        rows = rows.join(
            deleted.select(F.col("key").alias("_deletion_key"), F.col("row_index").alias("_row_index")),
            ["_deletion_key", "_row_index"],
            "left_anti",
        )
    carry = [*carry, LOCATION] if locate else carry
    return _project(reader, rows, row_tracking, keep_row_index, extra, carry, joined).select(
        *[_col(f.name) for f in output.fields]
    )


def tie_to_files(rows: DataFrame, files: DataFrame, root: str, column: str) -> DataFrame:
    """`rows` (read with `locate`, each file listed once in `files`) with `column`: the path the
    log gives each row's file, in place of `LOCATION`. Joined on the files' canonical keys once a
    filter or a join has left few rows, where `carry` joins every row the scan reads (a second
    per 10M rows, measured by a merge's scan). A row whose file is not among `files` fails, as a
    read carrying the path does. Both held on the driver (a small merge's touched files): joined
    there, with no job, each path keyed by `path_key` (no plan evaluates a key)."""
    if is_local(rows) and is_local(files):
        held = _tied_on_driver(rows, files, root, column)
        if held is not None:
            return held
    keys = files.select(canonical_path("path", root).alias("_tie_file_key"), F.col("path").alias(column))
    location = F.col(LOCATION)
    keyed = rows.withColumn("_tie_key", canonical_path(LOCATION, root))
    tied = keyed.join(keys, keyed["_tie_key"] == keys["_tie_file_key"], "left")
    refused = _not_in_snapshot(location)
    path = F.when(F.col(column).isNull(), refused.cast("string")).otherwise(F.col(column))
    return tied.withColumn(column, path).drop("_tie_key", "_tie_file_key", LOCATION)


def _tied_on_driver(rows: DataFrame, files: DataFrame, root: str, column: str) -> DataFrame | None:
    """`tie_to_files` of two frames held on the driver, keyed there (`path_key`, the driver's
    `canonical_path`): collecting `files` itself reuses its optimized plan, where a projection
    of it is optimized (its rows evaluated) again. None - Spark's route, which names a file the
    snapshot lacks - when a key cannot be made on the driver or a row's file is not among `files`."""
    by_key: dict[str, list[str]] = {}
    for file in files.collect():
        key = path_key(file["path"], root)
        if key is None:
            return None
        by_key.setdefault(key, []).append(file["path"])
    kept = [f for f in rows.schema.fields if f.name != LOCATION]
    tied = []
    for row in rows.collect():
        key = path_key(row[LOCATION], root) if row[LOCATION] is not None else None
        paths = by_key.get(key) if key is not None else None
        if paths is None:
            return None
        tied.extend((*[row[f.name] for f in kept], path) for path in paths)
    schema = StructType([*kept, StructField(column, StringType(), True)])
    return held_frame(rows.sparkSession, tied, schema)


def _not_in_snapshot(file: Column) -> Column:
    """The error of a row whose data file the read cannot tie to the file list, naming the file."""
    return F.raise_error(F.concat(F.lit("deltaspark: data file not in the snapshot: "), file))


# A location Spark's scan reports as its `_metadata.file_path` unchanged: a scheme, an authority
# and a path of characters a URI carries as they are (what Spark and Delta writers name files).
_PLAIN_LOCATION = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:(//[A-Za-z0-9.@:_-]*)?/[A-Za-z0-9._=/-]*$")


def _file_hashes(spark: Any, locations: list[str]) -> dict[str, int] | None:
    """Each scanned location (a file's canonical key) -> its `xxhash64`, for tying rows to their
    files by that hash - a join on a long, where building each row's canonical path and joining on
    the string costs a 10M-row read about a second more. Only where that is exact: every location
    is plain (`_PLAIN_LOCATION`: the path Spark reports for its rows is the location itself, so the
    canonical key needs no per-row work), and no two locations share a hash (computed by Spark on
    the driver, as a local relation). A row whose path matches no location still finds no entry
    and fails the read, as before. None (the per-row route) otherwise, and on Spark Connect."""
    if not locations or is_connect(spark) or not all(_PLAIN_LOCATION.match(p) for p in locations):
        return None
    hashed = local_frame(spark, {"p": locations}, "p string").select("p", F.xxhash64("p")).collect()
    values = {str(r[0]): int(r[1]) for r in hashed}
    if len(set(values.values())) != len(locations):
        return None
    return values


def _held_entries(
    snapshot: Any, reader: TableReader, listed: list[Any], hashes: dict[str, int] | None = None
) -> DataFrame | None:
    """What the read ties to each file's rows (its key, typed partition values, row tracking
    fields), made from `listed` rows that carry it (`driver_replay.listed_adds`: a small table's
    state held on the driver) as a local relation, instead of from the file list's frame; None
    when they do not. The partition values are parsed by the same expression as `files()`'s, on
    the driver when the read is built (a local relation: no job), so that a damaged one fails the
    call that reads it, naming its log file and data file, as the log's other damage does."""
    if not listed or not hasattr(listed[0], "fileKey"):
        return None
    rows = [
        (*(r[name] for name in ENTRY_FIELDS), hashes.get(r["fileKey"]) if hashes is not None else None)
        for r in listed
    ]
    held = held_frame(snapshot._spark, rows, ENTRIES_SCHEMA + ", _entry_hash long")
    source = ValueSource(snapshot.statePlan.log_file_of(F.col("version")), F.col("path"))
    partition = typed_partition_values(
        F.from_json("partitionValues", "map<string,string>"), reader.partition_fields, reader.mode, source
    )
    entries = held.select(
        F.col("fileKey").alias("_file_key"),
        F.lit("").alias("_dv_id"),
        partition.alias("_partition"),
        F.col("baseRowId").alias("_base_row_id"),
        F.col("defaultRowCommitVersion").alias("_default_commit_version"),
        F.col("_entry_hash"),
    )
    if reader.partition_fields:
        entries.select("_partition").collect()
    return entries


def _project(
    reader: TableReader,
    rows: DataFrame,
    row_tracking: bool,
    keep_row_index: bool,
    extra: list[StructField],
    carry: list[str],
    joined: bool,
) -> DataFrame:
    columns: list[Column] = []
    # A row whose file is missing from the snapshot's list means the keys disagree: fail rather
    # than return rows without their partition values. A filter of its own, so that filters on
    # the file's own columns still reach the scan (Spark pushes them below the join and into the
    # parquet reader; a row they drop is never returned, so it needs no check). The columns the
    # join gives (partition values) are guarded themselves: a filter on them alone would
    # otherwise let Spark make the join an inner one, which drops such rows before the check.
    unknown = F.col("_file_key").isNull()
    refused = _not_in_snapshot(F.col("_key"))
    if joined:
        rows = rows.where(F.when(unknown, refused.cast("boolean")).otherwise(F.lit(True)))
    for field in reader.logical_schema.fields:
        if field.name.lower() in reader.partition_names:
            value = F.col("_partition").getField(field.name)
            if joined:
                value = F.when(unknown, refused).otherwise(value)
        else:
            value = reader.logical_column(field)
        columns.append(value.alias(field.name))
    columns += [_col(f.name) for f in extra]
    columns += [_col(c) for c in carry]
    if keep_row_index:
        columns.append(F.col("_row_index"))
    if row_tracking:
        id_column, version_column = reader.materialized
        tracking = F.struct(
            row_id(_col(id_column) if id_column else None, F.col("_base_row_id"), F.col("_row_index")).alias(
                "row_id"
            ),
            row_commit_version(
                _col(version_column) if version_column else None, F.col("_default_commit_version")
            ).alias("row_commit_version"),
        )
        if joined:  # the join gives them too (`baseRowId`, `defaultRowCommitVersion`): guarded
            tracking = F.when(unknown, refused).otherwise(tracking)
        columns.append(tracking.alias("_metadata"))
    return rows.select(*columns)
