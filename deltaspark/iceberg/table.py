"""`IcebergTable` / `IcebergSnapshot`: the user-facing API for Iceberg tables, named like
`DeltaTable` (`forPath`, `toDF`, `history`) so notebooks read the same for both formats."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.errors import InvalidArgumentError
from deltaspark.iceberg import manifests, row_count, scan, table_metadata
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.job_errors import eager
from deltaspark.iceberg.pruning import Pruner
from deltaspark.iceberg.table_metadata import Snapshot, TableMetadata
from deltaspark.read.predicates import from_filter

CONTENT_NAMES = {0: "DATA", 1: "POSITION_DELETES", 2: "EQUALITY_DELETES"}  # manifest entry `content`


def _timestamp_ms(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1000)
    raise InvalidArgumentError(
        f"asOfTimestamp must be epoch milliseconds, an ISO string or a datetime: {value!r}"
    )


class IcebergSnapshot:
    """One snapshot of an Iceberg table (or the empty state of a table without snapshots)."""

    def __init__(self, spark: SparkSession, metadata: TableMetadata, snapshot: Snapshot | None) -> None:
        self._spark, self.metadata, self._snapshot = spark, metadata, snapshot

    @property
    def snapshotId(self) -> int | None:
        return self._snapshot.snapshot_id if self._snapshot else None

    @property
    def sequenceNumber(self) -> int | None:
        return self._snapshot.sequence_number if self._snapshot else None

    @property
    def timestampMs(self) -> int | None:
        return self._snapshot.timestamp_ms if self._snapshot else None

    @property
    def summary(self) -> dict[str, str]:
        return dict(self._snapshot.summary) if self._snapshot else {}

    def schema(self) -> T.StructType:
        """The Spark schema rows are read with (field ids in `parquet.field.id` metadata)."""
        return ice_types.struct_type(self.metadata.schema_for(self._snapshot))

    def manifests(self) -> DataFrame:
        """One row per manifest in the snapshot's manifest list."""
        if self._snapshot is None:
            return self._spark.createDataFrame([], manifests.MANIFEST_SPARK_SCHEMA)
        return manifests.manifests(self._spark, self.metadata, self._snapshot)

    def entries(self) -> DataFrame:
        """Every manifest entry (ADDED, EXISTING, DELETED) with inheritance applied."""
        if self._snapshot is None:
            return self._spark.createDataFrame([], manifests.ENTRY_SPARK_SCHEMA)
        return manifests.entries(self._spark, self.metadata, self._snapshot)

    def files(self, filter: Any = None) -> DataFrame:  # noqa: A002 - PySpark's own name for it
        """The live data and delete files (status ADDED or EXISTING), one row each; `content` is
        0 data, 1 position deletes (deletion vectors are `file_format` PUFFIN), 2 equality deletes.
        With `filter` (a Column or SQL string), data files whose partition values and column bounds
        rule out a matching row are left out (by manifest first, then by file)."""
        if filter is None or self._snapshot is None:
            return self.entries().where(F.col("status") != 2).drop("status")
        pruner = Pruner(self.metadata, self.metadata.schema_for(self._snapshot), from_filter(filter))
        listed = manifests.entries(self._spark, self.metadata, self._snapshot, prune=pruner.manifests)
        return pruner.files(listed.where(F.col("status") != 2)).drop("status")

    @eager
    def count(self) -> int:
        """The snapshot's row count. Without equality deletes it comes from the metadata: the data
        files' `record_count` less the rows their deletion vectors and position deletes remove (those
        are read and checked; data files are not opened, so a `record_count` that disagrees with its
        file is taken as written, as Iceberg's own count pushdown does). With equality deletes the
        rows are read: `toDF().count()`."""
        counted = row_count.metadata_count(self._spark, self.metadata, self._snapshot)
        return counted if counted is not None else self.toDF().count()

    @eager  # planning runs a job over the delete manifests
    def toDF(self, filter: Any = None, rowLineage: bool = False) -> DataFrame:  # noqa: A002
        """The snapshot's rows with every delete applied; `filter` (a Column or SQL string) skips the
        data files `files(filter)` leaves out and is applied to the rows; `rowLineage` adds v3's
        `_row_id` and `_last_updated_sequence_number`."""
        predicate = from_filter(filter) if filter is not None else None
        rows = scan.snapshot_rows(self._spark, self.metadata, self._snapshot, rowLineage, predicate)
        if filter is not None:
            rows = rows.where(filter)
        return rows


