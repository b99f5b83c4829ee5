"""Which manifests and data files of an Iceberg snapshot can hold rows matching a filter.

The filter becomes the predicate tree Delta's data skipping reads (`read.predicates`), and one
`FileFilter` decides for both formats: each data file, and each manifest, is given the same
`stats_parsed` struct (`numRecords`, `minValues`, `maxValues`, `nullCount`) for the columns the
filter names.

- Data files: `lower_bounds`/`upper_bounds` (binary single values by field id), `null_value_counts`
  and `record_count`. Spark orders NaN above every number and Iceberg's bounds leave NaN out, so a
  float or double maximum counts only when `nan_value_counts` says the file has no NaN.
- The partition tuple tightens them: an identity value is both bounds; a year, month, day or hour
  value bounds the source to the period it names; `truncate[W]` bounds a number to [v, v+W-1] and
  a string from below. A NULL value of any transform but `void` means the source is NULL in every
  row; any other value means it is NULL in none.
- Manifests: the manifest list's partition summaries give the same bounds over the manifest's
  partitions, and `contains_null = false` rules out NULLs. Only data manifests are pruned.

Bounds are Iceberg's, so they are exact (a string maximum is a true upper bound, a timestamp one is
in microseconds). Whatever is unknown keeps the file, and the filter is applied to the rows as
well: pruning can only save reading, never change an answer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T

from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.table_metadata import TableMetadata
from deltaspark.read.data_skipping import FileFilter
from deltaspark.read.predicates import Ref, children
from deltaspark.spark_compat import arrow_schema

STATS = "stats_parsed"
_EPOCH_TS = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class Leaf:
    """A column the filter names whose bounds can be compared (reachable through structs only)."""

    field_id: int
    names: tuple[str, ...]
    iceberg_type: str


@dataclass(frozen=True)
class SourceField:
    """A partition field over a `Leaf`: its place in the spec (summaries are listed in that order)."""

    position: int
    field_id: int
    source_id: int
    source_type: str
    transform: str
    result_type: Any


def _referenced(node: Any) -> set[str]:
    """Lower-cased top-level names the tree refers to (parts it cannot read refer to none)."""
    if isinstance(node, Ref):
        return {node.parts[0].lower()}
    return set().union(*(_referenced(c) for c in children(node) or []))


def leaves(schema: dict[str, Any], predicate: Any) -> list[Leaf]:
    """The comparable columns of `schema` under the top-level columns `predicate` names."""
    wanted = _referenced(predicate)
    out: list[Leaf] = []

    def walk(fields: list[dict[str, Any]], prefix: tuple[str, ...]) -> None:
        for f in fields:
            names = prefix + (f["name"],)
            kind = f["type"]
            if isinstance(kind, dict):
                if kind.get("type") == "struct":
                    walk(kind["fields"], names)
                continue
            try:
                spark = ice_types.spark_type(kind, ".".join(names))
            except Exception:  # refused types are refused by the reader, not here
                continue
            if isinstance(spark, MIN_MAX_TYPES):
                out.append(Leaf(int(f["id"]), names, kind))

    walk([f for f in schema["fields"] if f["name"].lower() in wanted], ())
    return out


def _nest(leaves_: list[Leaf], value: Any) -> dict[str, Any]:
    """`value(leaf)` of each leaf, nested by the leaf's names (the shape of `minValues`)."""
    root: dict[str, Any] = {}
    for leaf in leaves_:
        node = root
        for name in leaf.names[:-1]:
            node = node.setdefault(name, {})
        node[leaf.names[-1]] = value(leaf)
    return root


def _data_schema(leaves_: list[Leaf]) -> T.StructType:
    """The nested Spark struct of the leaves (the shape of `minValues` / `maxValues` / `nullCount`)."""
    root = _nest(leaves_, lambda leaf: ice_types.spark_type(leaf.iceberg_type, ".".join(leaf.names)))

    def build(node: dict[str, Any]) -> T.StructType:
        return T.StructType(
            [T.StructField(name, build(v) if isinstance(v, dict) else v, True) for name, v in node.items()]
        )

    return build(root)


def _counts(data_type: T.DataType) -> T.DataType:
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _counts(f.dataType), True) for f in data_type.fields])
    return T.LongType()


def _stats_type(data: T.StructType) -> T.StructType:
    return T.StructType(
        [
            T.StructField("numRecords", T.LongType(), True),
            T.StructField("minValues", data, True),
            T.StructField("maxValues", data, True),
            T.StructField("nullCount", _counts(data), True),
        ]
    )


