"""MERGE's clauses, as delta-spark's builder collects them, and the rules on their order.

Clauses of one kind (matched, not matched, not matched by source) are tried in the order given;
a row takes the first whose condition holds (a NULL condition does not hold), as SQL's MERGE does.
Only the last clause of a kind may omit its condition: one before it would hide the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltaspark.errors import InvalidArgumentError

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

UPDATE, DELETE, INSERT = "update", "delete", "insert"

_METHODS = {
    (MATCHED, UPDATE): "whenMatchedUpdate",
    (MATCHED, DELETE): "whenMatchedDelete",
    (NOT_MATCHED, INSERT): "whenNotMatchedInsert",
    (NOT_MATCHED_BY_SOURCE, UPDATE): "whenNotMatchedBySourceUpdate",
    (NOT_MATCHED_BY_SOURCE, DELETE): "whenNotMatchedBySourceDelete",
}


@dataclass(frozen=True)
class Clause:
    """One WHEN clause. `assignments` maps target columns to SQL strings or Columns; None for
    `whenMatchedUpdateAll` / `whenNotMatchedInsertAll` (every column from the source's column of
    the same name); empty for a delete."""

    kind: str  # MATCHED, NOT_MATCHED or NOT_MATCHED_BY_SOURCE
    action: str  # UPDATE, DELETE or INSERT
    condition: Any = None  # SQL string or Column; None: always
    assignments: Mapping[str, Any] | None = None

    @property
    def modifies_target(self) -> bool:
        """Whether the clause changes a target row (update or delete), as opposed to inserting."""
        return self.kind != NOT_MATCHED

    @property
    def method(self) -> str:
        name = _METHODS[(self.kind, self.action)]
        if self.assignments is None and self.action != DELETE:
            name += "All"
        return name

    def describe(self) -> dict[str, str]:
        """The clause as delta-spark records it in the commit's operation parameters."""
        described = {
            "actionType": self.action + ("*" if self.assignments is None and self.action != DELETE else "")
        }
        if self.condition is not None:
            described["predicate"] = _text(self.condition)
        return described


def _text(expression: Any) -> str:
    return expression if isinstance(expression, str) else str(expression)


def new_clause(kind: str, action: str, condition: Any, assignments: Any, all_columns: bool = False) -> Clause:
    """A clause from a builder call, its arguments checked."""
    clause = Clause(kind, action, condition, None if all_columns else (assignments or {}))
    if condition is not None and not isinstance(condition, str) and type(condition).__name__ != "Column":
        raise InvalidArgumentError(
            f"{clause.method}: the condition must be a SQL string or a Column, got {type(condition).__name__}"
        )
    unassigned = not isinstance(assignments, Mapping) or not assignments
    if action in (UPDATE, INSERT) and not all_columns and unassigned:
        what = "set" if action == UPDATE else "values"
        raise InvalidArgumentError(
            f"{clause.method} needs `{what}`: a dict of target column -> SQL string or Column"
        )
    return clause


def check_order(clauses: list[Clause]) -> None:
    """Refuse a merge without clauses, or with an unconditional clause before another of its kind."""
    if not clauses:
        raise InvalidArgumentError(
            "A merge needs at least one clause (whenMatchedUpdate, whenNotMatchedInsert, ...) "
            "before execute()"
        )
    for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
        of_kind = [c for c in clauses if c.kind == kind]
        for clause in of_kind[:-1]:
            if clause.condition is None:
                raise InvalidArgumentError(
                    f"{clause.method} without a condition must be the last of its kind: the clauses "
                    "after it could never apply (give it a condition or move it last)"
                )
