"""Tables by name, against a real Hive metastore (the session's embedded Derby, see conftest).

Each test uses its own database, so the tests do not see each other's tables."""

from __future__ import annotations

import uuid

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

import deltaspark
from deltaspark import DeltaTable
from deltaspark.catalog import _catalog_table, register, sync
from deltaspark.errors import (
    InvalidArgumentError,
    NotADeltaTableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedFeatureError,
)
from tests.log_builder import commit_info, metadata, protocol


@pytest.fixture
def db(spark):
    name = f"cat_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name}")
    yield name
    spark.sql(f"DROP DATABASE {name} CASCADE")


def _raw_hive_table(spark, db: str, table: str):
    """The table as the metastore stores it, before Spark reads its own properties back."""
    catalog = spark._jsparkSession.sharedState().externalCatalog().unwrapped()
    return catalog.client().getTable(db, table)


def _stored(spark, db: str, table: str):
    """The catalog's entry as Spark reads it back (schema, partitioning, comment, properties)."""
    ident = spark._jvm.org.apache.spark.sql.catalyst.TableIdentifier(table, spark._jvm.scala.Some(db))
    return spark._jsparkSession.sessionState().catalog().getTableMetadata(ident)


def _property(entry, key: str) -> str | None:
    value = entry.properties().get(key)
    return value.get() if value.isDefined() else None


def test_created_by_name_as_delta_spark_registers_it(spark, db, tmp_path):
    location = str(tmp_path / "orders")
    table = (
        DeltaTable.create(spark)
        .tableName(f"{db}.orders")
        .location(location)
        .addColumn("region", "string")
        .addColumn("id", "bigint", comment="order id")
        .addColumn("amount", "double")
        .partitionedBy("region")
        .property("delta.columnMapping.mode", "name")
        .property("team", "sales")
        .comment("all orders")
        .execute()
    )
    assert table.name == f"{db}.orders" and table.snapshot().version == 0

    raw = _raw_hive_table(spark, db, "orders")
    assert raw.properties().get("spark.sql.sources.provider").get() == "delta"
    assert raw.tableType().name() == "EXTERNAL"
    assert raw.storage().properties().get("path").get() == f"file:{location}"
    stored = _stored(spark, db, "orders")
    assert stored.provider().get() == "delta"
    assert [f.name() for f in stored.schema().fields()] == ["id", "amount", "region"]
    assert stored.partitionColumnNames().mkString(",") == "region"
    assert stored.comment().get() == "all orders"
    assert stored.properties().get("team").get() == "sales"
    assert stored.properties().get("delta.columnMapping.mode").get() == "name"
    # The schema keeps the log's field metadata (column mapping ids), which DDL cannot carry.
    assert "delta.columnMapping.id" in stored.schema().fields()[0].metadata().json()

    deltaspark.write(
        spark.createDataFrame([("eu", 1, 2.5), ("us", 2, 4.0)], "region string, id long, amount double"),
        tableName=f"{db}.orders",
    )
    for name in (f"{db}.orders", f"spark_catalog.{db}.orders", f"`{db}`.`orders`", f"delta.`{location}`"):
        found = DeltaTable.forName(spark, name)
        assert found.path.rstrip("/").endswith(location) and DeltaTable.isDeltaTable(spark, name)
        assert found.toDF().count() == 2
    assert DeltaTable.forName(spark, f"{db}.orders").detail().first()["name"] == f"{db}.orders"
    # delta-spark registers tables with an empty schema and no partition columns (the log has them).
    register(spark, f"{db}.by_delta_spark", location, StructType([]), [], {}, None)
    assert DeltaTable.forName(spark, f"{db}.by_delta_spark").snapshot().partitionColumns == ["region"]
    spark.sql(f"USE {db}")
    try:
        assert DeltaTable.forName(spark, "orders").snapshot().version == 1
    finally:
        spark.sql("USE default")