# ---- transforms as ranges of their source ---------------------------------------------------------
def _period(transform: str, value: int) -> tuple[dt.datetime, dt.datetime] | None:
    """[start, next start) of the year/month/day/hour numbered `value` since 1970."""
    try:
        if transform == "year":
            return dt.datetime(1970 + value, 1, 1), dt.datetime(1971 + value, 1, 1)
        if transform == "month":
            years, month = divmod(value, 12)
            start = dt.datetime(1970 + years, month + 1, 1)
            years, month = divmod(value + 1, 12)
            return start, dt.datetime(1970 + years, month + 1, 1)
        if transform == "day":
            start = _EPOCH_TS + dt.timedelta(days=value)
            return start, start + dt.timedelta(days=1)
        if transform == "hour":
            start = _EPOCH_TS + dt.timedelta(hours=value)
            return start, start + dt.timedelta(hours=1)
    except (OverflowError, ValueError):  # outside the years Python dates hold: keep the file
        return None
    return None


def source_range(transform: str, value: Any, source_type: str) -> tuple[Any, Any]:
    """(lowest, highest) source value that `transform` maps to `value`; None where unknown."""
    if value is None:
        return None, None
    if transform == "identity":
        if isinstance(value, float) and math.isnan(value):
            return None, None
        return value, value
    if transform in ("year", "month", "day", "hour") and isinstance(value, int):
        period = _period(transform, value)
        if period is None:
            return None, None
        start, end = period
        if source_type == "date":
            return (
                (start.date(), (end - dt.timedelta(days=1)).date()) if transform != "hour" else (None, None)
            )
        if source_type in ("timestamp", "timestamptz"):
            last = end - dt.timedelta(microseconds=1)
            if source_type == "timestamptz":
                return start.replace(tzinfo=dt.timezone.utc), last.replace(tzinfo=dt.timezone.utc)
            return start, last
        return None, None
    if transform.startswith("truncate["):
        width = int(transform[len("truncate[") : -1])
        if source_type in ("int", "long") and isinstance(value, int):
            return value, value + width - 1
        if source_type.startswith("decimal") and isinstance(value, decimal.Decimal):
            step = decimal.Decimal(width - 1).scaleb(value.as_tuple().exponent)
            return value, value + step
        if source_type == "string":
            return value, None  # every string with this prefix sorts at or after it
    return None, None


def _tighter(current: Any, candidate: Any, pick: Any) -> Any:
    if candidate is None:
        return current
    if current is None:
        return candidate
    try:
        return pick(current, candidate)
    except TypeError:  # values of different kinds (never for one column): keep what we had
        return current


# ---- executor-side stats builders -------------------------------------------------------------
class _Stats:
    def __init__(self, leaves_: list[Leaf]) -> None:
        self.leaves = leaves_
        self.low: dict[int, Any] = {}
        self.high: dict[int, Any] = {}
        self.nulls: dict[int, Any] = {}

    def bound(self, field_id: int, low: Any, high: Any) -> None:
        self.low[field_id] = _tighter(self.low.get(field_id), low, max)
        self.high[field_id] = _tighter(self.high.get(field_id), high, min)

    def row(self, records: int | None) -> dict[str, Any]:
        return {
            "numRecords": records,
            "minValues": _nest(self.leaves, lambda leaf: self.low.get(leaf.field_id)),
            "maxValues": _nest(self.leaves, lambda leaf: self.high.get(leaf.field_id)),
            "nullCount": _nest(self.leaves, lambda leaf: self.nulls.get(leaf.field_id)),
        }


def _float_high(iceberg_type: str, high: Any, no_nan: bool) -> Any:
    """A float maximum holds for Spark only when the column has no NaN (Spark's NaN is largest)."""
    floating = iceberg_type in ("float", "double")
    if floating and (not no_nan or (isinstance(high, float) and math.isnan(high))):
        return None
    return high


def _file_stats(
    row: dict[str, Any], leaves_: list[Leaf], specs: dict[int, list[SourceField]]
) -> dict[str, Any]:
    stats = _Stats(leaves_)
    lower = dict(row["lower_bounds"] or ())
    upper = dict(row["upper_bounds"] or ())
    nulls = dict(row["null_value_counts"] or ())
    nans = dict(row["nan_value_counts"] or ())
    for leaf in leaves_:
        fid = leaf.field_id
        low = ice_types.from_bytes(lower.get(fid), leaf.iceberg_type)
        if isinstance(low, float) and math.isnan(low):
            low = None
        high = ice_types.from_bytes(upper.get(fid), leaf.iceberg_type)
        high = _float_high(leaf.iceberg_type, high, nans.get(fid) == 0)
        stats.bound(fid, low, high)
        stats.nulls[fid] = nulls.get(fid)
    values = json.loads(row["partition"]) if row["partition"] else {}
    for field in specs.get(row["spec_id"], []):
        key = str(field.field_id)
        if key not in values:
            continue
        try:
            value = ice_types.from_json(values[key], field.result_type)
            low, high = source_range(field.transform, value, field.source_type)
        except (TypeError, ValueError, ArithmeticError):  # a value we cannot read bounds nothing
            continue
        stats.nulls[field.source_id] = row["record_count"] if value is None else 0
        stats.bound(field.source_id, low, high)
    return stats.row(row["record_count"])


