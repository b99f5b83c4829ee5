"""The predicate language read off SQL text (no Spark needed) and off PySpark Columns."""

from __future__ import annotations

from decimal import Decimal

import pytest

from deltaspark.read.predicates import And, Cmp, In, IsNull, Lit, Not, Opaque, Or, Ref, parse_sql


def test_comparisons_and_boolean_structure():
    assert parse_sql("a > 1 AND (b = 'x' OR NOT c <= 2.5)") == And(
        Cmp(">", Ref(("a",)), Lit(1)),
        Or(Cmp("=", Ref(("b",)), Lit("x")), Not(Cmp("<=", Ref(("c",)), Lit(Decimal("2.5"))))),
    )
    assert parse_sql("a <> 1") == Cmp("!=", Ref(("a",)), Lit(1))
    assert parse_sql("a == 1") == Cmp("=", Ref(("a",)), Lit(1))
    assert parse_sql("a <=> NULL") == Cmp("<=>", Ref(("a",)), Lit(None))
    assert parse_sql("5 < a") == Cmp("<", Lit(5), Ref(("a",)))


def test_in_between_null_and_literals():
    assert parse_sql("s.t IN (1, -2, 3L)") == In(Ref(("s", "t")), (Lit(1), Lit(-2), Lit(3)))
    assert parse_sql("x NOT IN ('a')") == Not(In(Ref(("x",)), (Lit("a"),)))
    assert parse_sql("x BETWEEN 1 AND 5") == And(
        Cmp(">=", Ref(("x",)), Lit(1)), Cmp("<=", Ref(("x",)), Lit(5))
    )
    assert parse_sql("x IS NOT NULL") == Not(IsNull(Ref(("x",))))
    assert parse_sql("flag = true") == Cmp("=", Ref(("flag",)), Lit(True))
    assert parse_sql("`odd name`.`x``y` = 'it''s'") == Cmp("=", Ref(("odd name", "x`y")), Lit("it's"))


def test_typed_literals_keep_their_sql_for_spark():
    node = parse_sql("d >= DATE '2024-05-01' AND t < TIMESTAMP '2024-05-01 10:00:00'")
    assert node.left.right == Lit("2024-05-01", sql="DATE '2024-05-01'")
    assert node.right.right.sql == "TIMESTAMP '2024-05-01 10:00:00'"


def test_what_pruning_cannot_use_is_opaque():
    assert parse_sql("upper(name) = 'X'") == Cmp("=", Opaque("upper(...)"), Lit("X"))
    assert isinstance(parse_sql("a +"), Opaque)
    assert isinstance(parse_sql("a LIKE 'x%'"), Opaque)


def test_an_unreadable_part_leaves_the_rest_readable():
    """Only the part pruning cannot read is opaque: `p = 'y'` still prunes next to `id % 2 = 0`
    (a whole-text fallback made such deletes rewrite every file and conflict with every write)."""
    assert parse_sql("p = 'y' AND id % 2 = 0") == And(Cmp("=", Ref(("p",)), Lit("y")), Opaque("id % 2 = 0"))
    assert parse_sql("a - 1 > 0 OR p = 'x'") == Or(Opaque("a - 1 > 0"), Cmp("=", Ref(("p",)), Lit("x")))
    between = parse_sql("(a + 1 BETWEEN 1 AND 3) AND p IN ('x')")  # BETWEEN's AND stays inside
    assert between == And(Opaque("a + 1 between 1 and 3"), In(Ref(("p",)), (Lit("x"),)))
    assert parse_sql("id = 2 + 1 AND p = 'q'") == And(Opaque("id = 2 + 1"), Cmp("=", Ref(("p",)), Lit("q")))
    assert parse_sql("NOT (b * 2 = 4)") == Not(Opaque("b * 2 = 4"))


@pytest.mark.connect
def test_columns_read_like_the_sql_they_stand_for(spark):
    """PySpark Columns become the same tree as the SQL they mean - classic Spark 4 (ColumnNode),
    classic Spark 3.5 (Catalyst expressions) and Connect - or pruning would silently do nothing."""
    from pyspark.sql import functions as F

    from deltaspark.read.predicates import from_filter

    cases = [
        ((F.col("a") > 1) & (F.col("b") == "x"), "a > 1 AND b = 'x'"),
        ((F.col("a") <= 2) | ~(F.col("c") != 3), "a <= 2 OR NOT c != 3"),
        (F.col("s.t").isin(1, 2), "s.t IN (1, 2)"),
        (F.col("x").between(1, 5), "x BETWEEN 1 AND 5"),
        (F.col("x").isNull(), "x IS NULL"),
        (F.col("x").isNotNull(), "x IS NOT NULL"),
        (F.col("x").eqNullSafe(None), "x <=> NULL"),
        (F.col("f") >= F.lit(True), "f >= true"),
        (F.col("d") < F.lit(Decimal("2.5")), "d < 2.5"),
        (F.lit(5) < F.col("a"), "5 < a"),
        (F.expr("a > 1 AND b IN ('p', 'q')"), "a > 1 AND b IN ('p', 'q')"),
    ]
    for column, sql in cases:
        assert _same(from_filter(column)) == _same(parse_sql(sql)), sql
    assert isinstance(from_filter(F.upper("name") == "X").left, Opaque)


def _same(node):
    """`a != b` as `NOT a = b` (Spark builds Column `!=` that way): one form for comparing trees."""
    if isinstance(node, Cmp) and node.op == "!=":
        return Not(Cmp("=", node.left, node.right))
    if isinstance(node, (And, Or)):
        return type(node)(_same(node.left), _same(node.right))
    if isinstance(node, Not):
        return Not(_same(node.child))
    return node
