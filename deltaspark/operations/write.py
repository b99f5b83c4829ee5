"""Writing a DataFrame to a Delta table: append, overwrite, replaceWhere, idempotent writes.

Spark writes the parquet files, in a directory of their own under the table root
(`<write id>/<partition dirs>/part-*.parquet`): the add paths are then exactly the files of this
write, found without listing the table and never confused with a concurrent writer's files. The
files are read back once to compute their statistics and to check NOT NULL columns, CHECK
constraints, invariants and generated columns (`file_stats`); a violation fails the write before
anything is committed (the written files stay unreferenced, for VACUUM). The `add` actions stay a
DataFrame all the way into the commit (`transaction`).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from deltaspark.errors import (
    InvalidArgumentError,
    InvariantViolationError,
    TableAlreadyExistsError,
    UnsupportedWriterFeatureError,
)
from deltaspark.features import clustering
from deltaspark.features.column_mapping import (
    column_mapping_mode,
    physical_field,
    physical_name,
    physical_type,
    with_column_mapping,
)
from deltaspark.features.enablement import (
    features_for_properties,
    features_for_schema,
    required_protocol,
    stored_configuration,
)
from deltaspark.features.expressions import resolve_expression
from deltaspark.features.identity_columns import IdentityInfo, identity_columns, with_high_water_marks
from deltaspark.features.metadata import Metadata
from deltaspark.features.partition_values import partition_fields, serialize_partition_value
from deltaspark.features.protocol import Protocol
from deltaspark.features.schema_evolution import fits, merge_schemas
from deltaspark.features.table_properties import check_user_properties
from deltaspark.log import action_schemas as schemas
from deltaspark.operations.file_stats import (
    check_layout_statistics,
    indexed_leaves,
    stats_aggregates,
    stats_json,
)
from deltaspark.operations.footer_stats import footer_adds, footer_route
from deltaspark.read.predicates import from_filter, references
from deltaspark.snapshot import Snapshot
from deltaspark.spark_compat import held_frame, micros_timestamps
from deltaspark.storage import Storage, join_path, storage_for
from deltaspark.transaction import actions as A
from deltaspark.transaction.idempotent import app_transaction, apply_once
from deltaspark.transaction.transaction import CommitResult, Transaction, driver_file_actions, rendered_adds

log = logging.getLogger(__name__)

MODES = ("append", "overwrite", "error", "errorifexists", "ignore")
GENERATION_KEY = "delta.generationExpression"
INVARIANTS_KEY = "delta.invariants"
CONSTRAINT_PREFIX = "delta.constraints."


@dataclass(frozen=True)
class Check:
    """A rule every written row must satisfy, as a SQL expression over the table's columns."""

    name: str
    expression: str


def checks_of(schema: StructType, configuration: dict[str, str]) -> list[Check]:
    """NOT NULL columns, CHECK constraints, column invariants and generated columns."""
    checks = []
    for field in schema.fields:
        quoted = f"`{field.name}`"
        if not field.nullable:
            checks.append(Check(f"NOT NULL {field.name}", f"{quoted} IS NOT NULL"))
        invariant = field.metadata.get(INVARIANTS_KEY)
        if invariant:
            expression = json.loads(invariant)["expression"]["expression"]
            checks.append(Check(f"invariant on {field.name}", expression))
        generated = field.metadata.get(GENERATION_KEY)
        if generated:
            checks.append(Check(f"generated column {field.name}", f"{quoted} <=> ({generated})"))
    for key, expression in sorted(configuration.items()):
        if key.startswith(CONSTRAINT_PREFIX):
            checks.append(Check(f"CHECK constraint {key[len(CONSTRAINT_PREFIX) :]}", expression))
    return checks


