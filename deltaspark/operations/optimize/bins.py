"""Which files OPTIMIZE rewrites, and which of them go into one new file (bin-packing).

The packing is one Python function (`assign_bins`): the driver runs it over the candidates' few
columns (held there already for a small log, collected by one job otherwise) up to as many files
as a read lists on the driver, and Python tasks run it over each partition's files beyond, so a
table of any number of files is planned on the cluster.

- Compaction: a file is a candidate when it is smaller than `minFileSize`, or when its deletion
  vector marks more than `maxDeletedRowsRatio` of its rows (delta-spark's rules and settings).
  Within each partition the candidates, smallest first, fill a bin until the next one would take
  it above `maxFileSize`, which then starts the next bin (delta-spark's packing: a bin exceeds
  `maxFileSize` only when one file does, so an optimized table compacts to nothing more). A bin
  of one file without a deletion vector would be rewritten as it is: it is left alone.
- Purge (`REORG ... APPLY (PURGE)`): every file with a deletion vector, alone or binned as above.
- Z-order: every file of each partition, one group per partition (the rows are then laid out
  along the curve into `maxFileSize` files, see `layout`).
- Clustering (OPTIMIZE on a clustered table, which is never partitioned): every file that no
  clustering laid out (`clusteringProvider` unset), in one group; files already clustered are left
  alone, whatever their size (incremental clustering).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from deltaspark.errors import InvalidArgumentError
from deltaspark.read.scan import DEFAULT_MAX_DRIVER_FILES, MAX_DRIVER_FILES_CONF, listing_columns
from deltaspark.spark_compat import (
    check_python_workers,
    conf_get,
    held_frame,
    is_local,
    local_frame,
    persist_sized,
)

MAX_FILE_SIZE_CONF = "spark.databricks.delta.optimize.maxFileSize"
MIN_FILE_SIZE_CONF = "spark.databricks.delta.optimize.minFileSize"
MAX_DELETED_ROWS_RATIO_CONF = "spark.databricks.delta.optimize.maxDeletedRowsRatio"
DEFAULT_FILE_SIZE = 1024**3
DEFAULT_DELETED_ROWS_RATIO = 0.05

COMPACTION, ZORDER, PURGE, CLUSTER = "compaction", "zorder", "purge", "cluster"
CURVE_KINDS = (ZORDER, CLUSTER)  # rows laid out along a curve, one group per partition
BIN = "__deltaspark_bin"  # the bin (0, 1, ... across the table) a rewritten file belongs to
PARTITION = "__deltaspark_partition"  # the file's partition values, as one comparable string
HELD_MAP_FILES = 200  # held files binned by one SQL map up to this many (see `_held_bins`)


class BinSizes(NamedTuple):
    max_file_size: int
    min_file_size: int
    max_deleted_rows_ratio: float

    @classmethod
    def of(cls, spark: SparkSession) -> BinSizes:
        max_size = int(conf_get(spark, MAX_FILE_SIZE_CONF, str(DEFAULT_FILE_SIZE)))
        min_size = int(conf_get(spark, MIN_FILE_SIZE_CONF, str(DEFAULT_FILE_SIZE)))
        ratio = float(conf_get(spark, MAX_DELETED_ROWS_RATIO_CONF, str(DEFAULT_DELETED_ROWS_RATIO)))
        if max_size <= 0 or min_size <= 0:
            raise InvalidArgumentError(
                f"{MAX_FILE_SIZE_CONF} and {MIN_FILE_SIZE_CONF} must be positive, "
                f"got {max_size} and {min_size}"
            )
        return cls(max_size, min_size, ratio)


def partition_key() -> Column:
    """The file's partition values as a string equal for equal partitions, whatever the order of
    the map's keys in the log."""
    return F.to_json(F.array_sort(F.map_entries(F.col("partitionValues"))))


def _deleted_ratio() -> Column:
    records = F.col("stats_parsed.numRecords")
    return F.when(records > 0, F.col("deletionVector.cardinality") / records)