def _manifest_stats(
    row: dict[str, Any], leaves_: list[Leaf], specs: dict[int, list[SourceField]]
) -> dict[str, Any] | None:
    fields = specs.get(row["partition_spec_id"])
    summaries = row["partitions"]
    if fields is None or summaries is None:
        return None  # v1 inline manifests and writers that leave summaries out: keep
    stats = _Stats(leaves_)
    for field in fields:
        if field.position >= len(summaries) or summaries[field.position] is None:
            continue
        summary = summaries[field.position]
        source_type = field.source_type
        low_value = ice_types.from_bytes(summary["lower_bound"], field.result_type)
        high_value = ice_types.from_bytes(summary["upper_bound"], field.result_type)
        low = source_range(field.transform, low_value, source_type)[0]
        high = source_range(field.transform, high_value, source_type)[1]
        if field.transform == "identity":
            high = _float_high(source_type, high, summary["contains_nan"] is False)
        stats.bound(field.source_id, low, high)
        if summary["contains_null"] is False:
            stats.nulls[field.source_id] = 0
    return stats.row(None)


_INTERPRETED = ("identity", "year", "month", "day", "hour")


def source_fields(metadata: TableMetadata, leaves_: list[Leaf]) -> dict[int, list[SourceField]]:
    """Per spec id, its partition fields over the filter's columns (void and unknown transforms,
    whose values say nothing of their source, left out)."""
    types = {leaf.field_id: leaf.iceberg_type for leaf in leaves_}
    out: dict[int, list[SourceField]] = {}
    for spec_id, fields in metadata.specs.items():
        out[spec_id] = [
            SourceField(
                position,
                f.field_id,
                f.source_id,
                types[f.source_id],
                f.transform,
                ice_types.partition_result_type(f.transform, types[f.source_id]),
            )
            for position, f in enumerate(fields)
            if f.source_id in types
            and (f.transform in _INTERPRETED or f.transform.startswith(("bucket[", "truncate[")))
        ]
    return out


class Pruner:
    """Prunes a snapshot's data manifests and data files by one filter."""

    def __init__(self, metadata: TableMetadata, schema: dict[str, Any], predicate: Any) -> None:
        self.leaves = leaves(schema, predicate)
        self.specs = source_fields(metadata, self.leaves)
        self.data_schema = _data_schema(self.leaves)
        self.predicate = predicate

    def _keep(self) -> Column:
        return FileFilter(self.data_schema, T.StructType([]), exact_bounds=True).keep(self.predicate)

    def _with_stats(self, df: DataFrame, builder: Any, inputs: list[str]) -> DataFrame:
        stats_type = _stats_type(self.data_schema)
        stats_field = T.StructField(STATS, stats_type, True)
        arrow_field = arrow_schema(T.StructType([stats_field])).field(STATS)
        leaves_, specs = self.leaves, self.specs

        def add(batches):  # noqa: ANN001, ANN202 - a mapInArrow function
            for batch in batches:
                columns = [batch.column(name).to_pylist() for name in inputs]
                rows = [dict(zip(inputs, values, strict=True)) for values in zip(*columns, strict=True)]
                stats = pa.array([builder(r, leaves_, specs) for r in rows], type=arrow_field.type)
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns, stats], schema=batch.schema.append(arrow_field)
                )

        return df.mapInArrow(add, T.StructType([*df.schema.fields, stats_field]))

    def manifests(self, listed: DataFrame) -> DataFrame:
        """The manifests whose partition summaries allow a matching row (delete manifests all kept)."""
        if not any(self.specs.values()):
            return listed
        inputs = ["partition_spec_id", "partitions"]
        with_stats = self._with_stats(listed, _manifest_stats, inputs)
        return with_stats.where((with_stats["content"] != 0) | self._keep()).drop(STATS)

    def files(self, entries: DataFrame) -> DataFrame:
        """The entries that may hold a matching row: data files pruned, delete files all kept."""
        if not self.leaves:
            return entries.where((entries["content"] != 0) | self._keep())
        inputs = [
            "record_count",
            "spec_id",
            "partition",
            "lower_bounds",
            "upper_bounds",
            "null_value_counts",
            "nan_value_counts",
        ]
        with_stats = self._with_stats(entries, _file_stats, inputs)
        return with_stats.where((with_stats["content"] != 0) | self._keep()).drop(STATS)
