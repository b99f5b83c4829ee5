"""A snapshot: the state of a Delta table at one version.

Loading a snapshot finds the newest `protocol` and `metaData` (and the checkpoint's sidecar
list) by the first route of `log/protocol_metadata.py` that answers; the driver keeps only those.
The state itself - files, tombstones, transactions, domains - is returned as lazy DataFrames
read by the route `log/state_plan.py` chooses for the segment, so it scales with the cluster,
not the driver. This module validates and assembles; it chooses no route.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from functools import cached_property
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from deltaspark.errors import (
    CorruptLogError,
    DeltaSparkError,
    MissingActionError,
    NonContiguousVersionsError,
    VersionNotFoundError,
)
from deltaspark.features.column_mapping import column_mapping_mode
from deltaspark.features.durations import DEFAULT_DELETED_FILE_RETENTION, parse_interval_ms
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.metadata import Metadata
from deltaspark.features.metadata_checks import check_metadata
from deltaspark.features.partition_values import ValueSource, partition_fields, typed_partition_values
from deltaspark.features.protocol import Protocol, check_readable
from deltaspark.features.schema import drop_void_fields
from deltaspark.features.stats import parse_stats_json, stats_schema
from deltaspark.log import action_schemas as schemas
from deltaspark.log import driver_replay, protocol_metadata
from deltaspark.log.checkpoint_check import check_sidecars
from deltaspark.log.commit_timestamps import MISSING_ICT, InCommitTimestamps, monotonic_file_times
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of, plan_segment, table_root_from
from deltaspark.log.reconciliation import newest_per
from deltaspark.log.segment import LogSegment
from deltaspark.log.state_plan import StatePlan
from deltaspark.read.data_skipping import DEFAULT_STRING_PREFIX_LENGTH, FileFilter
from deltaspark.read.predicates import from_filter
from deltaspark.spark_compat import conf_get, spark_version
from deltaspark.spark_errors import eager, raise_translated
from deltaspark.storage import Storage, join_path

log = logging.getLogger(__name__)

USE_COMPACTIONS_CONF = "spark.deltaspark.replay.useLogCompaction"


class Snapshot:
    """The table at `version`. Obtain one from `DeltaTable.snapshot()`."""

    def __init__(
        self,
        spark: SparkSession,
        storage: Storage,
        table_root: str,
        segment: LogSegment,
        protocol: Protocol,
        metadata: Metadata,
        commit_info: dict[str, Any] | None,
        sidecars: list[str],
        sidecar_sizes: list[int | None] | None = None,
    ) -> None:
        self._spark = spark
        self._storage = storage
        self.tableRoot = table_root
        self.segment = segment
        self.protocol = protocol
        self.metadata = metadata
        self.commitInfo = commit_info
        self._sidecars = sidecars
        self._sidecar_sizes = sidecar_sizes

    # ---- small facts, held on the driver -------------------------------------------------------
    @property
    def version(self) -> int:
        return self.segment.version

    @cached_property
    def schema(self) -> StructType:
        """The table's logical schema (as in `metaData.schemaString`)."""
        return self.metadata.schema(self.tableRoot)

    @property
    def partitionColumns(self) -> list[str]:
        return list(self.metadata.partitionColumns)

    @property
    def tableFeatures(self) -> list[str]:
        return self.protocol.tableFeatures

    @property
    def columnMappingMode(self) -> str:
        return column_mapping_mode(self.protocol, self.metadata)

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.configuration)

    @cached_property
    def inCommitTimestamps(self) -> InCommitTimestamps:
        return InCommitTimestamps.of(self.protocol, self.metadata)

    @property
    def timestampMs(self) -> int:
        """The commit timestamp of this version, in ms since the epoch: its in-commit timestamp, or its
        commit file's time made monotonic (as history and timestamp time travel see it)."""
        commit = self.segment.commit_at_version
        if self.inCommitTimestamps.applies_to(self.version) and commit is not None:
            ict = (self.commitInfo or {}).get("inCommitTimestamp")
            if ict is None:
                raise CorruptLogError(commit.path, MISSING_ICT.format(version=self.version))
            return int(ict)
        if commit is not None:
            return self._monotonic_commit_times.get(self.version, commit.modification_time)
        assert self.segment.checkpoint is not None
        return self.segment.checkpoint.files[0].modification_time

    @cached_property
    def _monotonic_commit_times(self) -> dict[int, int]:
        """Commit file times made monotonic over the whole log, as history and timestamp time travel
        compute them (a segment planned from `_last_checkpoint` lists only the log's tail)."""
        listing = list_log_files(self._storage, join_path(self.tableRoot, "_delta_log")) or []
        return monotonic_file_times([f for f in listing if f.version <= self.version])

    @property
    def timestamp(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.timestampMs / 1000, tz=dt.timezone.utc)

    def __repr__(self) -> str:
        return f"Snapshot(table={self.tableRoot!r}, version={self.version})"

    # ---- reading the segment -------------------------------------------------------------------
    @cached_property
    def _data_fields(self) -> list[StructField]:
        partitions = {c.lower() for c in self.metadata.partitionColumns}
        return [f for f in drop_void_fields(self.schema).fields if f.name.lower() not in partitions]

    @cached_property
    def _stats_schemas(self) -> tuple[StructType, StructType]:
        mode = self.columnMappingMode
        return stats_schema(self._data_fields, mode, True), stats_schema(self._data_fields, mode, False)

    @cached_property
    def statePlan(self) -> StatePlan:
        """Where this version's file actions come from (`log/state_plan.py`): the route, decided
        once, and the reads it makes."""
        return StatePlan(
            self._spark,
            self._storage,
            self.tableRoot,
            self.segment,
            self._stats_schemas[0],
            self.protocol.hasFeature("deletionVectors"),
            self._sidecars,
            self._sidecar_sizes,
        )

    @property
    def stateBytes(self) -> int:
        """About the memory the reconciled file actions take (`StatePlan.state_bytes`). Sizes the
        caches of file lists (`spark_compat.persist_sized`), so a small table's stay small."""
        return self.statePlan.state_bytes

    # ---- the state, as DataFrames ----------------------------------------------------------------
    def fileActions(self) -> DataFrame:
        """The reconciled `add` and `remove` actions, unparsed: `version, is_add, path_key, dv_id,
        add, remove, checkpoint_stats` (audits and checkpoints work on them as logged)."""
        return self.statePlan.reconciled()

    def parsedStats(self) -> Column:
        """`stats_parsed` (logical names) of `fileActions()` rows: the checkpoint's parsed stats, or
        the `add.stats` JSON parsed with this table's stats schema."""
        physical, logical = self._stats_schemas
        return F.coalesce(
            F.col("checkpoint_stats").cast(logical), parse_stats_json(F.col("add.stats"), physical, logical)
        )

    def smallActions(self, kind: str) -> DataFrame:
        """Every action of one non-file kind (`txn`, `domainMetadata`, ...) in the segment, with its
        version; not reconciled."""
        return self.statePlan.small_actions(kind)

    @eager
    def files(self, filter: Any = None) -> DataFrame:  # noqa: A002 - PySpark's own name for it
        """One row per live logical file (`add` action after reconciliation).

        Columns: the `add` fields, plus `partitionValues_parsed` (typed, logical names) and
        `stats_parsed` (numRecords/minValues/maxValues/nullCount/tightBounds, logical names).
        With `filter` (a Column or SQL string over the table's columns) only files that may hold
        matching rows are returned: pruned by partition values and by statistics.
        """
        files = self._all_files()
        if filter is None:
            return files
        return files.where(self.fileFilter(filter))

    def _resolve_filter(self, filter: Any) -> None:  # noqa: A002
        """A filter that does not parse, names no column of the table or is not a condition is an
        `InvalidArgumentError` now, not a wrong file list or Spark's error later."""
        resolve_expression(self._spark, drop_void_fields(self.schema), filter, "The filter", self.tableRoot)

    def _file_filter(self) -> FileFilter:
        schema = drop_void_fields(self.schema)
        fields = partition_fields(schema, self.metadata.partitionColumns)
        names = {f.name.lower() for f in fields}
        prefix = int(
            self.configuration.get("delta.dataSkippingStringPrefixLength", DEFAULT_STRING_PREFIX_LENGTH)
        )
        return FileFilter(
            StructType([f for f in schema.fields if f.name.lower() not in names]), StructType(fields), prefix
        )

    @eager
    def toDF(self, filter: Any = None, rowTracking: bool = False) -> DataFrame:  # noqa: A002
        """The table's rows at this version, in its logical schema.

        `filter` (Column or SQL string) prunes files by partition values and statistics and is
        then applied to the rows. `rowTracking=True` adds `_metadata.row_id` and
        `_metadata.row_commit_version` (tables with row tracking enabled).
        """
        from deltaspark.read.scan import read_files

        # A small table's live files, partition values and row tracking fields are listed from the
        # driver's state, without the file list's frame (a filter prunes in Spark, by the frame).
        # The frame is built only if the read needs it after all.
        state = self.statePlan.held if filter is None else None
        if state is not None:
            listed = driver_replay.listed_adds(state)
            return read_files(self, self.files, row_tracking=rowTracking, listed=listed)
        rows = read_files(self, self.files(filter), row_tracking=rowTracking)
        return rows if filter is None else rows.where(filter)

    def _all_files(self) -> DataFrame:
        mode = self.columnMappingMode
        fields = partition_fields(drop_void_fields(self.schema), self.metadata.partitionColumns)
        rows = self.statePlan.reconciled().where("is_add")
        # Stats kept only as a struct are rendered as JSON the way Delta writes them (UTC, `Z`).
        utc = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timeZone": "UTC"}
        stats_json = F.coalesce(F.col("add.stats"), F.to_json("checkpoint_stats", utc))
        parsed = self.parsedStats()
        ordered = []
        for name in schemas.ADD.fieldNames():
            ordered.append(stats_json.alias("stats") if name == "stats" else F.col(f"add.{name}").alias(name))
        return rows.select(
            *ordered,
            typed_partition_values(F.col("add.partitionValues"), fields, mode, self._value_source()).alias(
                "partitionValues_parsed"
            ),
            parsed.alias("stats_parsed"),
        )

    def parsedAdds(self, actions: DataFrame) -> DataFrame:
        """`add` actions from outside this snapshot (e.g. a concurrent commit's) in the shape of
        `files()` rows, parsed with this snapshot's schema, so that `fileFilter` applies to them."""
        physical_stats, logical_stats = self._stats_schemas
        fields = partition_fields(drop_void_fields(self.schema), self.metadata.partitionColumns)
        adds = actions.where(F.col("add").isNotNull())
        source = ValueSource(F.col("file"), F.col("add.path"))
        return adds.select(
            "add.*",
            typed_partition_values(
                F.col("add.partitionValues"), fields, self.columnMappingMode, source
            ).alias("partitionValues_parsed"),
            parse_stats_json(F.col("add.stats"), physical_stats, logical_stats).alias("stats_parsed"),
        )

    def fileFilter(self, filter: Any) -> Column:  # noqa: A002
        """The keep-this-file Column of `files(filter)`: false only for files (rows shaped like
        `files()`) that certainly hold no row matching `filter`."""
        self._resolve_filter(filter)
        return self._file_filter().keep(from_filter(filter))

    def _value_source(self) -> ValueSource:
        """Where a reconciled `add` row's partition values come from (for parse errors)."""
        return ValueSource(self.statePlan.log_file_of(F.col("version")), F.col("add.path"))

    def tombstones(self, includeExpired: bool = False) -> DataFrame:
        """Reconciled `remove` actions that have not expired (per `delta.deletedFileRetentionDuration`)."""
        rows = self.statePlan.reconciled().where(~F.col("is_add"))
        removes = rows.select(*[F.col(f"remove.{name}").alias(name) for name in schemas.REMOVE.fieldNames()])
        if includeExpired:
            return removes
        cutoff = self.tombstoneRetentionCutoffMs()
        return removes.where(F.coalesce(F.col("deletionTimestamp"), F.lit(0)) > F.lit(cutoff))

    def tombstoneRetentionCutoffMs(self, now_ms: int | None = None) -> int:
        retention = self.metadata.configuration.get(
            "delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION
        )
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - parse_interval_ms(retention)

    def transactions(self) -> DataFrame:
        """The newest `txn` per `appId` (application transaction identifiers), minus those expired
        by `delta.setTransactionRetentionDuration` when it is set."""
        txns = newest_per(self.statePlan.small_actions("txn"), "txn", "appId").select("txn.*")
        retention = self.metadata.configuration.get("delta.setTransactionRetentionDuration")
        if retention:
            cutoff = int(time.time() * 1000) - parse_interval_ms(retention)
            txns = txns.where(F.col("lastUpdated").isNotNull() & (F.col("lastUpdated") > F.lit(cutoff)))
        return txns

    def transactionVersion(self, appId: str) -> int | None:
        """The newest version of application `appId` at this version (its `txn`, as `transactions`
        has it), or None. As delta-spark, from this version's checksum (`N.crc`) when it lists the
        table's `setTransactions` (deltaspark writes them up to 100 applications): an idempotent
        write or a streaming batch then checks its version without a Spark job."""
        listed = self._checksum_transactions()
        if listed is None:
            row = self.transactions().where(F.col("appId") == appId).select("version").first()
            return int(row[0]) if row is not None else None
        txn = listed.get(appId)
        retention = self.metadata.configuration.get("delta.setTransactionRetentionDuration")
        if txn is not None and retention:
            cutoff = int(time.time() * 1000) - parse_interval_ms(retention)
            if txn.get("lastUpdated") is None or txn["lastUpdated"] <= cutoff:
                return None
        return None if txn is None else int(txn["version"])

    def _checksum_transactions(self) -> dict[str, dict[str, Any]] | None:
        """`setTransactions` of this version's checksum by appId; None when there is none (no
        `.crc`, unreadable, or written without the list)."""
        if getattr(self, "_crc_txns", False) is not False:
            return self._crc_txns
        found = None
        crc = next(
            (f for f in self.segment.listing if f.kind is LogFileKind.CHECKSUM and f.version == self.version),
            None,
        )
        if crc is not None and self._storage.direct_reads:
            try:
                document = json.loads(self._storage.read_text(crc.path) or "null")
                txns = document.get("setTransactions") if isinstance(document, dict) else None
                if isinstance(txns, list) and all(
                    isinstance(t, dict)
                    and isinstance(t.get("appId"), str)
                    and isinstance(t.get("version"), int)
                    and not isinstance(t.get("version"), bool)
                    for t in txns
                ):
                    found = {t["appId"]: t for t in txns}
            except (ValueError, DeltaSparkError):
                found = None
        self._crc_txns = found
        return found

    def domainMetadata(self) -> DataFrame:
        """The newest `domainMetadata` per domain, without removed domains."""
        domains = newest_per(self.statePlan.small_actions("domainMetadata"), "domainMetadata", "domain")
        return domains.select("domainMetadata.*").where(~F.coalesce(F.col("removed"), F.lit(False)))

    @cached_property
    @eager
    def rowIdHighWaterMark(self) -> int | None:
        """Highest assigned row id: the `delta.rowTracking` domain, or the draft-era
        `rowIdHighWaterMark` action in older tables."""
        marks = []
        for row in self.domainMetadata().where(F.col("domain") == "delta.rowTracking").collect():
            try:
                value = json.loads(row["configuration"] or "{}").get("rowIdHighWaterMark")
            except ValueError:
                value = None
            if value is not None:
                marks.append(int(value))
        legacy = self.statePlan.small_actions("rowIdHighWaterMark").agg(
            F.max_by("rowIdHighWaterMark.highWaterMark", "version").alias("mark")
        )
        row = legacy.first()
        if row is not None and row["mark"] is not None:
            marks.append(int(row["mark"]))
        return max(marks) if marks else None

    @eager
    def summary(self) -> dict[str, int]:
        """Number of live files and their total size, in one job."""
        row = self.files().agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes")).first()
        return {"numFiles": int(row["n"] or 0), "sizeInBytes": int(row["bytes"] or 0)} if row else {}

    def _repr_html_(self) -> str:
        """The key facts as an HTML table (notebooks); files and bytes from one aggregate, kept."""
        from deltaspark import display

        if "_html_summary" not in self.__dict__:
            try:
                self.__dict__["_html_summary"] = self.summary()
            except Exception:  # noqa: BLE001 - a rendering never fails; the facts it holds still show
                self.__dict__["_html_summary"] = None
        return display.snapshot_html(self, self.__dict__["_html_summary"])


