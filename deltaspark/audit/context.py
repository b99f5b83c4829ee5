"""What every check of one audit shares: the log listing, the snapshot audited, the replay timeline."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.audit.timeline import OverlappingAdds, Timeline
from deltaspark.log import action_schemas as schemas
from deltaspark.log.driver_replay import weighted_bytes
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.maintenance.table_listing import list_table_files
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import persist_sized
from deltaspark.storage import Storage


@dataclass
class AuditContext:
    spark: SparkSession
    storage: Storage
    table_path: str
    root: str  # qualified table root
    listing: list[LogFile]  # every file of _delta_log
    snapshot: Snapshot | None  # the version audited (None when it cannot be loaded)
    start_version: int  # checks of log files cover versions in [start_version, end_version]
    end_version: int
    snapshot_error: str | None = None  # why `snapshot` could not be loaded
    now_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def latest_version(self) -> int:
        return max((f.version for f in self.listing if f.kind is not LogFileKind.CHECKSUM), default=-1)

    def in_range(self, version: int) -> bool:
        return self.start_version <= version <= self.end_version

    def files_of(self, *kinds: LogFileKind) -> list[LogFile]:
        return [f for f in self.listing if f.kind in kinds]

    @cached_property
    def timeline(self) -> Timeline:
        """The replay the log checks compare with; its `intervals` are kept as the checks' frames
        are (`keep`), and released with them."""
        return Timeline(
            self.spark,
            self.storage,
            self.table_path,
            self.root,
            self.listing,
            self.end_version,
            keep=self.keep,
        )

    persisted: list[DataFrame] = field(default_factory=list)  # released by AuditReport.unpersist()

    audit_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    _shared: dict[str, DataFrame] = field(default_factory=dict, repr=False)

    def shared(self, name: str, build: Callable[[], DataFrame]) -> DataFrame:
        """`build()` kept (`keep`) the first time a check asks for `name`: one frame that several
        checks read, computed in one pass over what it derives from."""
        if name not in self._shared:
            self._shared[name] = self.keep(build())
        return self._shared[name]

    def keep(self, frame: DataFrame) -> DataFrame:
        """`frame` persisted (memory, spilling to disk) for the checks and frames that share it.

        Spark finds cached data by plan: a second audit of a table that changed meanwhile would
        build the same plans and read the first audit's cache. A column holding this audit's id
        makes its plans its own; it is dropped above the cached relation."""
        tagged = frame.withColumn("_audit_id", F.lit(self.audit_id))
        persisted = persist_sized(tagged, self.log_bytes, StorageLevel.MEMORY_AND_DISK)
        self.persisted.append(persisted)
        return persisted.drop("_audit_id")

    @cached_property
    def log_bytes(self) -> int:
        """About the memory the log's actions take once read (JSON, and parquet as it expands):
        what every frame the checks keep is sized by - none holds more rows than the log has."""
        return weighted_bytes([f for f in self.listing if f.kind is not LogFileKind.CHECKSUM])

    @cached_property
    def table_files(self) -> DataFrame:
        """Every file under the table root as vacuum sees it (distributed listing)."""
        columns = self.snapshot.partitionColumns if self.snapshot is not None else []
        return self.keep(list_table_files(self.spark, self.root, columns))

    @cached_property
    def _overlapping_adds(self) -> list[OverlappingAdds] | Exception:
        """`Timeline.overlapping_adds` (one job), or why it failed. Only a table whose protocol
        supports deletion vectors can hold a data file under two keys; others skip the job."""
        snapshot = self.snapshot
        if snapshot is None or not snapshot.protocol.hasFeature("deletionVectors"):
            return []
        try:
            return self.timeline.overlapping_adds()
        except Exception as exc:  # noqa: BLE001 - the check reports it; the file checks go on
            return exc

    def overlapping_adds(self) -> list[OverlappingAdds]:
        """Data files added again under another deletion vector while their older logical file
        was still live (see `Timeline.overlapping_adds`); raises what stopped the replay."""
        found = self._overlapping_adds
        if isinstance(found, Exception):
            raise found
        return found

    def live_twice(self) -> bool:
        """Whether the audited version holds a data file under two keys. Its snapshot's
        reconciliation then refuses the state, and the file checks read the replay's instead."""
        found = self._overlapping_adds
        return not isinstance(found, Exception) and any(o.overlap_end is None for o in found)

    @cached_property
    def file_actions(self) -> DataFrame:
        """The audited version's reconciled adds and tombstones (`Snapshot.fileActions`), cached
        lean: `add` without its `stats` JSON (the bulk of a file list), which is kept parsed as
        `stats` (logical names) instead. When the version holds a data file under two keys
        (which the snapshot refuses) they are the replay's, keyed as the protocol keys files,
        both logical files included (`log.reconciliation` reports the damage)."""
        snapshot = self.snapshot
        assert snapshot is not None
        actions = self.timeline.state_at(self.end_version) if self.live_twice() else snapshot.fileActions()
        return self.keep(
            actions.select(
                "version",
                "is_add",
                "path_key",
                "dv_id",
                # the add without its stats (not `dropFields`: Spark folds a plain struct into rows
                # held on the driver, not a field update)
                F.when(
                    F.col("add").isNotNull(),
                    F.struct(*[F.col(f"add.{n}") for n in schemas.ADD.fieldNames() if n != "stats"]),
                ).alias("add"),
                "remove",
                F.when(F.col("is_add"), snapshot.parsedStats()).alias("stats"),
            )
        )

    @property
    def live_files(self) -> DataFrame:
        """The audited version's live `add`s: `path` (canonical), `version`, `add` (without its
        `stats` JSON), `numRecords`, `stats` (parsed, logical names)."""
        return self.file_actions.where("is_add").select(
            F.col("path_key").alias("path"),
            "version",
            "add",
            F.col("stats.numRecords").alias("numRecords"),
            "stats",
        )
