"""UPDATE: set columns of the rows matching a condition, as one commit.

Files that cannot hold a matching row are skipped (partition values and statistics); the other
candidate files are read once, which finds the files that really hold a matching row (rows where
the condition is NULL are left alone, as in SQL) and counts their matches. Only those files change:

- with deletion vectors (`delta.enableDeletionVectors` on a table supporting the feature), the
  matching rows are marked deleted in a new DV per file and their new values are written as new
  files (merge-on-read): the file's other rows are not rewritten; a file whose every row is
  updated is removed instead. The matching rows (their positions and values) are kept from the
  one read, cached for both, and the DVs count them per file;
- otherwise (copy-on-write) the file is rewritten with the matching rows' new values and the other
  rows as they were, and the original is removed.

New values go through the same checks as any write (NOT NULL, CHECK constraints, invariants,
generated columns). Assignments are SQL strings or Columns over the table's columns, evaluated on
the row before the update; a generated column follows the columns it is computed from (unless it
is assigned, when the check holds it to its expression); an identity column `GENERATED ALWAYS`
cannot be assigned. Nested struct fields are assigned by their dotted name (`"address.city"`).
Assigned values are converted to the column's type as SQL's ANSI store assignment does: as a
write converts them, and also number to number (a value out of the column's range fails the
update, never wraps) and any atomic value to a string.

On a table with row tracking every row keeps its row id; updated rows take the commit's version
as their row commit version, copied rows keep theirs (delta-spark's rules). With the change data
feed on, each updated row is written twice under `_change_data/`, as `update_preimage` and
`update_postimage`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DecimalType,
    FractionalType,
    IntegerType,
    IntegralType,
    LongType,
    MapType,
    NumericType,
    ShortType,
    StringType,
    StructType,
)

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.identity_columns import identity_columns
from deltaspark.features.row_tracking import is_enabled as row_tracking_enabled
from deltaspark.operations.delete import (
    DvMarking,
    check_rows_changeable,
    files_of,
    mark_rows_deleted,
    materialized_row_tracking,
    read_candidates,
    write_change_files,
    writes_deletion_vectors,
)
from deltaspark.operations.file_set import FileSet
from deltaspark.operations.write import (
    GENERATION_KEY,
    conform_value,
    write_data_files,
)
from deltaspark.read.scan import read_files
from deltaspark.snapshot import Snapshot
from deltaspark.storage import Storage
from deltaspark.transaction.idempotent import apply_once
from deltaspark.transaction.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)

MATCHED = "__deltaspark_matched"
OUT_OF_RANGE = "deltaspark: a new value of"
_OUT_OF_RANGE_TEXT = re.compile(re.escape(OUT_OF_RANGE) + r" [^\n]*? is out of the range of [a-z0-9(), ]+")


def name_parts(name: str, table_path: str) -> list[str]:
    """A column name as Spark reads one: dots separate struct fields, backticks quote a part
    (`` `a.b`.c ``; a doubled backtick inside quotes is one backtick)."""
    parts, current, quoted, i = [], "", False, 0
    while i < len(name):
        char = name[i]
        if quoted:
            if char == "`" and name[i + 1 : i + 2] == "`":
                current, i = current + "`", i + 2
                continue
            if char == "`":
                quoted = False
            else:
                current += char
        elif char == "`":
            quoted = True
        elif char == ".":
            parts.append(current)
            current = ""
        else:
            current += char
        i += 1
    parts.append(current)
    if quoted or any(not p for p in parts):
        raise InvalidArgumentError(f"Cannot update {table_path}: {name!r} is not a column name")
    return parts


def _field_path(schema: StructType, name: str, table_path: str) -> tuple[list[str], DataType]:
    """The field names (as the schema spells them) of a dotted column name, and its type."""
    parts = name_parts(name, table_path)
    names: list[str] = []
    current: DataType = schema
    for i, part in enumerate(parts):
        if not isinstance(current, StructType):
            raise InvalidArgumentError(
                f"Cannot update `{name}` of {table_path}: `{'.'.join(parts[:i])}` is not a struct"
            )
        found = next((f for f in current.fields if f.name.lower() == part.lower()), None)
        if found is None:
            columns = ", ".join(f.name for f in schema.fields)
            raise InvalidArgumentError(
                f"Cannot update `{name}` of {table_path}: no such column (the table's columns: {columns})"
            )
        names.append(found.name)
        current = found.dataType
    return names, current


_INTEGRAL_BITS = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}


def _in_range(value: Column, source: DataType, target: DataType) -> Column | None:
    """Whether `value` fits `target` (None: every value does, as for float and double targets)."""
    if isinstance(target, IntegralType):
        bits = _INTEGRAL_BITS[type(target)]
        if isinstance(source, FractionalType) and not isinstance(source, DecimalType):
            # NaN compares above every number in Spark, so it is out of range too.
            return (value >= F.lit(-float(2 ** (bits - 1)))) & (value < F.lit(float(2 ** (bits - 1))))
        return (value >= F.lit(-(2 ** (bits - 1)))) & (value <= F.lit(2 ** (bits - 1) - 1))
    if isinstance(target, DecimalType):
        bound = Decimal(10) ** (target.precision - target.scale) - Decimal(10) ** -target.scale
        limit = (
            F.lit(float(bound))
            if isinstance(source, FractionalType) and not isinstance(source, DecimalType)
            else F.lit(bound)
        )
        return (value >= -limit) & (value <= limit)
    return None


def store_assign(value: Column, source: DataType, target: DataType, path: str, table_path: str) -> Column:
    """`value` converted to `target` by SQL's ANSI store assignment (see the module docstring)."""
    try:
        return conform_value(value, source, target, path, table_path)
    except InvalidArgumentError:
        complex_source = isinstance(source, (StructType, ArrayType, MapType, BinaryType))
        if isinstance(target, StringType) and not complex_source:
            return value.cast(target)
        if not (isinstance(source, NumericType) and isinstance(target, NumericType)):
            raise
    fits = _in_range(value, source, target)
    if fits is None:
        return value.cast(target)
    message = f"{OUT_OF_RANGE} `{path}` in {table_path} is out of the range of {target.simpleString()}"
    return F.when(value.isNull() | fits, value.cast(target)).otherwise(F.raise_error(F.lit(message)))


