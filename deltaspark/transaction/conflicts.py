"""Conflict detection between a transaction and the commits that won the race for its version.

The checks and their order are delta-spark's ConflictChecker's: protocol, metadata, metadata
domains, application transactions, row ids (re-assigned, not a conflict), added files the
transaction should have read, removed files it read, files it removes too, and the in-commit
timestamp (moved after the winner's, not a conflict). Each failure is its own named exception.

Small actions of a winning commit (protocol, metaData, txn, domainMetadata, commitInfo) are read
to the driver; its `add`/`remove` actions stay a DataFrame and are checked with joins and filters,
so a concurrent commit of a million files is checked on the cluster.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    ProtocolChangedError,
)
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol, check_writable
from deltaspark.log.files import LogFile
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import keep_actions, read_json_actions
from deltaspark.snapshot import Snapshot

log = logging.getLogger(__name__)

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"
ROW_TRACKING_DOMAIN = "delta.rowTracking"


@dataclass
class WinningCommit:
    """What a concurrent commit did, as far as conflict detection needs it."""

    version: int
    path: str
    protocol: Protocol | None
    metadata: Metadata | None
    commit_info: dict[str, Any]
    app_ids: set[str]
    domains: dict[str, dict[str, Any]]
    file_actions: DataFrame  # `add` / `remove` columns, one action per row

    @property
    def is_blind_append(self) -> bool:
        return bool(self.commit_info.get("isBlindAppend"))

    @property
    def in_commit_timestamp(self) -> int | None:
        value = self.commit_info.get("inCommitTimestamp")
        return int(value) if value is not None else None

    @property
    def row_id_high_water_mark(self) -> int | None:
        domain = self.domains.get(ROW_TRACKING_DOMAIN)
        if domain is None or domain.get("removed"):
            return None
        value = json.loads(domain.get("configuration") or "{}").get("rowIdHighWaterMark")
        return int(value) if value is not None else None

    def describe(self) -> str:
        operation = self.commit_info.get("operation")
        return f"version {self.version}" + (f" ({operation})" if operation else "")


def read_winning_commit(spark: SparkSession, commit: LogFile) -> WinningCommit:
    small = read_json_actions(
        spark, [commit], ["protocol", "metaData", "txn", "domainMetadata", "commitInfo"], select_lines=True
    )
    protocol = metadata = None
    info: dict[str, Any] = {}
    app_ids: set[str] = set()
    domains: dict[str, dict[str, Any]] = {}
    for row in small.collect():  # a corrupt line fails here, naming the commit file
        if row["protocol"] is not None:
            protocol = Protocol.from_row(row["protocol"])
        if row["metaData"] is not None:
            metadata = Metadata.from_row(row["metaData"])
        if row["commitInfo"] is not None:
            info = json.loads(row["commitInfo"])
        if row["txn"] is not None and row["txn"]["appId"] is not None:
            app_ids.add(row["txn"]["appId"])
        if row["domainMetadata"] is not None:
            domains[row["domainMetadata"]["domain"]] = row["domainMetadata"].asDict()
    files = read_json_actions(spark, [commit], ["add", "remove"], select_lines=False)
    files = keep_actions(files, F.col("add").isNotNull() | F.col("remove").isNotNull())
    return WinningCommit(commit.version, commit.path, protocol, metadata, info, app_ids, domains, files)


@dataclass
class TransactionReads:
    """What a transaction read and writes, for deciding whether a winning commit invalidates it."""

    snapshot: Snapshot | None
    isolation_level: str
    is_blind_append: bool
    changes_protocol: bool
    changes_metadata: bool
    read_whole_table: bool = False
    read_predicates: list[Any] = field(default_factory=list)
    read_files: DataFrame | None = None  # a `path` column, as in the log
    removed_files: DataFrame | None = None  # a `path` column, as in the log
    read_app_ids: set[str] = field(default_factory=set)
    written_domains: set[str] = field(default_factory=set)


class ConflictChecker:
    """Checks one transaction against winning commits, one at a time, in version order."""

    def __init__(self, reads: TransactionReads, table_root: str) -> None:
        self.reads = reads
        self.table_root = table_root
        self.protocol = reads.snapshot.protocol if reads.snapshot else None

    def check(self, winner: WinningCommit) -> None:
        log.info("Checking for conflicts with the concurrent commit %s", winner.describe())
        self._protocol(winner)
        self._metadata(winner)
        self._domains(winner)
        self._app_ids(winner)
        self._added_files(winner)
        self._deleted_read_files(winner)
        self._deleted_deleted_files(winner)

    def _protocol(self, winner: WinningCommit) -> None:
        if winner.protocol is None:
            return
        check_writable(winner.protocol, self.table_root, "commit to")
        if self.reads.changes_protocol:
            raise ProtocolChangedError(
                f"The protocol of {self.table_root} was changed by a concurrent commit, {winner.describe()}, "
                "while this transaction changes it too",
                winner.version,
            )
        if self.protocol is not None and set(self.protocol.tableFeatures) - set(
            winner.protocol.tableFeatures
        ):
            raise ProtocolChangedError(
                f"A concurrent commit, {winner.describe()}, removed table features of {self.table_root}",
                winner.version,
            )
        self.protocol = winner.protocol

    def _metadata(self, winner: WinningCommit) -> None:
        if winner.metadata is not None:
            raise MetadataChangedError(
                f"The metadata of {self.table_root} (schema, partitioning or properties) was changed by "
                f"a concurrent commit, {winner.describe()}",
                winner.version,
            )

    def _domains(self, winner: WinningCommit) -> None:
        clash = sorted((self.reads.written_domains - {ROW_TRACKING_DOMAIN}) & set(winner.domains))
        if clash:
            raise ConcurrentTransactionError(
                f"A concurrent commit, {winner.describe()}, changed the metadata domain(s) "
                f"{', '.join(clash)} of {self.table_root} that this transaction also changes",
                winner.version,
            )

    def _app_ids(self, winner: WinningCommit) -> None:
        clash = sorted(self.reads.read_app_ids & winner.app_ids)
        if clash:
            raise ConcurrentTransactionError(
                f"A concurrent commit, {winner.describe()}, recorded application transaction(s) "
                f"{', '.join(clash)} of {self.table_root}, which this transaction depends on",
                winner.version,
            )

    # ---- data files -------------------------------------------------------------------------------
    def _added_files(self, winner: WinningCommit) -> None:
        reads = self.reads
        if reads.isolation_level == SNAPSHOT_ISOLATION or reads.is_blind_append:
            return
        if (
            reads.isolation_level == WRITE_SERIALIZABLE
            and not reads.changes_metadata
            and winner.is_blind_append
        ):
            return  # WriteSerializable: blind appends never conflict
        adds = winner.file_actions.where(
            F.col("add").isNotNull() & F.coalesce(F.col("add.dataChange"), F.lit(True))
        )
        snapshot = reads.snapshot
        partitioned = bool(snapshot and snapshot.partitionColumns)
        if reads.read_whole_table or not partitioned:
            conflicting = adds
        elif reads.read_predicates and snapshot is not None:
            rows = snapshot.parsedAdds(adds)
            keep = None
            for predicate in reads.read_predicates:
                column = snapshot.fileFilter(predicate)
                keep = column if keep is None else keep | column
            conflicting = rows.where(keep)
        else:
            return
        first = conflicting.select(F.col("add.path") if "add" in conflicting.columns else "path").first()
        if first is not None:
            raise ConcurrentAppendError(
                f"Files were added to {self.table_root} by a concurrent commit, {winner.describe()}, "
                f"that this transaction's read would have seen (e.g. {first[0]})",
                winner.version,
            )

    def _removed_keys(self, winner: WinningCommit) -> DataFrame:
        removes = winner.file_actions.where(F.col("remove").isNotNull())
        return removes.select(canonical_path("remove.path", self.table_root).alias("key"))

    def _overlap(self, ours: DataFrame, winner: WinningCommit) -> str | None:
        keys = ours.select(canonical_path("path", self.table_root).alias("key"))
        row = keys.join(self._removed_keys(winner), "key", "left_semi").first()
        return row[0] if row is not None else None

    def _deleted_read_files(self, winner: WinningCommit) -> None:
        reads = self.reads
        if reads.read_whole_table and self._removed_keys(winner).first() is not None:
            raise ConcurrentDeleteReadError(
                f"A concurrent commit, {winner.describe()}, removed files of {self.table_root} while this "
                "transaction read the whole table",
                winner.version,
            )
        if reads.read_files is None:
            return
        path = self._overlap(reads.read_files, winner)
        if path is not None:
            raise ConcurrentDeleteReadError(
                f"A concurrent commit, {winner.describe()}, removed {path}, which this transaction read",
                winner.version,
            )

    def _deleted_deleted_files(self, winner: WinningCommit) -> None:
        if self.reads.removed_files is None:
            return
        path = self._overlap(self.reads.removed_files, winner)
        if path is not None:
            raise ConcurrentDeleteDeleteError(
                f"A concurrent commit, {winner.describe()}, removed {path}, which this transaction "
                "removes too",
                winner.version,
            )