def conform(df: DataFrame, schema: StructType, table_path: str) -> DataFrame:
    """The rows in the table's column order and types: columns (and struct fields, at any depth)
    matched by name, case-insensitively; missing nullable ones as null; generated columns computed
    when absent; values the table's types hold without loss cast to them; anything else refused by
    name (`mergeSchema=True` adds new columns and fields)."""
    if [(f.name, f.dataType) for f in df.schema.fields] == [(f.name, f.dataType) for f in schema.fields]:
        return df  # already the table's columns, names and types (NOT NULL is checked in the write)
    given = {f.name.lower(): f for f in df.schema.fields}
    wanted = {f.name.lower() for f in schema.fields}
    extra = sorted(f.name for f in df.schema.fields if f.name.lower() not in wanted)
    if extra:
        raise InvalidArgumentError(
            f"The DataFrame has column(s) {', '.join(extra)} that {table_path} does not have "
            "(pass mergeSchema=True to add them to the table)"
        )
    columns: list[Column] = []
    for field in schema.fields:
        source = given.get(field.name.lower())
        if source is None:
            if field.metadata.get(GENERATION_KEY):
                continue  # computed below, from the conformed columns
            if not field.nullable:
                raise InvalidArgumentError(
                    f"The DataFrame has no column `{field.name}`, which is NOT NULL in {table_path}"
                )
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        column = F.col(f"`{source.name}`")
        value = conform_value(column, source.dataType, field.dataType, field.name, table_path)
        columns.append(value.alias(field.name))
    generated_missing = [
        f for f in schema.fields if f.name.lower() not in given and f.metadata.get(GENERATION_KEY)
    ]
    if generated_missing:
        # Generated expressions refer to other columns by name: compute them on the conformed rows.
        base = df.select(*columns)
        return base.select(
            *[
                F.expr(f.metadata[GENERATION_KEY]).cast(f.dataType).alias(f.name)
                if f in generated_missing
                else F.col(f"`{f.name}`")
                for f in schema.fields
            ]
        )
    return df.select(*columns)


def conform_value(value: Column, source: DataType, target: DataType, path: str, table_path: str) -> Column:
    """`value` (of type `source`) as the table's `target` type, struct fields matched by name.

    Spark's struct cast is positional, which would silently swap fields given in another order, so
    structs are rebuilt field by field (inside arrays and maps too)."""
    if _same_shape(source, target):
        return value if source == target else value.cast(target)
    if isinstance(source, StructType) and isinstance(target, StructType):
        given = {f.name.lower(): f for f in source.fields}
        wanted = {f.name.lower() for f in target.fields}
        extra = sorted(f.name for f in source.fields if f.name.lower() not in wanted)
        if extra:
            raise InvalidArgumentError(
                f"The DataFrame's `{path}` has field(s) {', '.join(extra)} that {table_path} does not "
                "have (pass mergeSchema=True to add them)"
            )
        parts = []
        for field in target.fields:
            match = given.get(field.name.lower())
            if match is None:
                if not field.nullable:
                    raise InvalidArgumentError(
                        f"The DataFrame's `{path}` has no field `{field.name}`, NOT NULL in {table_path}"
                    )
                parts.append(F.lit(None).cast(field.dataType).alias(field.name))
            else:
                inner = conform_value(
                    value.getField(match.name),
                    match.dataType,
                    field.dataType,
                    f"{path}.{field.name}",
                    table_path,
                )
                parts.append(inner.alias(field.name))
        return F.when(value.isNull(), F.lit(None).cast(target)).otherwise(F.struct(*parts))
    if isinstance(source, ArrayType) and isinstance(target, ArrayType):
        element = (source.elementType, target.elementType)
        return F.transform(value, lambda x: conform_value(x, *element, f"{path}.element", table_path))
    if isinstance(source, MapType) and isinstance(target, MapType):
        keys, values = (source.keyType, target.keyType), (source.valueType, target.valueType)
        if not _same_shape(*keys):
            value = F.transform_keys(value, lambda k, _: conform_value(k, *keys, f"{path}.key", table_path))
        if not _same_shape(*values):
            value = F.transform_values(
                value, lambda _, v: conform_value(v, *values, f"{path}.value", table_path)
            )
        return value
    if fits(source, target):
        return value.cast(target)
    raise InvalidArgumentError(
        f"Column `{path}` of {table_path} is {target.simpleString()}; the DataFrame has "
        f"{source.simpleString()}, which does not convert without loss"
        + (" (mergeSchema=True with delta.enableTypeWidening=true widens it)" if fits(target, source) else "")
    )


def _same_shape(source: DataType, target: DataType) -> bool:
    """Nested types equal up to nullability and metadata (a struct from a literal, say)."""
    return json.dumps(_strip(source.jsonValue())) == json.dumps(_strip(target.jsonValue()))


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def check_writable_rows(protocol: Protocol, metadata: Metadata, table_path: str) -> None:
    """Refuse data writes that deltaspark's writer cannot make correctly yet, naming the feature."""
    reasons = []
    if protocol.hasFeature("materializePartitionColumns"):
        reasons.append("`materializePartitionColumns`: partition columns are not written into data files")
    if protocol.hasFeature("icebergCompatV1") or protocol.hasFeature("icebergCompatV2"):
        reasons.append("`icebergCompatV1/V2`: the Iceberg metadata UniForm keeps is not written")
    if reasons:
        raise UnsupportedWriterFeatureError(
            f"Cannot write rows to {table_path} yet: " + "; ".join(reasons),
            [r.split("`")[1] for r in reasons],
        )