# ---- loading ----------------------------------------------------------------------------------


def _protocol_of(raw: dict, where: str) -> Protocol:
    for required in ("minReaderVersion", "minWriterVersion"):
        if raw.get(required) is None:
            raise CorruptLogError(where, f"the `protocol` action has no {required}")
    return Protocol.from_row(raw)


def load_snapshot(spark: SparkSession, storage: Storage, segment: LogSegment, table_root: str) -> Snapshot:
    """The snapshot of `segment`: protocol and metadata (one Spark job at most), checked before use."""
    try:
        row = protocol_metadata.load(spark, storage, segment)
    except DeltaSparkError:
        raise
    except Exception as exc:
        checkpoint = segment.checkpoint
        raise_translated(exc, spark, checkpoint.files[0].path if checkpoint else segment.table_path)
    for action in ("protocol", "metaData"):
        if row is None or row[action] is None:
            if segment.checkpoint is not None:
                # Every checkpoint holds both: this one is damaged, and is passed over.
                raise CorruptLogError(
                    segment.checkpoint.files[0].path, f"the checkpoint has no `{action}` action"
                )
            raise MissingActionError(segment.table_path, segment.version, action)
    protocol = _protocol_of(row["protocol"], row["protocolFile"])
    check_readable(protocol, segment.table_path)
    metadata = Metadata.from_row(row["metaData"])
    check_metadata(protocol, metadata, row["metaDataFile"], spark_version(spark))
    commit_info = row["commitInfo"]
    if isinstance(commit_info, str):  # raw JSON text from the Spark path
        try:
            commit_info = json.loads(commit_info)
        except ValueError:
            commit_info = None
    entries = row["sidecars"] or []
    sidecars: list[str] = []
    if entries:
        assert segment.checkpoint is not None
        # A sidecar listed twice is one file of the checkpoint, read once.
        logged = list(dict.fromkeys((s["path"], s["sizeInBytes"]) for s in entries))
        sidecars = check_sidecars(storage, segment.checkpoint.files[0], logged)
    sizes = [size for _, size in logged] if entries else None
    snapshot = Snapshot(spark, storage, table_root, segment, protocol, metadata, commit_info, sidecars, sizes)
    log.info(
        "Loaded %s: protocol (%d, %d), %d partition column(s), %d sidecar(s)",
        snapshot,
        protocol.minReaderVersion,
        protocol.minWriterVersion,
        len(metadata.partitionColumns),
        len(sidecars),
    )
    return snapshot


