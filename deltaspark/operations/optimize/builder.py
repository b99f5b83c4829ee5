"""`DeltaOptimizeBuilder`: delta-spark's OPTIMIZE API (`dt.optimize().where(...)`, then
`executeCompaction()` or `executeZOrderBy(...)`), and `purgeDeletionVectors()` for delta-spark's
`REORG TABLE ... APPLY (PURGE)`. Each call returns delta-spark's metrics DataFrame (`path`,
`metrics`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame

from deltaspark.operations.optimize.bins import COMPACTION, PURGE, ZORDER

SIZE_STATS = "struct<min:bigint,max:bigint,avg:double,totalFiles:bigint,totalSize:bigint>"
FILE_COUNT = "struct<num:bigint,size:bigint>"
METRICS_SCHEMA = (
    "path string, metrics struct<numFilesAdded:bigint,numFilesRemoved:bigint,"
    f"filesAdded:{SIZE_STATS},filesRemoved:{SIZE_STATS},partitionsOptimized:bigint,"
    f"zOrderStats:struct<strategyName:string,inputCubeFiles:{FILE_COUNT},inputOtherFiles:{FILE_COUNT},"
    f"inputNumCubes:bigint,mergedFiles:{FILE_COUNT},numOutputCubes:bigint>,"
    "numBatches:bigint,totalConsideredFiles:bigint,totalFilesSkipped:bigint,preserveInsertionOrder:boolean,"
    "numFilesSkippedToReduceWriteAmplification:bigint,numBytesSkippedToReduceWriteAmplification:bigint,"
    "startTimeMs:bigint,endTimeMs:bigint,totalClusterParallelism:bigint,totalScheduledTasks:bigint,"
    "deletionVectorStats:struct<numDeletionVectorsRemoved:bigint,numDeletionVectorRowsRemoved:bigint>,"
    "numTableColumns:bigint,numTableColumnsWithStats:bigint>"
)


@dataclass(frozen=True)
class DeltaOptimizeBuilder:
    """An OPTIMIZE of the partitions `where` selects (all when None), being built."""

    _run: Callable[[DeltaOptimizeBuilder, str, list[str]], DataFrame]
    condition: Any = None

    def where(self, partitionFilter: str) -> DeltaOptimizeBuilder:
        """Only the partitions matching `partitionFilter` (a SQL predicate over partition columns;
        several calls are ANDed)."""
        if self.condition is None:
            return replace(self, condition=partitionFilter)
        return replace(self, condition=f"({self.condition}) AND ({partitionFilter})")

    def executeCompaction(self) -> DataFrame:
        """Bin-pack small files (and files with many deleted rows) into files of about
        `spark.databricks.delta.optimize.maxFileSize` bytes."""
        return self._run(self, COMPACTION, [])

    def executeZOrderBy(self, *columns: str | list[str]) -> DataFrame:
        """Rewrite every file of the selected partitions with its rows along a Z-curve of
        `columns`, so that data skipping works on each of them."""
        flat: list[str] = []
        for column in columns:
            flat.extend(column if isinstance(column, (list, tuple)) else [column])
        return self._run(self, ZORDER, flat)

    def purgeDeletionVectors(self) -> DataFrame:
        """Rewrite every file that has a deletion vector without its deleted rows (delta-spark's
        `REORG TABLE ... APPLY (PURGE)`)."""
        return self._run(self, PURGE, [])
