"""The one commit path: optimistic transactions, as the protocol's "Requirements for Writers" ask.

A `Transaction` starts from a snapshot (or from nothing, for a new table), records what it read
(predicates, files, application transaction ids) and collects actions. `commit()`:

1. refuses tables with features deltaspark cannot honour (by name) and removes on append-only tables;
2. writes version `read + 1` with put-if-absent (`log_store`): a commit file is never overwritten;
3. when another writer won that version, checks each winning commit with `conflicts` and, when
   nothing conflicts, tries the next free version (re-assigning row ids and the in-commit timestamp);
4. returns the version it committed.

Small actions are rendered on the driver. A data write's file actions stay DataFrames: Spark tasks
render them as JSON lines into a hidden directory of `_delta_log`, and the driver's JVM streams
the commit (its `commitInfo` first) into place without Python ever holding the file list.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from deltaspark.errors import (
    AppendOnlyTableError,
    CommitError,
    InvalidArgumentError,
    TooManyCommitAttemptsError,
    UnsupportedWriterFeatureError,
)
from deltaspark.features.metadata import Metadata, is_true
from deltaspark.features.protocol import Protocol, check_writable
from deltaspark.log import action_schemas as schemas
from deltaspark.log.files import LogFileKind
from deltaspark.log.listing import list_log_files, log_dir_of
from deltaspark.snapshot import Snapshot, load_version
from deltaspark.spark_compat import conf_get, held_frame
from deltaspark.storage import Storage, join_path
from deltaspark.transaction import actions as A
from deltaspark.transaction import checksum as C
from deltaspark.transaction.conflicts import (
    SERIALIZABLE,
    SNAPSHOT_ISOLATION,
    WRITE_SERIALIZABLE,
    ConflictChecker,
    TransactionReads,
    read_winning_commit,
)
from deltaspark.transaction.log_store import LogStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS_CONF = "spark.deltaspark.commit.maxAttempts"
CHECKSUM_CONF = "spark.deltaspark.commit.checksum"  # full (default) | incremental | off
# Up to this many file actions whose count the caller knows are collected to the driver (one Spark
# job) and written with the commit's other lines: no job renders them, no job aggregates them for
# the checksum. 0 turns it off.
DRIVER_FILE_ACTIONS_CONF = "spark.deltaspark.commit.driverFileActions"
DEFAULT_DRIVER_FILE_ACTIONS = 1000
DEFAULT_MAX_ATTEMPTS = 100
ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"


def commit_path(table_path: str, version: int) -> str:
    return join_path(log_dir_of(table_path), f"{version:020d}.json")


@dataclass
class CommitResult:
    """A landed commit: its version, the `commitInfo` it carries, and how many tries it took."""

    version: int
    commitInfo: dict[str, Any]
    attempts: int
    metrics: dict[str, Any] = field(default_factory=dict)
    # the committed table configuration (post-commit work reads it instead of loading the version)
    configuration: dict[str, str] | None = field(default=None, repr=False, compare=False)
    # whether the commit carries a metaData action (the catalog's copy of schema and properties follows)
    metadataChanged: bool = field(default=False, repr=False, compare=False)

    def _repr_html_(self) -> str:
        """Version, operation, parameters and metrics as an HTML table (notebooks)."""
        from deltaspark import display

        return display.commit_html(self)


def _in_schema_order(frame: DataFrame, column: str, schema: StructType) -> Column:
    """A file action struct with the protocol's fields in the protocol's order (absent ones null).

    Built as one SQL expression: a Column per field costs a py4j round trip per node, a quarter of a
    second per commit."""
    given = frame.schema[column].dataType
    present = set(given.fieldNames()) if isinstance(given, StructType) else set()
    fields = ", ".join(
        f"'{f.name}', CAST("
        + (f"`{column}`.`{f.name}`" if f.name in present else "NULL")
        + f" AS {f.dataType.simpleString()})"
        for f in schema.fields
    )
    return F.expr(f"named_struct({fields})")


def driver_file_actions(spark: SparkSession) -> int:
    """How many file actions a commit may collect to the driver (`DRIVER_FILE_ACTIONS_CONF`)."""
    return int(conf_get(spark, DRIVER_FILE_ACTIONS_CONF, str(DEFAULT_DRIVER_FILE_ACTIONS)))


def rendered_adds(adds: DataFrame) -> DataFrame:
    """`adds` (an `add` struct and `num_records`, other columns kept) with the `add` replaced by
    `line`, its commit line as `Transaction.addFiles` writes it: for callers that collect a few
    adds together with other per-file values, and hand the lines over (`addFiles(lines=...)`)."""
    others = [c for c in adds.columns if c != "add"]
    line = A.add_line(_in_schema_order(adds, "add", schemas.ADD))
    return adds.select(line.alias("line"), *others)


def rendered_removes(removes: DataFrame) -> DataFrame:
    """`removes` (a `remove` struct column, other columns kept) with the `remove` replaced by
    `line`, its commit line as `Transaction.removeFiles` writes it (see `rendered_adds`)."""
    others = [c for c in removes.columns if c != "remove"]
    line = A.remove_line(_in_schema_order(removes, "remove", schemas.REMOVE))
    return removes.select(line.alias("line"), *others)


class Transaction:
    """An optimistic transaction on the table at `table_path` (see the module docstring)."""

    def __init__(
        self, spark: SparkSession, storage: Storage, table_path: str, snapshot: Snapshot | None
    ) -> None:
        self.spark = spark
        self.storage = storage
        self.table_path = table_path.rstrip("/")
        self.snapshot = snapshot
        self.read_version = snapshot.version if snapshot is not None else -1
        self.protocol: Protocol | None = snapshot.protocol if snapshot is not None else None
        self.metadata: Metadata | None = snapshot.metadata if snapshot is not None else None
        self._protocol_changed = False
        self._metadata_changed = False
        self._actions: list[dict[str, Any]] = []
        self._adds: DataFrame | None = None
        self._removes: DataFrame | None = None
        self._removed_aggregates: dict[str, Any] | None = None  # of `_removes`, when known
        # Adds collected to the driver: (their line as Spark renders it, the action, num_records).
        self._driver_adds: list[tuple[str, dict[str, Any], int | None]] = []
        self._reads = TransactionReads(snapshot, WRITE_SERIALIZABLE, True, False, False)
        self._txn_id = A.new_txn_id()
        self._last_high_water_mark: int | None = None
        self._store = LogStore(storage)  # refuses sessions that cannot commit, before any work

    # ---- what the transaction read ----------------------------------------------------------------
    def readWholeTable(self) -> None:
        self._reads.read_whole_table = True

    def readPredicate(self, predicate: Any) -> None:
        """Record a filter (Column or SQL string over the table's columns) the transaction read with."""
        self._reads.read_predicates.append(predicate)

    def readFiles(self, files: DataFrame) -> None:
        """Record the files (rows with a `path` as in the log) the transaction's result depends on."""
        frame = files.select("path")
        current = self._reads.read_files
        self._reads.read_files = frame if current is None else current.unionByName(frame)

    def txnVersion(self, app_id: str) -> int | None:
        """The last version committed by application `app_id` (its `txn` action), read as part of the
        transaction: a concurrent commit for the same app id is a conflict."""
        self._reads.read_app_ids.add(app_id)
        if self.snapshot is None:
            return None
        return self.snapshot.transactionVersion(app_id)

    # ---- what it writes -----------------------------------------------------------------------------
    def updateProtocol(self, protocol: Protocol) -> None:
        if protocol != self.protocol:
            self.protocol = protocol
            self._protocol_changed = True

    def updateMetadata(self, metadata: Metadata) -> None:
        if metadata != self.metadata:
            self.metadata = metadata
            self._metadata_changed = True

    def addAction(self, action: dict[str, Any]) -> None:
        """A small action (txn, domainMetadata, a few remove/add) as its JSON dict."""
        (kind,) = action.keys()
        if kind in ("protocol", "metaData", "commitInfo"):
            raise InvalidArgumentError(f"Use updateProtocol/updateMetadata, not addAction, for `{kind}`")
        if kind == "txn":
            self._reads.read_app_ids.add(action["txn"]["appId"])
        if kind == "domainMetadata":
            self._reads.written_domains.add(action["domainMetadata"]["domain"])
        self._actions.append(action)

    def addFiles(
        self,
        adds: DataFrame,
        count: int | None = None,
        lines: list[tuple[str, int | None]] | None = None,
    ) -> None:
        """`add` actions as a DataFrame: an `add` struct column (the protocol's fields) and
        `num_records` (for row ids, when row tracking is on). `count`, when the caller knows how many
        rows `adds` has: a few are collected to the driver now (`DRIVER_FILE_ACTIONS_CONF`);
        `lines`, when the caller has already collected them (`rendered_adds`): `adds` is not read."""
        if lines is None and self._fits_driver(count, len(self._driver_adds)):
            lines = [(r["line"], r["num_records"]) for r in rendered_adds(adds).collect()]
        if lines is not None:
            for line, records in lines:
                self._driver_adds.append((line, json.loads(line)["add"], records))
            return
        adds = adds.select(_in_schema_order(adds, "add", schemas.ADD).alias("add"), "num_records")
        self._adds = adds if self._adds is None else self._adds.unionByName(adds)

    def removeFiles(
        self,
        removes: DataFrame,
        count: int | None = None,
        lines: list[str] | None = None,
        aggregates: dict[str, Any] | None = None,
    ) -> None:
        """`remove` actions as a DataFrame with a `remove` struct column; `count` as for `addFiles`;
        `lines`, when the caller has already collected them (`rendered_removes`): `removes` is not
        read. `aggregates`: what the checksum counts of them (`checksum.aggregate_dicts`), when the
        caller knows it already: the commit's checksum then runs no job over `removes`."""
        small = sum(1 for a in self._actions if "remove" in a)
        if lines is None and self._fits_driver(count, small):
            lines = [row["line"] for row in rendered_removes(removes).collect()]
        if lines is not None:
            self._actions += [json.loads(line) for line in lines]
            return
        removes = removes.select(_in_schema_order(removes, "remove", schemas.REMOVE).alias("remove"))
        first = self._removes is None
        self._removes = removes if first else self._removes.unionByName(removes)
        known = aggregates is not None and (first or self._removed_aggregates is not None)
        self._removed_aggregates = (
            C.combine(self._removed_aggregates or C.aggregate_dicts([]), aggregates) if known else None
        )

    def _fits_driver(self, count: int | None, held: int) -> bool:
        """Whether `count` more file actions (beside `held` already on the driver) are few enough
        to be collected (`DRIVER_FILE_ACTIONS_CONF`)."""
        return count is not None and count + held <= driver_file_actions(self.spark)

    # ---- committing -------------------------------------------------------------------------------
    def _isolation_level(self, data_change: bool) -> str:
        if not data_change:
            return SNAPSHOT_ISOLATION
        level = (self.metadata.configuration if self.metadata else {}).get("delta.isolationLevel")
        return SERIALIZABLE if level == SERIALIZABLE else WRITE_SERIALIZABLE

    def _row_tracking(self) -> bool:
        assert self.protocol is not None and self.metadata is not None
        supported = "rowTracking" in (self.protocol.writerFeatures or ())
        return supported and not is_true(self.metadata.configuration.get("delta.rowTrackingSuspended"))

    def _check_writable(self, small_removes: bool) -> None:
        if self.protocol is None or self.metadata is None:
            raise CommitError(f"A new table at {self.table_path} needs a protocol and a metaData action")
        check_writable(self.protocol, self.table_path, "commit to")
        if self._reads.written_domains and not self.protocol.hasFeature("domainMetadata"):
            raise UnsupportedWriterFeatureError(
                f"Cannot write metadata domains ({', '.join(sorted(self._reads.written_domains))}) to "
                f"{self.table_path}: its protocol does not support the `domainMetadata` feature "
                "(addFeatureSupport('domainMetadata') adds it)",
                ["domainMetadata"],
            )
        if is_true(self.metadata.configuration.get("delta.appendOnly")):
            removes_data = small_removes or (
                self._removes is not None
                and self._removes.where(F.coalesce(F.col("remove.dataChange"), F.lit(True))).first()
                is not None
            )
            if removes_data:
                raise AppendOnlyTableError(
                    f"Cannot remove data from {self.table_path}: the table is append-only "
                    "(delta.appendOnly=true)"
                )

    def commit(
        self,
        operation: str,
        parameters: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        userMetadata: str | None = None,
        dataChange: bool = True,
    ) -> CommitResult:
        """Commit the collected actions as the next version (see the module docstring)."""
        small_removes = any("remove" in a and a["remove"].get("dataChange", True) for a in self._actions)
        self._check_writable(small_removes)
        assert self.protocol is not None and self.metadata is not None
        reads = self._reads
        reads.changes_protocol = self._protocol_changed
        reads.changes_metadata = self._metadata_changed
        reads.isolation_level = self._isolation_level(dataChange)
        has_removes = self._removes is not None or any("remove" in a for a in self._actions)
        reads.is_blind_append = not has_removes and not (
            reads.read_whole_table or reads.read_predicates or reads.read_files is not None
        )
        if self._removes is not None:
            reads.removed_files = self._removes.select("remove.path")
        small_remove_paths = [a["remove"]["path"] for a in self._actions if "remove" in a]
        if small_remove_paths:
            extra = held_frame(self.spark, [(p,) for p in small_remove_paths], "path string")
            reads.removed_files = extra if reads.removed_files is None else reads.removed_files.union(extra)

        row_tracking = self._row_tracking() and (self._adds is not None or bool(self._driver_adds))
        adds = self._prepare_adds(row_tracking)
        high_water_mark = self._read_high_water_mark() if row_tracking else None
        frame_rows = self._count_new_rows(adds) if row_tracking else 0
        new_rows = frame_rows + (self._count_driver_rows() if row_tracking else 0)
        ict_enabled = is_true(self.metadata.configuration.get(ICT_ENABLED))
        ict_newly_enabled = ict_enabled and not (
            self.snapshot is not None and self.snapshot.inCommitTimestamps.applies_to(self.snapshot.version)
        )
        last_ict = (
            self.snapshot.timestampMs
            if ict_enabled and not ict_newly_enabled and self.snapshot is not None
            else None
        )

        max_attempts = int(conf_get(self.spark, MAX_ATTEMPTS_CONF, str(DEFAULT_MAX_ATTEMPTS)))
        checker = ConflictChecker(reads, self.table_path)
        version = self.read_version + 1
        checked_up_to = self.read_version
        temp_dir = join_path(log_dir_of(self.table_path), f".tmp-{uuid.uuid4().hex}")
        rendered: tuple[int, list[str]] | None = None
        try:
            for attempt in range(1, max_attempts + 1):
                now = int(time.time() * 1000)
                ict = None
                metadata = self.metadata
                if ict_enabled:
                    ict = max(now, last_ict + 1) if last_ict is not None else now
                    if ict_newly_enabled:
                        config = dict(metadata.configuration)
                        config[ICT_VERSION], config[ICT_TIMESTAMP] = str(version), str(ict)
                        metadata = replace(metadata, configuration=config)
                info = A.commit_info(
                    operation,
                    parameters or {},
                    now,
                    self.read_version,
                    reads.isolation_level,
                    reads.is_blind_append,
                    metrics or {},
                    self._txn_id,
                    userMetadata,
                    ict,
                )
                head = [info]
                if self._protocol_changed:
                    head.append(A.protocol_action(self.protocol))
                if self._metadata_changed or (ict_newly_enabled and self.snapshot is not None):
                    head.append(A.metadata_action(metadata))
                if row_tracking:
                    assert high_water_mark is not None
                    self._last_high_water_mark = high_water_mark + new_rows
                    head.append(A.row_tracking_domain(self._last_high_water_mark))
                head += self._actions
                if adds is not None or self._removes is not None:
                    key = version if row_tracking else 0
                    if rendered is None or rendered[0] != key:
                        parts = self._render_files(adds, temp_dir, attempt, version, high_water_mark)
                        rendered = (key, parts)
                    parts = rendered[1]
                else:
                    parts = []
                text = "".join(A.line(a) + "\n" for a in head)
                if self._driver_adds:
                    first_id = high_water_mark + 1 + frame_rows if high_water_mark is not None else None
                    text += "".join(line + "\n" for line in self._driver_add_lines(first_id, version))
                path = commit_path(self.table_path, version)
                if self._store.put_if_absent(path, text, parts):
                    self._write_checksum(version, info["commitInfo"], metadata, ict)
                    log.info(
                        "Committed version %d of %s (%s, attempt %d)",
                        version,
                        self.table_path,
                        operation,
                        attempt,
                    )
                    config = dict(metadata.configuration)
                    changed = self._metadata_changed or (ict_newly_enabled and self.snapshot is not None)
                    return CommitResult(
                        version, info["commitInfo"], attempt, dict(metrics or {}), config, changed
                    )
                log.info(
                    "Version %d of %s was committed by another writer; checking for conflicts",
                    version,
                    self.table_path,
                )
                winners = self._winning_commits(checked_up_to + 1)
                for winner in winners:
                    checker.check(winner)
                    if winner.row_id_high_water_mark is not None and high_water_mark is not None:
                        high_water_mark = max(high_water_mark, winner.row_id_high_water_mark)
                    if ict_enabled and winner.in_commit_timestamp is not None:
                        last_ict = max(last_ict or 0, winner.in_commit_timestamp)
                    checked_up_to = winner.version
                if checker.protocol is not None and not self._protocol_changed:
                    self.protocol = checker.protocol
                version = checked_up_to + 1
            raise TooManyCommitAttemptsError(
                f"Gave up committing to {self.table_path} after {max_attempts} attempts: every version "
                f"was taken by another writer (raise {MAX_ATTEMPTS_CONF} to try longer)"
            )
        finally:
            if rendered is not None or adds is not None or self._removes is not None:
                self.storage.delete(temp_dir, recursive=True)

    # ---- after the commit ---------------------------------------------------------------------------
    def _write_checksum(
        self, version: int, info: dict[str, Any], metadata: Metadata, ict: int | None
    ) -> None:
        """`version.crc`, incrementally when the previous one is there (see `checksum`); never fails
        the commit, which has landed."""
        mode = conf_get(self.spark, CHECKSUM_CONF, "full").strip().lower()
        if mode == "off":
            return
        assert self.protocol is not None
        try:
            doc = None
            previous = C.read_checksum(self.storage, self.table_path, version - 1)
            if previous is not None or version == 0:
                small = self._actions
                added = C.aggregate_dicts(
                    [a["add"] for a in small if "add" in a] + [add for _, add, _ in self._driver_adds]
                )
                removed = C.aggregate_dicts([a["remove"] for a in small if "remove" in a])
                dvs = self.protocol.hasFeature("deletionVectors")
                if self._adds is not None:
                    added = C.combine(added, C.file_aggregates(self._adds.select("add.*"), dvs))
                if self._removes is not None:
                    removed = C.combine(
                        removed,
                        self._removed_aggregates or C.file_aggregates(self._removes.select("remove.*"), dvs),
                    )
                empty = {
                    "txnId": None,
                    "numFiles": 0,
                    "tableSizeBytes": 0,
                    "setTransactions": [],
                    "domainMetadata": [],
                }
                base = previous or {
                    **empty,
                    "histogramOpt": {
                        "sortedBinBoundaries": list(C.FILE_SIZE_BINS),
                        "fileCounts": [0] * len(C.FILE_SIZE_BINS),
                        "totalBytes": [0] * len(C.FILE_SIZE_BINS),
                    },
                    "numDeletedRecordsOpt": 0,
                    "numDeletionVectorsOpt": 0,
                    "deletedRecordCountsHistogramOpt": {
                        "deletedRecordCounts": [0] * len(C.DELETED_RECORD_BINS)
                    },
                }
                doc = C.incremental_checksum(
                    base,
                    added,
                    removed,
                    self.protocol,
                    metadata,
                    info["txnId"],
                    ict,
                    [a["txn"] for a in small if "txn" in a],
                    [a["domainMetadata"] for a in small if "domainMetadata" in a]
                    + (
                        [A.row_tracking_domain(self._last_high_water_mark)["domainMetadata"]]
                        if self._last_high_water_mark is not None
                        else []
                    ),
                )
            if doc is None:
                # Without `N-1.crc` only a full computation over the table gives one: worth it for a
                # commit that changes files (which reads them anyway), not for a commit without data.
                changes_files = (
                    self._adds is not None
                    or self._removes is not None
                    or bool(self._driver_adds)
                    or any("add" in a or "remove" in a for a in self._actions)
                )
                if mode != "full" or not changes_files:
                    return
                snapshot = load_version(self.spark, self.storage, self.table_path, version, None)
                doc = C.full_checksum(snapshot, info["txnId"])
            self._store.put_if_absent(
                C.checksum_path(self.table_path, version), json.dumps(doc, separators=(",", ":"))
            )
        except Exception as exc:  # noqa: BLE001 - the commit has landed; a checksum is optional
            log.warning(
                "Version %d of %s was committed, but its checksum was not written: %s",
                version,
                self.table_path,
                exc,
            )

    # ---- helpers --------------------------------------------------------------------------------
    def _winning_commits(self, from_version: int) -> list[Any]:
        listing = list_log_files(self.storage, log_dir_of(self.table_path), from_version=from_version) or []
        commits = sorted(
            (f for f in listing if f.kind is LogFileKind.COMMIT and f.version >= from_version),
            key=lambda f: f.version,
        )
        expected = from_version
        for commit in commits:
            if commit.version != expected:
                break
            expected += 1
        return [read_winning_commit(self.spark, c) for c in commits if c.version < expected]

    def _read_high_water_mark(self) -> int:
        if self.snapshot is None:
            return -1
        mark = self.snapshot.rowIdHighWaterMark
        return -1 if mark is None else int(mark)

    def _prepare_adds(self, row_tracking: bool) -> DataFrame | None:
        adds = self._adds
        if adds is None or not row_tracking:
            return adds
        # New row ids go to files that have none (a re-added file keeps its own); they are assigned
        # as offsets now and shifted by the high-water mark at each attempt.
        needs = F.col("add.baseRowId").isNull()
        counted = F.when(needs, F.col("num_records")).otherwise(F.lit(0))
        order = Window.orderBy(F.col("add.path")).rowsBetween(Window.unboundedPreceding, -1)
        return adds.withColumn("row_offset", F.coalesce(F.sum(counted).over(order), F.lit(0)))

    def _count_driver_rows(self) -> int:
        """Rows of the driver-held adds that get new row ids (those without a `baseRowId`)."""
        needs = [records for _, add, records in self._driver_adds if add.get("baseRowId") is None]
        if any(records is None for records in needs):
            raise CommitError(f"Row tracking on {self.table_path} needs numRecords for every added file")
        return sum(int(records) for records in needs)

    def _driver_add_lines(self, first_id: int | None, version: int) -> list[str]:
        """The driver-held adds' lines; with row tracking (`first_id` set), files without row ids
        get consecutive ranges from `first_id`, in path order as `_prepare_adds` orders the rest,
        and this commit's version as their `defaultRowCommitVersion`."""
        if first_id is None:
            return [line for line, _, _ in self._driver_adds]
        lines = []
        next_id = first_id
        for line, add, records in sorted(self._driver_adds, key=lambda entry: entry[1]["path"]):
            if add.get("baseRowId") is not None and add.get("defaultRowCommitVersion") is not None:
                lines.append(line)
                continue
            add = dict(add)
            if add.get("baseRowId") is None:
                add["baseRowId"] = next_id
                next_id += int(records or 0)
            if add.get("defaultRowCommitVersion") is None:
                add["defaultRowCommitVersion"] = version
            lines.append(A.line({"add": add}))
        return lines

    def _count_new_rows(self, adds: DataFrame | None) -> int:
        if adds is None:
            return 0
        needs = F.col("add.baseRowId").isNull()
        row = adds.agg(
            F.sum(F.when(needs, F.col("num_records"))),
            F.count(F.when(needs & F.col("num_records").isNull(), 1)),
        ).first()
        if row[1]:
            raise CommitError(f"Row tracking on {self.table_path} needs numRecords for every added file")
        return int(row[0] or 0)

    def _render_files(
        self,
        adds: DataFrame | None,
        temp_dir: str,
        attempt: int,
        version: int,
        high_water_mark: int | None,
    ) -> list[str]:
        """JSON lines of the file actions, written by Spark tasks; returns the part files."""
        frames = []
        if adds is not None:
            add = F.col("add")
            if high_water_mark is not None:
                new_id = F.lit(high_water_mark + 1) + F.col("row_offset")
                add = add.withField("baseRowId", F.coalesce(F.col("add.baseRowId"), new_id)).withField(
                    "defaultRowCommitVersion",
                    F.coalesce(F.col("add.defaultRowCommitVersion"), F.lit(version).cast("long")),
                )
            frames.append(adds.select(A.add_line(add).alias("value")))
        if self._removes is not None:
            frames.append(self._removes.select(A.remove_line(F.col("remove")).alias("value")))
        lines = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        out = join_path(temp_dir, f"attempt-{attempt}")
        lines.write.mode("errorifexists").option("compression", "none").text(out)
        parts = self.storage.list_dir(out, "part-*") or []
        return sorted(p.path for p in parts if p.size > 0)