def out_of_range_error(exc: BaseException) -> InvalidArgumentError | None:
    """The `InvalidArgumentError` for a Spark failure raised by `store_assign`'s range check."""
    found = _OUT_OF_RANGE_TEXT.search(str(exc))
    if found is None:
        return None
    text = found.group(0)[len("deltaspark: ") :]
    return InvalidArgumentError(text[0].upper() + text[1:])


def assignments(
    spark: SparkSession, schema: StructType, set_: Mapping[str, Any], table_path: str
) -> dict[str, list[tuple[list[str], Column]]]:
    """`set_` resolved: top-level column -> [(path of nested fields below it, value converted to
    the field's type)]; a whole column has an empty path. Unknown columns, a column assigned twice
    (or together with one of its fields), an identity column `GENERATED ALWAYS` and values that do
    not convert without loss are `InvalidArgumentError`s."""
    if not isinstance(set_, Mapping) or not set_:
        raise InvalidArgumentError("An update needs `set`: a dict of column name -> SQL string or Column")
    always = {i.name.lower() for i in identity_columns(schema) if not i.allow_explicit_insert}
    empty = spark.createDataFrame([], schema)
    resolved: dict[str, list[tuple[list[str], Column]]] = {}
    seen: list[list[str]] = []
    for name, expression in set_.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"Update targets are column names, got {name!r}")
        path, target = _field_path(schema, name, table_path)
        lowered = [p.lower() for p in path]
        for other in seen:
            shorter = min(len(other), len(lowered))
            if other[:shorter] == lowered[:shorter]:
                raise InvalidArgumentError(
                    f"Cannot update {table_path}: `{name}` is assigned more than once "
                    "(directly or through a struct that holds it)"
                )
        seen.append(lowered)
        if lowered[0] in always:
            raise InvalidArgumentError(
                f"Cannot update {table_path}: `{path[0]}` is an identity column GENERATED ALWAYS"
            )
        value = resolve_expression(spark, schema, expression, f"The value of `{name}`", table_path, None)
        source = empty.select(value.alias("_v")).schema["_v"].dataType
        converted = store_assign(value, source, target, ".".join(path), table_path)
        resolved.setdefault(path[0], []).append((path[1:], converted))
    return resolved


