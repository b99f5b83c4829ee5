"""Partition pruning for `format("delta")`: the filters Spark offers a Python data source (4.1+).

Spark hands the reader the conjuncts of a query's filter that it can express (`EqualTo`,
`GreaterThan`, `In`, `IsNull`, `StringStartsWith`, `Not`, ...). A conjunct over partition columns
only has one value per file - the file's partition value - so a file where it is false or null
holds no row the query keeps and is not read. Every filter is still handed back to Spark, which
evaluates it on the rows as before: pruning only leaves out files, it never decides a row.
Whatever cannot be evaluated with certainty (a data column, a value of another type, a naive
against an aware time) keeps the file.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import datasource as ds

UNKNOWN = object()  # the filter says nothing about the file


def prunes(filter_: Any, partitions: set[str]) -> bool:
    """Whether `filter_` reads partition columns only (and can leave files out)."""
    columns = _columns(filter_)
    return columns is not None and bool(columns) and all(c in partitions for c in columns)


def _columns(filter_: Any) -> set[str] | None:
    if isinstance(filter_, ds.Not):
        return _columns(filter_.child)
    attribute = getattr(filter_, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # a nested field, or no column at all
    return {str(attribute[0]).lower()}


def keeps(filters: list[Any], values: dict[str, Any]) -> bool:
    """Whether a file with partition values `values` (lower-cased names) may hold a kept row."""
    for filter_ in filters:
        result = _evaluate(filter_, values)
        if result is not UNKNOWN and result is not True:
            return False  # false or null for every row of the file
    return True


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
    import datetime as dt
    from decimal import Decimal

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
