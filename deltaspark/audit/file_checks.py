"""Checks of the files the audited version points to: data files exist with their logged size,
deletion vectors decode and agree with their descriptors, parquet footers agree with the log
(row counts, readable column types), statistics are sane, partition values parse, and the CDC
files of retained commits exist.

Existence is a join with the distributed listing of the table (one listing, not one request per
file); only files the listing cannot show (outside the table root, in hidden folders) are looked
up one by one, in tasks.
"""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DecimalType, MapType, StructField, StructType

from deltaspark.audit import file_tasks
from deltaspark.audit.context import AuditContext
from deltaspark.audit.findings import FINDINGS_SCHEMA, findings_of
from deltaspark.features.column_mapping import ID_KEY, physical_name
from deltaspark.features.partition_values import parse_partition_value, partition_fields
from deltaspark.features.schema import drop_void_fields
from deltaspark.features.type_widening import TYPE_CHANGES_KEY
from deltaspark.log.files import LogFileKind
from deltaspark.log.paths import canonical_path
from deltaspark.log.replay import read_json_actions
from deltaspark.spark_compat import held_left_join, map_in_arrow

cloudpickle.register_pickle_by_value(file_tasks)


def live_files(ctx: AuditContext) -> DataFrame:
    """The audited version's live `add`s (see `AuditContext.live_files`)."""
    return ctx.live_files


def _missing_or_resized(ctx: AuditContext, files: DataFrame, check: str, what: str) -> DataFrame:
    """`files` (`path, size, version`) that the listing does not show with that size; files the
    listing cannot see are looked up in tasks."""
    listed = ctx.table_files.where(~F.col("isDir")).select(
        F.col("path").alias("_l_path"), F.col("size").alias("_l_size")
    )
    joined = held_left_join(files, listed, "path", "_l_path") or files.join(
        listed, files["path"] == listed["_l_path"], "left"
    )
    resized = findings_of(
        joined.where(
            F.col("_l_path").isNotNull() & F.col("size").isNotNull() & (F.col("_l_size") != F.col("size"))
        ),
        check,
        "error",
        F.concat(
            F.lit(f"{what} is "),
            F.col("_l_size").cast("string"),
            F.lit(" bytes, the log says "),
            F.col("size").cast("string"),
        ),
        F.col("version"),
        F.col("path"),
        F.col("_l_size"),
    )
    unlisted = joined.where(F.col("_l_path").isNull()).select("path", "size", "version")
    looked_up = map_in_arrow(unlisted, file_tasks.stat_batches(check, what), FINDINGS_SCHEMA)
    return resized.unionByName(looked_up)


def data_files_exist(ctx: AuditContext) -> DataFrame:
    """Every live data file exists and has the size its `add` logs."""
    files = live_files(ctx).select("path", F.col("add.size").alias("size"), "version")
    return _missing_or_resized(ctx, files, "files.exist", "data file")


def deletion_vectors(ctx: AuditContext) -> DataFrame:
    """Every live file's DV is there and valid: size, CRC-32, magic, cardinality, rows < numRecords."""
    dv = F.col("add.deletionVector")
    rows = (
        live_files(ctx)
        .where(dv.isNotNull())
        .select(
            "path",
            "version",
            "numRecords",
            dv.getField("storageType").alias("storageType"),
            dv.getField("pathOrInlineDv").alias("pathOrInlineDv"),
            dv.getField("offset").alias("offset"),
            dv.getField("sizeInBytes").alias("sizeInBytes"),
            dv.getField("cardinality").alias("cardinality"),
        )
    )
    return map_in_arrow(rows, file_tasks.dv_batches(ctx.root), FINDINGS_SCHEMA)


def _type_plan(data_type: DataType, mode: str, widened: bool) -> dict[str, Any]:
    name = data_type.typeName()
    if name in ("char", "varchar"):
        name = "string"
    plan: dict[str, Any] = {"kind": name, "widened": widened}
    if isinstance(data_type, DecimalType):
        plan.update(kind="decimal", precision=data_type.precision, scale=data_type.scale)
    elif isinstance(data_type, StructType):
        plan["fields"] = [_field_plan(f, mode, widened) for f in data_type.fields]
    elif isinstance(data_type, ArrayType):
        plan["element"] = _type_plan(data_type.elementType, mode, widened)
    elif isinstance(data_type, MapType):
        plan["key"] = _type_plan(data_type.keyType, mode, widened)
        plan["value"] = _type_plan(data_type.valueType, mode, widened)
    return plan


def _field_plan(field: StructField, mode: str, widened: bool = False) -> dict[str, Any]:
    widened = widened or TYPE_CHANGES_KEY in field.metadata
    plan = _type_plan(field.dataType, mode, widened)
    plan.update(
        name=field.name,
        physical=physical_name(field, mode),
        id=int(field.metadata[ID_KEY]) if mode == "id" and ID_KEY in field.metadata else None,
    )
    return plan