def write_data_files(
    spark: SparkSession,
    table_root: str,
    schema: StructType,
    partition_columns: list[str],
    configuration: dict[str, str],
    df: DataFrame,
    extra_checks: list[Check] = (),  # type: ignore[assignment]
    directory: str = "",
    check_rows: bool = True,
    mode: str = "none",
    hidden_columns: tuple[str, ...] = (),
    extra_aggregates: tuple[Column, ...] = (),
    storage: Storage | None = None,
) -> WrittenFiles:
    """Write `df` (already conformed) as parquet files under the table root (in `directory`, e.g.
    `_change_data/`, when given); return their `add` actions (`add`, `num_records`) as a DataFrame,
    after checking every rule in `checks_of` (unless `check_rows` is off, for change data files),
    and the cached per-file rows behind it (for the caller to unpersist). `hidden_columns` of `df`
    (materialized row-tracking columns) are written as they are, outside the table's schema.

    Under column mapping (`mode` name or id) the files hold physical column names at every depth
    and parquet field ids, and statistics and partition values are keyed by physical names."""
    fields = partition_fields(schema, partition_columns)
    partition_names = [f.name for f in fields]
    data_fields = [f for f in schema.fields if f.name not in partition_names]
    write_id = directory + f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}"
    out = join_path(table_root, write_id)
    stored = [physical_field(f, mode) for f in data_fields]
    checks = (checks_of(schema, configuration) if check_rows else []) + list(extra_checks)
    given = {f.name: f.dataType for f in df.schema.fields}
    # (value, name, field metadata, whether the value is `df`'s own column as written) of each
    # written column. A column already as written is taken as it is: building a cast and an alias
    # costs ~40 round trips into the JVM, 4 ms a column (a wide table's every write paid it).
    columns: list[tuple[Column, str, dict[str, Any], bool]] = [
        *[
            (df[f"`{f.name}`"], p.name, {}, True)
            if given.get(f.name) == p.dataType and p.name == f.name and not p.metadata
            else (F.col(f"`{f.name}`").cast(p.dataType), p.name, dict(p.metadata), False)
            for f, p in zip(data_fields, stored, strict=True)
        ],
        *[(F.col(f"`{name}`").cast("long"), name, {}, False) for name in hidden_columns],
        *[
            (serialize_partition_value(F.col(f"`{f.name}`"), f.dataType), physical_name(f, mode), {}, False)
            for f in fields
        ],
    ]
    if checks:
        # Every rule is evaluated in the write's own projection: a row that breaks one fails the
        # write's job (Spark aborts it: no file of it stays), and is counted afterwards.
        columns[0] = (_raising_checks(columns[0][0], checks), *columns[0][1:3], False)
    staged = df.select(
        *[value if as_is else value.alias(name, metadata=meta) for value, name, meta, as_is in columns]
    )
    writer = staged.write.mode("errorifexists").option(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
    )
    if partition_names:
        writer = writer.partitionBy(*[physical_name(f, mode) for f in fields])
    log.info("Writing data files to %s", out)
    storage = storage or storage_for(spark)
    leaves = indexed_leaves(StructType(data_fields), configuration, mode)
    footers = not extra_aggregates and footer_route(spark, storage, leaves)
    try:
        if _has_timestamps(schema):
            with micros_timestamps(spark):  # INT64 timestamps: footers then hold their bounds
                writer.parquet(out)
        else:
            writer.parquet(out)
    except Exception as exc:
        index = _raised_check(exc)
        if index is None:
            raise
        raise _violation(df, checks, index, table_root) from None

    if footers:
        found = footer_adds(spark, storage, out, write_id, fields, leaves, mode)  # type: ignore[arg-type]
        if found is not None:
            return _written_from(spark, found)
    relative = F.concat(F.lit(write_id + "/"), F.regexp_extract("__file", "/" + write_id + "/(.*)$", 1))
    return describe_files(
        spark,
        out,
        data_fields,
        fields,
        configuration,
        relative,
        mode=mode,
        extra_aggregates=extra_aggregates,
    )


_CHECK_MARK = "deltaspark check {} violated"
_CHECK_RAISED = re.compile(r"deltaspark check (\d+) violated")


