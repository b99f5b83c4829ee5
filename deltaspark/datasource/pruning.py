"""Partition pruning and data skipping for `format("delta")`: the filters Spark offers a Python
data source (4.1+).

Spark hands the reader the conjuncts of a query's filter that it can express (`EqualTo`,
`GreaterThan`, `In`, `IsNull`, `StringStartsWith`, `Not`, ...). A conjunct over a partition column
has one value per file - the file's partition value - so a file where it is false or null holds no
row the query keeps. A conjunct over a data column is checked against the file's statistics with
the rules `read.data_skipping` applies to `toDF(filter)`: minimum and maximum for comparisons (a
string maximum that may have been cut, and a timestamp maximum cut to milliseconds, are widened),
`nullCount` trusted only where it is 0 or `numRecords`, a file whose column is all null matches no
comparison. Every filter is still handed back to Spark, which evaluates it on the rows as before:
this only leaves out files, it never decides a row. Whatever cannot be decided with certainty (a
nested field, a value of another type, a naive against an aware time, NaN, missing statistics)
keeps the file.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql import datasource as ds
from pyspark.sql.types import (
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.datasource.table_state import TableState, typed_partition_values
from deltaspark.features.column_mapping import physical_name
from deltaspark.features.schema import drop_void_fields
from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.features.type_widening import widened_from_float
from deltaspark.read.data_skipping import DEFAULT_STRING_PREFIX_LENGTH

UNKNOWN = object()  # the filter says nothing about the file
_OPERATORS = {
    ds.EqualTo: "=",
    ds.EqualNullSafe: "=",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}
_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Bounds:
    """What a file's statistics say of one column (None where they say nothing)."""

    low: Any
    high: Any
    high_exact: bool  # False where the maximum was widened (cut strings, millisecond timestamps)
    nulls: int | None
    rows: int | None

    @property
    def all_null(self) -> bool:
        return self.nulls is not None and self.rows is not None and self.nulls == self.rows


class Skipping:
    """The columns of one table a pushed filter can leave files out by: partition columns by
    their values, top-level data columns by their statistics (physical names in the log)."""

    def __init__(self, state: TableState) -> None:
        self.state = state
        schema, mode = drop_void_fields(state.schema), state.mode
        self.partitions = {c.lower() for c in state.metadata.partitionColumns}
        self.data: dict[str, tuple[str, DataType]] = {
            f.name.lower(): (physical_name(f, mode), f.dataType)
            for f in schema.fields
            if f.name.lower() not in self.partitions and not isinstance(f.dataType, StructType)
        }
        self.from_float = {f.name.lower() for f in schema.fields if widened_from_float(f)}
        configuration = state.metadata.configuration or {}
        prefix = configuration.get("delta.dataSkippingStringPrefixLength", DEFAULT_STRING_PREFIX_LENGTH)
        self.prefix = int(prefix)

    def offered(self, filter_: Any) -> bool:
        """Whether `filter_` reads one column this class can decide files by."""
        columns = _columns(filter_)
        if columns is None or len(columns) != 1:
            return False
        (name,) = columns
        if name in self.partitions:
            return True
        if name not in self.data:
            return False
        inner = filter_.child if isinstance(filter_, ds.Not) else filter_
        return isinstance(inner, ds.IsNull | ds.IsNotNull) or isinstance(self.data[name][1], MIN_MAX_TYPES)

    def keeps(self, filters: list[Any], entry: dict[str, Any]) -> bool:
        """Whether the file of `entry` may hold a row every one of `filters` keeps."""
        columns = {name for f in filters for name in _columns(f) or ()}
        values = (
            {k.lower(): v for k, v in typed_partition_values(self.state, entry).items()}
            if columns & self.partitions
            else {}
        )
        bounds = self.bounds(entry.get("stats"), columns - self.partitions)
        return keeps(filters, values, bounds)

    def bounds(self, stats: Any, columns: set[str]) -> dict[str, Bounds]:
        """`columns`' bounds from a file's statistics (JSON text, or a checkpoint's parsed struct)."""
        if not columns or stats is None:
            return {}
        if isinstance(stats, str):
            try:
                stats = json.loads(stats, parse_float=Decimal)  # a decimal's digits, exactly
            except ValueError:
                return {}  # unreadable statistics say nothing
        if not isinstance(stats, dict):
            return {}
        rows = _count(stats.get("numRecords"))
        lows, highs, nulls = (stats.get(k) or {} for k in ("minValues", "maxValues", "nullCount"))
        out = {}
        for name in columns:
            if name not in self.data:
                continue
            physical, data_type = self.data[name]
            low = _typed(lows.get(physical), data_type) if isinstance(lows, dict) else None
            high = _typed(highs.get(physical), data_type) if isinstance(highs, dict) else None
            exact = True
            if isinstance(data_type, StringType):
                # string statistics are prefixes: a maximum that may have been cut says nothing
                high = high if high is not None and len(high) < self.prefix else None
                exact = False
            elif isinstance(data_type, TimestampType | TimestampNTZType) and high is not None:
                try:
                    high = high + dt.timedelta(microseconds=999)  # cut to milliseconds
                except OverflowError:  # the year 9999's last millisecond: no maximum at all
                    high = None
                exact = False
            elif isinstance(data_type, FloatType):
                low, high = _float32(low), _float32(high)  # "3.14" holds 3.140000104904175
            elif name in self.from_float:
                # an older file's bound is a float32 in shortest text, a newer file's a double
                low = None if low is None else min(low, _float32(low))
                high = None if high is None else max(high, _float32(high))
            count = _count(nulls.get(physical)) if isinstance(nulls, dict) else None
            out[name] = Bounds(low, high, exact, count, rows)
        return out