def updated_columns(
    schema: StructType, resolved: dict[str, list[tuple[list[str], Column]]], matched: Column
) -> list[Column]:
    """The table's columns after the update: assigned values where `matched`, else as they were.
    Generated columns are left to `with_generated` (they depend on the other new values)."""
    out = []
    for field in schema.fields:
        old = F.col(f"`{field.name}`")
        parts = resolved.get(field.name)
        if not parts:
            out.append(old.alias(field.name))
            continue
        new = old
        for nested, value in parts:
            if not nested:
                new = value
            else:
                # withField on a null struct stays null, as a SQL update of a field of a null struct
                new = new.withField(".".join("`" + n.replace("`", "``") + "`" for n in nested), value)
        out.append(F.when(matched, new).otherwise(old).alias(field.name))
    return out


def with_generated(
    frame: DataFrame, schema: StructType, resolved: dict[str, Any], matched: Column, keep: list[str]
) -> DataFrame:
    """`frame` (the updated columns, the `matched` flag and `keep` columns) with each generated
    column that is not assigned recomputed from the new values of the matched rows."""
    generated = [f for f in schema.fields if f.metadata.get(GENERATION_KEY) and f.name not in resolved]
    if not generated:
        return frame
    recomputed = {
        f.name: F.when(matched, F.expr(f.metadata[GENERATION_KEY]).cast(f.dataType))
        .otherwise(F.col(f"`{f.name}`"))
        .alias(f.name)
        for f in generated
    }
    return frame.select(
        *[recomputed.get(f.name, F.col(f"`{f.name}`")) for f in schema.fields], *[F.col(k) for k in keep]
    )


