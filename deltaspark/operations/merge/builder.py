"""`DeltaMergeBuilder`: delta-spark's MERGE API, clause by clause, then `execute()`.

Each `when...` call returns a new builder with the clause appended, so a partly built merge can be
reused. `execute()` runs the merge (`execute.merge`) and returns delta-spark's one-row metrics
DataFrame (`num_affected_rows`, `num_updated_rows`, `num_deleted_rows`, `num_inserted_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame

from deltaspark.operations.merge.clauses import (
    DELETE,
    INSERT,
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    UPDATE,
    Clause,
    new_clause,
)


@dataclass(frozen=True)
class DeltaMergeBuilder:
    """A merge of `source` into a table on `condition`, being built."""

    _run: Callable[[DeltaMergeBuilder], DataFrame]
    source: DataFrame
    condition: Any
    clauses: tuple[Clause, ...] = field(default=())
    schemaEvolution: bool = False
    txnAppId: str | None = None
    txnVersion: int | None = None

    def _with(self, clause: Clause) -> DeltaMergeBuilder:
        return replace(self, clauses=(*self.clauses, clause))

    def whenMatchedUpdate(
        self, condition: Any = None, set: Mapping[str, Any] | None = None
    ) -> DeltaMergeBuilder:  # noqa: A002
        """Update matched target rows (where `condition` holds): `set` maps target columns to SQL
        strings or Columns over the target's and the source's columns."""
        return self._with(new_clause(MATCHED, UPDATE, condition, set))

    def whenMatchedUpdateAll(self, condition: Any = None) -> DeltaMergeBuilder:
        """Update every column of matched target rows from the source's column of the same name."""
        return self._with(new_clause(MATCHED, UPDATE, condition, None, all_columns=True))

    def whenMatchedDelete(self, condition: Any = None) -> DeltaMergeBuilder:
        """Delete matched target rows (where `condition` holds)."""
        return self._with(new_clause(MATCHED, DELETE, condition, {}))

    def whenNotMatchedInsert(
        self, condition: Any = None, values: Mapping[str, Any] | None = None
    ) -> DeltaMergeBuilder:
        """Insert source rows that match no target row: `values` maps target columns to
        expressions over the source's columns (columns not given are NULL or generated)."""
        return self._with(new_clause(NOT_MATCHED, INSERT, condition, values))

    def whenNotMatchedInsertAll(self, condition: Any = None) -> DeltaMergeBuilder:
        """Insert source rows that match no target row, every column from the source's."""
        return self._with(new_clause(NOT_MATCHED, INSERT, condition, None, all_columns=True))

    def whenNotMatchedBySourceUpdate(
        self,
        condition: Any = None,
        set: Mapping[str, Any] | None = None,  # noqa: A002
    ) -> DeltaMergeBuilder:
        """Update target rows that no source row matches (`set` over the target's columns)."""
        return self._with(new_clause(NOT_MATCHED_BY_SOURCE, UPDATE, condition, set))

    def whenNotMatchedBySourceDelete(self, condition: Any = None) -> DeltaMergeBuilder:
        """Delete target rows that no source row matches."""
        return self._with(new_clause(NOT_MATCHED_BY_SOURCE, DELETE, condition, {}))

    def withSchemaEvolution(self) -> DeltaMergeBuilder:
        """Let `whenMatchedUpdateAll` / `whenNotMatchedInsertAll` add the source's new columns and
        struct fields to the table."""
        return replace(self, schemaEvolution=True)

    def execute(self, txnAppId: str | None = None, txnVersion: int | None = None) -> DataFrame:
        """Run the merge as one commit; delta-spark's one-row metrics DataFrame. With
        `txnAppId`/`txnVersion` (or the session's `spark.databricks.delta.write.txnAppId` /
        `txnVersion`) the merge is idempotent: when the table already holds that version of the
        application, nothing is read or committed and every metric is 0."""
        return self._run(replace(self, txnAppId=txnAppId, txnVersion=txnVersion))