class IcebergTable:
    """An Iceberg table at a path, read through its metadata files (no catalog)."""

    def __init__(self, spark: SparkSession, metadata: TableMetadata) -> None:
        self._spark, self.metadata = spark, metadata

    @classmethod
    def forPath(
        cls,
        spark: SparkSession,
        path: str,
        metadataLocation: str | None = None,
        relocate: dict[str, str] | None = None,
    ) -> IcebergTable:
        """The table at `path`. `metadataLocation` picks a metadata file (a name in `metadata/` or a
        full path) instead of the current one. `relocate` maps path prefixes where the table was
        written to where it is now; the table's recorded `location` maps to `path` by default."""
        return cls(spark, table_metadata.load(path, metadataLocation, relocate))

    @property
    def formatVersion(self) -> int:
        return self.metadata.format_version

    @property
    def location(self) -> str:
        return self.metadata.table_root

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    def snapshot(
        self, snapshotId: int | None = None, ref: str | None = None, asOfTimestamp: Any = None
    ) -> IcebergSnapshot:
        """A snapshot by id, branch or tag name, or the one current at a time (epoch ms, ISO string
        or datetime); the current snapshot by default."""
        ms = _timestamp_ms(asOfTimestamp) if asOfTimestamp is not None else None
        chosen = self.metadata.snapshot(snapshotId, ref, ms)
        return IcebergSnapshot(self._spark, self.metadata, chosen)

    def toDF(self, filter: Any = None, rowLineage: bool = False) -> DataFrame:
        return self.snapshot().toDF(filter, rowLineage)

    def files(self) -> DataFrame:
        return self.snapshot().files()

    def count(self) -> int:
        return self.snapshot().count()

    def schema(self) -> T.StructType:
        return self.snapshot().schema()

    def snapshots(self) -> DataFrame:
        """Every snapshot in the metadata, oldest first (like Iceberg's `snapshots` metadata table)."""
        rows = [
            (
                dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.timezone.utc).replace(tzinfo=None),
                s.snapshot_id,
                s.parent_id,
                s.sequence_number,
                s.operation,
                s.manifest_list,
                s.summary,
            )
            for s in sorted(
                self.metadata.snapshots.values(), key=lambda s: (s.timestamp_ms, s.sequence_number)
            )
        ]
        schema = (
            "committed_at timestamp_ntz, snapshot_id long, parent_id long, sequence_number long, "
            "operation string, manifest_list string, summary map<string,string>"
        )
        return self._spark.createDataFrame(rows, schema)

    def history(self) -> DataFrame:
        """The snapshot log: when each snapshot became current, and whether it is an ancestor of the
        current snapshot (rolled-back snapshots are not)."""
        ancestors = set(self.metadata.ancestors(self.metadata.current_snapshot_id))
        rows = [
            (
                dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None),
                snapshot_id,
                self.metadata.snapshots[snapshot_id].parent_id
                if snapshot_id in self.metadata.snapshots
                else None,
                snapshot_id in ancestors,
            )
            for ms, snapshot_id in self.metadata.snapshot_log
        ]
        schema = (
            "made_current_at timestamp_ntz, snapshot_id long, parent_id long, is_current_ancestor boolean"
        )
        return self._spark.createDataFrame(rows, schema)

    def refs(self) -> DataFrame:
        """Branches and tags with the snapshot each points at and its retention settings."""
        rows = [
            (
                name,
                str(ref.get("type", "branch")).upper(),
                int(ref["snapshot-id"]),
                ref.get("max-ref-age-ms"),
                ref.get("min-snapshots-to-keep"),
                ref.get("max-snapshot-age-ms"),
            )
            for name, ref in sorted(self.metadata.refs.items())
        ]
        schema = (
            "name string, type string, snapshot_id long, max_reference_age_in_ms long, "
            "min_snapshots_to_keep int, max_snapshot_age_in_ms long"
        )
        return self._spark.createDataFrame(rows, schema)
