"""Which target files a MERGE must read: what its condition says about the target's rows.

The merge condition's conjuncts (parts joined by AND) of two kinds prune files before any row is
read, as delta-spark's do:

- an equality `t.k = s.k` between a top-level target column and a source expression: a target row
  can match only if its `k` lies between the smallest and the largest `s.k` of the source (NULL
  keys never match with `=`), so files whose statistics or partition values put `k` outside that
  range hold no match;
- a conjunct over target columns alone (`t.part = '2024-01-01'`): files that certainly hold no
  row satisfying it hold no match.

Anything else in the condition prunes nothing; the join still applies the whole condition, so a
part not understood here costs speed, never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    MapType,
    StructType,
    TimestampNTZType,
)

from deltaspark.read.predicates import And, Cmp, In, IsNull, Lit, Not, Opaque, Or, Ref, from_filter


@dataclass(frozen=True)
class KeyPair:
    """An equality conjunct `target column = source expression`."""

    target: str  # the target's top-level column, as the table spells it
    source: Column  # the source side, resolved over the source frame
    data_type: DataType | None = None  # the source side's type


def conjuncts(tree: Any) -> list[Any]:
    """The parts of a predicate tree joined by AND at its top."""
    if isinstance(tree, And):
        return conjuncts(tree.left) + conjuncts(tree.right)
    return [tree]


def _quoted(parts: tuple[str, ...]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


class ConditionParts:
    """The merge condition read against the target's columns (`alias`-qualified or not) and the
    source frame's."""

    def __init__(self, condition: Any, alias: str | None, schema: StructType, source: DataFrame) -> None:
        self.tree = from_filter(condition)
        self.alias = alias
        self.columns = {f.name.lower(): f.name for f in schema.fields}
        self.types = {f.name: f.dataType for f in schema.fields}
        self.source = source
        self.source_columns = {c.lower() for c in source.columns}

    def target_column(self, node: Any) -> str | None:
        """The target column a reference names (None when it is not a top-level target column)."""
        if not isinstance(node, Ref):
            return None
        parts = node.parts
        if self.alias and len(parts) == 2 and parts[0].lower() == self.alias.lower():
            return self.columns.get(parts[1].lower())
        if len(parts) == 1 and parts[0].lower() not in self.source_columns:
            return self.columns.get(parts[0].lower())
        return None

    def _source_side(self, node: Any) -> tuple[Column, DataType] | None:
        if not isinstance(node, Ref) or self.target_column(node) is not None:
            return None
        column = F.col(_quoted(node.parts))
        try:
            data_type = self.source.select(column.alias("_k")).schema["_k"].dataType
        except Exception:  # not a source column (a struct field of the target, say): no pruning
            return None
        unranged = (FloatType, DoubleType, BinaryType, StructType, ArrayType, MapType)  # NaN: no range
        return None if isinstance(data_type, unranged) else (column, data_type)

    def key_pairs(self) -> list[KeyPair]:
        """The `target column = source expression` conjuncts (with `=`; `<=>` matches NULLs)."""
        pairs = []
        for part in conjuncts(self.tree):
            if not isinstance(part, Cmp) or part.op != "=":
                continue
            for left, right in ((part.left, part.right), (part.right, part.left)):
                target, source = self.target_column(left), self._source_side(right)
                if target is not None and source is not None:
                    pairs.append(KeyPair(target, *source))
                    break
        return pairs

    def ranged_pairs(self) -> list[KeyPair]:
        """The key pairs whose source range bounds the target column's: the source side has the
        column's type, or one Spark widens to it keeping order (integers, decimals). A string
        compared with a number, say, is cast: "9" and "10" order the other way as strings."""
        both = (IntegralType, DecimalType)
        return [
            p
            for p in self.key_pairs()
            if p.data_type == (target := self.types.get(p.target))
            or any(isinstance(p.data_type, t) and isinstance(target, t) for t in both)
        ]

    def keys_decide_matches(self) -> bool:
        """Whether a source row's match depends only on its key-pair values: every conjunct is a
        key pair or over target columns alone. Then the source rows with a match are exactly those
        whose keys appear among the matched pairs' (NULL keys never do)."""
        pairs = self.key_pairs()
        if not pairs:
            return False
        for part in conjuncts(self.tree):
            is_pair = (
                isinstance(part, Cmp)
                and part.op == "="
                and any(
                    self.target_column(a) is not None and self._source_side(b) is not None
                    for a, b in ((part.left, part.right), (part.right, part.left))
                )
            )
            rendered = None if is_pair else self._render(part)
            if not is_pair and (rendered is None or not rendered[1]):
                return False
        return True

    def target_only(self) -> list[Column]:
        """The conjuncts over target columns alone, as Columns over the table's columns."""
        found = []
        for part in conjuncts(self.tree):
            rendered = self._render(part)
            if rendered is not None and rendered[1]:
                found.append(rendered[0])
        return found

    def _render(self, node: Any) -> tuple[Column, bool] | None:
        """(node as a Column over the table's columns, whether it references a column); None when
        it cannot be rendered or references anything but a target column."""
        if isinstance(node, Ref):
            name = self.target_column(node)
            return None if name is None else (F.col(_quoted((name,))), True)
        if isinstance(node, Lit):
            return (F.expr(node.sql) if node.sql else F.lit(node.value)), False
        if isinstance(node, Opaque):
            return None
        if isinstance(node, Cmp):
            sides = [self._render(node.left), self._render(node.right)]
            if None in sides:
                return None
            (left, l_ref), (right, r_ref) = sides  # type: ignore[misc]
            ops = {
                "=": lambda a, b: a == b,
                "!=": lambda a, b: a != b,
                "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b,
                ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b,
                "<=>": lambda a, b: a.eqNullSafe(b),
            }
            return ops[node.op](left, right), l_ref or r_ref
        if isinstance(node, In):
            items = [self._render(v) for v in (node.expr, *node.values)]
            if None in items:
                return None
            head, *rest = items
            return head[0].isin([v[0] for v in rest]), any(i[1] for i in items)  # type: ignore[index]
        if isinstance(node, IsNull):
            inner = self._render(node.expr)
            return None if inner is None else (inner[0].isNull(), inner[1])
        if isinstance(node, Not):
            inner = self._render(node.child)
            return None if inner is None else (~inner[0], inner[1])
        if isinstance(node, (And, Or)):
            sides = [self._render(node.left), self._render(node.right)]
            if None in sides:
                return None
            (left, l_ref), (right, r_ref) = sides  # type: ignore[misc]
            return ((left & right) if isinstance(node, And) else (left | right)), l_ref or r_ref
        return None


def key_ranges(pairs: list[KeyPair], bounds: list[tuple[Any, Any]]) -> list[Column]:
    """`target BETWEEN min AND max` per key pair, from the source's bounds (all non-NULL: a key
    with no non-NULL source value matches nothing, which the caller decides before this)."""
    return [
        (F.col(_quoted((pair.target,))) >= _bound(low, pair.data_type))
        & (F.col(_quoted((pair.target,))) <= _bound(high, pair.data_type))
        for pair, (low, high) in zip(pairs, bounds, strict=True)
    ]


def _bound(value: Any, data_type: DataType | None) -> Column:
    """A bound as a literal data skipping reads: dates and timestamps without a time zone as typed
    SQL literals (exact: no time zone is involved); a zoned timestamp stays a plain literal, which
    prunes nothing (collected, it is a wall-clock time of the client's zone)."""
    if isinstance(data_type, DateType):
        return F.expr(f"DATE '{value.isoformat()}'")
    if isinstance(data_type, TimestampNTZType):
        return F.expr(f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'")
    return F.lit(value)


def all_of(columns: list[Column]) -> Column | None:
    return reduce(lambda a, b: a & b, columns) if columns else None
