"""Per-file statistics of newly written data files, computed on the executors.

The files a write produced are read back once and aggregated by file (`_metadata.file_path`):
`numRecords`, `minValues`, `maxValues` and `nullCount` for the first
`delta.dataSkippingNumIndexedCols` leaf columns (default 32) or the columns named by
`delta.dataSkippingStatsColumns`, as the protocol's "Per-file Statistics" define them. The same
pass counts rows that break NOT NULL columns, CHECK constraints and invariants, so a write that
violates them is refused before it is committed. Nothing per file reaches the driver.

Bounds are exact (`tightBounds` is not written: there are no deletion vectors on new files).
Strings longer than the prefix length keep a truncated minimum (a prefix is never greater than
the value) and no maximum, since no prefix is an upper bound; NaN in a float column drops that
column's bounds for the file. Timestamps are written in milliseconds, the minimum rounded down
and the maximum rounded up, so both stay true bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    FloatType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.column_mapping import physical_name
from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.features.table_properties import stats_column_names

DEFAULT_NUM_INDEXED_COLS = 32
STRING_PREFIX = 32
_UTC_JSON = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSS",
    "timeZone": "UTC",
}


@dataclass(frozen=True)
class Leaf:
    path: tuple[str, ...]  # the column in the rows aggregated (logical names)
    field: StructField
    json_path: tuple[str, ...] = ()  # its names in the stats JSON (physical names); `path` if empty

    @property
    def key(self) -> tuple[str, ...]:
        return self.json_path or self.path


def indexed_leaves(schema: StructType, configuration: dict[str, str], mode: str = "none") -> list[Leaf]:
    """The leaf columns statistics are collected for, in schema order (`dataSkippingStatsColumns`
    names logical columns); under column mapping (`mode`) they are keyed by physical names."""
    named = configuration.get("delta.dataSkippingStatsColumns")
    wanted = _stats_columns(named) if named else None
    limit = int(configuration.get("delta.dataSkippingNumIndexedCols", DEFAULT_NUM_INDEXED_COLS))
    leaves: list[Leaf] = []

    def walk(fields: list[StructField], prefix: tuple[str, ...], names: tuple[str, ...]) -> None:
        for f in fields:
            path, json_path = (*prefix, f.name), (*names, physical_name(f, mode))
            if isinstance(f.dataType, StructType):
                walk(f.dataType.fields, path, json_path)
            else:
                leaves.append(Leaf(path, f, json_path))

    walk(schema.fields, (), ())
    if wanted is not None:
        return [
            leaf
            for leaf in leaves
            if any(tuple(p.lower() for p in leaf.path[: i + 1]) in wanted for i in range(len(leaf.path)))
        ]
    return leaves if limit < 0 else leaves[:limit]


def _stats_columns(named: str) -> set[tuple[str, ...]]:
    """The column paths `delta.dataSkippingStatsColumns` names, lower-cased; a value set by a writer
    that did not check it is read leniently (names split at commas and dots, backticks dropped)."""
    try:
        paths = stats_column_names(named)
    except ValueError:
        paths = [n.strip().strip("`").split(".") for n in named.split(",")]
    return {tuple(p.lower() for p in path) for path in paths}


def _col(path: tuple[str, ...]) -> Column:
    column = F.col(f"`{path[0]}`")
    for part in path[1:]:
        column = column.getField(part)
    return column


def _nest(values: dict[tuple[str, ...], Column]) -> Column | None:
    """A struct Column nesting `values` by their paths (None when there are none)."""
    tree: dict[str, object] = {}
    for path, value in values.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[path[-1]] = value  # type: ignore[index]

    def build(node: dict[str, object]) -> Column:
        return F.struct(*[(build(v) if isinstance(v, dict) else v).alias(k) for k, v in node.items()])  # type: ignore[union-attr,arg-type]

    return build(tree) if tree else None


def stats_aggregates(leaves: list[Leaf]) -> tuple[list[Column], dict[str, tuple[tuple[str, ...], str]]]:
    """Aggregate Columns for one file's rows, and what each aggregate is (path, kind)."""
    aggs: list[Column] = []
    meaning: dict[str, tuple[tuple[str, ...], str]] = {}
    for i, leaf in enumerate(leaves):
        column = _col(leaf.path)
        data_type = leaf.field.dataType
        name = f"n{i}"
        aggs.append(F.sum(F.when(column.isNull(), 1).otherwise(0)).alias(name))
        meaning[name] = (leaf.key, "nullCount")
        if not isinstance(data_type, MIN_MAX_TYPES) or isinstance(data_type, (ArrayType, MapType)):
            continue
        value = column
        if isinstance(data_type, (FloatType, DoubleType)):
            aggs.append(F.sum(F.when(F.isnan(column), 1).otherwise(0)).alias(f"nan{i}"))
            meaning[f"nan{i}"] = (leaf.key, "nan")
        if isinstance(data_type, StringType):
            aggs.append(F.max(F.length(column)).alias(f"len{i}"))
            meaning[f"len{i}"] = (leaf.key, "maxLength")
        aggs.append(F.min(value).alias(f"min{i}"))
        aggs.append(F.max(value).alias(f"max{i}"))
        meaning[f"min{i}"] = (leaf.key, "min")
        meaning[f"max{i}"] = (leaf.key, "max")
    return aggs, meaning


