"""`spark.read.format("delta")`: a Python data source (Spark 4.0+) over a table's state.

Planning (`schema`, `partitions`) runs in a Python process Spark starts on the driver's host and
reads the log with `table_state` (no JVM there). Each input partition carries its own files; the
reader that Spark ships to the executors holds only the column plan, so a table of many files
costs the executors nothing more than their share. A task opens its files with pyarrow
(`arrow_file_reader.read_files`: physical names or field ids of column mapping, type widening,
deletion vectors, partition values) and yields Arrow record batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from deltaspark.datasource.pruning import Skipping
from deltaspark.datasource.table_state import TableState, output_schema, typed_partition_values
from deltaspark.errors import InvalidArgumentError
from deltaspark.features.column_mapping import ID_KEY, physical_name
from deltaspark.features.schema import drop_void_fields
from deltaspark.file_io import FileSystemSettings, install
from deltaspark.read.arrow_file_reader import read_files
from deltaspark.read.distributed_read import type_plan
from deltaspark.spark_compat import FileSplitting, arrow_schema

NO_PATH = (
    "deltaspark: format('delta') was given no path. spark.read.format('delta').load(path) reads a "
    "table by its location. A table by name (spark.table, SELECT ... FROM db.t) reaches this data "
    "source without its location: Spark's session catalog passes a Python data source none of the "
    "catalog entry's options. Read it with deltaspark.DeltaTable.forName(spark, name).toDF(), or "
    "load its location"
)


@dataclass
class FilePartition(InputPartition):
    """The files one task reads, each with its typed partition values and deletion vector."""

    files: list[dict[str, Any]]


def column_plan(state: TableState) -> list[dict[str, Any]]:
    """How `read_files` builds each output column (see `distributed_read.read_distributed`)."""
    partitions = {c.lower() for c in state.metadata.partitionColumns}
    mode, plan = state.mode, []
    for field in drop_void_fields(state.schema).fields:
        if field.name.lower() in partitions:
            plan.append({"kind": "partition", "name": field.name})
            continue
        field_id = int(field.metadata[ID_KEY]) if mode == "id" and ID_KEY in field.metadata else None
        plan.append(
            {
                "kind": "data",
                "physical": physical_name(field, mode),
                "id": field_id,
                "type": type_plan(field.dataType, mode),
            }
        )
    return plan


def file_partitions(
    state: TableState, splitting: FileSplitting, entries: list[dict[str, Any]] | None = None
) -> list[FilePartition]:
    """`entries` (the state's live files when None) in tasks sized as Spark sizes a file scan's
    (`splitting`: the session's `spark.sql.files.*` settings and parallelism), in their order: a
    file joins the current task unless the task would then exceed the split size, each file
    counting its open cost too. Spark would split a file larger than that size; here a file is one
    task's. A Python task costs tens of milliseconds more than a JVM one (see docs/streaming.md):
    a few tasks per core, not one per file, keeps the scan near Spark's own."""
    entries = state.live_files if entries is None else entries
    most = splitting.split_bytes([f["size"] or 0 for f in entries])
    bins: list[FilePartition] = []
    current: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        length = entry["size"] or 0
        if current and size + length > most:
            bins.append(FilePartition(current))
            current, size = [], 0
        current.append(
            {
                "path": entry["path"],
                "partitionValues_parsed": typed_partition_values(state, entry),
                "deletionVector": entry["deletionVector"],
                "baseRowId": entry["baseRowId"],
                "defaultRowCommitVersion": entry["defaultRowCommitVersion"],
            }
        )
        size += length + splitting.open_cost
    if current:
        bins.append(FilePartition(current))
    return bins


class FileReading:
    """What a task needs to read a partition's files: the column plan, the output schema, the
    table root (deletion vectors) and the session's file system settings. Small: Spark ships it."""

    def __init__(self, state: TableState, settings: FileSystemSettings | None) -> None:
        self.table_root = state.table_root
        self.columns = column_plan(state)
        self.schema_json = output_schema(state).json()
        self.settings = settings

    def read(self, partition: FilePartition):  # noqa: ANN201 - Arrow record batches
        # Spark gives a bare InputPartition when a table has no files at all
        return self.read_with(read_files, getattr(partition, "files", []))

    def read_with(self, read: Callable[..., Iterator[Any]], items: list[dict[str, Any]]) -> Iterator[Any]:
        """`read(items, columns, target, table_root)` (data files, or a change feed's files) with
        the session's file system settings installed."""
        target = arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        install(self.settings)
        try:
            yield from read(items, self.columns, target, self.table_root)
        finally:
            install(None)


class DeltaBatchReader(FileReading, DataSourceReader):
    """Plans a table's files into partitions; reads a partition's files as Arrow batches."""

    def __init__(
        self, state: TableState, settings: FileSystemSettings | None, splitting: FileSplitting
    ) -> None:
        super().__init__(state, settings)
        self.splitting = splitting
        self._state: TableState | None = state  # planning only: never shipped with the reader

    def partitions(self) -> list[FilePartition]:
        assert self._state is not None
        return file_partitions(self._state, self.splitting)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}


class PrunedBatchReader(DeltaBatchReader):
    """A batch reader that leaves out the files a query's filters exclude by partition values and
    statistics (Spark 4.1+, with `spark.sql.python.filterPushdown.enabled`): see `pruning`. Spark
    evaluates every filter on the rows as before."""

    def __init__(
        self, state: TableState, settings: FileSystemSettings | None, splitting: FileSplitting
    ) -> None:
        super().__init__(state, settings, splitting)
        self._skipping: Skipping | None = Skipping(state)  # planning only, as `_state`
        self._filters: list[Any] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        assert self._state is not None and self._skipping is not None
        for filter_ in filters:
            if self._skipping.offered(filter_):
                self._filters.append(filter_)
            yield filter_  # Spark still applies it to the rows

    def partitions(self) -> list[FilePartition]:
        assert self._state is not None and self._skipping is not None
        if not self._filters:
            return file_partitions(self._state, self.splitting)
        kept = [entry for entry in self._state.live_files if self._skipping.keeps(self._filters, entry)]
        return file_partitions(self._state, self.splitting, kept)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None, "_skipping": None, "_filters": []}


def batch_options(options: dict[str, str]) -> tuple[str, int | None, str | None]:
    """(path, versionAsOf, timestampAsOf) from the reader's options, delta-spark's names."""
    options = {k.lower(): v for k, v in options.items()}  # Spark passes them case-insensitively
    path = options.get("path")
    if not path:
        raise InvalidArgumentError(NO_PATH)
    version = options.get("versionasof")
    timestamp = options.get("timestampasof")
    if version is not None:
        try:
            version = int(version)
        except ValueError:
            raise InvalidArgumentError(f"versionAsOf must be a whole number, got {version!r}") from None
    return path, version, timestamp