def _columns(filter_: Any) -> set[str] | None:
    if isinstance(filter_, ds.Not):
        return _columns(filter_.child)
    attribute = getattr(filter_, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # a nested field, or no column at all
    return {str(attribute[0]).lower()}


def keeps(filters: list[Any], values: dict[str, Any], bounds: dict[str, Bounds] | None = None) -> bool:
    """Whether a file with partition values `values` and column `bounds` (lower-cased names) may
    hold a row every one of `filters` keeps."""
    for filter_ in filters:
        (name,) = _columns(filter_) or {""}
        if name in values:
            result = _evaluate(filter_, values)
            if result is not UNKNOWN and result is not True:
                return False  # false or null for every row of the file
        elif bounds and name in bounds and not _may_match(filter_, bounds[name], negate=False):
            return False
    return True


def _may_match(filter_: Any, bounds: Bounds, negate: bool) -> bool:
    """False only where no row of a file with `bounds` can satisfy `filter_` (its negation with
    `negate`): the rules of `read.data_skipping.FileFilter`."""
    if isinstance(filter_, ds.Not):
        return _may_match(filter_.child, bounds, not negate)
    if isinstance(filter_, ds.IsNull | ds.IsNotNull) or (
        isinstance(filter_, ds.EqualNullSafe) and filter_.value is None
    ):
        wants_null = isinstance(filter_, ds.IsNull | ds.EqualNullSafe) != negate
        return bounds.nulls != 0 if wants_null else not bounds.all_null
    if isinstance(filter_, ds.In):
        if negate or any(v is None for v in filter_.value):
            return True
        return any(_compare("=", bounds, v) for v in filter_.value)
    if isinstance(filter_, ds.StringStartsWith):
        return True if negate else _starts(bounds, filter_.value)
    op = _OPERATORS.get(type(filter_))
    if op is None:
        return True  # StringEndsWith, StringContains: statistics say nothing
    if isinstance(filter_, ds.EqualNullSafe) and negate:
        return True
    if filter_.value is None:
        return False  # a comparison with null is never true, nor is its negation
    return _compare(_NEGATED[op] if negate else op, bounds, filter_.value)


def _compare(op: str, bounds: Bounds, value: Any) -> bool:
    if bounds.all_null:
        return False  # a comparison is null on every row
    if isinstance(value, float) and value != value:
        return True  # NaN: Spark orders it above every number
    low, high = bounds.low, bounds.high
    try:
        if op == "=":
            return not (_known(low, value) and low > value or _known(high, value) and high < value)
        if op == "<":
            return not (_known(low, value) and low >= value)
        if op == "<=":
            return not (_known(low, value) and low > value)
        if op == ">":
            return not (_known(high, value) and high <= value)
        if op == ">=":
            return not (_known(high, value) and high < value)
        if op == "!=":
            same = _known(low, value) and _known(high, value) and low == high == value
            return not (bounds.high_exact and same)
    except TypeError:
        return True
    return True


def _starts(bounds: Bounds, prefix: Any) -> bool:
    """Whether a value between the bounds may start with `prefix`: the minimum is a prefix of
    the real one, so the real values' first characters are at least its first characters."""
    if bounds.all_null:
        return False
    if not isinstance(prefix, str):
        return True
    n = len(prefix)
    if isinstance(bounds.low, str) and bounds.low[:n] > prefix:
        return False
    return not (isinstance(bounds.high, str) and bounds.high[:n] < prefix)


def _known(bound: Any, value: Any) -> bool:
    return bound is not None and _same_kind(bound, value)


def _float32(value: float | None) -> float | None:
    """`value` as the float32 nearest to it (the value a float column's statistic names)."""
    if value is None:
        return None
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return value


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _typed(value: Any, data_type: DataType) -> Any:
    """A statistic as a Python value of the column's type; None where it is not one (a NaN, text
    in a number column, a time without its zone)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(data_type, StringType):
            return value if isinstance(value, str) else None
        if isinstance(data_type, FloatType | DoubleType):
            number = float(value) if isinstance(value, int | float | Decimal) else None
            return None if number is None or number != number else number
        if isinstance(data_type, DecimalType):
            return Decimal(str(value)) if isinstance(value, int | float | str | Decimal) else None
        if isinstance(data_type, DateType):
            if isinstance(value, dt.datetime):
                return None
            return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value)[:10])
        if isinstance(data_type, TimestampType | TimestampNTZType):
            if not isinstance(value, dt.datetime):
                value = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            zoned = isinstance(data_type, TimestampType)
            return value if (value.tzinfo is not None) == zoned else None
        if isinstance(value, int):
            return value  # byte, short, int, long
    except (ValueError, InvalidOperation):
        return None
    return None


def _evaluate(filter_: Any, values: dict[str, Any]) -> Any:
    """SQL's three-valued result of `filter_` on one row of the file: True, False, None (null) or
    UNKNOWN."""
    if isinstance(filter_, ds.Not):
        inner = _evaluate(filter_.child, values)
        return inner if inner is UNKNOWN or inner is None else not inner
    name = str(filter_.attribute[0]).lower()
    if name not in values:
        return UNKNOWN
    value = values[name]
    try:
        if isinstance(filter_, ds.IsNull):
            return value is None
        if isinstance(filter_, ds.IsNotNull):
            return value is not None
        if value is None:
            return None
        if isinstance(filter_, ds.EqualNullSafe):
            return filter_.value is not None and _same_kind(value, filter_.value) and value == filter_.value
        literal = filter_.value
        if literal is None:
            return None
        if isinstance(filter_, ds.In):
            if not all(_same_kind(value, v) for v in literal if v is not None):
                return UNKNOWN
            if value in [v for v in literal if v is not None]:
                return True
            return None if any(v is None for v in literal) else False
        if not _same_kind(value, literal):
            return UNKNOWN
        if isinstance(filter_, ds.EqualTo):
            return value == literal
        if isinstance(filter_, ds.GreaterThan):
            return value > literal
        if isinstance(filter_, ds.GreaterThanOrEqual):
            return value >= literal
        if isinstance(filter_, ds.LessThan):
            return value < literal
        if isinstance(filter_, ds.LessThanOrEqual):
            return value <= literal
        if isinstance(filter_, ds.StringStartsWith):
            return value.startswith(literal)
        if isinstance(filter_, ds.StringEndsWith):
            return value.endswith(literal)
        if isinstance(filter_, ds.StringContains):
            return literal in value
    except TypeError:
        return UNKNOWN
    return UNKNOWN


def _same_kind(value: Any, literal: Any) -> bool:
    """Values Python compares as Spark does: both strings, both numbers (not booleans against
    numbers), both dates, both times with a zone or both without."""
    if isinstance(value, bool) or isinstance(literal, bool):
        return isinstance(value, bool) and isinstance(literal, bool)
    numbers = (int, float, Decimal)
    if isinstance(value, numbers) and isinstance(literal, numbers):
        return not (isinstance(value, float) and isinstance(literal, Decimal)) and not (
            isinstance(value, Decimal) and isinstance(literal, float)
        )
    if isinstance(value, dt.datetime) and isinstance(literal, dt.datetime):
        return (value.tzinfo is None) == (literal.tzinfo is None)
    if isinstance(value, dt.datetime) or isinstance(literal, dt.datetime):
        return False
    if isinstance(value, dt.date) and isinstance(literal, dt.date):
        return True
    return (
        isinstance(value, str)
        and isinstance(literal, str)
        or isinstance(value, bytes)
        and isinstance(literal, bytes)
    )
