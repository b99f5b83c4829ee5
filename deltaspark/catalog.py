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
# Which version of the table a catalog entry shows (delta-spark's keys, so both skip older updates).
LAST_UPDATE_VERSION = "delta.lastUpdateVersion"
LAST_COMMIT_TIMESTAMP = "delta.lastCommitTimestamp"

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


def _outside_session_catalog(parts: list[str]) -> bool:
    """A `catalog.db.table` name of another catalog than Spark's session catalog."""
    return len(parts) == 3 and parts[0].lower() != SESSION_CATALOG


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
    if _outside_session_catalog(parts):
        raise InvalidArgumentError(
            f"{name}: deltaspark registers tables in Spark's session catalog ({SESSION_CATALOG}) only"
        )
    if lookup(spark, name) is not None:
        raise TableAlreadyExistsError(name, f"The catalog already has a table named {name}")
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    # The catalog keeps a qualified URI: a relative path would mean something else to each reader.
    hadoop_path = jvm.org.apache.hadoop.fs.Path(location)
    file_system = hadoop_path.getFileSystem(session.sessionState().newHadoopConf())
    location = str(file_system.makeQualified(hadoop_path).toString())
    entry = _catalog_table(spark, parts, location, schema, partition_columns, properties, comment)
    session.sessionState().catalog().createTable(entry, False, False)
    log.info("Registered %s at %s (provider delta)", name, location)
    registered = lookup(spark, name)
    if registered is None:  # pragma: no cover - the catalog just said it created it
        raise TableNotFoundError(name, "the catalog lost the table it registered")
    return registered


def _catalog_table(
    spark: SparkSession,
    parts: list[str],
    location: str,
    schema: StructType,
    partition_columns: list[str],
    properties: dict[str, str],
    comment: str | None,
) -> Any:
    """Spark's `CatalogTable` for a Delta table: the one its parser and analyzer make of a `CREATE
    TABLE ... USING parquet` statement, copied with provider `delta` and the schema with its field
    metadata (column mapping ids and physical names, which DDL cannot carry)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    ordered = _partition_columns_last(schema, partition_columns)
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
    state = spark._jsparkSession.sessionState()  # noqa: SLF001
    template = state.analyzer().execute(state.sqlParser().parsePlan(statement)).table()
    return _copy(template, {_SCHEMA: jschema, _PROVIDER: jvm.scala.Some("delta")})


# Positions in `CatalogTable`'s constructor, the same on Spark 3.5 and 4.x (later ones differ).
_SCHEMA, _PROVIDER, _PROPERTIES, _COMMENT = 3, 4, 11, 14
_ACCESSORS = {_SCHEMA: "schema", _PROVIDER: "provider", _PROPERTIES: "properties", _COMMENT: "comment"}


def _copy(table: Any, changes: dict[int, Any]) -> Any:
    """`table.copy(...)` with the arguments at `changes`' positions replaced: the case class's `copy`
    takes every field positionally (py4j has no named arguments), each defaulting to the current
    value; each replaced position is checked to hold the field it is meant to."""
    copy = next(m for m in table.getClass().getMethods() if m.getName() == "copy")
    args = [getattr(table, f"copy$default${i}")() for i in range(1, len(copy.getParameterTypes()) + 1)]
    for position, value in changes.items():
        current = getattr(table, _ACCESSORS[position])()
        if not args[position].equals(current):  # pragma: no cover - a Spark with another layout
            raise UnsupportedSessionError(f"Spark's CatalogTable has no {_ACCESSORS[position]} at {position}")
        args[position] = value
    return table.copy(*args)


def sync(
    spark: SparkSession,
    name: str,
    version: int,
    timestamp: int,
    schema: StructType,
    partition_columns: list[str],
    properties: dict[str, str],
    comment: str | None,
) -> bool:
    """Bring the catalog entry of the Delta table `name` up to the table's `version`: its schema,
    properties and comment, as delta-spark's catalog update does (`delta.lastUpdateVersion` and
    `delta.lastCommitTimestamp` record which version it shows, so a slower writer of an older
    version leaves a newer entry alone). Returns whether the entry was changed.

    Spark's catalog cannot change an entry's partition columns in place. When they differ from the
    table's, an external entry is registered afresh (its data stays); a managed one without
    partition columns (as delta-spark registers tables) takes the schema as data columns, as
    delta-spark's update writes it; another managed one keeps its schema, with a warning (dropping
    it would delete the table's data)."""
    parts = split_name(name)
    if is_connect(spark) or _outside_session_catalog(parts):
        return False
    state = spark._jsparkSession.sessionState()  # noqa: SLF001
    catalog = state.catalog()
    ident = state.sqlParser().parseTableIdentifier(".".join(_quote(p) for p in parts[-2:]))
    if catalog.isTempView(ident) or not catalog.tableExists(ident):
        return False  # dropped, or shadowed by a view, since
    current = catalog.getTableMetadata(ident)
    provider = current.provider()
    if not provider.isDefined() or provider.get().lower() != "delta":
        return False  # re-created as something else since
    recorded = current.properties().get(LAST_UPDATE_VERSION)
    if recorded.isDefined() and int(recorded.get()) >= version:
        return False
    shown = {**properties, LAST_UPDATE_VERSION: str(version), LAST_COMMIT_TIMESTAMP: str(timestamp)}
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    # as SHOW TABLE EXTENDED prints it (decoded): the LOCATION of a re-registration
    location = str(jvm.org.apache.spark.sql.catalyst.catalog.CatalogUtils.URIToString(current.location()))
    registered = [str(c) for c in _list(current.partitionColumnNames())]
    lowered = [c.lower() for c in partition_columns]
    data: StructType | None = schema
    if [c.lower() for c in registered] == lowered:
        data = StructType([f for f in schema.fields if f.name.lower() not in lowered])
    elif current.tableType().name() == "EXTERNAL":
        # Spark's catalog cannot change partition columns in place: the external entry is written
        # afresh (dropping an external table's entry deletes no data)
        fresh = _catalog_table(spark, parts, location, schema, partition_columns, shown, comment)
        catalog.dropTable(ident, False, False)
        catalog.createTable(fresh, False, False)
        log.info("Registered %s afresh, partitioned by %s (version %d)", name, partition_columns, version)
        return True
    elif registered:
        data = None
        log.warning(
            "The catalog entry of %s keeps its partition columns %s: the table is now partitioned by %s "
            "(Spark's catalog cannot change them in place, and dropping a managed table's entry would "
            "delete its data); its schema there is left as it was",
            name,
            registered,
            partition_columns,
        )
    if data is not None:
        jdata = jvm.org.apache.spark.sql.types.DataType.fromJson(data.json())
        if not jdata.equals(current.dataSchema()):
            # the external catalog's call: the session catalog's refuses to drop columns
            table_ident = current.identifier()
            catalog.externalCatalog().alterTableDataSchema(
                table_ident.database().get(), table_ident.table(), jdata
            )
            current = catalog.getTableMetadata(ident)
    template = _catalog_table(spark, parts, location, schema, partition_columns, shown, comment)
    catalog.alterTable(_copy(current, {_PROPERTIES: template.properties(), _COMMENT: template.comment()}))
    log.info("Updated the catalog entry of %s to version %d", name, version)
    return True


def _list(seq: Any) -> list[Any]:
    """A Scala `Seq` as a Python list."""
    return [seq.apply(i) for i in range(seq.size())]


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
