"""Delta tables by name: the session catalog (a Hive metastore, AWS Glue through the Hive client)
holds where a table lives; the Delta log at that location stays the only source of truth.

A name is looked up with `SHOW TABLE EXTENDED`, which reads the catalog entry without resolving its
provider: a table registered with provider `delta` (by delta-spark, Databricks or deltaspark) is
found without delta-spark's classes, on classic and Spark Connect sessions alike (`DESCRIBE` and
`spark.catalog.tableExists` resolve the provider on Spark 4 and fail).

A table is registered the way delta-spark registers one: an external data source table with
provider `delta`, its location, schema, partition columns, comment and properties (Spark stores a
provider it has no Hive SerDe for "in Spark SQL specific format": the schema in the table's
properties, the location as the storage's `path`). Spark's `CREATE TABLE ... USING delta` and
`spark.catalog.createTable(source="delta")` look the provider up and fail without delta-spark, so
the entry is built by Spark's own parser for a `USING parquet` statement, given provider `delta`
and the table's schema, and handed to the session catalog over py4j (classic sessions only).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from deltaspark.errors import (
    InvalidArgumentError,
    NotADeltaTableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
    UnsupportedSessionError,
)
from deltaspark.spark_compat import is_connect

log = logging.getLogger(__name__)

SESSION_CATALOG = "spark_catalog"
# Table features whose commits must go through the catalog (Unity Catalog's catalog-managed tables):
# a put-if-absent commit at the location would bypass it.
CATALOG_MANAGED_FEATURES = ("catalogManaged", "catalogOwned-preview")

_PART = r"(?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
_NAME = re.compile(rf"^{_PART}(?:\.{_PART}){{0,2}}$")
_PATH_NAME = re.compile(r"^delta\.`(.+)`$", re.S)


@dataclass(frozen=True)
class CatalogEntry:
    """What the catalog says about a table: where it lives and what kind of table it is."""

    name: str  # as the user gave it
    provider: str
    table_type: str  # EXTERNAL, MANAGED, VIEW
    location: str | None
    temporary: bool = False
    properties: dict[str, str] = field(default_factory=dict)


def path_in_name(identifier: str) -> str | None:
    """The path of a ``delta.`/path` `` identifier (delta-spark's path-as-name form), else None."""
    match = _PATH_NAME.match(identifier.strip())
    return match.group(1).replace("``", "`") if match else None


def looks_like_name(identifier: str) -> bool:
    """A catalog name (`t`, `db.t`, `catalog.db.t`, parts optionally back-quoted) rather than a
    path: paths have a `/` or a scheme, names never do."""
    return path_in_name(identifier) is not None or bool(_NAME.match(identifier.strip()))


def split_name(name: str) -> list[str]:
    """`a.`b.c`.d` -> ["a", "b.c", "d"]; raises `InvalidArgumentError` for anything else."""
    if not _NAME.match(name.strip()):
        raise InvalidArgumentError(
            f"Not a table name: {name!r} (expected table, database.table or catalog.database.table)"
        )
    parts = re.findall(_PART, name.strip())
    return [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]


def _quote(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _information(text: str) -> dict[str, str]:
    """`SHOW TABLE EXTENDED`'s `information` column: `Key: value` lines."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and key not in facts:
            facts[key.strip()] = value.strip()
    return facts


def _properties(text: str) -> dict[str, str]:
    """`[k1=v1, k2=v2]` as `SHOW TABLE EXTENDED` prints table properties (best effort: values with
    `, ` in them split; only `delta.*` keys are relied on)."""
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    pairs = (item.partition("=") for item in inner.split(", ") if "=" in item)
    return {k.strip(): v for k, _, v in pairs}


def lookup(spark: SparkSession, name: str) -> CatalogEntry | None:
    """The catalog's entry for `name`, or None when there is no such table or view."""
    parts = split_name(name)
    namespace, table = parts[:-1], parts[-1]
    if "*" in table or "|" in table:
        raise InvalidArgumentError(f"Not a table name: {name!r}")
    where = f" IN {'.'.join(_quote(p) for p in namespace)}" if namespace else ""
    try:
        rows = spark.sql(f"SHOW TABLE EXTENDED{where} LIKE {_sql_string(table)}").collect()
    except Exception as exc:  # noqa: BLE001 - Spark's analysis errors differ by version
        message = str(exc)
        missing = ("SCHEMA_NOT_FOUND", "CATALOG_NOT_FOUND", "NoSuchDatabase", "NoSuchNamespace", "not found")
        if any(k in message for k in missing):
            return None
        raise
    for row in rows:
        if row["tableName"].lower() != table.lower():
            continue
        facts = _information(row["information"] or "")
        return CatalogEntry(
            name=name,
            provider=facts.get("Provider", "").lower(),
            table_type=facts.get("Type", "VIEW" if row["isTemporary"] else "").upper(),
            location=facts.get("Location") or None,
            temporary=bool(row["isTemporary"]),
            properties=_properties(facts.get("Table Properties", "")),
        )
    return None


def resolve(spark: SparkSession, name: str) -> CatalogEntry:
    """The catalog entry of the Delta table `name`; named errors for a missing table, a view, a
    table of another format and a catalog-managed table."""
    entry = lookup(spark, name)
    if entry is None:
        raise TableNotFoundError(name, "no such table in the catalog")
    refuse_unless_delta(entry)
    return entry


def location_of(spark: SparkSession, identifier: str) -> str:
    """A table argument (of a job, of the CLI) as a path: a name the session catalog knows becomes
    its Delta table's location (named errors as `resolve`); anything else is a path already."""
    path = path_in_name(identifier)
    if path is not None:
        return path
    if looks_like_name(identifier):
        entry = lookup(spark, identifier)
        if entry is not None:
            refuse_unless_delta(entry)
            assert entry.location is not None
            return entry.location
    return identifier


def refuse_unless_delta(entry: CatalogEntry) -> None:
    """Raise the named error for an entry deltaspark cannot open as a Delta table."""
    if entry.temporary or entry.table_type == "VIEW":
        raise NotADeltaTableError(entry.name, "it is a view")
    if entry.provider != "delta":
        raise NotADeltaTableError(entry.name, f"its provider is {entry.provider or 'hive'!r}, not 'delta'")
    managed = [f for f in CATALOG_MANAGED_FEATURES if f"delta.feature.{f}" in entry.properties]
    if managed:
        raise catalog_managed_error(entry.name, managed)
    if not entry.location:
        raise NotADeltaTableError(entry.name, "the catalog gives no location")


def catalog_managed_error(name: str, features: list[str]) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{name} is a catalog-managed table ({', '.join(features)}): its commits go through its "
        "catalog (Unity Catalog), which deltaspark does not speak; read and write it with the "
        "catalog's own engine",
        features,
    )


def _jvm_session(spark: SparkSession, action: str) -> Any:
    if is_connect(spark):
        raise UnsupportedSessionError(
            f"{action} needs a classic Spark session: deltaspark registers tables through the session "
            "catalog over py4j, which Spark Connect does not expose (on a server with delta-spark, "
            "run CREATE TABLE ... USING delta LOCATION ... instead)"
        )
    return spark._jsparkSession  # noqa: SLF001


def register(
    spark: SparkSession,
    name: str,
    location: str,
    schema: StructType,
    partition_columns: list[str],
    properties: dict[str, str],
    comment: str | None,
) -> CatalogEntry:
    """Register the Delta table at `location` as `name` (external, provider `delta`).

    Raises `TableAlreadyExistsError` when the name is taken."""
    session = _jvm_session(spark, f"Registering {name}")
    parts = split_name(name)
    if len(parts) == 3 and parts[0].lower() != SESSION_CATALOG:
        raise InvalidArgumentError(
            f"{name}: deltaspark registers tables in Spark's session catalog ({SESSION_CATALOG}) only"
        )
    if lookup(spark, name) is not None:
        raise TableAlreadyExistsError(name, f"The catalog already has a table named {name}")
    ordered = _partition_columns_last(schema, partition_columns)
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    # The catalog keeps a qualified URI: a relative path would mean something else to each reader.
    hadoop_path = jvm.org.apache.hadoop.fs.Path(location)
    file_system = hadoop_path.getFileSystem(session.sessionState().newHadoopConf())
    location = str(file_system.makeQualified(hadoop_path).toString())
    jschema = jvm.org.apache.spark.sql.types.DataType.fromJson(ordered.json())
    partitioning = ", ".join(_quote(c) for c in partition_columns)
    listed = ", ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in properties.items())
    statement = (
        f"CREATE TABLE {'.'.join(_quote(p) for p in parts)}"
        + (f" ({jschema.toDDL()})" if ordered.fields else "")  # none: as delta-spark registers tables
        + " USING parquet"
        + (f" PARTITIONED BY ({partitioning})" if partition_columns else "")
        + f" LOCATION {_sql_string(location)}"
        + (f" COMMENT {_sql_string(comment)}" if comment else "")
        + (f" TBLPROPERTIES ({listed})" if properties else "")
    )
    state = session.sessionState()
    command = state.analyzer().execute(state.sqlParser().parsePlan(statement))
    template = command.table()
    # The parser's entry, with provider `delta` and the schema with its field metadata (column
    # mapping ids and physical names, which DDL cannot carry).
    copy = next(m for m in template.getClass().getMethods() if m.getName() == "copy")
    args = [getattr(template, f"copy$default${i}")() for i in range(1, len(copy.getParameterTypes()) + 1)]
    args[3] = jschema
    args[4] = jvm.scala.Some("delta")
    entry = template.copy(*args)
    state.catalog().createTable(entry, False, False)
    log.info("Registered %s at %s (provider delta)", name, location)
    registered = lookup(spark, name)
    if registered is None:  # pragma: no cover - the catalog just said it created it
        raise TableNotFoundError(name, "the catalog lost the table it registered")
    return registered


def default_location(spark: SparkSession, name: str) -> str:
    """Where the session catalog puts a managed table `name` (the database's folder + the name)."""
    session = _jvm_session(spark, f"Creating {name} without a location")
    parts = split_name(name)
    state = session.sessionState()
    ident = state.sqlParser().parseTableIdentifier(".".join(_quote(p) for p in parts[-2:]))
    return str(state.catalog().defaultTablePath(ident).toString())


def _partition_columns_last(schema: StructType, partition_columns: list[str]) -> StructType:
    """Spark's catalog wants a data source table's partition columns at the end of its schema."""
    lowered = [c.lower() for c in partition_columns]
    data = [f for f in schema.fields if f.name.lower() not in lowered]
    parts = sorted(
        (f for f in schema.fields if f.name.lower() in lowered), key=lambda f: lowered.index(f.name.lower())
    )
    return StructType(data + parts)