def test_write_by_name_creates_a_managed_location_and_appends(spark, db):
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    first = deltaspark.write(rows, tableName=f"{db}.events", partitionBy=["name"])
    assert first is not None and first.version == 0
    table = DeltaTable.forName(spark, f"{db}.events")
    warehouse = spark.conf.get("spark.sql.warehouse.dir").replace("file:", "")
    assert table.path.replace("file:", "").startswith(warehouse) and table.path.endswith(f"{db}.db/events")
    assert deltaspark.write(rows, tableName=f"{db}.events").version == 1
    with pytest.raises(TableAlreadyExistsError, match="already has a table named"):
        deltaspark.write(rows, tableName=f"{db}.events", mode="error")
    assert deltaspark.write(rows, tableName=f"{db}.events", mode="ignore") is None
    with pytest.raises(InvalidArgumentError, match="is registered at"):
        deltaspark.write(rows, "/elsewhere/events", tableName=f"{db}.events")
    # An independent reader finds the rows at the location the catalog gives.
    independent = pa.table(deltalake.DeltaTable(table.path.replace("file:", "")).to_pyarrow_table())
    assert sorted(independent.column("id").to_pylist()) == [1, 1, 2, 2]
    assert DeltaTable.forName(spark, f"{db}.events").history().count() == 2


def test_an_existing_table_is_registered_without_a_commit(spark, db, tmp_path):
    location = str(tmp_path / "by_path")
    deltaspark.write(spark.range(3), location)
    table = DeltaTable.create(spark).tableName(f"{db}.by_path").location(location).execute()
    assert table.snapshot().version == 0 and DeltaTable.forName(spark, f"{db}.by_path").toDF().count() == 3
    # createIfNotExists by name: nothing committed; create by name: the name is taken.
    again = DeltaTable.createIfNotExists(spark).tableName(f"{db}.by_path").addColumn("id", "bigint").execute()
    assert again.snapshot().version == 0
    with pytest.raises(TableAlreadyExistsError, match="already has a table named"):
        DeltaTable.create(spark).tableName(f"{db}.by_path").addColumn("id", "bigint").execute()
    with pytest.raises(InvalidArgumentError, match="is registered at"):
        DeltaTable.createOrReplace(spark).tableName(f"{db}.by_path").location(str(tmp_path / "x")).execute()


