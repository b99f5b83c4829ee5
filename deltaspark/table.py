"""`DeltaTable`: the entry point users import, named after delta-spark's Python API.

The facade only finds the table and the versions asked for; the work is done by the layers below
(`log` reads the transaction log, `read` reads rows, `maintenance` writes checkpoints and cleans
up), which never import this module.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructField, StructType

from deltaspark.audit.audit import audit_context, audit_table
from deltaspark.audit.repair import repair as repair_table
from deltaspark.audit.report import AuditReport
from deltaspark.catalog import (
    CATALOG_MANAGED_FEATURES,
    LAST_COMMIT_TIMESTAMP,
    LAST_UPDATE_VERSION,
    CatalogEntry,
    catalog_managed_error,
    default_location,
    looks_like_name,
    lookup,
    path_in_name,
    refuse_unless_delta,
    register,
    resolve,
    sync,
)
from deltaspark.conversion.from_iceberg import convert_iceberg, parse_iceberg_identifier
from deltaspark.conversion.to_iceberg import IcebergExport, to_iceberg
from deltaspark.errors import (
    InvalidArgumentError,
    NonContiguousVersionsError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from deltaspark.features.identity_columns import IdentityGenerator, identity_metadata
from deltaspark.log.commit_timestamps import first_version_at_or_after, to_epoch_ms, version_at_timestamp
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.history import history_frame
from deltaspark.log.listing import list_log_files, log_dir_of, read_last_checkpoint
from deltaspark.maintenance.checkpoint_writer import (
    CheckpointResult,
    protected_before_version,
    write_checkpoint,
)
from deltaspark.maintenance.log_cleanup import LogCleanupResult, cleanup_log
from deltaspark.maintenance.post_commit import checkpoint_if_due
from deltaspark.maintenance.vacuum import vacuum
from deltaspark.operations import table_changes
from deltaspark.operations.convert import convert, parse_identifier
from deltaspark.operations.delete import delete as delete_rows
from deltaspark.operations.merge.builder import DeltaMergeBuilder
from deltaspark.operations.merge.execute import merge as merge_rows
from deltaspark.operations.optimize.builder import METRICS_SCHEMA, DeltaOptimizeBuilder
from deltaspark.operations.optimize.execute import optimize as optimize_files
from deltaspark.operations.restore import restore
from deltaspark.operations.update import update as update_rows
from deltaspark.operations.write import write as write_rows
from deltaspark.read.change_data_feed import read_changes
from deltaspark.read.table_detail import detail_frame
from deltaspark.snapshot import USE_COMPACTIONS_CONF, Snapshot, load_version
from deltaspark.spark_compat import held_frame
from deltaspark.spark_errors import eager
from deltaspark.storage import Storage, storage_for
from deltaspark.transaction.idempotent import app_transaction
from deltaspark.transaction.transaction import CommitResult

log = logging.getLogger(__name__)

__all__ = [
    "USE_COMPACTIONS_CONF",
    "CommitResult",
    "DeltaTable",
    "DeltaTableBuilder",
    "TimestampLike",
    "write",
]

TimestampLike = str | dt.datetime | dt.date | int


class DeltaTable:
    """A Delta table at a path. Every method reads the log as it is when called."""

    def __init__(self, spark: SparkSession, path: str, storage: Storage | None = None) -> None:
        self._spark = spark
        self._path = path.rstrip("/") or "/"
        self._storage = storage or storage_for(spark)
        self._alias: str | None = None
        self._name: str | None = None  # the catalog name it was opened or created by

    @classmethod
    @eager
    def forPath(cls, spark: SparkSession, path: str) -> DeltaTable:
        """The Delta table at `path`; raises `TableNotFoundError` if there is none."""
        table = cls(spark, path)
        log_dir = log_dir_of(table._path)
        hint = read_last_checkpoint(table._storage, log_dir)
        # With a hint only the tail of the log is listed; without one (or if it lies) all of it.
        for start in ([hint.version] if hint else []) + [None]:
            listing = list_log_files(table._storage, log_dir, from_version=start)
            if listing is None:
                raise TableNotFoundError(path)
            if any(f.kind is LogFileKind.COMMIT or f.is_checkpoint for f in listing):
                return table
        raise TableNotFoundError(path, "no commit or checkpoint files in _delta_log")

    @classmethod
    @eager
    def forName(cls, spark: SparkSession, tableOrViewName: str) -> DeltaTable:
        """The Delta table registered in Spark's session catalog (a Hive metastore, Glue) as
        `tableOrViewName` (`t`, `db.t`, `spark_catalog.db.t`, or delta-spark's ``delta.`/path` ``).

        Raises `TableNotFoundError` for a missing name or a location without a Delta log,
        `NotADeltaTableError` for a view or a table of another format, `UnsupportedFeatureError`
        for a catalog-managed (Unity Catalog) table."""
        path = path_in_name(tableOrViewName)
        if path is not None:
            return cls.forPath(spark, path)
        return cls._registered(spark, resolve(spark, tableOrViewName))

    @classmethod
    def _registered(cls, spark: SparkSession, entry: CatalogEntry) -> DeltaTable:
        """The table a catalog entry (a Delta table, `refuse_unless_delta` passed) places, read once
        so that a catalog-managed table is refused."""
        refuse_unless_delta(entry)
        assert entry.location is not None
        try:
            table = cls.forPath(spark, entry.location)
        except TableNotFoundError as exc:
            reason = f"the catalog places it at {entry.location}: {exc}"
            raise TableNotFoundError(entry.name, reason) from exc
        table._name = entry.name
        try:
            protocol = table.snapshot().protocol
        except UnsupportedFeatureError as exc:
            managed = [f for f in CATALOG_MANAGED_FEATURES if f in exc.features]
            if managed:
                raise catalog_managed_error(entry.name, managed) from exc
            raise
        managed = [f for f in CATALOG_MANAGED_FEATURES if f in protocol.tableFeatures]
        if managed:
            raise catalog_managed_error(entry.name, managed)
        return table

    @classmethod
    @eager
    def forPathOrName(cls, spark: SparkSession, identifier: str) -> DeltaTable:
        """`forName` when `identifier` is a name the catalog knows, else `forPath` (the CLI's and the
        jobs' rule: a path has a `/` or a scheme; a bare word not in the catalog is a path)."""
        path = path_in_name(identifier)
        if path is not None:
            return cls.forPath(spark, path)
        entry = lookup(spark, identifier) if looks_like_name(identifier) else None
        if entry is not None:
            return cls._registered(spark, entry)
        try:
            return cls.forPath(spark, identifier)
        except TableNotFoundError as exc:
            if looks_like_name(identifier):
                reason = "no such table in the catalog, and no Delta table at that path"
                raise TableNotFoundError(identifier, reason) from exc
            raise

    @classmethod
    def isDeltaTable(cls, spark: SparkSession, identifier: str) -> bool:
        """Whether `identifier` — a path, or a name in the session catalog (names are tried first;
        a bare word the catalog does not know is a path) — is a Delta table. A catalog-managed
        table is a Delta table (True), though deltaspark refuses to open it."""
        try:
            cls.forPathOrName(spark, identifier)
        except UnsupportedFeatureError as exc:
            return any(f in exc.features for f in CATALOG_MANAGED_FEATURES)
        except TableNotFoundError:
            return False
        return True

    @property
    def path(self) -> str:
        return self._path

    @property
    def name(self) -> str | None:
        """The catalog name the table was opened or created by (None when opened by path)."""
        return self._name

    def __repr__(self) -> str:
        if self._name is not None:
            return f"DeltaTable({self._name!r} at {self._path!r})"
        return f"DeltaTable({self._path!r})"

    def _listing(self) -> list[LogFile]:
        listing = list_log_files(self._storage, log_dir_of(self._path))
        if listing is None:
            raise TableNotFoundError(self._path)
        return listing

    def _load(self, version: int | None, listing: list[LogFile] | None = None) -> Snapshot:
        return load_version(self._spark, self._storage, self._path, version, listing)

    @eager
    def snapshot(self, version: int | None = None, timestamp: TimestampLike | None = None) -> Snapshot:
        """The table at the latest version, at `version`, or as of `timestamp`."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("Give a version or a timestamp, not both")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise InvalidArgumentError(f"version must be an integer, got {version!r}")
        listing = None
        if timestamp is not None:
            listing = self._listing()
            latest = self._load(None, listing)
            wanted = to_epoch_ms(self._spark, timestamp)
            version = version_at_timestamp(self._spark, listing, latest.inCommitTimestamps, wanted)
            log.info("Timestamp %s resolves to version %d", timestamp, version)
        return self._load(version, listing)

    @eager
    def toDF(self, filter: Any = None, rowTracking: bool = False) -> DataFrame:  # noqa: A002
        """The latest version's rows; see `Snapshot.toDF` (under the table's alias, if it has one)."""
        frame = self.snapshot().toDF(filter, rowTracking=rowTracking)
        return frame.alias(self._alias) if self._alias else frame

    def alias(self, aliasName: str) -> DeltaTable:
        """This table under an alias, for the conditions and assignments of `merge`."""
        if not isinstance(aliasName, str) or not aliasName:
            raise InvalidArgumentError(f"An alias is a non-empty string, got {aliasName!r}")
        table = DeltaTable(self._spark, self._path, self._storage)
        table._alias = aliasName
        return table

    def merge(self, source: DataFrame, condition: str | Any) -> DeltaMergeBuilder:
        """Start a MERGE of `source` into this table on `condition` (SQL string or Column over the
        table's alias and the source's), as delta-spark's `DeltaTable.merge`: add clauses
        (`whenMatchedUpdate`, `whenNotMatchedInsertAll`, ...) and call `execute()`."""
        return DeltaMergeBuilder(self._merge, source, condition)

    @eager
    def _merge(self, builder: DeltaMergeBuilder) -> DataFrame:
        outcome = merge_rows(
            self._spark,
            self._storage,
            self._path,
            self.snapshot(),
            self._alias,
            builder.source,
            builder.condition,
            list(builder.clauses),
            builder.schemaEvolution,
            app_transaction(self._spark, builder.txnAppId, builder.txnVersion),
        )
        self._after_commit(outcome.commit)
        m = outcome.metrics
        updated, deleted, inserted = (
            int(m["numTargetRowsUpdated"]),
            int(m["numTargetRowsDeleted"]),
            int(m["numTargetRowsInserted"]),
        )
        return held_frame(
            self._spark,
            [(updated + deleted + inserted, updated, deleted, inserted)],
            "num_affected_rows long, num_updated_rows long, num_deleted_rows long, num_inserted_rows long",
        )

    @eager
    def changes(
        self,
        startingVersion: int | None = None,
        endingVersion: int | None = None,
        startingTimestamp: TimestampLike | None = None,
        endingTimestamp: TimestampLike | None = None,
    ) -> DataFrame:
        """The change data feed between two versions (inclusive; the end defaults to the latest),
        or between two timestamps: the table's columns plus `_change_type`, `_commit_version` and
        `_commit_timestamp`. See `deltaspark.read.change_data_feed`."""
        if (startingVersion is None) == (startingTimestamp is None):
            raise InvalidArgumentError("Give exactly one of startingVersion and startingTimestamp")
        if endingVersion is not None and endingTimestamp is not None:
            raise InvalidArgumentError("Give at most one of endingVersion and endingTimestamp")
        for name, value in (("startingVersion", startingVersion), ("endingVersion", endingVersion)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
        listing = self._listing()
        if startingTimestamp is not None or endingTimestamp is not None:
            ict = self._load(None, listing).inCommitTimestamps
            if startingTimestamp is not None:
                wanted = to_epoch_ms(self._spark, startingTimestamp)
                startingVersion = first_version_at_or_after(self._spark, listing, ict, wanted)
            if endingTimestamp is not None:
                wanted = to_epoch_ms(self._spark, endingTimestamp)
                endingVersion = version_at_timestamp(self._spark, listing, ict, wanted)
        assert startingVersion is not None
        latest = self._load(endingVersion, listing)
        if startingVersion < 0 or startingVersion > latest.version:
            raise InvalidArgumentError(
                f"startingVersion {startingVersion} must be between 0 and the ending version {latest.version}"
            )
        start = latest if startingVersion == latest.version else self._load(startingVersion, listing)
        return read_changes(start, latest, listing)

    @eager
    def detail(self) -> DataFrame:
        """One row describing the table, like DESCRIBE DETAIL."""
        return detail_frame(self.snapshot(), self._name)

    @eager
    def transactionVersion(self, appId: str) -> int | None:
        """The newest version of application `appId` the table holds (its `txn` action, see
        `Snapshot.transactions`), or None: what an idempotent writer or a streaming query
        (`deltaspark.writeStream`, whose appId is the query's id) has committed."""
        return self.snapshot().transactionVersion(appId)

    @eager
    def history(self, limit: int | None = None) -> DataFrame:
        """`commitInfo` of every commit in the log, newest first (like DESCRIBE HISTORY)."""
        listing = self._listing()
        latest = self._load(None, listing)
        # Commits are contiguous from the oldest one kept: a gap among the commits asked for is
        # damage, not a shorter history (one older than the newest `limit` commits is not asked for).
        versions = sorted(f.version for f in listing if f.kind is LogFileKind.COMMIT)
        missing: list[int] = []
        if versions:
            oldest = versions[0] if limit is None else max(versions[0], versions[-1] - max(limit, 0) + 1)
            missing = sorted(set(range(oldest, versions[-1] + 1)) - set(versions))
        if missing:
            raise NonContiguousVersionsError(latest.tableRoot, missing, "the history has a gap")
        return history_frame(self._spark, listing, latest.inCommitTimestamps, limit, self._storage)

    @eager
    def checkpoint(
        self, version: int | None = None, actionsPerPart: int | None = None, v2Format: str | None = None
    ) -> CheckpointResult:
        """Write a checkpoint of the latest version (or `version`) as a distributed write. The latest
        snapshot decides whether `checkpointProtection` forbids checkpointing an older version.
        See `deltaspark.maintenance.checkpoint_writer`."""
        latest = self.snapshot()
        snapshot = latest if version is None or version == latest.version else self.snapshot(version=version)
        return write_checkpoint(snapshot, actionsPerPart, v2Format, protected_before_version(latest))

    @eager
    def cleanupLog(self, dryRun: bool = True) -> LogCleanupResult:
        """Metadata cleanup: delete log files older than `delta.logRetentionDuration` that no retained
        version needs; with `dryRun` (the default) only list them."""
        return cleanup_log(self._storage, self._path, dryRun)

    @eager
    def toIceberg(self, formatVersion: int = 2) -> IcebergExport:
        """Write Iceberg metadata for the latest version under `<table>/metadata/`, so that Iceberg
        engines read the table in place (no data is copied); a no-op when it already describes that
        version. Format 3 carries deletion vectors and row lineage (needs row tracking)."""
        return to_iceberg(self._spark, self._storage, self.snapshot(), formatVersion)

    @eager
    def vacuum(
        self,
        retentionHours: float | None = None,
        dryRun: bool = False,
        lite: bool = False,
        inventory: DataFrame | str | None = None,
    ) -> DataFrame:
        """VACUUM: delete files no version within the retention period needs (delta-spark's rules;
        see `deltaspark.maintenance.vacuum`). Returns what it deletes - or, with `dryRun`, would
        delete - as a DataFrame `path, size, modificationTime, isDir, reason` (+ `deleted`,
        `error`). `lite` takes the candidates from the log instead of a listing; `inventory` (a
        DataFrame or table name with `path, length, isDir, modificationTime`) replaces the listing."""
        return vacuum(self._spark, self._storage, self._path, retentionHours, dryRun, lite, inventory)

    @eager
    def audit(
        self,
        level: str = "full",
        startVersion: int | None = None,
        endVersion: int | None = None,
        checks: list[str] | None = None,
        timed: bool = False,
    ) -> AuditReport:
        """Check the table's health: the log (versions, checkpoints, compactions and checksums against
        the replay, `_last_checkpoint`, in-commit timestamps, protocol vs properties), with
        `level="full"` every file (existence and size, deletion vectors, parquet footers, CDC files)
        and orphans, plus statistics, partition values and hygiene. Log checks cover versions
        `startVersion..endVersion`; file checks the version `endVersion` (default: the latest).
        `checks` keeps the checks whose names start with one of its prefixes (`["log.", "files.exist"]`).
        The checks are evaluated together (few Spark jobs); `timed=True` runs them one by one and
        reports each one's seconds in `summary["checks"]` (slower on small tables).
        Returns an `AuditReport`: `findings` (a DataFrame), `summary`, `metrics`, `passed`, `frames`."""
        return audit_table(
            self._spark, self._storage, self._path, level, startVersion, endVersion, checks, timed
        )

    @eager
    def repair(self, dryRun: bool = True) -> DataFrame:
        """Like FSCK REPAIR TABLE: the live files whose data file or deletion vector file is missing
        (`path, dataFileMissing, deletionVectorPath, deletionVectorFileMissing`); unless `dryRun`,
        their references are removed in one commit."""
        return repair_table(audit_context(self._spark, self._storage, self._path), dryRun)

    # ---- changing the table: every change is one commit through `deltaspark.transaction` ---------
    @classmethod
    def create(cls, spark: SparkSession) -> DeltaTableBuilder:
        """A builder that creates a new table (fails if one exists), as in delta-spark."""
        return DeltaTableBuilder(spark, "create")

    @classmethod
    @eager
    def convertToDelta(
        cls,
        spark: SparkSession,
        identifier: str,
        partitionSchema: str | StructType | None = None,
        metadataLocation: str | None = None,
    ) -> DeltaTable:
        """Convert the parquet directory ``parquet.`path` `` or the Iceberg table ``iceberg.`path` ``
        to a Delta table in place (one commit; files described on the executors; no data file is
        rewritten). A Delta table already there is returned as it is. `metadataLocation` picks the
        Iceberg metadata file to convert (default: the table's current one)."""
        iceberg_path = parse_iceberg_identifier(identifier)
        path = iceberg_path if iceberg_path is not None else parse_identifier(identifier)
        table = cls(spark, path)
        if table._latest_or_none() is not None:
            return table
        if iceberg_path is not None:
            if partitionSchema is not None:
                raise InvalidArgumentError(
                    "partitionSchema applies to parquet directories, not Iceberg tables"
                )
            table._after_commit(convert_iceberg(spark, table._storage, table._path, metadataLocation))
            return table
        schema = partitionSchema
        if isinstance(schema, str):
            schema = (
                StructType.fromDDL(schema) if hasattr(StructType, "fromDDL") else _parse_schema(spark, schema)
            )
        table._after_commit(convert(spark, table._storage, table._path, schema))
        return table

    @classmethod
    def createIfNotExists(cls, spark: SparkSession) -> DeltaTableBuilder:
        return DeltaTableBuilder(spark, "createIfNotExists")

    @classmethod
    def createOrReplace(cls, spark: SparkSession) -> DeltaTableBuilder:
        return DeltaTableBuilder(spark, "createOrReplace")

    @classmethod
    def replace(cls, spark: SparkSession) -> DeltaTableBuilder:
        return DeltaTableBuilder(spark, "replace")

    def _latest_or_none(self) -> Snapshot | None:
        try:
            return self.snapshot()
        except (TableNotFoundError, VersionNotFoundError) as exc:
            if isinstance(exc, VersionNotFoundError) and exc.latest is not None:
                raise
            return None

    def _after_commit(self, result: CommitResult | None, registered_now: bool = False) -> CommitResult | None:
        """Post-commit work: a checkpoint when one is due; the catalog entry of a table opened by
        name brought up to a metadata change (not when it was just registered from this version)."""
        if result is not None:
            configuration = result.configuration
            if configuration is None:
                configuration = self.snapshot(version=result.version).configuration
            interval = configuration.get("delta.checkpointInterval")
            checkpoint_if_due(self._spark, self._storage, self._path, result.version, interval)
            if result.metadataChanged and self._name is not None and not registered_now:
                self._sync_catalog(result.version)
        return result

    def _sync_catalog(self, version: int) -> None:
        """The catalog entry of a table opened by name follows its schema, properties and comment
        (delta-spark's catalog update). The commit has landed: a catalog that refuses is logged,
        not raised (the log stays the truth; a retry would commit twice)."""
        assert self._name is not None
        snapshot = self.snapshot(version=version)
        try:
            sync(
                self._spark,
                self._name,
                version,
                snapshot.timestampMs,
                snapshot.schema,
                snapshot.partitionColumns,
                snapshot.configuration,
                snapshot.metadata.description,
            )
        except Exception as exc:  # noqa: BLE001 - py4j and metastore errors alike
            log.warning(
                "Version %d of %s is committed, but its catalog entry %s was not updated: %s",
                version,
                self._path,
                self._name,
                exc,
            )

    def optimize(self) -> DeltaOptimizeBuilder:
        """Start an OPTIMIZE, as delta-spark's `DeltaTable.optimize`: optionally `.where(partition
        predicate)`, then `.executeCompaction()`, `.executeZOrderBy(cols)` or
        `.purgeDeletionVectors()`."""
        return DeltaOptimizeBuilder(self._optimize)

    @eager
    def _optimize(self, builder: DeltaOptimizeBuilder, kind: str, columns: list[str]) -> DataFrame:
        outcome = optimize_files(
            self._spark, self._storage, self._path, self.snapshot(), builder.condition, kind, columns
        )
        self._after_commit(outcome.commit)
        return held_frame(self._spark, [(self._path, outcome.metrics)], METRICS_SCHEMA)

    @eager
    def clusterBy(self, *colNames: str) -> CommitResult | None:
        """ALTER TABLE CLUSTER BY: cluster this (unpartitioned) table by these columns from now on
        (no columns: CLUSTER BY NONE). No file is rewritten; the next `optimize()` clusters the
        files no clustering laid out. None when nothing changes."""
        names = colNames[0] if len(colNames) == 1 and isinstance(colNames[0], (list, tuple)) else colNames
        result = table_changes.cluster_by(
            self._spark, self._storage, self._path, self.snapshot(), list(names)
        )
        return self._after_commit(result)

    @eager
    def setProperties(self, properties: dict[str, str]) -> CommitResult:
        """Set table properties (ALTER TABLE SET TBLPROPERTIES); features they need are added."""
        result = table_changes.set_properties(
            self._spark, self._storage, self._path, self.snapshot(), properties
        )
        self._after_commit(result)
        return result

    @eager
    def unsetProperties(self, keys: list[str], ifExists: bool = False) -> CommitResult | None:
        """Remove table properties (ALTER TABLE UNSET TBLPROPERTIES [IF EXISTS])."""
        snapshot = self.snapshot()
        return self._after_commit(
            table_changes.unset_properties(
                self._spark, self._storage, self._path, snapshot, list(keys), ifExists
            )
        )

    @eager
    def addFeatureSupport(self, featureName: str) -> CommitResult | None:
        """Add a table feature to the protocol (None when it is already supported)."""
        return self._after_commit(
            table_changes.add_feature_support(
                self._spark, self._storage, self._path, self.snapshot(), featureName
            )
        )

    @eager
    def upgradeTableProtocol(self, readerVersion: int, writerVersion: int) -> CommitResult | None:
        """Raise the protocol versions, as delta-spark's `upgradeTableProtocol` (never lowers them)."""
        return self._after_commit(
            table_changes.upgrade_protocol(
                self._spark, self._storage, self._path, self.snapshot(), readerVersion, writerVersion
            )
        )

    @eager
    def delete(
        self, condition: str | Any = None, txnAppId: str | None = None, txnVersion: int | None = None
    ) -> CommitResult | None:
        """Delete the rows matching `condition` (SQL string or Column; every row when None), as
        delta-spark's `DeltaTable.delete`; None when no file can hold a matching row.
        `txnAppId`/`txnVersion` (or the session's `spark.databricks.delta.write.txnAppId` /
        `txnVersion`) make it idempotent: None when the table already holds that version."""
        app = app_transaction(self._spark, txnAppId, txnVersion)
        result = delete_rows(self._spark, self._storage, self._path, self.snapshot(), condition, app)
        return self._after_commit(result)

    @eager
    def update(
        self,
        condition: str | Any = None,
        set: dict[str, Any] | None = None,  # noqa: A002 - delta-spark's name
        txnAppId: str | None = None,
        txnVersion: int | None = None,
    ) -> CommitResult | None:
        """Set columns of the rows matching `condition` (SQL string or Column; every row when None),
        as delta-spark's `DeltaTable.update`: `set` maps column names (dotted for struct fields) to
        SQL strings or Columns over the row before the update. None when no row matches, or when
        the table already holds `txnVersion` of `txnAppId` (an idempotent write, see `delete`)."""
        app = app_transaction(self._spark, txnAppId, txnVersion)
        result = update_rows(self._spark, self._storage, self._path, self.snapshot(), condition, set, app)
        return self._after_commit(result)

    @eager
    def restoreToVersion(self, version: int) -> DataFrame:
        """Restore the table to an earlier version as a new commit (RESTORE); returns delta-spark's
        one-row metrics DataFrame."""
        listing = self._listing()
        latest = self._load(None, listing)
        target = self._load(version, listing)
        return self._restore(latest, target, {"version": version})

    @eager
    def restoreToTimestamp(self, timestamp: TimestampLike) -> DataFrame:
        """Restore the table to the version as of `timestamp` (see `snapshot(timestamp=...)`)."""
        target = self.snapshot(timestamp=timestamp)
        latest = self.snapshot()
        return self._restore(latest, target, {"timestamp": str(timestamp)})

    def _restore(self, latest: Snapshot, target: Snapshot, parameters: dict[str, Any]) -> DataFrame:
        result = restore(self._spark, self._storage, self._path, latest, target, parameters)
        self._after_commit(result)
        m = result.metrics
        names = (
            "tableSizeAfterRestore",
            "numOfFilesAfterRestore",
            "numRemovedFiles",
            "numRestoredFiles",
            "removedFilesSize",
            "restoredFilesSize",
        )
        columns = ", ".join(f"{_snake(n)} long" for n in names)
        return held_frame(self._spark, [tuple(int(m[n]) for n in names)], columns)

    def _repr_html_(self) -> str:
        """The latest version's key facts as an HTML table (notebooks)."""
        return self.snapshot()._repr_html_()


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


class DeltaTableBuilder:
    """Builds a table definition and commits it: `DeltaTable.create(spark).location(p).addColumn(...)
    .partitionedBy(...).property(k, v).execute()`, named as delta-spark's builder."""

    def __init__(self, spark: SparkSession, mode: str) -> None:
        self._spark = spark
        self._mode = mode
        self._path: str | None = None
        self._fields: list[StructField] = []
        self._partitions: list[str] = []
        self._properties: dict[str, str] = {}
        self._comment: str | None = None
        self._cluster_by: list[str] | None = None
        self._name: str | None = None

    def tableName(self, identifier: str) -> DeltaTableBuilder:
        """Register the table in Spark's session catalog under this name (external, provider
        `delta`, as delta-spark does); without `location()` it goes where the catalog puts managed
        tables. An existing Delta table at `location()` with no columns given is registered as is."""
        self._name = identifier
        return self

    def location(self, path: str) -> DeltaTableBuilder:
        self._path = path
        return self

    def comment(self, comment: str) -> DeltaTableBuilder:
        self._comment = comment
        return self

    def addColumn(
        self,
        colName: str,
        dataType: str | DataType,
        nullable: bool = True,
        generatedAlwaysAs: str | IdentityGenerator | None = None,
        comment: str | None = None,
        generatedByDefaultAs: IdentityGenerator | None = None,
    ) -> DeltaTableBuilder:
        """A column; `generatedAlwaysAs` takes a SQL expression (a generated column) or an
        `IdentityGenerator` (GENERATED ALWAYS AS IDENTITY), `generatedByDefaultAs` an
        `IdentityGenerator` (GENERATED BY DEFAULT AS IDENTITY), as delta-spark's builder."""
        if isinstance(dataType, str):
            parsed = StructType.fromDDL(f"`{colName}` {dataType}") if hasattr(StructType, "fromDDL") else None
            data_type = (
                parsed.fields[0].dataType if parsed is not None else _parse_type(self._spark, dataType)
            )
        else:
            data_type = dataType
        metadata: dict[str, Any] = {}
        if generatedAlwaysAs is not None and generatedByDefaultAs is not None:
            raise InvalidArgumentError(f"Column {colName}: give generatedAlwaysAs or generatedByDefaultAs")
        if isinstance(generatedAlwaysAs, IdentityGenerator) or generatedByDefaultAs is not None:
            generator = generatedAlwaysAs if generatedByDefaultAs is None else generatedByDefaultAs
            metadata.update(identity_metadata(generator, always=generatedByDefaultAs is None))  # type: ignore[arg-type]
        elif generatedAlwaysAs:
            metadata["delta.generationExpression"] = generatedAlwaysAs
        if comment:
            metadata["comment"] = comment
        self._fields.append(StructField(colName, data_type, nullable, metadata))
        return self

    def addColumns(self, cols: StructType | list[StructField]) -> DeltaTableBuilder:
        self._fields.extend(cols.fields if isinstance(cols, StructType) else cols)
        return self

    def partitionedBy(self, *colNames: str) -> DeltaTableBuilder:
        names = colNames[0] if len(colNames) == 1 and isinstance(colNames[0], (list, tuple)) else colNames
        self._partitions = list(names)
        return self

    def clusterBy(self, *colNames: str) -> DeltaTableBuilder:
        """Liquid clustering by these columns (delta-spark's `clusterBy`): OPTIMIZE then lays rows
        out along a curve of them. A table cannot be both partitioned and clustered."""
        names = colNames[0] if len(colNames) == 1 and isinstance(colNames[0], (list, tuple)) else colNames
        self._cluster_by = list(names)
        return self

    def property(self, key: str, value: str) -> DeltaTableBuilder:
        self._properties[key] = str(value)
        return self

    @eager
    def execute(self) -> DeltaTable:
        if self._path is None and self._name is None:
            raise InvalidArgumentError("Give the table's tableName() or location() before execute()")
        path, registered = _location_for_name(self._spark, self._name, self._path)
        if registered and self._mode == "create":
            raise TableAlreadyExistsError(
                self._name or "", f"The catalog already has a table named {self._name}"
            )
        table = DeltaTable(self._spark, path)
        table._name = self._name
        latest = table._latest_or_none()
        register_only = (
            self._name is not None and latest is not None and not self._fields and self._mode != "replace"
        )
        result = None
        if not register_only:
            result = table_changes.create_table(
                self._spark,
                table._storage,
                table._path,
                latest,
                self._mode,
                StructType(self._fields),
                self._partitions,
                self._properties,
                self._comment,
                self._cluster_by,
            )
        registered_now = self._name is not None and not registered
        if registered_now:
            _register(table)
        table._after_commit(result, registered_now)
        return table


def _parse_schema(spark: SparkSession, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema


def _parse_type(spark: SparkSession, ddl: str) -> DataType:
    return spark.createDataFrame([], f"x {ddl}").schema.fields[0].dataType


def _location_for_name(spark: SparkSession, name: str | None, path: str | None) -> tuple[str, bool]:
    """Where the table named `name` lives (its catalog location, else `path`, else the catalog's
    managed location), and whether the catalog already has it."""
    if name is None:
        assert path is not None
        return path, False
    entry = lookup(spark, name)
    if entry is None:
        return (path if path is not None else default_location(spark, name)), False
    refuse_unless_delta(entry)
    assert entry.location is not None
    if path is not None and _normalized(path) != _normalized(entry.location):
        raise InvalidArgumentError(f"{name} is registered at {entry.location}, not at {path}")
    return entry.location, True


def _normalized(location: str) -> str:
    for prefix in ("file://", "file:"):
        if location.startswith(prefix):
            location = location[len(prefix) :]
            break
    return "/" + location.strip("/") if location.startswith("/") else location.rstrip("/")


def _register(table: DeltaTable) -> None:
    """Register `table` (just created or found at its location) under its name."""
    assert table._name is not None
    snapshot = table.snapshot()
    shown = {LAST_UPDATE_VERSION: str(snapshot.version), LAST_COMMIT_TIMESTAMP: str(snapshot.timestampMs)}
    register(
        table._spark,
        table._name,
        table._path,
        snapshot.schema,
        snapshot.partitionColumns,
        {**snapshot.configuration, **shown},
        snapshot.metadata.description,
    )


@eager
def write(
    df: DataFrame,
    path: str | None = None,
    mode: str = "append",
    partitionBy: list[str] | None = None,
    replaceWhere: str | None = None,
    txnAppId: str | None = None,
    txnVersion: int | None = None,
    userMetadata: str | None = None,
    properties: dict[str, str] | None = None,
    mergeSchema: bool = False,
    overwriteSchema: bool = False,
    clusterBy: list[str] | None = None,
    tableName: str | None = None,
) -> CommitResult | None:
    """Write a DataFrame to the Delta table at `path`, or named `tableName` in Spark's session
    catalog (created and registered if absent; with both, a new table goes to `path`): `mode` is append,
    overwrite (with `replaceWhere` over partition columns: replace only those partitions),
    error/errorifexists or ignore. `txnAppId`/`txnVersion` make the write idempotent;
    `mergeSchema` adds new columns; `overwriteSchema` (overwrite) replaces schema and partitioning;
    `clusterBy` creates the table clustered by those columns (liquid clustering).
    Returns the commit, or None when nothing was committed."""
    return write_table(
        df,
        path,
        mode,
        partitionBy,
        replaceWhere,
        txnAppId,
        txnVersion,
        userMetadata,
        properties,
        mergeSchema,
        overwriteSchema,
        clusterBy,
        tableName,
    )


def write_table(
    df: DataFrame,
    path: str | None,
    mode: str = "append",
    partitionBy: list[str] | None = None,
    replaceWhere: str | None = None,
    txnAppId: str | None = None,
    txnVersion: int | None = None,
    userMetadata: str | None = None,
    properties: dict[str, str] | None = None,
    mergeSchema: bool = False,
    overwriteSchema: bool = False,
    clusterBy: list[str] | None = None,
    tableName: str | None = None,
    operation: tuple[str, dict[str, Any]] | None = None,
) -> CommitResult | None:
    """`write`, with the commit's operation given by the caller (the streaming sink's)."""
    spark = df.sparkSession
    if path is None and tableName is None:
        raise InvalidArgumentError("Give the table's path or tableName")
    location, registered = _location_for_name(spark, tableName, path)
    if registered and mode in ("error", "errorifexists"):
        raise TableAlreadyExistsError(location, f"The catalog already has a table named {tableName}")
    table = DeltaTable(spark, location)
    table._name = tableName
    result = write_rows(
        spark,
        table._storage,
        table._path,
        table._latest_or_none(),
        df,
        mode,
        partitionBy,
        replaceWhere,
        txnAppId,
        txnVersion,
        userMetadata,
        properties,
        mergeSchema,
        overwriteSchema,
        clusterBy,
        operation,
    )
    registered_now = tableName is not None and not registered and (result is not None or mode == "ignore")
    if registered_now:
        _register(table)
    return table._after_commit(result, registered_now)
