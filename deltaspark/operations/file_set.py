"""The data files an operation changes, with the totals it needs, from one job or none.

DML and OPTIMIZE choose files (rows shaped like `Snapshot.files()`), then need their totals (for
the metrics and to choose a route), their `remove` actions and what a read of them collects (their
paths, sizes and deletion vectors). Files held on the driver (a small log's: a local relation)
give all three from one collect that runs no job. Others are cached and totalled by one aggregate;
when they are few (at most `spark.deltaspark.commit.driverFileActions`, 1,000 by default) one
collect then gives their `remove` lines and listing, and the commit writes the lines it was
handed. Many files stay DataFrames: their removes rendered by Spark tasks at commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from deltaspark.operations.write import remove_of, removes_of
from deltaspark.read.scan import listing_columns
from deltaspark.spark_compat import is_local, local_frame, persist_sized, sql_in
from deltaspark.transaction.checksum import aggregate_dicts
from deltaspark.transaction.transaction import Transaction, driver_file_actions, rendered_removes


@dataclass(frozen=True)
class Total:
    """A total over the files: `kind` of `column` (a column name, nested with dots) - `count` (rows
    where it is set; every row without a column), `sum`, `min`, `max`, `distinct` (distinct set
    values), `values` (the distinct set values themselves, sorted: only where they are known to be
    few) or `nulls` (rows where it is null). As Spark's aggregates: a sum, min or max of nothing
    is None."""

    name: str
    kind: str
    column: str | None = None

    def aggregate(self) -> Column:
        column = F.col(self.column) if self.column is not None else F.lit(1)
        if self.kind == "count":
            return F.count(column)
        if self.kind == "nulls":
            return F.count(F.when(column.isNull(), 1))
        if self.kind == "distinct":
            return F.countDistinct(column)
        if self.kind == "values":
            return F.array_sort(F.collect_set(column))
        return {"sum": F.sum, "min": F.min, "max": F.max}[self.kind](column)

    def of(self, values: list[Any]) -> Any:
        """The same total of values held on the driver (`values`: the column's, one per file)."""
        if self.kind == "nulls":
            return sum(1 for v in values if v is None)
        present = [v for v in values if v is not None]
        if self.kind == "count":
            return len(present)
        if self.kind == "distinct":
            return len(set(present))
        if self.kind == "values":
            return sorted(set(present))
        if not present:
            return None
        return {"sum": sum, "min": min, "max": max}[self.kind](present)


def _input(total: Total, index: int) -> Column:
    return (F.col(total.column) if total.column else F.lit(1)).alias(f"__total_{index}")


def _held_totals(rows: list[Row], totals: tuple[Total, ...]) -> dict[str, Any]:
    return {t.name: t.of([r[f"__total_{i}"] for r in rows]) for i, t in enumerate(totals)}


def held_totals(rows: list[Row], totals: tuple[Total, ...]) -> dict[str, Any]:
    """`totals` of files collected already (`rows` with a field named by each total's column)."""
    columns = dict(zip(rows[0].__fields__, zip(*rows, strict=True), strict=True)) if rows else {}
    return {t.name: t.of(list(columns.get(t.column, ())) if t.column else [1] * len(rows)) for t in totals}


def totals_of(frame: DataFrame, totals: tuple[Total, ...]) -> dict[str, Any]:
    """`totals` of `frame`'s rows: one aggregate, or, for rows held on the driver, no job."""
    return totals_and_rows(frame, totals, [], False, 0)[0]


def totals_and_rows(
    frame: DataFrame, totals: tuple[Total, ...], columns: list[Any], few: bool, limit: int
) -> tuple[dict[str, Any], list[Row] | None]:
    """`totals` of `frame`'s rows, and the rows themselves (`columns` and the totals' inputs) when
    there are at most `limit` of them. Rows held on the driver are collected (no job). Otherwise,
    when `few` says they should be few, they are collected first (at most `limit` + 1: one job,
    and an aggregate only if they were more); else one aggregate comes first - whose first total
    must count the rows - and the rows are collected only if it shows they are few."""
    inputs = [*columns, *[_input(t, i) for i, t in enumerate(totals)]]
    if is_local(frame):
        rows = frame.select(*inputs).collect()
        return _held_totals(rows, totals), rows if len(rows) <= limit else None
    if few and limit > 0:
        rows = frame.select(*inputs).limit(limit + 1).collect()
        if len(rows) <= limit:
            return _held_totals(rows, totals), rows
    row = frame.agg(*[t.aggregate().alias(t.name) for t in totals]).first()
    values = {t.name: row[t.name] for t in totals}
    if few or limit <= 0 or int(values[totals[0].name] or 0) > limit:
        return values, None
    return values, frame.select(*inputs).collect()


# Files this small are read (and their rows aggregated) in one task: one job, no shuffle. Above
# it tasks reading in parallel win back the shuffle: one task read 11 files of 14 MB (1.1M rows)
# in 0.43 s, and the DELETE of their 10% took 1.22 s warm read in parallel against 1.49-1.66 s
# in one task (Spark's defaults, 2 cores; issue 50).
ONE_TASK_BYTES = 4 * 1024 * 1024


def held_listing(files: DataFrame | None) -> list[Row] | None:
    """`read_files`'s `listed` for files held on the driver (collected with no job); None for
    files that are not."""
    if files is None or not is_local(files):
        return None
    return files.select(*listing_columns(files)).collect()


def in_one_task(rows: DataFrame, listed: list[Row] | None) -> DataFrame:
    """`rows` (a read of the `listed` files) in one partition when the files are small: a collect
    of them is then one job, and an aggregate of them needs no shuffle."""
    if listed is not None and sum(r["size"] or 0 for r in listed) <= ONE_TASK_BYTES:
        return rows.coalesce(1)
    return rows


_PATHS = StructType([StructField("__touched", StringType())])
_COUNTS = StructType([*_PATHS.fields, StructField("__matched", LongType())])

# What every operation that removes files reports.
FILE_TOTALS = (
    Total("files", "count"),
    Total("bytes", "sum", "size"),
    Total("dvs", "count", "deletionVector"),
    Total("records", "sum", "stats_parsed.numRecords"),
    Total("dv_rows", "sum", "deletionVector.cardinality"),
    Total("no_stats", "nulls", "stats_parsed.numRecords"),
)


@dataclass
class FileSet:
    """Files (`frame`: rows shaped like `Snapshot.files()`, held on the driver or cached), their
    `totals`, their `removes` and, when they are few, each file's `remove` line and read listing
    (`held`)."""

    frame: DataFrame
    totals: dict[str, Any]
    removes: DataFrame
    held: list[Row] | None
    listing: list[Row] | None = None  # the read's listing, collected with the totals, when not held

    @classmethod
    def of(
        cls,
        frame: DataFrame,
        now_ms: int,
        cached: list[Any],
        size_bytes: int | None,
        totals: tuple[Total, ...] = FILE_TOTALS,
        data_change: bool = True,
        known: dict[str, Any] | None = None,
        listing: list[Row] | None = None,
    ) -> FileSet:
        """The files of `frame` (cached, sized by `size_bytes`, unless held on the driver; added to
        `cached` for the caller to release), their `totals`, and their removes (at `now_ms`,
        `data_change`) and listing, held when few.

        `known`: their `totals` computed already on the driver, with their read `listing`
        (`read.scan.listing_columns`). Many files are then neither cached nor totalled again (their
        removes are rendered by Spark at commit); few are collected once, for their lines."""
        limit = driver_file_actions(frame.sparkSession)
        if known is not None and int(known[totals[0].name] or 0) > limit:
            return cls(frame, known, removes_of(frame, now_ms, data_change), None, listing)
        frame = persist_sized(frame, size_bytes)
        cached.append(frame)
        columns = ["line", *listing_columns(frame)]
        lined = rendered_removes(frame.withColumn("remove", remove_of(now_ms, data_change)))
        values, held = totals_and_rows(lined, totals, columns, known is not None, limit)
        return cls(frame, values, removes_of(frame, now_ms, data_change), held, listing)

    @classmethod
    def among(
        cls, files: DataFrame, touched: DataFrame, now_ms: int, cached: list[Any], size_bytes: int | None
    ) -> FileSet:
        """The rows of `files` whose `path` is one of `touched`'s `__touched` (each once), with, when
        `touched` has a `__matched` count per file, their sum as the total `matched`. Files held on
        the driver stay there: the few touched paths are collected and picked out of them, so
        that the set is held too (no job lists, totals or removes it)."""
        spark = files.sparkSession
        counted = "__matched" in touched.columns
        if is_local(files):
            rows = touched.collect()
            if len(rows) <= driver_file_actions(spark):
                picked = files.where(sql_in("path", [r["__touched"] for r in rows]))
                chosen = cls.of(picked, now_ms, cached, size_bytes)
                if counted:
                    chosen.totals["matched"] = sum(int(r["__matched"]) for r in rows)
                return chosen
            columns = {"__touched": [r["__touched"] for r in rows]}
            if counted:
                columns["__matched"] = [int(r["__matched"]) for r in rows]
            touched = local_frame(spark, columns, _COUNTS if counted else _PATHS)
        joined = files.join(touched, files["path"] == touched["__touched"]).drop("__touched")
        totals = (*FILE_TOTALS, Total("matched", "sum", "__matched")) if counted else FILE_TOTALS
        return cls.of(joined, now_ms, cached, size_bytes, totals)

    def count(self, name: str) -> int:
        """A total as a number (0 for a sum of nothing)."""
        return int(self.totals[name] or 0)

    def records(self) -> int | None:
        """The rows of these files in all, by their statistics; None when a file has none."""
        return None if self.count("no_stats") else self.count("records")

    @property
    def listed(self) -> list[Row] | None:
        """What `read_files` collects of these files, when held or known (pass as its `listed`)."""
        return self.held if self.held is not None else self.listing

    def remove_from(self, txn: Transaction) -> None:
        """Their `remove` actions added to `txn`: the lines held, or the frame's rows (with what the
        checksum counts of them, when their listing is known)."""
        lines = [r["line"] for r in self.held] if self.held is not None else None
        aggregates = None
        if lines is None and self.listing is not None:
            dv = [{"cardinality": r["deleted"]} if r["hasDv"] else None for r in self.listing]
            files = [{"size": r["size"], "deletionVector": d} for r, d in zip(self.listing, dv, strict=True)]
            aggregates = aggregate_dicts(files)
        txn.removeFiles(self.removes, self.count("files"), lines, aggregates)