def test_the_catalog_entry_follows_schema_property_and_comment_commits(spark, db, tmp_path, caplog):
    name = f"{db}.events"
    rows = spark.createDataFrame([(1, "mon")], "id long, day string")
    first = deltaspark.write(rows, tableName=name, partitionBy=["day"], properties={"team": "a"})
    assert first.metadataChanged
    entry = _stored(spark, db, "events")
    assert _property(entry, "delta.lastUpdateVersion") == "0" and _property(entry, "team") == "a"
    assert _property(entry, "delta.lastCommitTimestamp") == str(
        DeltaTable.forName(spark, name).snapshot().timestampMs
    )

    table = DeltaTable.forName(spark, name)
    assert table.setProperties({"team": "b", "delta.logRetentionDuration": "interval 9 days"}).version == 1
    entry = _stored(spark, db, "events")
    assert (
        _property(entry, "team") == "b"
        and _property(entry, "delta.logRetentionDuration") == "interval 9 days"
    )
    assert _property(entry, "delta.lastUpdateVersion") == "1"
    # a commit that changes no metadata leaves the catalog alone (no lookup on every append)
    appended = deltaspark.write(rows, tableName=name)
    assert (
        not appended.metadataChanged
        and _property(_stored(spark, db, "events"), "delta.lastUpdateVersion") == "1"
    )

    wider = spark.createDataFrame([(2, "tue", "x")], "id long, day string, note string")
    assert deltaspark.write(wider, tableName=name, mergeSchema=True).version == 3
    entry = _stored(spark, db, "events")
    assert [f.name() for f in entry.schema().fields()] == ["id", "note", "day"]  # partition column last
    assert entry.partitionColumnNames().mkString(",") == "day"
    table.unsetProperties(["team"])
    assert _property(_stored(spark, db, "events"), "team") is None
    # an older version's update (a slower writer) leaves the newer entry alone
    stale = table.snapshot(version=1)
    assert not sync(spark, name, 1, 0, stale.schema, ["day"], stale.configuration, None)
    assert [f.name() for f in _stored(spark, db, "events").schema().fields()] == ["id", "note", "day"]

    # the table opened by path commits without touching the catalog, as delta-spark's path tables
    DeltaTable.forPath(spark, table.path).setProperties({"by": "path"})
    assert _property(_stored(spark, db, "events"), "by") is None
    # dropping columns (overwriteSchema) is followed
    narrow = spark.createDataFrame([(3, "wed")], "id long, day string")
    deltaspark.write(narrow, tableName=name, mode="overwrite", overwriteSchema=True, partitionBy=["day"])
    assert [f.name() for f in _stored(spark, db, "events").schema().fields()] == ["id", "day"]
    # a change of partitioning: Spark's catalog cannot alter it, the external entry is written afresh
    deltaspark.write(narrow, tableName=name, mode="overwrite", overwriteSchema=True, partitionBy=[])
    entry = _stored(spark, db, "events")
    assert entry.partitionColumnNames().mkString(",") == "" and entry.tableType().name() == "EXTERNAL"
    assert _property(entry, "by") == "path" and entry.storage().locationUri().get().toString() == table.path
    assert DeltaTable.forName(spark, name).toDF().count() == 1
    # a replace by name: the new comment, and partitioned again
    DeltaTable.createOrReplace(spark).tableName(name).addColumn("id", "bigint").addColumn(
        "day", "string"
    ).partitionedBy("day").comment("by day").execute()
    entry = _stored(spark, db, "events")
    assert entry.comment().get() == "by day" and [f.name() for f in entry.schema().fields()] == ["id", "day"]
    assert entry.partitionColumnNames().mkString(",") == "day"
    # an external entry as delta-spark registers it (no columns) gets the log's schema and partitioning
    register(spark, f"{db}.bare", table.path, StructType([]), [], {}, None)
    DeltaTable.forName(spark, f"{db}.bare").setProperties({"team": "c"})
    bare = _stored(spark, db, "bare")
    assert [f.name() for f in bare.schema().fields()] == ["id", "day"] and _property(bare, "team") == "c"
    assert bare.partitionColumnNames().mkString(",") == "day"

    # a catalog that fails after the commit: logged, the commit stands
    def refuse(*_args, **_kwargs):
        raise RuntimeError("metastore unavailable")

    caplog.clear()
    with caplog.at_level("WARNING", logger="deltaspark.table"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(deltaspark.table, "sync", refuse)
        done = table.setProperties({"team": "d"})
    assert "its catalog entry" in caplog.text and "metastore unavailable" in caplog.text
    assert table.snapshot().version == done.version and table.snapshot().configuration["team"] == "d"

    # a managed entry is never dropped (that would delete its data): its schema stays, with a warning
    managed_path = str(tmp_path / "managed")
    deltaspark.write(narrow, managed_path, partitionBy=["day"])
    template = _catalog_table(spark, [db, "managed"], managed_path, narrow.schema, ["day"], {}, None)
    copy = next(m for m in template.getClass().getMethods() if m.getName() == "copy")
    args = [getattr(template, f"copy$default${i}")() for i in range(1, len(copy.getParameterTypes()) + 1)]
    args[1] = spark._jvm.org.apache.spark.sql.catalyst.catalog.CatalogTableType.MANAGED()
    spark._jsparkSession.sessionState().catalog().createTable(template.copy(*args), False, False)
    caplog.clear()
    with caplog.at_level("WARNING", logger="deltaspark.catalog"):
        deltaspark.write(
            narrow, tableName=f"{db}.managed", mode="overwrite", overwriteSchema=True, partitionBy=[]
        )
    assert "keeps its partition columns ['day']" in caplog.text
    entry = _stored(spark, db, "managed")
    assert entry.tableType().name() == "MANAGED" and entry.partitionColumnNames().mkString(",") == "day"
    assert DeltaTable.forPath(spark, managed_path).snapshot().partitionColumns == []


def test_names_that_are_not_delta_tables_get_named_errors(spark, db, tmp_path):
    spark.range(2).write.format("parquet").saveAsTable(f"{db}.plain")
    spark.sql(f"CREATE VIEW {db}.a_view AS SELECT 1 AS x")
    spark.range(1).createOrReplaceTempView("a_temp_view")
    cases = {
        f"{db}.missing": (TableNotFoundError, "no such table in the catalog"),
        "no_such_db.t": (TableNotFoundError, "no such table in the catalog"),
        f"{db}.plain": (NotADeltaTableError, "provider is 'parquet'"),
        f"{db}.a_view": (NotADeltaTableError, "it is a view"),
        "a_temp_view": (NotADeltaTableError, "it is a view"),
    }
    for name, (error, message) in cases.items():
        with pytest.raises(error, match=message):
            DeltaTable.forName(spark, name)
        assert not DeltaTable.isDeltaTable(spark, name), name
    with pytest.raises(InvalidArgumentError, match="Not a table name"):
        DeltaTable.forName(spark, "a/b")
    # Registered, but its location holds no Delta log.
    register(spark, f"{db}.hollow", str(tmp_path / "hollow"), spark.range(1).schema, [], {}, None)
    with pytest.raises(TableNotFoundError, match="the catalog places it at"):
        DeltaTable.forName(spark, f"{db}.hollow")
    assert not DeltaTable.isDeltaTable(spark, f"{db}.hollow")
    # A bare word the catalog does not know is a path, as before names existed.
    assert not DeltaTable.isDeltaTable(spark, "not_a_table_anywhere")


def test_a_catalog_managed_table_stays_refused_by_name(spark, db, log, tmp_path):
    log.commit(
        0,
        protocol(
            3, 7, reader_features=["catalogManaged"], writer_features=["catalogManaged", "inCommitTimestamp"]
        ),
        metadata(),
        commit_info(operation="CREATE TABLE"),
    )
    register(spark, f"{db}.managed_by_log", log.path, spark.range(1).schema, [], {}, None)
    with pytest.raises(UnsupportedFeatureError, match="catalog-managed") as refused:
        DeltaTable.forName(spark, f"{db}.managed_by_log")
    assert refused.value.features == ["catalogManaged"]
    # Unity Catalog says so in the table's properties: refused before its location is read.
    properties = {"delta.feature.catalogManaged": "supported"}
    register(
        spark,
        f"{db}.managed_by_uc",
        str(tmp_path / "unreadable"),
        spark.range(1).schema,
        [],
        properties,
        None,
    )
    with pytest.raises(UnsupportedFeatureError, match="catalog-managed"):
        DeltaTable.forName(spark, f"{db}.managed_by_uc")
    assert DeltaTable.isDeltaTable(spark, f"{db}.managed_by_log")


@pytest.mark.connect
def test_names_resolve_on_classic_and_connect_sessions(spark, log):
    """Lookups are SQL (`SHOW TABLE EXTENDED`), so Spark Connect resolves names too; registering
    goes through the JVM's session catalog, which Connect does not expose."""
    from deltaspark.errors import UnsupportedSessionError
    from deltaspark.spark_compat import is_connect

    with pytest.raises(TableNotFoundError, match="no such table in the catalog"):
        DeltaTable.forName(spark, "default.no_such_table")
    spark.range(1).createOrReplaceTempView("connect_temp_view")
    with pytest.raises(NotADeltaTableError, match="it is a view"):
        DeltaTable.forName(spark, "connect_temp_view")
    log.commit(0, protocol(), metadata(), commit_info(operation="CREATE TABLE"))
    assert DeltaTable.forName(spark, f"delta.`{log.path}`").snapshot().version == 0
    if is_connect(spark):  # registering the existing table needs the JVM
        with pytest.raises(UnsupportedSessionError, match="needs a classic Spark session"):
            DeltaTable.create(spark).tableName("default.on_connect").location(log.path).execute()


def test_the_cli_and_the_jobs_take_names(spark, db, tmp_path, capsys):
    import json

    from deltaspark.cli import main
    from deltaspark.operations import maintenance_job

    location = str(tmp_path / "t")
    deltaspark.write(spark.range(3), location, tableName=f"{db}.t")
    assert main(["describe", f"{db}.t", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["version"] == 0 and facts["path"].endswith(location)
    assert main(["set-properties", f"{db}.t", "team=ops", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    assert DeltaTable.forName(spark, f"{db}.t").snapshot().configuration["team"] == "ops"
    assert main(["history", f"{db}.missing", "--json"]) == 1
    assert "no such table in the catalog" in capsys.readouterr().err
    summary = tmp_path / "summary.json"
    assert maintenance_job.main([f"{db}.t", "--output", str(summary)], spark=spark) == 0
    (result,) = json.loads(summary.read_text())["tables"]
    assert result["table"] == f"{db}.t" and result["path"].endswith(location) and result["status"] == "ok"