def footers(ctx: AuditContext) -> DataFrame:
    """Every live data file's parquet footer: readable, `num_rows == numRecords`, and each table
    column stored in a type it can be read as (by physical name or field id, widening allowed)."""
    snapshot = ctx.snapshot
    assert snapshot is not None
    partitions = {c.lower() for c in snapshot.partitionColumns}
    fields = [f for f in drop_void_fields(snapshot.schema).fields if f.name.lower() not in partitions]
    plans = [_field_plan(f, snapshot.columnMappingMode) for f in fields]
    rows = live_files(ctx).select("path", "version", "numRecords")
    return map_in_arrow(rows, file_tasks.footer_batches(plans), FINDINGS_SCHEMA)


def _leaves(data_type: DataType, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(data_type, StructType):
        return [leaf for f in data_type.fields for leaf in _leaves(f.dataType, (*prefix, f.name))]
    return [prefix]


def _get(column: Column, path: tuple[str, ...]) -> Column:
    for name in path:
        column = column.getField(name)
    return column


def statistics(ctx: AuditContext) -> DataFrame:
    """Per live file: numRecords >= 0, each nullCount <= numRecords, each minValue <= maxValue."""
    files = live_files(ctx)
    stats_type = files.schema["stats"].dataType
    assert isinstance(stats_type, StructType)
    stats, records = F.col("stats"), F.col("numRecords")
    problems = [F.when(records < 0, F.lit("numRecords is negative"))]
    if "nullCount" in stats_type.fieldNames():
        for leaf in _leaves(stats_type["nullCount"].dataType):
            count = _get(stats.getField("nullCount"), leaf)
            name = ".".join(leaf)
            problems.append(
                F.when(
                    count > records,
                    F.concat(
                        F.lit(f"nullCount of {name} ("), count.cast("string"), F.lit(") exceeds numRecords")
                    ),
                )
            )
    if "minValues" in stats_type.fieldNames() and "maxValues" in stats_type.fieldNames():
        maxima = set(_leaves(stats_type["maxValues"].dataType))
        for leaf in _leaves(stats_type["minValues"].dataType):
            if leaf not in maxima:
                continue
            low, high = _get(stats.getField("minValues"), leaf), _get(stats.getField("maxValues"), leaf)
            name = ".".join(leaf)
            problems.append(
                F.when(
                    low > high,
                    F.concat(
                        F.lit(f"minValues.{name} ("),
                        low.cast("string"),
                        F.lit(f") > maxValues.{name} ("),
                        high.cast("string"),
                        F.lit(")"),
                    ),
                )
            )
    found = files.select(
        "path", "version", F.explode(F.filter(F.array(*problems), lambda p: p.isNotNull())).alias("problem")
    )
    return findings_of(found, "files.statistics", "error", F.col("problem"), F.col("version"), F.col("path"))


def partition_values(ctx: AuditContext) -> DataFrame:
    """Every live file has a value for each partition column (by physical name), and it parses as
    the column's type; keys that are no partition column are warned about. One pass over the
    files: each file's problems, errors and warnings, are one array."""
    snapshot = ctx.snapshot
    assert snapshot is not None
    mode = snapshot.columnMappingMode
    fields = partition_fields(drop_void_fields(snapshot.schema), snapshot.partitionColumns)
    files = live_files(ctx)
    values = F.coalesce(F.col("add.partitionValues"), F.create_map().cast("map<string,string>"))

    def problem(severity: str, condition: Column, detail: Column) -> Column:
        return F.when(condition, F.struct(F.lit(severity).alias("severity"), detail.alias("detail")))

    problems = []
    keys = []
    for field in fields:
        key = physical_name(field, mode)
        keys.append(key)
        raw = values.getItem(key)
        typed = parse_partition_value(raw, field)
        problems.append(
            problem(
                "error",
                ~F.array_contains(F.map_keys(values), key),
                F.lit(f"no value for partition column {field.name}"),
            )
        )
        problems.append(
            problem(
                "error",
                raw.isNotNull() & (raw != "") & typed.isNull(),
                F.concat(
                    F.lit("partition value '"),
                    raw,
                    F.lit(f"' of {field.name} is not a valid {field.dataType.simpleString()}"),
                ),
            )
        )
    extra = F.array_except(F.map_keys(values), F.array(*[F.lit(k) for k in keys]).cast("array<string>"))
    problems.append(
        problem(
            "warning",
            F.size(extra) > 0,
            F.concat(
                F.lit("partitionValues has keys that are no partition column: "), F.array_join(extra, ", ")
            ),
        )
    )
    found = files.select(
        "path",
        "version",
        F.explode(F.filter(F.array(*problems), lambda p: p.isNotNull())).alias("problem"),
    )
    return findings_of(
        found,
        "files.partition_values",
        F.col("problem.severity"),
        F.col("problem.detail"),
        F.col("version"),
        F.col("path"),
    )


def change_data_files(ctx: AuditContext) -> DataFrame:
    """The `cdc` files of the retained commits in range exist with their logged size (every
    commit there is, whether or not the replay can reach it)."""
    commits = [c for c in ctx.files_of(LogFileKind.COMMIT) if ctx.in_range(c.version)]
    if not commits:
        return ctx.spark.createDataFrame([], FINDINGS_SCHEMA)
    cdc = read_json_actions(ctx.spark, commits, ["cdc"]).where(F.col("cdc").isNotNull())
    files = cdc.select(
        canonical_path("cdc.path", ctx.root).alias("path"), F.col("cdc.size").alias("size"), "version"
    )
    return _missing_or_resized(ctx, files, "files.change_data", "change data file")