def assign_bins(
    files: Iterable[tuple[str, int, str, bool]], max_file_size: int, curve: bool
) -> Iterator[Any]:
    """delta-spark's bin-packing, over candidates sorted by partition, size and path (`partition,
    size, path, has_dv`): within a partition, each file joins the current bin unless it would take
    the bin above `max_file_size`, when it starts the next one (so a bin never exceeds it unless a
    lone file does, and compacting again changes nothing). A curve's group is the whole partition.
    Yields `(path, group within its partition, files in the group, files with a DV in it)`."""
    group: list[str] = []
    key: str | None = None
    index = size = dvs = 0
    for partition, file_size, path, has_dv in files:
        if partition != key or (not curve and group and size + file_size > max_file_size):
            yield from ((p, index, len(group), dvs) for p in group)
            index = 0 if partition != key else index + 1
            key, group, size, dvs = partition, [], 0, 0
        group.append(path)
        size += file_size
        dvs += bool(has_dv)
    yield from ((p, index, len(group), dvs) for p in group)


def _groups_in_tasks(max_file_size: int, curve: bool):  # noqa: ANN202 - a mapInArrow function
    """`assign_bins` as a `mapInArrow` body over rows sorted within each task."""

    def groups(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        rows = (
            (r["partition"], r["size"], r["path"], r["has_dv"])
            for batch in batches
            for r in batch.to_pylist()
        )
        out: list[tuple[str, int, int, int]] = []
        for assigned in assign_bins(rows, max_file_size, curve):
            out.append(assigned)
            if len(out) >= 65536:
                yield _group_batch(pa, out)
                out = []
        if out:
            yield _group_batch(pa, out)

    return groups


def _group_batch(pa: Any, rows: list[tuple[str, int, int, int]]) -> Any:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns[0], pa.string()),
            pa.array(columns[1], pa.int64()),
            pa.array(columns[2], pa.int64()),
            pa.array(columns[3], pa.int64()),
        ],
        names=["__path", "__group", "__files", "__dvs"],
    )


def _candidates(files: DataFrame, kind: str, sizes: BinSizes) -> DataFrame:
    """The files `kind` may rewrite, with their `PARTITION` key."""
    files = files.withColumn(PARTITION, partition_key())
    has_dv = F.col("deletionVector").isNotNull()
    if kind == ZORDER:
        return files
    if kind == CLUSTER:
        return files.where(F.col("clusteringProvider").isNull())
    if kind == PURGE:
        return files.where(has_dv)
    small = F.col("size") < sizes.min_file_size
    return files.where(
        small | F.coalesce(has_dv & (_deleted_ratio() > sizes.max_deleted_rows_ratio), F.lit(False))
    )


@dataclass(frozen=True)
class BinPlan:
    """The files OPTIMIZE rewrites (`files`: rows of `snapshot.files()` with their `BIN` and
    `PARTITION`) and, when the driver planned the bins, each of them as collected there (`rows`:
    the read's listing columns, the columns asked for, `PARTITION` and `BIN`), from which the
    caller takes their totals and the read its listing without another job."""

    files: DataFrame
    rows: list[Row] | None = None


def plan_bins(
    files: DataFrame,
    kind: str,
    sizes: BinSizes,
    cached: list[Any],
    size_bytes: int | None,
    columns: Iterable[str] = (),
) -> BinPlan:
    """Which of `files` (rows of `snapshot.files()`) `kind` rewrites, and in which bin (dense, from
    0, in partition order). The candidates' few columns the packing needs are collected (no job
    when they are held on the driver already, a small log's; one otherwise) and packed there by
    `assign_bins`, up to `spark.deltaspark.read.maxDriverFiles` candidates (200,000, as many as a
    read lists on the driver); `columns` of `files` are collected with them. The chosen files are
    then the held ones narrowed to their bins, or `files` (cached by the caller) joined with a
    local relation of their paths and bins. More candidates are packed by Python tasks over each
    partition's files, sorted, whose answer is cached (sized by `size_bytes`, the files' estimate;
    added to `cached` for the caller to release)."""
    curve = kind in CURVE_KINDS
    candidates = _candidates(files, kind, sizes)
    limit = int(conf_get(files.sparkSession, MAX_DRIVER_FILES_CONF, str(DEFAULT_MAX_DRIVER_FILES)))
    listing = listing_columns(candidates)
    listed = candidates.select(*listing).columns
    asked = [c for c in dict.fromkeys(columns) if c not in {*listed, BIN, PARTITION}]
    held = is_local(candidates)
    collected = candidates.select(*listing, *[F.col(c).alias(c) for c in asked], F.col(PARTITION))
    rows = collected.limit(limit + 1).collect()
    if len(rows) <= limit:
        names = [*listed, *asked, PARTITION]
        at = {name: i for i, name in enumerate(names)}  # a Row's field by name is a list search
        part, size, path, has_dv = at[PARTITION], at["size"], at["path"], at["hasDv"]
        inputs = sorted((r[part], r[size], r[path], r[has_dv]) for r in rows)
        kept = _kept(assign_bins(inputs, sizes.max_file_size, curve), curve, inputs)
        chosen_row = Row(*names, BIN)
        chosen = [chosen_row(*r, kept[r[path]]) for r in rows if r[path] in kept]
        if not kept:
            return BinPlan(candidates.where(F.lit(False)).withColumn(BIN, F.lit(None).cast("int")), [])
        frame = _held_bins(candidates, kept) if held else _joined_bins(candidates, kept)
        if frame is not None:
            return BinPlan(frame, chosen)
    return BinPlan(_bins_in_tasks(candidates, curve, sizes, cached, size_bytes))