def update(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot,
    condition: Any = None,
    set: Mapping[str, Any] | None = None,  # noqa: A002 - delta-spark's name
    app: tuple[str, int] | None = None,
) -> CommitResult | None:
    """Set the assigned columns of the rows matching `condition` (every row when None); None when
    no row matches, or when the table already holds `app` (an idempotent write's txnAppId and
    txnVersion): nothing is committed."""
    started = time.time()
    metadata, protocol = snapshot.metadata, snapshot.protocol
    check_rows_changeable(snapshot, table_path, "update")
    schema = snapshot.schema
    resolved = assignments(spark, schema, set or {}, table_path)
    txn = Transaction(spark, storage, table_path, snapshot)
    if not apply_once(txn, app, table_path):
        return None
    if condition is None:
        txn.readWholeTable()
        files = snapshot.files()
        matches = F.lit(True)
    else:
        resolve_expression(spark, schema, condition, "The update condition", table_path)
        txn.readPredicate(condition)
        files = snapshot.files(condition)
        matches = F.coalesce(F.expr(condition) if isinstance(condition, str) else condition, F.lit(False))
    metrics: dict[str, Any] = {
        "numAddedFiles": 0,
        "numRemovedFiles": 0,
        "numUpdatedRows": 0,
        "numCopiedRows": 0,
        "numAddedChangeFiles": 0,
        "numAddedBytes": 0,
        "numRemovedBytes": 0,
        "numDeletionVectorsAdded": 0,
        "numDeletionVectorsRemoved": 0,
        "numDeletionVectorsUpdated": 0,
    }
    now = int(time.time() * 1000)
    cached: list[Any] = []
    try:
        # One row per candidate file, with the totals that choose the route (DVs need every
        # file's `numRecords`): replay the log once, not per step.
        candidates = FileSet.of(files, now, cached, snapshot.stateBytes)
        txn.readFiles(candidates.frame)
        if not candidates.count("files"):
            log.info("Nothing to update in %s: no file can hold a matching row", table_path)
            return None
        tracked = row_tracking_enabled(protocol, metadata)
        use_dvs = writes_deletion_vectors(snapshot)
        if use_dvs and candidates.count("no_stats"):
            use_dvs = False
            log.info("Rewriting files of %s: some have no numRecords statistic for a DV", table_path)
        # One read of the candidates. With DVs the matched rows are kept (positions, values, row
        # tracking columns) for their DVs and their new values alike, and the DVs count them per
        # file; copy-on-write counts them per file to find the files to rewrite.
        read = read_candidates(
            snapshot, candidates.frame, candidates.listed, row_tracking=tracked and use_dvs
        )
        matched = read.where(matches)
        marking = None
        if use_dvs:
            matched = matched.persist()
            cached.append(matched)
            marking = mark_rows_deleted(spark, storage, snapshot, txn, candidates, matched, now, cached)
            # the rows each new DV marks; the DV steps read no file list again
            touched, updated = candidates, marking.newly_deleted
        else:
            touched = files_of(snapshot, candidates.frame, matched, now, cached)
            updated = touched.count("matched")
        if not updated:
            log.info("Nothing to update in %s: no row matches", table_path)
            return None
        metrics["numUpdatedRows"] = updated
        scanned = time.time()
        metrics["scanTimeMs"] = int((scanned - started) * 1000)
        hidden: tuple[str, ...] = materialized_row_tracking(snapshot) if tracked else ()
        job = _Update(
            spark,
            storage,
            snapshot,
            txn,
            touched.frame.drop("__matched"),
            touched,
            matches,
            resolved,
            hidden,
            now,
            metrics,
            cached,
        )
        try:
            if marking is not None:
                _merge_on_read(job, matched, marking)
            else:
                _copy_on_write(job)
        except Exception as exc:  # a value out of its column's range, raised by a Spark task
            error = out_of_range_error(exc)
            if error is None:
                raise
            raise error from None
        _record_changes(job, matched if marking is not None else None)
        metrics["rewriteTimeMs"] = int((time.time() - scanned) * 1000)
        metrics["executionTimeMs"] = int((time.time() - started) * 1000)
        parameters = {"predicate": [str(condition)] if condition is not None else []}
        return txn.commit("UPDATE", parameters, metrics)
    finally:
        for frame in cached:
            frame.unpersist()


@dataclass
class _Update:
    """One update's inputs and what it has built so far (for the steps below)."""

    spark: SparkSession
    storage: Storage
    snapshot: Snapshot
    txn: Transaction
    # copy-on-write: the files holding a matched row; with DVs (whose steps do not read them:
    # the matched rows are at hand) the candidates
    files: DataFrame
    touched: FileSet  # the same, with their totals
    matches: Column
    resolved: dict[str, Any]
    hidden: tuple[str, ...]  # the materialized row tracking columns, when the table tracks rows
    now: int
    metrics: dict[str, Any]
    cached: list[Any]


def _new_rows(
    job: _Update, rows: DataFrame, matches: Column, hidden: tuple[str, ...], only_matched: bool
) -> DataFrame:
    """Rows of the touched files as the update leaves them (only the matched ones when
    `only_matched`), in the table's columns plus the materialized row tracking columns: the row id
    kept, the row commit version kept for copied rows and null (the commit's) for updated ones."""
    schema = job.snapshot.schema
    source = rows.where(matches) if only_matched else rows
    flagged = source.withColumn(MATCHED, F.lit(True) if only_matched else matches)
    matched = F.col(MATCHED)
    tracking = []
    if hidden:
        row_id, commit_version = hidden
        tracking = [
            F.col("_metadata.row_id").alias(row_id),
            F.when(matched, F.lit(None).cast("long"))
            .otherwise(F.col("_metadata.row_commit_version"))
            .alias(commit_version),
        ]
    base = flagged.select(*updated_columns(schema, job.resolved, matched), matched.alias(MATCHED), *tracking)
    complete = with_generated(base, schema, job.resolved, matched, [MATCHED, *hidden])
    return complete.drop(MATCHED)