def _breaks(check: Check) -> Column:
    """True for a row that breaks `check` (its expression false or null)."""
    return ~F.coalesce(F.expr(check.expression), F.lit(False))


def _raising_checks(value: Column, checks: list[Check]) -> Column:
    """`value`, unless the row breaks a check: then an error naming the check's index."""
    chain = None
    for i, check in enumerate(checks):
        broken = _breaks(check)
        error = F.raise_error(F.lit(_CHECK_MARK.format(i)))
        chain = F.when(broken, error) if chain is None else chain.when(broken, error)
    return chain.otherwise(value)  # type: ignore[union-attr]


def _raised_check(exc: BaseException) -> int | None:
    match = _CHECK_RAISED.search(str(exc))
    return int(match.group(1)) if match else None


def _violation(df: DataFrame, checks: list[Check], raised: int, table_root: str) -> InvariantViolationError:
    """The error for a write a check stopped: every check's count of breaking rows (a second look
    at the input, on this failure path only)."""
    sums = [F.sum(F.when(_breaks(c), 1).otherwise(0)).alias(f"b{i}") for i, c in enumerate(checks)]
    counts = df.agg(*sums).first()
    broken = [(c, int(counts[i] or 0)) for i, c in enumerate(checks) if counts is not None and counts[i]]
    if not broken:  # the input changed between the two looks (a non-deterministic source)
        detail = f"{checks[raised].name} ({checks[raised].expression}): at least 1 row"
    else:
        detail = "; ".join(f"{c.name} ({c.expression}): {n} row(s)" for c, n in broken)
    return InvariantViolationError(f"Rows written to {table_root} violate {detail}; nothing was committed")


