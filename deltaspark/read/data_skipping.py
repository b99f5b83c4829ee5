"""Partition pruning and data skipping: which files can hold rows matching a filter.

A predicate (see `predicates`) is turned into a boolean Column over `Snapshot.files()` rows that
is false only for files that certainly hold no matching row:

- parts that reference only partition columns are evaluated exactly on `partitionValues_parsed`;
- comparisons of a data column with a literal use `stats_parsed` min/max (string maxima that may
  have been truncated, and timestamp maxima truncated to milliseconds, are widened accordingly, as
  are the bounds of a `double` column that was a `float`: an older file's statistics are float32
  values in shortest text);
- `IS [NOT] NULL` uses `nullCount`, trusting only the values 0 and `numRecords`, which hold with
  tight and wide bounds alike (`tightBounds`);
- NOT is pushed down; anything not understood keeps the file. Missing stats keep the file.

Literal types are left to Spark's own coercion, exactly as in the row filter, so a comparison of
an integer column with 1.5 is pruned with decimal semantics, not truncated.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DoubleType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.features.type_widening import widened_from_float
from deltaspark.read.predicates import FLIPPED, And, Cmp, In, IsNull, Lit, Not, Opaque, Or, Ref

NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
DEFAULT_STRING_PREFIX_LENGTH = 32


class FileFilter:
    """Builds the keep-this-file Column for one table schema."""

    def __init__(
        self,
        data_schema: StructType,
        partition_schema: StructType,
        string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH,
        exact_bounds: bool = False,
    ) -> None:
        self.data = {f.name.lower(): f for f in data_schema.fields}
        self.partitions = {f.name.lower(): f for f in partition_schema.fields}
        self.string_prefix_length = string_prefix_length
        self.exact_bounds = exact_bounds  # Iceberg's bounds: string and timestamp maxima are not cut

    # ---- resolving references ------------------------------------------------------------------
    def _data_path(self, ref: Ref) -> tuple[list[str], DataType] | None:
        resolved = self._data_field(ref)
        return None if resolved is None else (resolved[0], resolved[1].dataType)

    def _data_field(self, ref: Ref) -> tuple[list[str], StructField] | None:
        fields = self.data
        names: list[str] = []
        field: StructField | None = None
        for part in ref.parts:
            field = fields.get(part.lower()) if fields is not None else None
            if field is None:
                return None
            names.append(field.name)
            data_type = field.dataType
            fields = (
                {f.name.lower(): f for f in data_type.fields} if isinstance(data_type, StructType) else None
            )
        assert field is not None
        return names, field

    def _partition_name(self, ref: Ref) -> str | None:
        if len(ref.parts) != 1:
            return None
        field = self.partitions.get(ref.parts[0].lower())
        return field.name if field else None

    def _only_partitions(self, node: Any) -> bool:
        if isinstance(node, Ref):
            return self._partition_name(node) is not None
        if isinstance(node, Lit):
            return True
        if isinstance(node, Cmp):
            return self._only_partitions(node.left) and self._only_partitions(node.right)
        if isinstance(node, In):
            return self._only_partitions(node.expr) and all(isinstance(v, Lit) for v in node.values)
        if isinstance(node, IsNull):
            return self._only_partitions(node.expr)
        if isinstance(node, (And, Or)):
            return self._only_partitions(node.left) and self._only_partitions(node.right)
        if isinstance(node, Not):
            return self._only_partitions(node.child)
        return False

    def _partition_expr(self, node: Any) -> Column:
        """The predicate evaluated on a file's typed partition values (same semantics as rows)."""
        if isinstance(node, Ref):
            return F.col("partitionValues_parsed").getField(self._partition_name(node))
        if isinstance(node, Lit):
            return _literal_column(node)
        if isinstance(node, Cmp):
            left, right = self._partition_expr(node.left), self._partition_expr(node.right)
            return _compare(node.op, left, right)
        if isinstance(node, In):
            return self._partition_expr(node.expr).isin([_literal_column(v) for v in node.values])
        if isinstance(node, IsNull):
            return self._partition_expr(node.expr).isNull()
        if isinstance(node, And):
            return self._partition_expr(node.left) & self._partition_expr(node.right)
        if isinstance(node, Or):
            return self._partition_expr(node.left) | self._partition_expr(node.right)
        if isinstance(node, Not):
            return ~self._partition_expr(node.child)
        raise AssertionError(node)

    # ---- the keep condition --------------------------------------------------------------------
    def keep(self, node: Any) -> Column:
        """True for files that may hold a row matching `node`."""
        return self._may_match(node, negate=False)

    def _may_match(self, node: Any, negate: bool) -> Column:
        if isinstance(node, Opaque):
            return _keep()
        if self._only_partitions(node) and not isinstance(node, Lit):
            exact = self._partition_expr(node)
            return F.coalesce(~exact if negate else exact, F.lit(False))
        if isinstance(node, Lit):
            if node.value is None:
                return F.lit(False)
            truth = bool(node.value) != negate
            return F.lit(truth)
        if isinstance(node, Not):
            return self._may_match(node.child, not negate)
        if isinstance(node, (And, Or)):
            left, right = self._may_match(node.left, negate), self._may_match(node.right, negate)
            conjunction = isinstance(node, And) != negate  # De Morgan under NOT
            return left & right if conjunction else left | right
        if isinstance(node, Cmp):
            return self._comparison(node, negate)
        if isinstance(node, In):
            if negate or not isinstance(node.expr, Ref) or any(not isinstance(v, Lit) for v in node.values):
                return _keep()
            if any(v.value is None for v in node.values):
                return _keep()
            options = [self._comparison(Cmp("=", node.expr, v), False) for v in node.values]
            result = options[0]
            for option in options[1:]:
                result = result | option
            return result
        if isinstance(node, IsNull) and isinstance(node.expr, Ref):
            return self._null_check(node.expr, is_null=not negate)
        return _keep()

    def _null_check(self, ref: Ref, is_null: bool) -> Column:
        resolved = self._data_path(ref)
        if resolved is None or isinstance(resolved[1], StructType):
            return _keep()
        nulls = _stat("nullCount", resolved[0])
        count = F.col("stats_parsed.numRecords")
        # Only nullCount == 0 (no nulls) and nullCount == numRecords (all null) carry information.
        maybe = (nulls != F.lit(0)) if is_null else (nulls != count)
        return F.coalesce(maybe, F.lit(True))

    def _comparison(self, node: Cmp, negate: bool) -> Column:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Lit) and isinstance(right, Ref):
            op, left, right = FLIPPED[op], right, left
        if not (isinstance(left, Ref) and isinstance(right, Lit)):
            return _keep()
        if op == "<=>":
            if right.value is None:
                return self._null_check(left, is_null=not negate)
            if negate:
                return _keep()
            op = "="
        elif right.value is None:
            return F.lit(False)  # a comparison with NULL is never true
        if negate:
            op = NEGATED[op]
        resolved = self._data_field(left)
        if resolved is None:
            return _keep()
        names, field = resolved
        data_type = field.dataType
        if not isinstance(data_type, MIN_MAX_TYPES):
            return _keep()  # no min/max statistics are kept for this type (booleans, binary, nested...)
        low, high = _stat("minValues", names), _stat("maxValues", names)
        high_is_exact = True
        if self.exact_bounds:
            pass
        elif isinstance(data_type, StringType):
            # String stats are prefixes: a maximum that may have been cut says nothing.
            high = F.when(F.length(high) < F.lit(self.string_prefix_length), high)
            high_is_exact = False
        elif isinstance(data_type, (TimestampType, TimestampNTZType)):
            # Timestamp stats are truncated to milliseconds: the real maximum may be 999 us above.
            high = high + F.expr("INTERVAL 999 MICROSECONDS")
            high_is_exact = False
        elif isinstance(data_type, DoubleType) and widened_from_float(field):
            # an older file's bound is a float32 in shortest text: "3.4" holds 3.4000000953674316
            low = F.least(low, low.cast("float").cast("double"))
            high = F.greatest(high, high.cast("float").cast("double"))
        value = _literal_column(right)
        if op == "=":
            check = (low <= value) & (high >= value)
        elif op == "<":
            check = low < value
        elif op == "<=":
            check = low <= value
        elif op == ">":
            check = high > value
        elif op == ">=":
            check = high >= value
        elif op == "!=":
            if not high_is_exact:
                return _keep()
            check = ~((low == value) & (high == value))
        else:
            return _keep()
        not_all_null = F.col("stats_parsed.nullCount").isNull() | (
            _stat("nullCount", names) != F.col("stats_parsed.numRecords")
        )
        return F.coalesce(check, F.lit(True)) & F.coalesce(not_all_null, F.lit(True))


def _keep() -> Column:
    """Keep the file: built per call, since Columns belong to the session kind in use."""
    return F.lit(True)


def _literal_column(literal: Lit) -> Column:
    return F.expr(literal.sql) if literal.sql else F.lit(literal.value)


def _stat(kind: str, names: list[str]) -> Column:
    column = F.col("stats_parsed").getField(kind)
    for name in names:
        column = column.getField(name)
    return column


def _compare(op: str, left: Column, right: Column) -> Column:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    if op == "<=>":
        return left.eqNullSafe(right)
    raise AssertionError(op)
