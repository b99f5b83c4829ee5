"""A small predicate language for file pruning: parsed from SQL text or read off a PySpark Column.

Only what file pruning can use is represented - comparisons, IN, IS [NOT] NULL, BETWEEN,
AND/OR/NOT over column references and literals. Anything else becomes `Opaque`, which prunes
nothing; the user's filter is always applied to the rows as well, so an opaque part can only cost
speed, never correctness.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from deltaspark.spark_compat import PYSPARK_VERSION

# ---- the tree -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Lit:
    value: Any  # None, bool, int, float, Decimal, str
    sql: str | None = None  # typed SQL literal text (DATE '...', TIMESTAMP '...'), built with Spark's parser


@dataclass(frozen=True)
class Cmp:
    op: str  # one of = != < <= > >= <=>
    left: Any
    right: Any


@dataclass(frozen=True)
class In:
    expr: Any
    values: tuple[Any, ...]


@dataclass(frozen=True)
class IsNull:
    expr: Any


@dataclass(frozen=True)
class And:
    left: Any
    right: Any


@dataclass(frozen=True)
class Or:
    left: Any
    right: Any


@dataclass(frozen=True)
class Not:
    child: Any


@dataclass(frozen=True)
class Opaque:
    text: str = ""


FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}

# ---- SQL text -----------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)(?P<suffix>[LlDdBbSsYy]|BD|bd)?
      | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      | (?P<ident>`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op><=>|<=|>=|<>|!=|==|=|<|>|\(|\)|,|\.|-)
      | (?P<other>\S)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {
    "and",
    "or",
    "not",
    "in",
    "is",
    "null",
    "between",
    "true",
    "false",
    "date",
    "timestamp",
    "timestamp_ntz",
}


class _ParseError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out, position = [], 0
    text = text.strip()
    while position < len(text):
        m = _TOKEN.match(text, position)
        if not m or m.end() == position:
            raise _ParseError(f"cannot tokenize at {text[position : position + 20]!r}")
        position = m.end()
        if m.group("num") is not None:
            out.append(("num", m.group("num") + (m.group("suffix") or "")))
        elif m.group("str") is not None:
            out.append(("str", m.group("str")))
        elif m.group("ident") is not None:
            word = m.group("ident")
            if word.startswith("`"):
                out.append(("ident", word[1:-1].replace("``", "`")))
            elif word.lower() in _KEYWORDS:
                out.append(("kw", word.lower()))
            else:
                out.append(("ident", word))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            out.append(("other", m.group("other")))  # arithmetic and the like: read as opaque
    return out


def _unquote(token: str) -> str:
    body = token[1:-1]
    quote = token[0]
    body = body.replace(quote * 2, quote)
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _number(text: str) -> Any:
    lowered = text.lower()
    if lowered.endswith("bd"):
        return Decimal(text[:-2])
    if lowered[-1] in "lsy":
        return int(text[:-1])
    if lowered[-1] in "db":
        return float(text[:-1])
    if any(c in lowered for c in ".e"):
        return Decimal(text) if "e" not in lowered else float(text)
    return int(text)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self, offset: int = 0) -> tuple[str, str] | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def take(self, kind: str | None = None, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (kind and token[0] != kind) or (value and token[1] != value):
            raise _ParseError(f"expected {value or kind}, got {token}")
        self.i += 1
        return token

    def accept(self, kind: str, value: str) -> bool:
        if self.peek() == (kind, value):
            self.i += 1
            return True
        return False

    def parse(self) -> Any:
        node = self.or_()
        if self.peek() is not None:
            raise _ParseError(f"unexpected {self.peek()}")
        return node

    def or_(self) -> Any:
        node = self.and_()
        while self.accept("kw", "or"):
            node = Or(node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while self.accept("kw", "and"):
            node = And(node, self.not_())
        return node

    def not_(self) -> Any:
        if self.accept("kw", "not") or self.accept("other", "!"):
            return Not(self.not_())
        return self.readable_predicate()

    def _at_boundary(self) -> bool:
        token = self.peek()
        return token is None or token in (("kw", "and"), ("kw", "or"), ("op", ")"))

    def readable_predicate(self) -> Any:
        """A predicate of the grammar, or `Opaque` for one it cannot read (`id % 2 = 0`), so that
        the conjuncts around it still prune."""
        start = self.i
        try:
            node = self.predicate()
            if self._at_boundary():
                return node
        except _ParseError:
            pass
        self.i = start
        return self._skip_opaque()

    def _skip_opaque(self) -> Opaque:
        """Consume one unreadable predicate: up to the next AND / OR / ')' outside parentheses
        (the AND of a BETWEEN belongs to it)."""
        start, depth, between = self.i, 0, False
        while (token := self.peek()) is not None:
            if depth == 0 and token == ("op", ")"):
                break
            if depth == 0 and token == ("kw", "or"):
                break
            if depth == 0 and token == ("kw", "and"):
                if not between:
                    break
                between = False
            elif token == ("kw", "between") and depth == 0:
                between = True
            depth += token == ("op", "(")
            depth -= token == ("op", ")")
            self.i += 1
        if self.i == start:
            raise _ParseError(f"expected a predicate, got {self.peek()}")
        return Opaque(" ".join(value for _, value in self.tokens[start : self.i]))

    def predicate(self) -> Any:
        left = self.primary()
        token = self.peek()
        if token and token[0] == "op" and token[1] in ("=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>"):
            self.i += 1
            op = {"==": "=", "<>": "!="}.get(token[1], token[1])
            return Cmp(op, left, self.primary())
        if self.accept("kw", "is"):
            negated = self.accept("kw", "not")
            self.take("kw", "null")
            return Not(IsNull(left)) if negated else IsNull(left)
        negated = self.accept("kw", "not")
        if self.accept("kw", "in"):
            self.take("op", "(")
            values = [self.primary()]
            while self.accept("op", ","):
                values.append(self.primary())
            self.take("op", ")")
            node: Any = In(left, tuple(values))
            return Not(node) if negated else node
        if self.accept("kw", "between"):
            low = self.primary()
            self.take("kw", "and")
            high = self.primary()
            node = And(Cmp(">=", left, low), Cmp("<=", left, high))
            return Not(node) if negated else node
        if negated:
            raise _ParseError("dangling NOT")
        return left

    def primary(self) -> Any:
        token = self.take()
        kind, value = token
        if kind == "op" and value == "(":
            node = self.or_()
            self.take("op", ")")
            return node
        if kind == "op" and value == "-":
            inner = self.primary()
            if isinstance(inner, Lit) and isinstance(inner.value, (int, float, Decimal)):
                return Lit(-inner.value)
            raise _ParseError("unary minus on a non-number")
        if kind == "num":
            return Lit(_number(value))
        if kind == "str":
            return Lit(_unquote(value))
        if kind == "kw" and value in ("true", "false"):
            return Lit(value == "true")
        if kind == "kw" and value == "null":
            return Lit(None)
        if (
            kind == "kw"
            and value in ("date", "timestamp", "timestamp_ntz")
            and self.peek()
            and self.peek()[0] == "str"
        ):
            quoted = self.take("str")[1]
            # Kept as SQL so that Spark reads it in the session time zone, exactly as the row filter does.
            return Lit(_unquote(quoted), sql=f"{value.upper()} {quoted}")
        if kind == "ident":
            parts = [value]
            while self.peek() == ("op", ".") and self.peek(1) and self.peek(1)[0] == "ident":
                self.i += 1
                parts.append(self.take("ident")[1])
            if self.peek() == ("op", "("):  # a function call: not something pruning understands
                depth = 0
                while True:
                    t = self.take()
                    depth += t == ("op", "(")
                    depth -= t == ("op", ")")
                    if depth == 0:
                        break
                return Opaque(".".join(parts) + "(...)")
            return Ref(tuple(parts))
        raise _ParseError(f"unexpected {token}")


def parse_sql(text: str) -> Any:
    """Parse a SQL boolean expression; anything outside the small grammar gives `Opaque`."""
    try:
        return _Parser(text).parse()
    except (_ParseError, ValueError):
        return Opaque(text)


# ---- PySpark Column trees ------------------------------------------------------------------------

_FUNCTIONS = {
    "and": "and",
    "or": "or",
    "not": "not",
    "!": "not",
    "=": "=",
    "==": "=",
    "<=>": "<=>",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "!=": "!=",
    "<>": "!=",
    "isnull": "isnull",
    "isnotnull": "isnotnull",
    "in": "in",
}


def _combine(name: str, args: list[Any]) -> Any:
    kind = _FUNCTIONS.get(name.lower())
    if kind == "and" and len(args) == 2:
        return And(*args)
    if kind == "or" and len(args) == 2:
        return Or(*args)
    if kind == "not" and len(args) == 1:
        return Not(args[0])
    if kind in FLIPPED and len(args) == 2:
        return Cmp(kind, *args)
    if kind == "isnull" and len(args) == 1:
        return IsNull(args[0])
    if kind == "isnotnull" and len(args) == 1:
        return Not(IsNull(args[0]))
    if kind == "in" and len(args) >= 2:
        return In(args[0], tuple(args[1:]))
    return Opaque(name)


def _identifier(text: str) -> Ref:
    parts, current, quoted = [], "", False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return Ref(tuple(parts))


def _literal(value: Any, type_name: str) -> Any:
    """A literal from a Column tree; date/time literals stay opaque because their conversion to
    Spark values depends on client settings the row filter applies on its own."""
    type_name = type_name.lower()
    if value is None or isinstance(value, (bool, int, float, str, Decimal)):
        if type_name.startswith(("date", "timestamp")):
            return Opaque(type_name)
        return Lit(value)
    if type_name.startswith("decimal"):
        return Lit(Decimal(str(value.toString()) if hasattr(value, "toString") else str(value)))
    return Opaque(type_name)


def _from_connect(expr: Any) -> Any:
    name = type(expr).__name__
    if name == "UnresolvedFunction":
        return _combine(expr._name, [_from_connect(a) for a in expr._args])
    if name == "ColumnReference":
        return _identifier(expr._unparsed_identifier)
    if name == "LiteralExpression":
        return _literal(expr._value, str(expr._dataType.simpleString()))
    if name == "SQLExpression":
        return parse_sql(expr._expr)
    return Opaque(name)


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _from_classic(node: Any) -> Any:
    name = str(node.getClass().getSimpleName())
    if name == "UnresolvedFunction":
        return _combine(str(node.functionName()), [_from_classic(a) for a in _seq(node.arguments())])
    if name == "UnresolvedAttribute":
        return Ref(tuple(str(p) for p in _seq(node.nameParts())))
    if name == "Literal":
        data_type = node.dataType()
        type_name = str(data_type.get().simpleString()) if data_type.isDefined() else "string"
        return _literal(node.value(), type_name)
    if name == "SqlExpression":
        return parse_sql(str(node.expression()))
    return Opaque(name)


# Spark 3.5 builds classic Columns as Catalyst expressions directly (Spark 4 as ColumnNodes).
_CATALYST_COMPARISONS = {
    "EqualTo": "=",
    "EqualNullSafe": "<=>",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}


def _catalyst_literal(node: Any) -> Any:
    data_type = node.dataType()
    type_name = str(data_type.simpleString())
    value = node.value()
    if type_name in ("date", "timestamp_ntz") and isinstance(value, int):
        # days / microseconds since the epoch, without a time zone: exact as typed SQL literals
        return _epoch_literal(value, type_name)
    if value is not None and not isinstance(value, (bool, int, float, str)):
        text = str(value.toString())
        if type_name == "string":
            value = text  # UTF8String
        elif type_name.startswith("decimal"):
            value = Decimal(text)
    return _literal(value, type_name)


def _epoch_literal(value: int, type_name: str) -> Any:
    epoch = datetime.datetime(1970, 1, 1)
    try:
        if type_name == "date":
            text = (epoch + datetime.timedelta(days=value)).date().isoformat()
            return Lit(text, f"DATE '{text}'")
        text = (epoch + datetime.timedelta(microseconds=value)).isoformat(sep=" ")
        return Lit(text, f"TIMESTAMP_NTZ '{text}'")
    except (OverflowError, ValueError):  # outside Python's years 1-9999: prune nothing
        return Opaque(type_name)


def _from_catalyst(node: Any) -> Any:
    name = str(node.getClass().getSimpleName())
    children = _seq(node.children())
    if name in _CATALYST_COMPARISONS and len(children) == 2:
        return Cmp(_CATALYST_COMPARISONS[name], _from_catalyst(children[0]), _from_catalyst(children[1]))
    if name in ("And", "Or") and len(children) == 2:
        kind = And if name == "And" else Or
        return kind(_from_catalyst(children[0]), _from_catalyst(children[1]))
    if name == "Not" and len(children) == 1:
        return Not(_from_catalyst(children[0]))
    if name == "IsNull" and len(children) == 1:
        return IsNull(_from_catalyst(children[0]))
    if name == "IsNotNull" and len(children) == 1:
        return Not(IsNull(_from_catalyst(children[0])))
    if name == "In":
        return In(_from_catalyst(node.value()), tuple(_from_catalyst(v) for v in _seq(node.list())))
    if name == "UnresolvedAttribute":
        return Ref(tuple(str(p) for p in _seq(node.nameParts())))
    if name == "Literal":
        return _catalyst_literal(node)
    if name == "UnresolvedFunction":
        function = node.nameParts()
        function_name = str(function.apply(function.size() - 1))
        return _combine(function_name, [_from_catalyst(a) for a in _seq(node.arguments())])
    return Opaque(name)


def from_filter(condition: Any) -> Any:
    """The predicate tree of a SQL string or a PySpark Column (classic or Connect)."""
    if condition is None:
        return Lit(True)
    if isinstance(condition, str):
        return parse_sql(condition)
    try:
        if type(condition).__module__.startswith("pyspark.sql.connect"):  # a Spark Connect Column
            return _from_connect(condition._expr)
        jc = condition._jc
        if PYSPARK_VERSION >= (4, 0):
            return _from_classic(jc.node())  # classic Column, Spark 4: a ColumnNode tree
        return _from_catalyst(jc.expr())  # classic Column, Spark 3.5: a Catalyst expression
    except Exception:  # an unfamiliar tree: prune nothing, the row filter still applies
        return Opaque(repr(condition))


def children(node: Any) -> list[Any] | None:
    """The operands of an inner node of the tree; None for a leaf (`Ref`, `Lit`, `Opaque`) or a node
    this module does not build."""
    if isinstance(node, Cmp):
        return [node.left, node.right]
    if isinstance(node, In):
        return [node.expr, *node.values]
    if isinstance(node, IsNull):
        return [node.expr]
    if isinstance(node, (And, Or)):
        return [node.left, node.right]
    if isinstance(node, Not):
        return [node.child]
    return None


def references(node: Any) -> set[str] | None:
    """The top-level column names a predicate tree uses; None when part of it was not understood
    (an `Opaque` node), so callers that need certainty can refuse it."""
    if isinstance(node, Ref):
        return {node.parts[0]}
    if isinstance(node, Lit):
        return set()
    operands = children(node)
    if operands is None:
        return None
    found: set[str] = set()
    for child in operands:
        names = references(child)
        if names is None:
            return None
        found |= names
    return found