def stats_json(leaves: list[Leaf], meaning: dict[str, tuple[tuple[str, ...], str]]) -> Column:
    """The `stats` JSON of one aggregated file row (see `stats_aggregates`)."""
    types = {leaf.key: leaf.field.dataType for leaf in leaves}
    mins: dict[tuple[str, ...], Column] = {}
    maxs: dict[tuple[str, ...], Column] = {}
    nulls: dict[tuple[str, ...], Column] = {}
    index = {v: k for k, v in meaning.items()}
    for path, kind in meaning.values():
        if kind == "nullCount":
            nulls[path] = F.col(index[(path, kind)])
    for path, kind in meaning.values():
        if kind != "min":
            continue
        low, high = F.col(index[(path, "min")]), F.col(index[(path, "max")])
        data_type = types[path]
        if (path, "nan") in index:
            has_nan = F.col(index[(path, "nan")]) > 0
            low = F.when(~has_nan, low)
            high = F.when(~has_nan, high)
        if isinstance(data_type, StringType):
            low = F.substring(low, 1, STRING_PREFIX)
            high = F.when(F.col(index[(path, "maxLength")]) <= STRING_PREFIX, high)
        if isinstance(data_type, (TimestampType, TimestampNTZType)):
            # JSON keeps milliseconds (the format truncates): round the maximum up to stay a bound.
            sub_ms = (F.date_part(F.lit("SECOND"), high) * 1_000_000).cast("long") % 1000
            pad = ((F.lit(1000) - sub_ms) % 1000).cast("decimal(18,6)") / 1_000_000
            high = high + F.make_dt_interval(F.lit(0), F.lit(0), F.lit(0), pad)
        mins[path] = low
        maxs[path] = high
    parts = [F.col("num_records").alias("numRecords")]
    for name, values in (("minValues", mins), ("maxValues", maxs), ("nullCount", nulls)):
        nested = _nest(values)
        if nested is not None:
            parts.append(nested.alias(name))
    return F.to_json(F.struct(*parts), _UTC_JSON)


def check_layout_statistics(
    names: list[str], schema: StructType, configuration: dict[str, str], table_path: str, verb: str
) -> None:
    """Refuse clustering or Z-order columns the table collects no statistics for (the protocol
    requires them for clustering; without them neither layout lets a read skip a file)."""
    indexed = {leaf.path[0].lower() for leaf in indexed_leaves(schema, configuration) if len(leaf.path) == 1}
    missing = [name for name in names if name.lower() not in indexed]
    if missing:
        raise InvalidArgumentError(
            f"Cannot {verb} {table_path} by {', '.join(missing)}: the table collects no statistics for "
            "them (see delta.dataSkippingNumIndexedCols / delta.dataSkippingStatsColumns)"
        )
