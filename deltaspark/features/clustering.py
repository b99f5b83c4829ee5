"""Liquid clustering (the protocol's "Clustered Table"): which columns a table is clustered by.

The columns live in the `delta.clustering` metadata domain as `{"clusteringColumns": [...]}`, each
a column path of physical names (delta-spark writes lists like `[["col-1a2b"]]`; the protocol's
example writes plain strings: both are read). A clustered table supports the `clustering` and
`domainMetadata` writer features, is never partitioned, and keeps statistics for its clustering
columns. Files that a clustering implementation laid out carry its name in `clusteringProvider`
(deltaspark's OPTIMIZE writes `liquid`, as delta-spark does); it reclusters only files of its own
provider or none.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import StructField, StructType

from deltaspark.errors import CorruptLogError, InvalidArgumentError, UnsupportedFeatureError
from deltaspark.features.column_mapping import physical_name

DOMAIN = "delta.clustering"
PROVIDER = "liquid"


def parse_columns(configuration: str | None, table_path: str) -> list[tuple[str, ...]]:
    """The clustering column paths (physical names) of a `delta.clustering` configuration."""
    try:
        columns = json.loads(configuration or "{}").get("clusteringColumns") or []
        return [(c,) if isinstance(c, str) else tuple(str(p) for p in c) for c in columns]
    except (ValueError, AttributeError, TypeError):
        reason = f"the {DOMAIN} domain does not hold a list of clustering columns: {configuration!r}"
        raise CorruptLogError(f"{table_path}/_delta_log", reason) from None


def domain_action(columns: list[tuple[str, ...]]) -> dict[str, Any]:
    """The `domainMetadata` action recording `columns` (physical paths), as delta-spark writes it."""
    configuration = json.dumps({"clusteringColumns": [list(c) for c in columns]}, separators=(",", ":"))
    return {"domainMetadata": {"domain": DOMAIN, "configuration": configuration, "removed": False}}


def clustering_fields(snapshot: Any) -> list[StructField]:
    """The table's clustering columns (empty when it is not clustered). Nested clustering columns
    are refused by name: deltaspark clusters by top-level columns."""
    if not snapshot.protocol.hasFeature("clustering"):
        return []
    rows = snapshot.domainMetadata().where(f"domain = '{DOMAIN}'").select("configuration").collect()
    paths = parse_columns(rows[0][0], snapshot.tableRoot) if rows else []
    mode = snapshot.columnMappingMode
    by_physical = {physical_name(f, mode): f for f in snapshot.schema.fields}
    fields = []
    for path in paths:
        if len(path) != 1 or path[0] not in by_physical:
            raise UnsupportedFeatureError(
                f"{snapshot.tableRoot} is clustered by {'.'.join(path)}, which is not a top-level column: "
                "deltaspark clusters by top-level columns only",
                ["clustering"],
            )
        fields.append(by_physical[path[0]])
    return fields


def resolve_columns(
    schema: StructType, columns: list[str], partition_columns: list[str] | tuple[str, ...], table_path: str
) -> list[StructField]:
    """The schema's fields for clustering column names (case-insensitive, top-level, distinct), for
    a table that is not partitioned."""
    if partition_columns:
        raise InvalidArgumentError(
            f"Cannot cluster {table_path}: it is partitioned by {', '.join(partition_columns)}, and a table "
            "cannot be both partitioned and clustered"
        )
    by_name = {f.name.lower(): f for f in schema.fields}
    fields = []
    for column in columns:
        field = by_name.get(column.lower()) if isinstance(column, str) else None
        if field is None:
            raise InvalidArgumentError(
                f"Cannot cluster {table_path} by {column!r}: no such top-level column "
                f"(columns: {', '.join(f.name for f in schema.fields)})"
            )
        if isinstance(field.dataType, StructType):
            raise InvalidArgumentError(f"Cannot cluster {table_path} by {column!r}: it is a struct")
        fields.append(field)
    if len({f.name for f in fields}) != len(fields):
        raise InvalidArgumentError(f"Clustering columns of {table_path} repeat: {columns}")
    return fields


def physical_paths(fields: list[StructField], mode: str) -> list[tuple[str, ...]]:
    return [(physical_name(f, mode),) for f in fields]
