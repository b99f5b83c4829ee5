"""MERGE's new values: each clause's assignments resolved over the joined rows, converted to the
table's types, and the rows the merge writes projected from them.

A joined row carries the target row as one struct (`TARGET_ROW`) and the source row as another
(`SOURCE_ROW`), so that same-named columns of the two sides never clash, and the index of the
clause it takes (`CLAUSE`). Updates assign top-level columns or struct fields (dotted names, the
target's alias optional); inserts assign whole columns; `updateAll`/`insertAll` take the source's
column of each name. Values are converted by ANSI store assignment (`update.store_assign`).
Generated columns a clause does not assign are recomputed; identity columns an insert leaves
out are generated later (`identity_missing`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.identity_columns import IdentityInfo, identity_columns
from deltaspark.operations.merge.clauses import DELETE, INSERT, UPDATE, Clause
from deltaspark.operations.update import name_parts, store_assign
from deltaspark.operations.write import GENERATION_KEY, conform_value

TARGET_ROW = "__deltaspark_target_row"  # the target row's columns, as a struct (never ambiguous)
SOURCE_ROW = "__deltaspark_source_row"
CLAUSE = "__deltaspark_clause"  # index of the clause a joined row takes; null: none
ROW_ID = "__deltaspark_row_id"
ROW_VERSION = "__deltaspark_row_commit_version"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class ClauseValues:
    """The new value of every column of the table under each clause, over the joined rows."""

    def __init__(
        self,
        clauses: list[Clause],
        old_schema: StructType,
        schema: StructType,
        alias: str,
        source_types: dict[str, tuple[str, DataType]],
        evolve: bool,
        hidden: tuple[str, ...],
        table_path: str,
        probe: DataFrame,
    ) -> None:
        """`old_schema`/`schema`: the table's columns before and after the merge (schema
        evolution); `source_types`: the source's columns by lower-case name; `hidden`: the
        materialized row tracking columns to carry; `probe`: the joined rows' shape (no rows)."""
        self.clauses, self.alias, self.table_path = clauses, alias, table_path
        self.source_types, self.evolve, self.hidden = source_types, evolve, hidden
        self.old_schema = old_schema
        self.schema = schema
        inserts = [i for i, c in enumerate(clauses) if c.action == INSERT]
        self.by_clause: dict[int, dict[str, Column]] = {}  # clause -> top-level column -> value
        self.assigned: dict[int, set[str]] = {}
        for i, clause in enumerate(clauses):
            if clause.action == DELETE:
                continue
            values = self._values(clause, probe)
            self.by_clause[i] = values
            self.assigned[i] = {name.lower() for name in values}
        # identity column -> the insert clauses that leave it to be generated
        self.identity_missing: dict[str, tuple[IdentityInfo, list[int]]] = {}
        for identity in identity_columns(self.schema):
            leaving = [i for i in inserts if identity.name.lower() not in self.assigned[i]]
            if leaving:
                self.identity_missing[identity.name] = (identity, leaving)

    def old(self, field: StructField) -> Column:
        """The target row's value of `field` before the merge (NULL for a column the merge adds)."""
        before = {f.name.lower(): f for f in self.old_schema.fields}.get(field.name.lower())
        if before is None:
            return F.lit(None).cast(field.dataType)
        value = F.col(f"{TARGET_ROW}.{quote(before.name)}")
        if before.dataType == field.dataType:
            return value
        return conform_value(value, before.dataType, field.dataType, field.name, self.table_path)

    def _target_field(self, name: str) -> tuple[list[str], StructField]:
        """A target column name as a clause names it (alias-qualified or not, dotted for fields)."""
        parts = name_parts(name, self.table_path)
        top = {f.name.lower(): f for f in self.schema.fields}
        alias = self.alias
        if len(parts) > 1 and parts[0].lower() == alias.lower() and parts[0].lower() not in top:
            parts = parts[1:]
        field = top.get(parts[0].lower())
        if field is None:
            raise InvalidArgumentError(
                f"Cannot merge into {self.table_path}: no column `{name}` "
                f"(the table's columns: {', '.join(f.name for f in self.schema.fields)})"
            )
        return [field.name, *parts[1:]], field

    def _values(self, clause: Clause, probe: DataFrame) -> dict[str, Column]:
        """Top-level column -> its new value under `clause`, converted to the column's type."""
        if clause.assignments is None:
            return self._all_from_source(clause)
        nested: dict[str, list[tuple[list[str], Any, str]]] = {}
        seen: list[list[str]] = []
        for name, expression in clause.assignments.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    f"{clause.method}: assignment targets are column names, got {name!r}"
                )
            path, field = self._target_field(name)
            lowered = [p.lower() for p in path]
            for other in seen:
                shorter = min(len(other), len(lowered))
                if other[:shorter] == lowered[:shorter]:
                    raise InvalidArgumentError(f"{clause.method}: `{name}` is assigned more than once")
            seen.append(lowered)
            always = {i.name.lower() for i in identity_columns(self.schema) if not i.allow_explicit_insert}
            if path[0].lower() in always:
                raise InvalidArgumentError(
                    f"{clause.method}: `{path[0]}` of {self.table_path} is an identity column "
                    "GENERATED ALWAYS"
                )
            if clause.action == INSERT and len(path) > 1:
                raise InvalidArgumentError(
                    f"{clause.method}: insert values are for whole columns, not `{name}`"
                )
            nested.setdefault(field.name, []).append((path[1:], expression, name))
        out: dict[str, Column] = {}
        for top, assigned in nested.items():
            field = next(f for f in self.schema.fields if f.name == top)
            value = self.old(field) if clause.action == UPDATE else F.lit(None).cast(field.dataType)
            for sub, expression, name in assigned:
                column = expression_of(expression)
                target_type = sub_type(field, sub, self.table_path, name)
                try:
                    found = probe.select(column.alias("_v")).schema["_v"].dataType
                except Exception as exc:
                    raise InvalidArgumentError(
                        f"{clause.method}: the value of `{name}` {shown(expression)} cannot be used: "
                        f"{first_line(exc)}"
                    ) from None
                converted = store_assign(column, found, target_type, ".".join([top, *sub]), self.table_path)
                nested_name = ".".join(quote(s) for s in sub)
                value = value.withField(nested_name, converted) if sub else converted
            out[top] = value
        return out

    def _all_from_source(self, clause: Clause) -> dict[str, Column]:
        """`updateAll` / `insertAll`: each column from the source's column of the same name. A
        column the source lacks is refused, unless the schema evolves: then an update keeps it and
        an insert leaves it NULL (a generated column is computed either way)."""
        out: dict[str, Column] = {}
        for field in self.schema.fields:
            if clause.action == UPDATE and field.name.lower() in identity_names(self.schema):
                continue  # an identity column keeps its value
            found = self.source_types.get(field.name.lower())
            if found is None:
                if field.metadata.get(GENERATION_KEY) or self.evolve:
                    continue
                if field.name.lower() in identity_names(self.schema) and clause.action == INSERT:
                    continue  # generated
                raise InvalidArgumentError(
                    f"{clause.method}: the source has no column `{field.name}` of {self.table_path} "
                    "(assign the columns one by one, or use withSchemaEvolution())"
                )
            name, data_type = found
            always = {i.name.lower() for i in identity_columns(self.schema) if not i.allow_explicit_insert}
            if field.name.lower() in always:
                raise InvalidArgumentError(
                    f"{clause.method}: `{field.name}` of {self.table_path} is an identity column GENERATED "
                    "ALWAYS, and the source has a column of that name (drop it from the source)"
                )
            value = F.col(f"{SOURCE_ROW}.{quote(name)}")
            out[field.name] = store_assign(value, data_type, field.dataType, field.name, self.table_path)
        return out

    def project(self, rows: DataFrame, with_target: bool) -> DataFrame:
        """`rows` (joined and tagged) as the table's columns after the merge, the materialized row
        tracking columns, `CLAUSE`, and the target row before (`TARGET_ROW`, for change data)."""
        clause = F.col(CLAUSE)
        columns = []
        for field in self.schema.fields:
            value: Any = None
            for i, values in self.by_clause.items():
                if self.clauses[i].modifies_target != with_target:
                    continue  # target rows take update clauses only, source rows insert clauses
                if field.name in values:
                    value = (F.when if value is None else value.when)(clause == F.lit(i), values[field.name])
            old = self.old(field) if with_target else F.lit(None).cast(field.dataType)
            columns.append((old if value is None else value.otherwise(old)).alias(field.name))
        tracking = []
        if self.hidden:
            row_id, commit_version = self.hidden
            tracking = [
                F.col(ROW_ID).alias(row_id) if with_target else F.lit(None).cast("long").alias(row_id),
                (F.when(clause.isNull(), F.col(ROW_VERSION)) if with_target else F.lit(None))
                .cast("long")
                .alias(commit_version),
            ]
        target_row = F.col(TARGET_ROW) if with_target else F.lit(None).cast(self._old_struct())
        projected = rows.select(*columns, *tracking, clause, target_row.alias(TARGET_ROW))
        generated = [f for f in self.schema.fields if f.metadata.get(GENERATION_KEY)]
        if not generated:
            return projected
        out = []
        for field in self.schema.fields:
            column = F.col(quote(field.name))
            if field in generated:
                recompute = [i for i in self.by_clause if field.name.lower() not in self.assigned[i]]
                if recompute:
                    fresh = F.expr(field.metadata[GENERATION_KEY]).cast(field.dataType)
                    column = F.when(clause.isin(recompute), fresh).otherwise(column)
            out.append(column.alias(field.name))
        return projected.select(*out, *[F.col(h) for h in self.hidden], clause, F.col(TARGET_ROW))

    def _old_struct(self) -> StructType:
        return StructType([StructField(f.name, f.dataType, True) for f in self.old_schema.fields])


def identity_names(schema: StructType) -> set[str]:
    return {i.name.lower() for i in identity_columns(schema)}


def sub_type(field: StructField, sub: list[str], table_path: str, name: str) -> Any:
    current: Any = field.dataType
    for part in sub:
        if not isinstance(current, StructType):
            raise InvalidArgumentError(f"Cannot merge into {table_path}: `{name}` is not a struct field")
        found = next((f for f in current.fields if f.name.lower() == part.lower()), None)
        if found is None:
            raise InvalidArgumentError(f"Cannot merge into {table_path}: no field `{name}`")
        current = found.dataType
    return current


def expression_of(expression: Any) -> Column:
    return F.expr(expression) if isinstance(expression, str) else expression


def shown(expression: Any) -> str:
    return expression if isinstance(expression, str) else str(expression)


def first_line(exc: BaseException) -> str:
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