def _write_new_rows(job: _Update, matched: DataFrame | None = None) -> Any:
    """The touched files' rows as the update leaves them (`_new_rows`), written and added: every
    row of the files (copy-on-write), or only `matched`, the matched rows read already (the
    condition is not evaluated again: a non-deterministic one would pick other rows than those
    marked deleted)."""
    snapshot = job.snapshot
    if matched is None:
        rows = read_files(snapshot, job.files, row_tracking=bool(job.hidden), listed=job.touched.listed)
        new = _new_rows(job, rows, job.matches, job.hidden, only_matched=False)
    else:
        new = _new_rows(job, matched, F.lit(True), job.hidden, only_matched=True)
    written = write_data_files(
        job.spark,
        snapshot.tableRoot,
        snapshot.schema,
        snapshot.partitionColumns,
        snapshot.configuration,
        new,
        mode=snapshot.columnMappingMode,
        hidden_columns=job.hidden,
    )
    job.cached.append(written)
    job.txn.addFiles(written.adds, written.files, written.lines)  # type: ignore[arg-type]
    job.metrics["numAddedFiles"] = written.files
    job.metrics["numAddedBytes"] = written.bytes
    return written


def _copy_on_write(job: _Update) -> None:
    """The touched files rewritten with the update applied; the originals removed."""
    job.touched.remove_from(job.txn)
    job.metrics["numRemovedFiles"] = job.touched.count("files")
    job.metrics["numRemovedBytes"] = job.touched.count("bytes")
    job.metrics["numDeletionVectorsRemoved"] = job.touched.count("dvs")
    written = _write_new_rows(job)
    job.metrics["numCopiedRows"] = written.rows - job.metrics["numUpdatedRows"]


def _merge_on_read(job: _Update, matched: DataFrame, marking: DvMarking) -> None:
    """The `matched` rows, marked deleted in each file's new DV (`marking`, as a delete marks
    them), written with their new values as new files; the files' other rows stay where they
    are. The matched rows were read once (positions, values and row tracking columns) and cached
    for both steps, so that the rows given new values are exactly those marked deleted."""
    marking.record(job.metrics)
    written = _write_new_rows(job, matched)
    log.info(
        "Update of %s: %d row(s) in %d file(s) marked in deletion vectors (%d files emptied), "
        "their new values in %d file(s)",
        job.snapshot.tableRoot,
        job.metrics["numUpdatedRows"],
        marking.changed_files,
        marking.emptied_files,
        written.files,
    )


def _record_changes(job: _Update, matched: DataFrame | None) -> None:
    """With the change data feed on: each updated row before and after, as change data files.
    `matched`: the matched rows when read already (with DVs), else the touched files are read."""
    snapshot = job.snapshot
    if snapshot.configuration.get("delta.enableChangeDataFeed", "").lower() != "true":
        return
    rows = matched if matched is not None else read_files(snapshot, job.files).where(job.matches)
    columns = [F.col(f"`{f.name}`") for f in snapshot.schema.fields]
    before = rows.select(*columns, F.lit("update_preimage").alias("_change_type"))
    after = _new_rows(job, rows, F.lit(True), (), only_matched=True).select(
        *columns, F.lit("update_postimage").alias("_change_type")
    )
    files, _ = write_change_files(job.spark, snapshot, job.txn, before.unionByName(after), job.cached)
    job.metrics["numAddedChangeFiles"] = files