def _has_timestamps(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return any(_has_timestamps(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_timestamps(data_type.elementType)
    if isinstance(data_type, MapType):
        return _has_timestamps(data_type.keyType) or _has_timestamps(data_type.valueType)
    return isinstance(data_type, TimestampType)


def _written_from(spark: SparkSession, found: list[tuple[dict[str, Any], int]]) -> WrittenFiles:
    """`WrittenFiles` of adds made on the driver (from footers): their lines are handed to the
    transaction when few (`driver_file_actions`), else a DataFrame of them."""
    lines: list[tuple[str, int | None]] = [(A.line({"add": add}), records) for add, records in found]
    rows = sum(records for _, records in found)
    size = sum(int(add["size"]) for add, _ in found)
    if len(lines) <= driver_file_actions(spark):
        return WrittenFiles(None, None, len(found), rows, size, lines)
    return WrittenFiles(_frame_of(spark, lines), None, len(found), rows, size)


def _frame_of(spark: SparkSession, lines: list[tuple[str, int | None]]) -> DataFrame:
    """A DataFrame of `add` actions from their commit lines."""
    frame = held_frame(spark, lines, "line string, num_records long")
    return frame.select(
        F.from_json("line", StructType([StructField("add", schemas.ADD)])).getField("add").alias("add"),
        "num_records",
    )


class WrittenFiles(NamedTuple):
    """Data files just written (or converted): their `add` actions (`add`, `num_records`), the
    cached per-file rows behind them (for the caller to unpersist), and their totals. When the adds
    were made on the driver and are few, `lines` holds them and there is no DataFrame (`adds` and
    `cached` are None): `add_rows` reads them either way."""

    adds: DataFrame | None
    cached: DataFrame | None
    files: int
    rows: int
    bytes: int
    lines: list[tuple[str, int | None]] | None = None  # when few: the adds' commit lines, collected

    def add_rows(self) -> list[tuple[dict[str, Any], int]]:
        """Every add (as a dict) and its row count, on the driver: for callers that know they are
        few (change data files: one per partition and task)."""
        if self.lines is not None:
            return [(json.loads(line)["add"], int(records or 0)) for line, records in self.lines]
        assert self.adds is not None
        rows = rendered_adds(self.adds).collect()
        return [(json.loads(r["line"])["add"], int(r["num_records"] or 0)) for r in rows]

    def adds_frame(self, spark: SparkSession) -> DataFrame:
        """The adds as a DataFrame (`add`, `num_records`), made from `lines` when they are held."""
        if self.adds is not None:
            return self.adds
        return _frame_of(spark, self.lines or [])

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


def describe_files(
    spark: SparkSession,
    location: str,
    data_fields: list[StructField],
    fields: list[StructField],
    configuration: dict[str, str],
    relative: Column,
    reserialize: bool = False,
    mode: str = "none",
    extra_aggregates: tuple[Column, ...] = (),
) -> WrittenFiles:
    """Read the parquet files under `location` once: `add` actions with statistics per file (the
    read-back route: what footers cannot say, files written by other tools). Partition directories
    are read as strings; `reserialize` parses them as their types and writes them back in the
    protocol's form (for directories written by other tools). `relative` turns `__file` (the
    file's URI) into the add path. Files of a column-mapped table (`mode`) are read by physical
    names; statistics are computed under logical names, then keyed by physical names.
    `extra_aggregates` are computed per file too (identity columns' high-water marks)."""
    read_schema = StructType(
        [StructField(physical_name(f, mode), physical_type(f.dataType, mode), True) for f in data_fields]
        + [StructField(physical_name(f, mode), StringType(), True) for f in fields]
    )
    files = spark.read.schema(read_schema).option("basePath", location).parquet(location)

    def logical(f: StructField) -> Column:
        column = F.col(f"`{physical_name(f, mode)}`")
        return column if mode == "none" else column.cast(f.dataType)

    typed = files.select(
        *[logical(f).alias(f.name) for f in data_fields],
        *[logical(f).cast(f.dataType).alias(f.name) for f in fields],
        *[
            (
                serialize_partition_value(logical(f).cast(f.dataType), f.dataType)
                if reserialize
                else F.col(f"`{physical_name(f, mode)}`")
            ).alias(f"__pv_{i}")
            for i, f in enumerate(fields)
        ],
        F.col("_metadata.file_path").alias("__file"),
        F.col("_metadata.file_size").alias("__size"),
        F.unix_millis(F.col("_metadata.file_modification_time")).alias("__mtime"),
    )
    leaves = indexed_leaves(StructType(data_fields), configuration, mode)
    aggs, meaning = stats_aggregates(leaves)
    per_file = typed.groupBy("__file", "__size", "__mtime").agg(
        F.count(F.lit(1)).alias("num_records"),
        *[F.first(f"__pv_{i}").alias(f"__pv_{i}") for i in range(len(fields))],
        *aggs,
        *extra_aggregates,
    )
    per_file = per_file.persist()
    partition_values = (
        F.create_map(
            *[x for i, f in enumerate(fields) for x in (F.lit(physical_name(f, mode)), F.col(f"__pv_{i}"))]
        )
        if fields
        else F.create_map().cast(schemas.STRING_MAP)
    )
    add = F.struct(
        relative.alias("path"),
        partition_values.alias("partitionValues"),
        F.col("__size").cast("long").alias("size"),
        F.col("__mtime").cast("long").alias("modificationTime"),
        F.lit(True).alias("dataChange"),
        stats_json(leaves, meaning).alias("stats"),
    )
    adds = per_file.select(add.alias("add"), "num_records")
    # The job that computes (and caches) the per-file rows collects them when they are few - their
    # commit lines and counts, totalled here - else totals them.
    limit = driver_file_actions(spark)
    held = None
    if limit > 0:
        shaped = per_file.select(add.alias("add"), "num_records", "__size")
        held = rendered_adds(shaped).limit(limit + 1).collect()
    if held is not None and len(held) <= limit:
        totals = [len(held), sum(r["num_records"] for r in held), sum(r["__size"] for r in held)]
        lines = [(r["line"], r["num_records"]) for r in held]
    else:
        sums = [F.sum(c) for c in ("num_records", "__size")]
        totals = list(per_file.agg(F.count(F.lit(1)), *sums).first())
        lines = None
    return WrittenFiles(adds, per_file, int(totals[0] or 0), int(totals[1] or 0), int(totals[2] or 0), lines)


def add_of(**changes: Column) -> Column:
    """The `add` action of a `files()` row (the protocol's fields), with the fields in `changes`
    replaced: `add_of(dataChange=F.lit(False))` re-adds a file as it is."""
    return F.struct(*[changes.get(f.name, F.col(f.name)).alias(f.name) for f in schemas.ADD.fields])


def removes_of(files: DataFrame, now_ms: int, data_change: bool = True) -> DataFrame:
    """`remove` actions for `files()` rows (see `remove_of`)."""
    return files.select(remove_of(now_ms, data_change).alias("remove"))


def remove_of(now_ms: int, data_change: bool = True) -> Column:
    """The `remove` action of a `files()` row, carrying what the protocol asks (extended metadata,
    the DV and row-tracking fields, so that CDF and row ids stay derivable). One SQL expression:
    built from Column functions it took ~55 JVM round trips, and an operation builds it for its
    totals, its removes and their commit lines."""
    return F.expr(
        f"struct(path, CAST({int(now_ms)} AS BIGINT) AS deletionTimestamp, "
        f"{'true' if data_change else 'false'} AS dataChange, true AS extendedFileMetadata, "
        "partitionValues, size, stats, tags, deletionVector, baseRowId, defaultRowCommitVersion)"
    )


def new_table_metadata(
    schema: StructType,
    partition_by: list[str],
    configuration: dict[str, str],
    name: str | None = None,
    description: str | None = None,
) -> Metadata:
    return Metadata(
        id=str(uuid.uuid4()),
        name=name,
        description=description,
        formatProvider="parquet",
        formatOptions={},
        schemaString=schema.json(),
        partitionColumns=tuple(partition_by),
        createdTime=int(time.time() * 1000),
        configuration=dict(configuration),
    )


def write(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    snapshot: Snapshot | None,
    df: DataFrame,
    mode: str = "append",
    partitionBy: list[str] | None = None,
    replaceWhere: Any = None,
    txnAppId: str | None = None,
    txnVersion: int | None = None,
    userMetadata: str | None = None,
    properties: dict[str, str] | None = None,
    mergeSchema: bool = False,
    overwriteSchema: bool = False,
    clusterBy: list[str] | None = None,
    operation: tuple[str, dict[str, Any]] | None = None,
) -> CommitResult | None:
    """Write `df` to the table (created when `snapshot` is None, clustered by `clusterBy` when
    given); None when nothing was committed (`ignore` on an existing table, or an idempotent write
    already applied). `operation`: the commit's operation and parameters when not a plain WRITE
    (a streaming sink's `STREAMING UPDATE`). `mergeSchema` adds the DataFrame's new columns to the table;
    `overwriteSchema` (with mode overwrite) replaces the schema and partitioning (a clustered table
    keeps its clustering columns, which must still be there)."""
    mode = mode.lower()
    if overwriteSchema and (mode != "overwrite" or replaceWhere is not None):
        raise InvalidArgumentError("overwriteSchema needs mode='overwrite' without replaceWhere")
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    app = app_transaction(spark, txnAppId, txnVersion)
    if snapshot is not None and mode in ("error", "errorifexists"):
        raise TableAlreadyExistsError(table_path)
    if snapshot is not None and mode == "ignore":
        return None
    if replaceWhere is not None and mode != "overwrite":
        raise InvalidArgumentError("replaceWhere needs mode='overwrite'")
    txn = Transaction(spark, storage, table_path, snapshot)
    if not apply_once(txn, app, table_path):
        return None

    if snapshot is None:
        schema = StructType([StructField(f.name, f.dataType, True, f.metadata) for f in df.schema.fields])
        configuration = check_user_properties(spark, properties or {}, schema, table_path)
        partition_by = list(partitionBy or [])
        missing = [c for c in partition_by if c.lower() not in {f.name.lower() for f in schema.fields}]
        if missing:
            raise InvalidArgumentError(
                f"partitionBy names column(s) {', '.join(missing)} not in the DataFrame"
            )
        schema, configuration = with_column_mapping(schema, configuration, keep_names=False)
        features = features_for_properties(configuration) | features_for_schema(schema)
        clustered = None
        if clusterBy is not None:
            clustered = clustering_columns(schema, clusterBy, partition_by, configuration, table_path)
            features.add("clustering")
        protocol = required_protocol(None, features)
        metadata = new_table_metadata(schema, partition_by, stored_configuration(configuration))
        txn.updateProtocol(protocol)
        txn.updateMetadata(metadata)
        if clustered is not None:
            mode_name = column_mapping_mode(protocol, metadata)
            txn.addAction(clustering.domain_action(clustering.physical_paths(clustered, mode_name)))
    else:
        if clusterBy is not None:
            raise InvalidArgumentError(
                f"clusterBy applies to a new table; use DeltaTable.clusterBy on {table_path}"
            )
        metadata, protocol = snapshot.metadata, snapshot.protocol
        if overwriteSchema:
            new_schema = StructType(
                [StructField(f.name, f.dataType, True, f.metadata) for f in df.schema.fields]
            )
            partition_by = list(partitionBy if partitionBy is not None else metadata.partitionColumns)
            missing = [
                c for c in partition_by if c.lower() not in {f.name.lower() for f in new_schema.fields}
            ]
            if missing:
                raise InvalidArgumentError(
                    f"partitionBy names column(s) {', '.join(missing)} not in the DataFrame"
                )
            new_schema, configuration = with_column_mapping(
                new_schema, dict(metadata.configuration), keep_names=False
            )
            metadata = replace(
                metadata,
                schemaString=new_schema.json(),
                partitionColumns=tuple(partition_by),
                configuration=configuration,
            )
            _keep_clustering(txn, snapshot, metadata, table_path)
            partitionBy = None
        elif mergeSchema:
            widening = metadata.flag("delta.enableTypeWidening") and protocol.hasFeature("typeWidening")
            merged = merge_schemas(metadata.schema(table_path), df.schema, table_path, widening)
            if merged != metadata.schema(table_path):
                # New columns get ids and physical names on a column-mapped table.
                merged, configuration = with_column_mapping(
                    merged, dict(metadata.configuration), keep_names=False
                )
                metadata = replace(metadata, schemaString=merged.json(), configuration=configuration)
        if metadata is not snapshot.metadata:
            protocol = required_protocol(protocol, features_for_schema(metadata.schema(table_path)))
            txn.updateProtocol(protocol)
            txn.updateMetadata(metadata)
        if partitionBy and [c.lower() for c in partitionBy] != [c.lower() for c in metadata.partitionColumns]:
            raise InvalidArgumentError(
                f"{table_path} is partitioned by {list(metadata.partitionColumns)}; "
                f"partitionBy={partitionBy} would change it (changing the partitioning is not supported)"
            )
        if properties:
            raise InvalidArgumentError(
                "properties apply to a new table; use setProperties on an existing one"
            )
    check_writable_rows(protocol, metadata, table_path)
    schema = metadata.schema(table_path)
    df, generated = with_identity_values(spark, df, identity_columns(schema), table_path)
    conformed = conform(df, schema, table_path)
    table_root = storage.qualify(table_path)

    extra: list[Check] = []
    now = int(time.time() * 1000)
    operation_parameters: dict[str, Any] = {"mode": "Overwrite" if mode == "overwrite" else "Append"}
    if metadata.partitionColumns:
        operation_parameters["partitionBy"] = json.dumps(list(metadata.partitionColumns))
    removed = None
    if snapshot is not None and mode == "overwrite":
        if replaceWhere is not None:
            resolve_expression(spark, schema, replaceWhere, "replaceWhere", table_path)
            check_partition_only(replaceWhere, metadata, table_path)
            predicate = replaceWhere if isinstance(replaceWhere, str) else None
            if predicate is None:
                raise InvalidArgumentError("replaceWhere must be a SQL string over partition columns")
            extra.append(Check(f"replaceWhere {predicate}", predicate))
            txn.readPredicate(predicate)
            removed = snapshot.files(predicate)
            operation_parameters["predicate"] = json.dumps([predicate])
        else:
            txn.readWholeTable()
            removed = snapshot.files()
    written = write_data_files(
        spark,
        table_root,
        schema,
        list(metadata.partitionColumns),
        metadata.configuration,
        conformed,
        extra,
        mode=column_mapping_mode(protocol, metadata),
        storage=storage,
        extra_aggregates=tuple(
            (F.max if g.step > 0 else F.min)(F.col(f"`{g.name}`")).alias(f"__identity_{i}")
            for i, g in enumerate(generated)
        ),
    )
    adds, cached = written.adds, written.cached  # cached: a DataFrame when identity values were made
    try:
        if generated:
            # The new high-water marks go into this commit's metaData (a concurrent writer that also
            # generated values then conflicts, instead of both committing the same values).
            ends = cached.agg(
                *[
                    (F.max if g.step > 0 else F.min)(f"__identity_{i}").alias(f"m{i}")
                    for i, g in enumerate(generated)
                ]
            ).first()
            marks = {g.name: int(ends[i]) for i, g in enumerate(generated) if ends[i] is not None}
            if marks:
                metadata = replace(metadata, schemaString=with_high_water_marks(schema, marks).json())
                txn.updateMetadata(metadata)
                operation_parameters["identityHighWaterMarks"] = json.dumps(marks)
        txn.addFiles(adds, written.files, written.lines)  # type: ignore[arg-type]
        metrics: dict[str, Any] = {
            "numFiles": written.files,
            "numOutputRows": written.rows,
            "numOutputBytes": written.bytes,
        }
        if removed is not None:
            gone = removed.agg(F.count(F.lit(1)), F.sum("size")).first()
            metrics["numRemovedFiles"] = int(gone[0] or 0)
            metrics["numRemovedBytes"] = int(gone[1] or 0)
            txn.removeFiles(removes_of(removed, now), metrics["numRemovedFiles"])
        name, operation_parameters = operation or ("WRITE", operation_parameters)
        return txn.commit(name, operation_parameters, metrics, userMetadata)
    finally:
        written.unpersist()


def with_identity_values(
    spark: SparkSession, df: DataFrame, identities: list[IdentityInfo], table_path: str
) -> tuple[DataFrame, list[IdentityInfo]]:
    """`df` with values generated for the identity columns it lacks, and those columns.

    Values are `base + step * (partition + k * n)` for the k-th row of partition `partition` of
    `n`, as delta-spark generates them: unique without coordination, beyond the high-water mark.
    The rows are first spread round-robin over exactly `n` partitions (Spark never coalesces an
    explicit repartition by number), so `partition < n` holds in the task that computes them.
    GENERATED ALWAYS columns given in `df` are refused; GENERATED BY DEFAULT ones are kept as given
    (and, as in delta-spark, do not move the high-water mark)."""
    given = {f.name.lower() for f in df.schema.fields}
    generated = []
    for identity in identities:
        if identity.name.lower() in given:
            if not identity.allow_explicit_insert:
                raise InvalidArgumentError(
                    f"Column `{identity.name}` of {table_path} is GENERATED ALWAYS AS IDENTITY: its values "
                    "are generated, leave it out of the DataFrame"
                )
            continue
        generated.append(identity)
    if not generated:
        return df, []
    n = max(1, int(spark.sparkContext.defaultParallelism))
    spread = df.repartition(n)
    partition = F.spark_partition_id().cast("long")
    k = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << 33) - 1))
    rank = F.try_add(partition, F.try_multiply(k, F.lit(n).cast("long")))
    columns = []
    for identity in generated:
        value = F.try_add(F.lit(identity.next_base).cast("long"), F.try_multiply(rank, F.lit(identity.step)))
        overflow = F.raise_error(
            F.lit(f"deltaspark: identity column `{identity.name}` of {table_path} overflowed BIGINT")
        )
        columns.append(F.when(value.isNull(), overflow.cast("long")).otherwise(value).alias(identity.name))
    log.info("Generating identity values for %s over %d partitions", [g.name for g in generated], n)
    return spread.select("*", *columns), generated