def _unreadable_checkpoint(
    exc: CorruptLogError, segment: LogSegment | None, listing: list[LogFile]
) -> int | None:
    """The version of the checkpoint `exc` says is unreadable (its file or one of its sidecars)."""
    name = exc.path.rstrip("/").rsplit("/", 1)[-1]
    for f in listing:
        if f.is_checkpoint and f.name == name:
            return f.version
    if "/_sidecars/" in exc.path and segment is not None and segment.checkpoint is not None:
        return segment.checkpoint.version
    return None


@eager
def load_version(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    version: int | None = None,
    listing: list[LogFile] | None = None,
) -> Snapshot:
    """The snapshot of the table at `table_path` at `version` (the latest when None), planned from
    `listing` when the caller has already listed `_delta_log`.

    A checkpoint that turns out unreadable (empty, not parquet, a missing sidecar) is passed over
    for an older one, or for the commits from version 0, as Spark's Delta does; when no other
    checkpoint can replace it, its `CorruptLogError` is raised.
    """
    use_compactions = conf_get(spark, USE_COMPACTIONS_CONF, "true").strip().lower() == "true"
    skipped: set[int] = set()
    first_error: CorruptLogError | None = None
    segment: LogSegment | None = None
    while True:
        try:
            segment = plan_segment(storage, table_path, version, use_compactions, listing, frozenset(skipped))
            root = table_root_from(list(segment.listing), storage, table_path)
            return load_snapshot(spark, storage, segment, root)
        except CorruptLogError as exc:
            if listing is None:
                listing = list_log_files(storage, log_dir_of(table_path)) or []
            bad = _unreadable_checkpoint(exc, segment, listing)
            if bad is None or bad in skipped:
                raise
            log.warning("Checkpoint at version %d cannot be read (%s); replaying without it", bad, exc)
            first_error = first_error or exc
            skipped.add(bad)
        except (NonContiguousVersionsError, VersionNotFoundError) as exc:
            if first_error is None:
                raise
            raise CorruptLogError(
                first_error.path,
                f"{first_error.reason}; no older checkpoint can replace it ({exc})",
            ) from exc
