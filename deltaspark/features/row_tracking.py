"""Row tracking ("Row Tracking"): stable row ids and row commit versions.

A row's id is its materialized value (a hidden column named in the table configuration) when that
column is present and not null, else the file's `baseRowId` plus the row's physical index. Its
commit version is likewise the materialized value or the file's `defaultRowCommitVersion`.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol

ENABLED_KEY = "delta.enableRowTracking"
ROW_ID_COLUMN_KEY = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_COLUMN_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"


def is_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    return (
        protocol.hasFeature("rowTracking") and metadata.configuration.get(ENABLED_KEY, "").lower() == "true"
    )


def materialized_columns(metadata: Metadata) -> tuple[str | None, str | None]:
    return metadata.configuration.get(ROW_ID_COLUMN_KEY), metadata.configuration.get(
        COMMIT_VERSION_COLUMN_KEY
    )


def row_id(materialized: Column | None, base_row_id: Column, row_index: Column) -> Column:
    default = base_row_id + row_index
    return F.coalesce(materialized, default) if materialized is not None else default


def row_commit_version(materialized: Column | None, default_row_commit_version: Column) -> Column:
    if materialized is None:
        return default_row_commit_version
    return F.coalesce(materialized, default_row_commit_version)