def clustering_columns(
    schema: StructType,
    names: list[str],
    partition_by: list[str] | tuple[str, ...],
    configuration: dict[str, str],
    table_path: str,
) -> list[StructField]:
    """The fields to cluster a table by: top-level, distinct, the table unpartitioned, and with
    statistics collected (the protocol requires them)."""
    fields = clustering.resolve_columns(schema, names, partition_by, table_path)
    check_layout_statistics([f.name for f in fields], schema, configuration, table_path, "cluster")
    return fields


def _keep_clustering(txn: Transaction, snapshot: Snapshot, metadata: Metadata, table_path: str) -> None:
    """An overwritten schema of a clustered table: its clustering columns must still be there (and
    the table unpartitioned); their physical names, new under column mapping, are recorded again."""
    old = clustering.clustering_fields(snapshot)
    if not old:
        return
    schema = metadata.schema(table_path)
    fields = clustering.resolve_columns(schema, [f.name for f in old], metadata.partitionColumns, table_path)
    mode_name = column_mapping_mode(snapshot.protocol, metadata)
    paths = clustering.physical_paths(fields, mode_name)
    if paths != clustering.physical_paths(old, snapshot.columnMappingMode):
        txn.addAction(clustering.domain_action(paths))


def check_partition_only(
    predicate: Any, metadata: Metadata, table_path: str, what: str = "replaceWhere"
) -> None:
    """Refuse a predicate (SQL string) that uses anything but partition columns."""
    if not isinstance(predicate, str):
        return
    names = {c.lower() for c in metadata.partitionColumns}
    found = references(from_filter(predicate))
    if found is None:
        raise InvalidArgumentError(
            f"{what} {predicate!r} on {table_path}: deltaspark cannot tell which columns it uses; "
            "use comparisons, IN, IS NULL, AND, OR and NOT over partition columns"
        )
    used = {r.lower() for r in found}
    outside = sorted(used - names)
    if outside or not used:
        raise InvalidArgumentError(
            f"{what} on {table_path} must use partition columns only "
            f"({', '.join(metadata.partitionColumns) or 'the table is not partitioned'}); it references "
            f"{', '.join(outside) or 'no column'}"
        )
