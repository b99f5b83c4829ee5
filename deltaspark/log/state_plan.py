"""Where a snapshot's file actions come from: one decision, made once per snapshot.

`protocol_metadata` decides where protocol and metadata come from; this module decides, for the
same segment, where the reconciled `add`/`remove` actions come from, and reads them:

1. `driver` - a small log (`driver_replay`: the segment's JSON and 8x its parquet checkpoint
   within `spark.deltaspark.replay.driverMaxBytes`, no sidecars) replayed on the driver, or held
   from an earlier replay of the same files (`segment_cache`); a local relation, no job;
2. `checkpoint` - a checkpoint with no commit after it: its rows are already reconciled;
3. `tail` - commits only (no checkpoint): ranked by one shuffle (`reconciliation.newest_per_file`);
4. `broadcast` - a checkpoint and a tail of at most `spark.deltaspark.replay.broadcastTailBytes`
   of JSON: only the tail is ranked, the checkpoint filtered by a broadcast of its keys;
5. `union` - a checkpoint and a longer tail, shuffled together and ranked.

Every route gives the same rows (`reconciliation.file_action_rows`' columns plus
`checkpoint_stats`). The route is chosen once, when first asked, and named in the log; the
snapshot (`snapshot.py`) only asks for the rows, never chooses.
"""

from __future__ import annotations

import logging
from functools import cached_property, reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from deltaspark.features.stats import conform_parsed_stats
from deltaspark.log import action_schemas as schemas
from deltaspark.log import driver_replay
from deltaspark.log.reconciliation import commit_file_of, file_action_rows, reconcile_files
from deltaspark.log.replay import (
    CORRUPT_LINE,
    parquet_file_schema,
    read_checkpoint_actions,
    read_json_actions,
)
from deltaspark.log.segment import LogSegment
from deltaspark.log.sidecar_reader import read_sidecar_actions
from deltaspark.spark_compat import conf_get
from deltaspark.storage import Storage

log = logging.getLogger(__name__)

BROADCAST_TAIL_BYTES_CONF = "spark.deltaspark.replay.broadcastTailBytes"
DEFAULT_BROADCAST_TAIL_BYTES = 128 * 1024 * 1024
ROUTES = ("driver", "checkpoint", "tail", "broadcast", "union")


def _union(left: DataFrame, right: DataFrame) -> DataFrame:
    return left.unionByName(right)


