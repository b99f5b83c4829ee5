"""Resolving the expressions a user passes - conditions, `replaceWhere`, filters, CHECK constraints,
generated columns - against a table's columns before anything runs or is written.

Spark parses and resolves an expression only when a plan that uses it is analysed, which for a
write can be after files were written, and then raises its own `ParseException` or
`AnalysisException`. Here the expression is analysed at once, over an empty DataFrame with the
table's schema (no Spark job), and a bad one is an `InvalidArgumentError` naming the expression,
what was wrong and the table's columns.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, StructType

from deltaspark.errors import InvalidArgumentError

CONDITION = BooleanType()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def resolve_expression(
    spark: SparkSession,
    schema: StructType,
    expression: Any,
    what: str,
    table: str,
    expected: DataType | None = CONDITION,
    cast_to: DataType | None = None,
) -> Column:
    """`expression` (a SQL string or a Column) as a Column resolved over `schema`'s columns; it
    must be of the `expected` type (a condition: boolean; `None`: any), or castable to `cast_to`
    (a generated column's type). `what` names it in errors (e.g. "The delete condition")."""
    if not isinstance(expression, (str, Column)) and type(expression).__name__ != "Column":
        raise InvalidArgumentError(
            f"{what} must be a SQL string or a Column, got {type(expression).__name__}"
        )
    shown = expression if isinstance(expression, str) else str(expression)
    columns = ", ".join(f.name for f in schema.fields) or "none"
    try:
        column = F.expr(expression) if isinstance(expression, str) else expression
        probe = column.cast(cast_to) if cast_to is not None else column
        resolved = spark.createDataFrame([], schema).select(probe.alias("_expression")).schema
    except Exception as exc:  # ParseException, AnalysisException (classic or Connect)
        raise InvalidArgumentError(
            f"{what} {shown!r} cannot be used on {table}: {_first_line(exc)} (the table's columns: {columns})"
        ) from None
    found = resolved["_expression"].dataType
    if cast_to is None and expected is not None and found != expected:
        raise InvalidArgumentError(
            f"{what} {shown!r} on {table} is of type {found.simpleString()}, not "
            f"{expected.simpleString()} (the table's columns: {columns})"
        )
    return column
