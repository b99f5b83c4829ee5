"""The table's state at every retained version at once, to check checkpoints and checksums against.

The log is replayed once from its oldest reconstructable point: commit 0 when every commit up to
the audited version is there, else the oldest checkpoint after the last missing commit (log
cleanup removed the first commits, or a gap). Every logical file `(path, deletionVector.uniqueId)`
becomes the intervals of versions during which it was live (`add` from its version until the next
action on the same key) or a tombstone. The state at version v is then a filter
(`start <= v < end`), and the aggregates a checksum records at many versions are cumulative sums
of per-version changes (one window per histogram bin), never one replay per version.

The small actions (protocol, metaData, txn, domainMetadata, in-commit timestamps) are few: they
are collected and swept on the driver.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from deltaspark.errors import DeltaSparkError, NonContiguousVersionsError
from deltaspark.log import action_schemas as schemas
from deltaspark.log import driver_replay
from deltaspark.log.driver_replay import weighted_bytes
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.reconciliation import file_action_rows
from deltaspark.log.replay import read_json_actions
from deltaspark.log.segment import build_log_segment, complete_checkpoints
from deltaspark.log.typed_json import UnclearError
from deltaspark.snapshot import Snapshot, load_snapshot
from deltaspark.spark_compat import held_frame, local_frame
from deltaspark.storage import Storage
from deltaspark.transaction.checksum import (
    DELETED_RECORD_BINS,
    FILE_SIZE_BINS,
    aggregate_dicts,
    binned,
    combine,
    negated,
)

log = logging.getLogger(__name__)

_SMALL_KINDS = ["protocol", "metaData", "txn", "domainMetadata", "commitInfo"]
_HELD_INTERVALS = StructType(
    [
        StructField("start", LongType(), False),
        StructField("is_add", BooleanType(), False),
        StructField("path_key", StringType(), False),
        StructField("dv_id", StringType(), False),
        StructField("add_json", StringType(), True),
        StructField("remove_json", StringType(), True),
        StructField("end", LongType(), True),
    ]
)
_NEVER = (1 << 63) - 1  # the end of an interval that is still open
_ADD_WITHOUT_STATS = StructType([f for f in schemas.ADD.fields if f.name != "stats"])


def _without_stats(add: Column) -> Column:
    """`add` without its `stats` JSON (a new struct, not `dropFields`: Spark folds a plain struct
    into rows held on the driver, not a field update; and the scans below it then skip `stats`)."""
    return F.when(
        add.isNotNull(), F.struct(*[add.getField(f.name).alias(f.name) for f in _ADD_WITHOUT_STATS])
    )


def clean_document(value: Any) -> Any:
    """A log document without nulls (so that absent and null fields compare equal), its
    `schemaString` parsed (writers differ in JSON whitespace, not in the schema)."""
    if isinstance(value, dict):
        out = {k: clean_document(v) for k, v in value.items() if v is not None}
        if isinstance(out.get("schemaString"), str):
            with contextlib.suppress(ValueError):  # else compared as text
                out["schemaString"] = json.loads(out["schemaString"])
        return out
    if isinstance(value, list):
        return [clean_document(v) for v in value]
    return value


@dataclass
class SmallState:
    """protocol, metadata, txns by appId, domains by name and the in-commit timestamp at a version."""

    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)
    ict: int | None = None

    def copy(self) -> SmallState:
        return SmallState(self.protocol, self.metadata, dict(self.txns), dict(self.domains), self.ict)


def load_checkpoint_snapshot(
    spark: SparkSession, storage: Storage, table_path: str, root: str, listing: list[LogFile], version: int
) -> Snapshot:
    """The snapshot of `version` read from the checkpoint at exactly that version (no commits)."""
    segment = build_log_segment(table_path, listing, version)
    if segment.checkpoint is None or segment.checkpoint.version != version:
        raise ValueError(f"no usable checkpoint at version {version}")
    return load_snapshot(spark, storage, segment, root)


def listed(versions: list[int], limit: int = 10) -> str:
    """`versions` for a message: the first `limit`, then how many more."""
    more = f" and {len(versions) - limit} more" if len(versions) > limit else ""
    return ", ".join(str(v) for v in versions[:limit]) + more


def replay_base(
    table_path: str, commits: dict[int, LogFile], checkpoints: dict[int, Any], latest: int
) -> int:
    """Where a replay of versions up to `latest` starts: -1 (commit 0 on) when every commit up to
    `latest` is there, else the oldest complete checkpoint at or after the last missing commit
    (the commits after it are then all there). Raises `NonContiguousVersionsError` when no
    checkpoint bridges the missing commits."""
    missing = [v for v in range(0, latest + 1) if v not in commits]
    if not missing:
        return -1
    usable = sorted(v for v in checkpoints if missing[-1] <= v <= latest)
    if usable:
        return usable[0]
    before = [v for v in checkpoints if v <= latest]
    if not before:
        raise NonContiguousVersionsError(table_path, missing, "replaying the retained log: no checkpoint")
    raise NonContiguousVersionsError(
        table_path, [v for v in missing if v > max(before)], "replaying the retained log"
    )


@dataclass(frozen=True)
class OverlappingAdds:
    """Two `add`s of one data file under different deletion vectors, both live at once: the newer
    from `version` (until `end`, None while live), the older from `older_version` (until
    `older_end`). `dv` / `older_dv`: the deletion vector ids ("" for none)."""

    path: str  # canonical
    version: int
    end: int | None
    dv: str
    older_version: int
    older_end: int | None
    older_dv: str

    @property
    def overlap_end(self) -> int | None:
        """The first version at which one of the two is no longer live (None: both still are)."""
        ends = [e for e in (self.end, self.older_end) if e is not None]
        return min(ends) if ends else None


class Timeline:
    """File intervals and small-action states of every version from `base` to `latest`."""

    def __init__(
        self,
        spark: SparkSession,
        storage: Storage,
        table_path: str,
        root: str,
        listing: list[LogFile],
        latest: int,
        keep: Callable[[DataFrame], DataFrame] = DataFrame.persist,
    ) -> None:
        self._spark = spark
        self._keep = keep
        self._storage = storage
        self._root = root
        commits = {f.version: f for f in listing if f.kind is LogFileKind.COMMIT and f.version <= latest}
        self.base_version = replay_base(table_path, commits, complete_checkpoints(listing), latest)
        # Commits the replay cannot use: before the base, some are missing (cleaned up, or a gap).
        self.missing_before_base = [v for v in range(0, self.base_version) if v not in commits]
        self.base_snapshot = (
            load_checkpoint_snapshot(spark, storage, table_path, root, listing, self.base_version)
            if self.base_version >= 0
            else None
        )
        self.commits = [commits[v] for v in range(self.base_version + 1, latest + 1)]
        self.latest = latest

    def why_not_before_base(self) -> str:
        """Why versions before the base cannot be replayed (the missing commits named)."""
        return (
            f"the replay starts from the checkpoint at version {self.base_version}: "
            f"commit(s) {listed(self.missing_before_base)} are not in the log"
        )

    # ---- file actions ------------------------------------------------------------------------------
    def _events(self, stats: bool) -> DataFrame:
        """Every file action from the base on; without `stats`, `add` lacks its `stats` JSON (the
        bulk of a file action, which only `state_at` returns: the scans then skip it)."""
        frames = []
        if self.base_snapshot is not None:
            frames.append(
                self.base_snapshot.fileActions().select(
                    "version", "is_add", "path_key", "dv_id", "add", "remove"
                )
            )
        if self.commits:
            actions = read_json_actions(self._spark, self.commits, ["add", "remove"], select_lines=False)
            frames.append(file_action_rows(actions, self._root))
        if not frames:
            return self._spark.createDataFrame(
                [], "version long, is_add boolean, path_key string, dv_id string"
            )
        events = frames[0]
        for frame in frames[1:]:
            events = events.unionByName(frame, allowMissingColumns=True)
        if stats or "add" not in events.columns:
            return events
        return events.withColumn("add", _without_stats(F.col("add")))

    def _interval_rows(self, stats: bool) -> tuple[DataFrame, bool]:
        """`intervals` (`add` with its `stats` or without) and whether they are held on the driver."""
        held = self._intervals_on_driver(stats)
        if held is not None:
            return held, True
        order = Window.partitionBy("path_key", "dv_id").orderBy(F.col("version"), F.col("is_add").desc())
        frame = (
            self._events(stats)
            .withColumn("end", F.lead("version").over(order))
            .withColumnRenamed("version", "start")
            .where(F.col("end").isNull() | (F.col("end") > F.col("start")))
        )
        return frame, False

    @cached_property
    def intervals(self) -> DataFrame:
        """One row per file action: `start` (its version), `end` (the version of the next action on the
        same key, null while it is the newest), `is_add`, the key and the action (`add` without its
        `stats` JSON: kept for all the checks, it holds what they compare and not the bulk of the
        log). Within a version a `remove` supersedes an `add` of the same key (an empty interval)."""
        frame, held = self._interval_rows(stats=False)
        return frame if held else self._keep(frame)

    def _intervals_on_driver(self, stats: bool = False) -> DataFrame | None:
        """`intervals` of a small log, swept on the driver from the actions the driver replay reads
        (typed exactly as Spark reads them) and held there; None where it cannot be sure to read
        them as Spark does (Spark then reads them and names what is wrong). `stats`: `add` keeps
        its `stats` JSON."""
        if not self.small:
            return None
        events: list[tuple[int, bool, tuple[str, str], str]] = []
        base = self.base_snapshot
        if base is not None:
            state = base.statePlan.held
            if state is None:
                return None
            events += [(v, is_add, key, action) for key, (v, is_add, action) in state.entries.items()]
        try:
            for f in self.commits:
                for is_add, key, action in driver_replay.file_actions(self._storage, f, self._root, True):
                    events.append((f.version, is_add, key, action))
        except (UnclearError, DeltaSparkError):
            return None
        events.sort(key=lambda e: (e[2], e[0], not e[1]))  # per key: by version, an add first
        columns: dict[str, list[Any]] = {name: [] for name in _HELD_INTERVALS.fieldNames()}
        for i, (version, is_add, key, action) in enumerate(events):
            following = events[i + 1] if i + 1 < len(events) and events[i + 1][2] == key else None
            end = following[0] if following is not None else None
            if end is not None and end <= version:
                continue  # superseded within its own version
            add, remove = (action, None) if is_add else (None, action)
            row = (version, is_add, key[0], key[1], add, remove, end)
            for name, value in zip(_HELD_INTERVALS.fieldNames(), row, strict=True):
                columns[name].append(value)
        return local_frame(self._spark, columns, _HELD_INTERVALS).select(
            "start",
            "is_add",
            "path_key",
            "dv_id",
            F.from_json("add_json", schemas.ADD if stats else _ADD_WITHOUT_STATS).alias("add"),
            F.from_json("remove_json", schemas.REMOVE).alias("remove"),
            "end",
        )

    def overlapping_adds(self) -> list[OverlappingAdds]:
        """Every `add` that starts while another `add` of the same data file (under another
        deletion vector) is still live, with the one of those that stays live longest: a writer
        that changed a file's deletion vector without removing the old logical file. One job (a
        window over the adds by path); only the few overlapping rows reach the driver."""
        never = F.lit(_NEVER)
        adds = self.intervals.where("is_add").select(
            "path_key", "dv_id", "start", F.coalesce(F.col("end"), never).alias("until")
        )
        earlier = (
            Window.partitionBy("path_key")
            .orderBy("start", "dv_id")
            .rowsBetween(Window.unboundedPreceding, -1)
        )
        # Of the earlier adds, the one live longest: if it ends after this one starts, they overlap.
        longest = F.max(F.struct("until", "start", "dv_id")).over(earlier)
        rows = (
            adds.withColumn("_older", longest)
            .where(F.col("_older").isNotNull() & (F.col("_older.until") > F.col("start")))
            .select(
                "path_key",
                "start",
                "until",
                "dv_id",
                F.col("_older.start").alias("older_start"),
                F.col("_older.until").alias("older_until"),
                F.col("_older.dv_id").alias("older_dv"),
            )
            .collect()
        )
        out = [
            OverlappingAdds(
                r["path_key"],
                int(r["start"]),
                None if r["until"] == _NEVER else int(r["until"]),
                r["dv_id"] or "",
                int(r["older_start"]),
                None if r["older_until"] == _NEVER else int(r["older_until"]),
                r["older_dv"] or "",
            )
            for r in rows
        ]
        return sorted(out, key=lambda o: (o.version, o.path))

    def state_at(self, version: int) -> DataFrame:
        """The file actions live at `version` as the protocol keys them (by path and deletion
        vector id), in `Snapshot.fileActions()`'s columns, `add` with its `stats`: what the audit
        checks when the snapshot's own reconciliation refuses the state (a data file live twice).
        Replayed anew (the kept `intervals` hold no stats); its caller keeps what it needs."""
        return self._at(version, self._interval_rows(stats=True)[0]).select(
            F.col("start").alias("version"),
            "is_add",
            "path_key",
            "dv_id",
            "add",
            "remove",
            F.lit(None).alias("checkpoint_stats"),
        )

    def files_at(self, version: int) -> DataFrame:
        """The `intervals` rows of `version`: its live files (`is_add`) and its tombstones, one row
        per logical file."""
        return self._at(version, self.intervals)

    @staticmethod
    def _at(version: int, intervals: DataFrame) -> DataFrame:
        v = F.lit(version)
        return intervals.where((F.col("start") <= v) & (F.col("end").isNull() | (F.col("end") > v)))

    @cached_property
    def small(self) -> bool:
        """Whether the replayed log is small enough for the driver (the driver replay's bound,
        `spark.deltaspark.replay.driverMaxBytes`): its file states are then swept there."""
        base = self.base_snapshot
        files = [*(base.segment.checkpoint.files if base is not None and base.segment.checkpoint else ())]
        return weighted_bytes([*files, *self.commits]) <= driver_replay.max_bytes(self._spark)

    def file_states_on_driver(self, versions: list[int]) -> dict[int, dict[str, Any]]:
        """`file_states` of a small log, swept on the driver over the collected add intervals (one
        job): each version's live files aggregated as a checksum aggregates them."""
        rows = (
            self.intervals.where("is_add")
            .select(
                "start",
                "end",
                F.col("add.size").alias("size"),
                F.col("add.deletionVector.cardinality").alias("deleted"),
                F.col("add.deletionVector").isNotNull().alias("dv"),
            )
            .collect()
        )
        changes: list[tuple[int, int, dict[str, Any]]] = []  # (version, sign, the file's aggregate)
        for r in rows:
            dv = {"cardinality": r["deleted"]} if r["dv"] else None
            one = aggregate_dicts([{"size": r["size"], "deletionVector": dv}])
            changes.append((int(r["start"]), 1, one))
            if r["end"] is not None:
                changes.append((int(r["end"]), -1, one))
        changes.sort(key=lambda c: c[0])
        state = aggregate_dicts([])
        out: dict[int, dict[str, Any]] = {}
        i = 0
        for v in sorted(set(versions)):
            while i < len(changes) and changes[i][0] <= v:
                _, sign, one = changes[i]
                state = combine(state, one if sign > 0 else negated(one))
                i += 1
            out[v] = {**state, "bins": list(FILE_SIZE_BINS)}
        return out

    def file_states(self, versions: list[int]) -> DataFrame:
        """Per version in `versions`: what a checksum records about its files - `numFiles`,
        `tableSizeBytes`, `numDeletedRecords`, `numDeletionVectors` and the histograms
        `fileCounts`, `totalBytes`, `deletedRecordCounts` (the standard bins)."""
        spark = self._spark
        adds = binned(
            self.intervals.where("is_add").select("start", "end", "add.size", "add.deletionVector"),
            ("start", "end"),
        )
        sums = [
            F.sum("n").alias("n"),
            F.sum("bytes").alias("bytes"),
            F.sum("deleted").alias("deleted"),
            F.sum("dvs").alias("dvs"),
        ]

        def changes(at: str, sign: int) -> DataFrame:
            frame = adds.where(F.col(at).isNotNull()) if at == "end" else adds
            return frame.select(
                F.col(at).alias("version"),
                F.col("__ck_bin").alias("bin"),
                F.col("__ck_dbin").alias("dbin"),
                F.lit(sign).cast("long").alias("n"),
                (F.col("__ck_size") * sign).alias("bytes"),
                (F.col("__ck_deleted") * sign).alias("deleted"),
                (F.col("__ck_has_dv") * sign).alias("dvs"),
            )

        deltas = (
            changes("start", 1).unionByName(changes("end", -1)).groupBy("version", "bin", "dbin").agg(*sums)
        )
        running = (
            Window.partitionBy("bin", "dbin").orderBy("version").rowsBetween(Window.unboundedPreceding, 0)
        )
        cumulative = deltas.select(
            "version",
            "bin",
            "dbin",
            F.lit(False).alias("probe"),
            *[F.sum(c).over(running).alias(c) for c in ("n", "bytes", "deleted", "dvs")],
        )
        # One probe per (asked version, bin pair): the running sums as of that version.
        pairs = deltas.select("bin", "dbin").distinct()
        probes = (
            _frame_of(spark, "version", versions)
            .crossJoin(pairs)
            .select(
                "version",
                "bin",
                "dbin",
                F.lit(True).alias("probe"),
                *[F.lit(None).cast("long").alias(c) for c in ("n", "bytes", "deleted", "dvs")],
            )
        )
        as_of = (
            Window.partitionBy("bin", "dbin")
            .orderBy("version", "probe")
            .rowsBetween(Window.unboundedPreceding, 0)
        )
        at_probes = (
            cumulative.unionByName(probes)
            .select(
                "version",
                "bin",
                "dbin",
                "probe",
                *[
                    F.coalesce(F.last(c, ignorenulls=True).over(as_of), F.lit(0)).alias(c)
                    for c in ("n", "bytes", "deleted", "dvs")
                ],
            )
            .where("probe")
        )
        per_bin = at_probes.groupBy("version", "bin").agg(
            F.sum("n").alias("n"), F.sum("bytes").alias("bytes")
        )
        per_dbin = at_probes.groupBy("version", "dbin").agg(F.sum("n").alias("n"))
        totals = at_probes.groupBy("version").agg(
            F.sum("n").alias("numFiles"),
            F.sum("bytes").alias("tableSizeBytes"),
            F.sum("deleted").alias("numDeletedRecords"),
            F.sum("dvs").alias("numDeletionVectors"),
        )
        counts = per_bin.groupBy("version").agg(
            F.map_from_entries(F.collect_list(F.struct("bin", "n"))).alias("_counts"),
            F.map_from_entries(F.collect_list(F.struct("bin", "bytes"))).alias("_bytes"),
        )
        deleted = per_dbin.groupBy("version").agg(
            F.map_from_entries(F.collect_list(F.struct("dbin", "n"))).alias("_deleted")
        )

        def dense(column: str, size: int) -> Column:
            return F.transform(
                F.sequence(F.lit(0), F.lit(size - 1)),
                lambda i: F.coalesce(F.element_at(F.col(column), i), F.lit(0)),
            )

        asked = _frame_of(spark, "version", versions)
        return (
            asked.join(totals, "version", "left")
            .join(counts, "version", "left")
            .join(deleted, "version", "left")
            .select(
                "version",
                *[
                    F.coalesce(F.col(c), F.lit(0)).alias(c)
                    for c in ("numFiles", "tableSizeBytes", "numDeletedRecords", "numDeletionVectors")
                ],
                dense("_counts", len(FILE_SIZE_BINS)).alias("fileCounts"),
                dense("_bytes", len(FILE_SIZE_BINS)).alias("totalBytes"),
                dense("_deleted", len(DELETED_RECORD_BINS)).alias("deletedRecordCounts"),
            )
        )

    # ---- small actions -----------------------------------------------------------------------------
    @cached_property
    def _small_events(self) -> list[tuple[int, str, Any]]:
        """(version, kind, value) of every small action from the base on, oldest first."""
        events: list[tuple[int, str, Any]] = []
        base = self.base_snapshot
        if base is not None:
            v = self.base_version
            events.append((v, "protocol", base.protocol.asDict()))
            events.append((v, "metaData", base.metadata.asDict()))
            for kind in ("txn", "domainMetadata"):
                for row in base.smallActions(kind).where(F.col(kind).isNotNull()).collect():
                    events.append((v, kind, row[kind].asDict()))
        if self.commits:
            frame = read_json_actions(self._spark, self.commits, _SMALL_KINDS).select(
                "version",
                F.to_json("protocol").alias("protocol"),
                F.to_json("metaData").alias("metaData"),
                F.to_json("txn").alias("txn"),
                F.to_json("domainMetadata").alias("domainMetadata"),
                F.get_json_object("commitInfo", "$.inCommitTimestamp").cast("long").alias("ict"),
            )
            for row in frame.collect():
                for kind in ("protocol", "metaData", "txn", "domainMetadata"):
                    if row[kind] is not None:
                        events.append((row["version"], kind, json.loads(row[kind])))
                if row["ict"] is not None:
                    events.append((row["version"], "ict", row["ict"]))
        events.sort(key=lambda e: e[0])
        return events

    @cached_property
    def in_commit_timestamps(self) -> dict[int, int]:
        """Version -> `commitInfo.inCommitTimestamp` of the commits that have one."""
        return {v: int(value) for v, kind, value in self._small_events if kind == "ict"}

    def small_states(self, versions: list[int]) -> dict[int, SmallState]:
        """The small-action state at each of `versions` (one sweep over the events)."""
        wanted = sorted(set(versions))
        out: dict[int, SmallState] = {}
        state = SmallState()
        events = self._small_events
        i = 0
        for v in wanted:
            if v > self.latest:
                continue
            while i < len(events) and events[i][0] <= v:
                _, kind, value = events[i]
                value = clean_document(value)
                if kind == "protocol":
                    state.protocol = value
                elif kind == "metaData":
                    state.metadata = value
                elif kind == "txn":
                    state.txns[value.get("appId")] = value
                elif kind == "domainMetadata":
                    if value.get("removed"):
                        state.domains.pop(value.get("domain"), None)
                    else:
                        state.domains[value.get("domain")] = value
                i += 1
            state.ict = self.in_commit_timestamps.get(v)
            out[v] = state.copy()
        return out


def _frame_of(spark: SparkSession, column: str, versions: list[int]) -> DataFrame:
    return held_frame(spark, [(int(v),) for v in versions], f"{column} long")