class StatePlan:
    """The file-state route of one snapshot's segment, and the reads it makes.

    `physical_stats`: the table's stats schema with physical names (the type of
    `checkpoint_stats`); `deletion_vectors`: the protocol supports them (without, a DV in a file
    action is a damaged log, and the one-add-per-path check is skipped); `sidecars` (and their
    logged sizes): a V2 checkpoint's sidecar files, as the snapshot load checked them.
    """

    def __init__(
        self,
        spark: SparkSession,
        storage: Storage,
        table_root: str,
        segment: LogSegment,
        physical_stats: StructType,
        deletion_vectors: bool,
        sidecars: list[str],
        sidecar_sizes: list[int | None] | None = None,
    ) -> None:
        self._spark = spark
        self._storage = storage
        self._root = table_root
        self.segment = segment
        self._physical_stats = physical_stats
        self._dvs = deletion_vectors
        self.sidecars = sidecars
        self._sidecar_sizes = sidecar_sizes

    # ---- the decision ------------------------------------------------------------------------
    @cached_property
    def held(self) -> driver_replay.FileState | None:
        """The reconciled file actions replayed on the driver (route `driver`), or None."""
        if self.sidecars:
            return None  # V2 checkpoints with sidecars are for big tables
        state = driver_replay.file_state(self._spark, self._storage, self.segment, self._root, self._dvs)
        if state is not None:
            log.info(
                "Replayed version %d on the driver: %d actions", self.segment.version, len(state.entries)
            )
        return state

    @cached_property
    def route(self) -> str:
        """One of `ROUTES` (see the module's docstring), decided once."""
        if self.held is not None:
            return "driver"
        if self.segment.checkpoint is None:
            return "tail"
        if not self.segment.tail_files:
            return "checkpoint"
        limit = int(conf_get(self._spark, BROADCAST_TAIL_BYTES_CONF, str(DEFAULT_BROADCAST_TAIL_BYTES)))
        return "broadcast" if self.segment.tail_bytes <= limit else "union"

    @property
    def state_bytes(self) -> int:
        """About the memory the reconciled file actions take: the driver's replay, or the
        segment's log files (parquet weighted as it expands, sidecars included)."""
        if self.held is not None:
            return self.held.chars
        sidecars = sum(size or 0 for size in self._sidecar_sizes or ())
        checkpoint = self.segment.checkpoint
        files = [*(checkpoint.files if checkpoint else ()), *self.segment.tail_files]
        return driver_replay.weighted_bytes(files) + sidecars * driver_replay.PARQUET_WEIGHT

    # ---- the rows ----------------------------------------------------------------------------
    @cached_property
    def held_rows(self) -> DataFrame | None:
        """The driver route's rows as a local relation (None on the other routes)."""
        if self.held is None:
            return None
        return driver_replay.reconciled_frame(self._spark, self.held, self._physical_stats)

    def reconciled(self, partitions: int | None = None) -> DataFrame:
        """Every live logical file (`is_add`) and tombstone (`not is_add`), unexpired or not, by
        this plan's route. `partitions`: the shuffle count of a plan that ranks the whole state
        (its rows then keep their `join_key`, see `reconcile_files`)."""
        held = self.held_rows
        if held is not None:
            return held
        route = self.route
        checkpoint = self.checkpoint_actions(["add", "remove"], include_sidecars=True)
        tail = self.tail_actions(["add", "remove"])
        checkpoint_rows = (
            file_action_rows(checkpoint, self._root, [F.col("checkpoint_stats")], self._dvs)
            if checkpoint is not None
            else None
        )
        no_stats = F.lit(None).cast(self._physical_stats).alias("checkpoint_stats")
        tail_rows = file_action_rows(tail, self._root, [no_stats], self._dvs) if tail is not None else None
        log.info(
            "Replaying version %d: checkpoint %s, %d JSON files (%d bytes) on top, %s route",
            self.segment.version,
            self.segment.checkpoint.version if self.segment.checkpoint else None,
            len(self.segment.tail_files),
            self.segment.tail_bytes,
            route,
        )
        return reconcile_files(
            checkpoint_rows,
            tail_rows,
            route == "broadcast",
            self._dvs,
            partitions,
            table_root=self._root,
            log_file_of=self.log_file_of,
        )

    def small_actions(self, kind: str) -> DataFrame:
        """Every action of one non-file kind (txn, domainMetadata, ...) in the segment, with its
        version; not reconciled. Only the kind's lines of the commits are parsed."""
        sources = (self.checkpoint_actions([kind], False), self.tail_actions([kind], select_lines=True))
        frames = [f.select("version", kind, CORRUPT_LINE) for f in sources if f is not None]
        return reduce(_union, frames)

    def checkpoint_actions(self, kinds: list[str], include_sidecars: bool) -> DataFrame | None:
        """Actions of the checkpoint (and its sidecars); `add` rows carry `checkpoint_stats`, the
        checkpoint's `stats_parsed` (if written) in this table's physical stats layout."""
        checkpoint = self.segment.checkpoint
        if checkpoint is None:
            return None
        stats_type = self.checkpoint_stats_type if "add" in kinds else None
        schema = schemas.action_schema(kinds, add_stats_parsed=stats_type)
        frames = [read_checkpoint_actions(self._spark, checkpoint.files, kinds, checkpoint.version, schema)]
        if include_sidecars and self.sidecars:
            frames.append(
                read_sidecar_actions(
                    self._spark,
                    self.sidecars,
                    schema,
                    checkpoint.version,
                    checkpoint.files[0].path,
                    self._sidecar_sizes,
                )
            )
        keep = ["version", "file", CORRUPT_LINE, *kinds]
        if "add" in kinds:
            frames = [self._split_checkpoint_stats(frame, stats_type) for frame in frames]
            keep.append("checkpoint_stats")
        return reduce(_union, [frame.select(*keep) for frame in frames])

    def tail_actions(self, kinds: list[str], select_lines: bool = False) -> DataFrame | None:
        """The tail's actions of `kinds`; `select_lines` for kinds that are a few lines of a big log
        (`read_json_actions`: only their lines are parsed)."""
        files = list(self.segment.tail_files)
        if not files:
            return None
        return read_json_actions(self._spark, files, kinds, select_lines=select_lines)

    @cached_property
    def checkpoint_stats_type(self) -> DataType | None:
        """The type of `add.stats_parsed` as the checkpoint's writer wrote it, from a parquet footer."""
        checkpoint = self.segment.checkpoint
        if checkpoint is None:
            return None
        candidates = self.sidecars or [f.path for f in checkpoint.files if f.file_format == "parquet"]
        if not candidates:
            return None
        written = parquet_file_schema(self._spark, candidates[0])
        if "add" not in written.fieldNames():
            return None
        add_type = written["add"].dataType
        if isinstance(add_type, StructType) and "stats_parsed" in add_type.fieldNames():
            return add_type["stats_parsed"].dataType
        return None

    def _split_checkpoint_stats(self, frame: DataFrame, written: DataType | None) -> DataFrame:
        add_type = frame.schema["add"].dataType
        if (
            written is None
            or not isinstance(add_type, StructType)
            or "stats_parsed" not in add_type.fieldNames()
        ):
            return frame.withColumn("checkpoint_stats", F.lit(None).cast(self._physical_stats))
        return frame.withColumn(
            "checkpoint_stats", conform_parsed_stats(F.col("add.stats_parsed"), written, self._physical_stats)
        ).withColumn("add", F.col("add").dropFields("stats_parsed"))

    def log_file_of(self, version: Column) -> Column:
        """The log file an action of a reconciled row came from, for error messages: the commit
        (or log compaction) of its version, or the checkpoint."""
        name = commit_file_of(self._root)(version)
        for compaction in self.segment.compactions:
            name = F.when(version == F.lit(compaction.version), F.lit(compaction.path)).otherwise(name)
        checkpoint = self.segment.checkpoint
        if checkpoint is not None:
            where = checkpoint.files[0].path + (" (or one of its sidecars)" if self.sidecars else "")
            name = F.when(version <= F.lit(checkpoint.version), F.lit(where)).otherwise(name)
        return name