def _joined_bins(candidates: DataFrame, kept: dict[str, int]) -> DataFrame:
    """`candidates` narrowed to the `kept` paths, with their bins: a join with the paths and bins
    held on the driver (broadcast: a few bytes a file)."""
    bins = local_frame(
        candidates.sparkSession,
        {"__path": list(kept), BIN: list(kept.values())},
        f"__path string, {BIN} int",
    )
    return candidates.join(F.broadcast(bins), candidates["path"] == bins["__path"]).drop("__path")


def _bins_in_tasks(
    candidates: DataFrame, curve: bool, sizes: BinSizes, cached: list[Any], size_bytes: int | None
) -> DataFrame:
    """`plan_bins` by Python tasks over each partition's candidates, for more than the driver
    collects."""
    inputs = [
        F.col(PARTITION).alias("partition"),
        F.col("size"),
        F.col("path"),
        F.col("deletionVector").isNotNull().alias("has_dv"),
    ]
    check_python_workers(candidates.sparkSession)
    assigned = persist_sized(
        candidates.select(*inputs)
        .repartition(F.col("partition"))
        .sortWithinPartitions("partition", "size", "path")
        .mapInArrow(
            _groups_in_tasks(sizes.max_file_size, curve),
            "__path string, __group long, __files long, __dvs long",
        ),
        size_bytes,
    )
    cached.append(assigned)
    if not curve:
        assigned = assigned.where((F.col("__files") > 1) | (F.col("__dvs") > 0))
    chosen = candidates.join(assigned, candidates["path"] == assigned["__path"]).drop("__path")
    # dense bin numbers: one small window over the bins' keys, joined back
    keys = chosen.select(PARTITION, "__group").distinct()
    numbered = keys.withColumn(
        BIN, (F.row_number().over(Window.orderBy(PARTITION, "__group")) - 1).cast("int")
    )
    return chosen.join(numbered, [PARTITION, "__group"]).drop("__group", "__files", "__dvs")


def _kept(assigned: Iterator[Any], curve: bool, rows: list[tuple[str, int, str, bool]]) -> dict[str, int]:
    """Each rewritten file's dense bin number (in partition, then group order), from `assign_bins`
    over `rows`: a bin of one file without a DV is left alone (its file would be rewritten as it
    is)."""
    partition_of = {r[2]: r[0] for r in rows}
    groups = [(partition_of[p], g, p) for p, g, n, dvs in assigned if curve or n > 1 or dvs > 0]
    numbers = {key: i for i, key in enumerate(sorted({(part, g) for part, g, _ in groups}))}
    return {path: numbers[(part, g)] for part, g, path in groups}


def _held_bins(candidates: DataFrame, kept: dict[str, int]) -> DataFrame | None:
    """`candidates` held on the driver, narrowed to `kept` with their bin numbers, held too. Up to
    `HELD_MAP_FILES` files, by one SQL map (Spark folds it into the relation); more are joined with
    their bins here, since Spark evaluates such a map's literal anew for every row when it folds it
    (5,000 files: 10 s of planning, 20,000: over three minutes). None when a path cannot be written
    as a plain SQL literal (few files) - Spark's route bins them."""
    if len(kept) > HELD_MAP_FILES:
        rows = [(*r, kept[r["path"]]) for r in candidates.collect() if r["path"] in kept]
        schema = StructType([*candidates.schema.fields, StructField(BIN, IntegerType())])
        return held_frame(candidates.sparkSession, rows, schema)
    if any("'" in p or "\\" in p for p in kept):
        return None
    pairs = ", ".join(f"'{p}', {b}" for p, b in kept.items())
    binned = candidates.withColumn(BIN, F.expr(f"element_at(map({pairs}), path)").cast("int"))
    return binned.where(F.col(BIN).isNotNull())
