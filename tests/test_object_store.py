"""Files in an object store, reached with the session's Hadoop S3A settings only.

deltaspark's Python side (executor tasks that read data files and Iceberg manifests, list and delete
a table's files, check footers; the driver's reads of Iceberg metadata) opens files with pyarrow,
which does not read Hadoop's configuration: `deltaspark.file_io` translates the session's `fs.s3a.*`
settings and ships them with each job. The store is a real S3 endpoint (moto's server, signing
enforced: `tests/s3_server.py`) that no environment variable or default credential reaches, so a
task that did not get the settings fails. These tests also run on the standalone cluster
(`tests/test_cluster.py`), whose executors are other processes started by the workers.

Spark's own reads of an `s3a://` path need the `hadoop-aws` JAR, which is not on PyPI (so not here):
a Delta log in S3 is read by Spark's Hadoop FileSystem and is not part of these tests; an Iceberg
table is read by deltaspark's Python side alone, so it is read here end to end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from deltaspark import file_io
from deltaspark.file_io import FileSystemSettings, s3_options, session_settings
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.s3_server import S3Server, s3_server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server(("lake", "other-lake")) as server:
        yield server


@pytest.fixture
def s3a(spark: SparkSession, s3: S3Server) -> Iterator[SparkSession]:
    """The session with the endpoint's S3A settings, as a user sets them in a notebook."""
    settings = s3.s3a_settings()
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key in settings:
            spark.conf.unset(key)


# ---- the translation -------------------------------------------------------------------------------
def test_s3a_settings_become_pyarrow_options() -> None:
    assert s3_options({}) == {}
    minio = {
        "endpoint": "http://minio:9000",
        "path.style.access": "true",
        "access.key": "AK",
        "secret.key": "SK",
        "session.token": "TOKEN",
    }
    assert s3_options(minio) == {
        "access_key": "AK",
        "secret_key": "SK",
        "session_token": "TOKEN",
        "endpoint_override": "minio:9000",
        "force_virtual_addressing": False,
        "scheme": "http",
    }
    # No scheme in the endpoint: SSL decides it; without path-style access, virtual hosts (as S3A).
    on_prem = s3_options({"endpoint": "store.local:443", "connection.ssl.enabled": "false"})
    assert on_prem == {
        "endpoint_override": "store.local:443",
        "force_virtual_addressing": True,
        "scheme": "http",
    }
    # An AWS endpoint is not overridden: it names the region.
    assert s3_options({"endpoint": "s3.eu-west-1.amazonaws.com"}) == {"region": "eu-west-1"}
    assert s3_options({"endpoint": "https://s3-ap-south-1.amazonaws.com"}) == {"region": "ap-south-1"}
    assert s3_options({"endpoint": "s3.amazonaws.com", "endpoint.region": "us-west-2"}) == {
        "region": "us-west-2"
    }
    assert s3_options({"access.key": "AK"}) == {}  # a key without its secret is no credential
    anonymous = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    assert s3_options({"aws.credentials.provider": anonymous}) == {"anonymous": True}


def test_a_bucket_s_own_settings_override_the_general_ones() -> None:
    settings = FileSystemSettings(
        (("endpoint", "http://a:1"), ("secret.key", "SECRET-1"), ("access.key", "KEY-1")),
        (("special", (("endpoint", "http://b:2"), ("access.key", "KEY-2"))),),
    )
    assert settings.s3a_for("any")["endpoint"] == "http://a:1"
    special = settings.s3a_for("special")
    assert special == {"endpoint": "http://b:2", "access.key": "KEY-2", "secret.key": "SECRET-1"}
    assert not any(v in repr(settings) for v in ("SECRET-1", "KEY-1", "KEY-2"))  # no secret printed


def test_the_session_s_hadoop_configuration_is_read_with_its_credential_providers(
    spark: SparkSession, tmp_path
) -> None:  # noqa: ANN001
    """Settings come from the Hadoop configuration Spark's reads use (the context's and the
    session's), per-bucket ones too, and secrets through `getPassword`: a key kept in a JCEKS
    credential store (as `hadoop credential create` writes it) is found."""
    jvm = spark._jvm
    store = f"jceks://file{tmp_path}/s3.jceks"
    args = ["create", "fs.s3a.secret.key", "-value", "from-the-store", "-provider", store]
    java_args = spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(args))
    for i, arg in enumerate(args):
        java_args[i] = arg
    shell = jvm.org.apache.hadoop.security.alias.CredentialShell()  # `hadoop credential create`
    shell.setConf(jvm.org.apache.hadoop.conf.Configuration())
    assert shell.run(java_args) == 0
    context_conf = spark.sparkContext._jsc.hadoopConfiguration()
    session = {
        "hadoop.security.credential.provider.path": store,
        "fs.s3a.access.key": "AK",
        "fs.s3a.endpoint": "http://store:9000",
        "fs.s3a.bucket.special.endpoint": "http://special:9000",
    }
    context_conf.set("fs.s3a.path.style.access", "true")
    for key, value in session.items():
        spark.conf.set(key, value)
    try:
        settings = session_settings(spark)
    finally:
        context_conf.unset("fs.s3a.path.style.access")
        for key in session:
            spark.conf.unset(key)
    general = settings.s3a_for("lake")
    assert general["access.key"] == "AK" and general["secret.key"] == "from-the-store"
    assert general["endpoint"] == "http://store:9000" and general["path.style.access"] == "true"
    assert settings.s3a_for("special")["endpoint"] == "http://special:9000"
    assert session_settings(spark).s3a_for("lake").get("access.key") is None  # unset: gone


@pytest.mark.connect
def test_on_spark_connect_the_session_s_settings_are_read_but_not_its_secrets(spark: SparkSession) -> None:
    """A Spark Connect client is not shown settings whose names match `spark.redaction.regex`
    (keys, secrets, tokens): `conf.get` gives None and `getAll` leaves them out. The endpoint,
    region and addressing still travel with the jobs; the credentials must be the executors' own
    (environment, instance profile). On a classic session all of them travel."""
    from deltaspark.spark_compat import is_connect

    settings = {
        "fs.s3a.endpoint": "http://store:9000",
        "fs.s3a.bucket.special.endpoint.region": "eu-west-3",
        "fs.s3a.access.key": "KEY-1",
        "fs.s3a.secret.key": "SECRET-1",
    }
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        read = session_settings(spark)
    finally:
        for key in settings:
            spark.conf.unset(key)
    assert read.s3a_for("lake")["endpoint"] == "http://store:9000"
    assert read.s3a_for("special")["endpoint.region"] == "eu-west-3"
    secrets = (read.s3a_for("lake").get("access.key"), read.s3a_for("lake").get("secret.key"))
    assert secrets == ((None, None) if is_connect(spark) else ("KEY-1", "SECRET-1"))


# ---- an Iceberg table in S3, read end to end --------------------------------------------------------
def _iceberg_in_s3(s3: S3Server, location: str):  # noqa: ANN202 - a pyiceberg Table
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from tests.iceberg_written import create_table

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "kind", StringType()))
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="kind")
    )
    table = create_table(location, schema, spec, io_properties=s3.pyiceberg_properties())
    arrow = table.schema().as_arrow()
    table.append(pa.table({"id": [1, 2, 3], "kind": ["a", "b", "a"]}, schema=arrow))
    table.append(pa.table({"id": [4, 5], "kind": ["b", "c"]}, schema=arrow))
    table.delete(EqualTo("id", 2))  # rewrites a file of partition b
    return table


def test_an_iceberg_table_in_s3_is_read_with_the_session_s_s3a_settings(
    s3a: SparkSession, s3: S3Server
) -> None:
    """Metadata on the driver, manifest lists, manifests and data files in tasks: all through the
    S3A settings of the session, the only place the endpoint and the key are written."""
    from deltaspark import IcebergTable

    written = _iceberg_in_s3(s3, "s3://lake/iceberg/pets")
    expected = sorted(written.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in expected] == [1, 3, 4, 5]
    table = IcebergTable.forPath(s3a, "s3a://lake/iceberg/pets")
    assert sorted((r.asDict() for r in table.toDF().collect()), key=lambda r: r["id"]) == expected
    assert table.count() == 4
    assert table.files().count() == len(written.inspect.files())


def test_the_wrong_key_is_refused_by_the_store(s3a: SparkSession, s3: S3Server) -> None:
    """The settings are what the reads use: with another secret the store refuses them (no
    ambient credential stands in), and the error names the file."""
    from deltaspark import IcebergTable
    from deltaspark.errors import PermissionDeniedError

    _iceberg_in_s3(s3, "s3://lake/iceberg/refused")
    s3a.conf.set("fs.s3a.secret.key", "not-the-secret")
    with pytest.raises(PermissionDeniedError, match="ACCESS_DENIED.*s3a://lake/iceberg/refused/metadata"):
        IcebergTable.forPath(s3a, "s3a://lake/iceberg/refused")


# ---- listing and deleting a table's files (vacuum's tasks) ------------------------------------------
def test_a_table_s_files_are_listed_and_deleted_by_tasks_in_s3(
    s3a: SparkSession, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import functions as F

    from deltaspark.maintenance import table_listing
    from deltaspark.maintenance.file_deletion import deletion_batches

    client = s3.client()
    keys = [
        "delta/t/_delta_log/00000000000000000000.json",
        "delta/t/part=1/a.parquet",
        "delta/t/part=1/b.parquet",
        "delta/t/part=2/c.parquet",
        "delta/t/part=2/deeper/d.parquet",
        "delta/t/e.parquet",
    ]
    for key in keys:
        client.put_object(Bucket="lake", Key=key, Body=b"x" * 7)
    root = "s3a://lake/delta/t"
    monkeypatch.setattr(table_listing, "DRIVER_ENTRIES", 0)  # too many for the driver: tasks list
    listed = table_listing.list_table_files(s3a, root, ["part"])
    files = {r["path"]: r["size"] for r in listed.where(~F.col("isDir")).collect()}
    data = {f"s3a://lake/{k}": 7 for k in keys if "_delta_log" not in k}
    assert files == data

    doomed = [f"{root}/part=1/a.parquet", f"{root}/part=2/deeper/d.parquet"]
    rows = s3a.createDataFrame([(p, False, None) for p in doomed], "path string, isDir boolean, skip string")
    done = rows.repartition(2).mapInArrow(
        deletion_batches(root), "path string, isDir boolean, deleted boolean, error string"
    )
    assert {(r["path"], r["deleted"], r["error"]) for r in done.collect()} == {
        (p, True, None) for p in doomed
    }
    objects = client.list_objects_v2(Bucket="lake", Prefix="delta/t/")["Contents"]
    left = {o["Key"] for o in objects if not o["Key"].endswith("/")}  # pyarrow leaves directory markers
    assert left == set(keys) - {"delta/t/part=1/a.parquet", "delta/t/part=2/deeper/d.parquet"}


def test_tasks_run_with_the_settings_of_the_job_that_carried_them(s3a: SparkSession, s3: S3Server) -> None:
    """What makes the above work on any executor: `carry_settings` binds the session's settings
    when the job is built (later changes to the session do not reach a job already built) and
    installs them around the task's body only."""

    def endpoints(batches: Iterator[int]) -> Iterator[str | None]:
        for _ in batches:
            yield file_io.current_settings().s3a_for("lake").get("endpoint")

    body = file_io.carry_settings(endpoints)
    s3a.conf.unset("fs.s3a.endpoint")
    assert list(body(iter([1, 2]))) == [s3.endpoint, s3.endpoint]
    assert file_io._installed is None  # nothing left behind for the next task in the worker
    # (the session's own setting is gone: Hadoop 3.3's default, `s3.amazonaws.com`, or none)
    assert file_io.current_settings().s3a_for("lake").get("endpoint") in (None, "s3.amazonaws.com")


@pytest.mark.skipif(PYSPARK_VERSION < (4, 0), reason="Python data sources need Spark 4.0+")
def test_format_delta_reads_and_streams_a_table_in_s3_with_the_session_s_settings(
    s3a: SparkSession, s3: S3Server, tmp_path
) -> None:
    """`format("delta")` is Python end to end (the log in the planning process, the data files in
    tasks, both through pyarrow): a checkpointed table with a deletion after its checkpoint, copied
    into the bucket, read and streamed from `s3a://` with the S3A settings `register` read."""
    import deltaspark
    from deltaspark import DeltaTable

    local = tmp_path / "t"
    for start in (0, 10, 20):
        deltaspark.write(s3a.range(start, start + 10, 1, 2), str(local))
    DeltaTable.forPath(s3a, str(local)).checkpoint()
    deltaspark.write(s3a.range(30, 35, 1, 1), str(local))
    DeltaTable.forPath(s3a, str(local)).delete("id % 10 = 3")
    expected = sorted(r[0] for r in DeltaTable.forPath(s3a, str(local)).toDF().collect())
    assert len(expected) == 31 and any(
        p.name.endswith(".checkpoint.parquet") for p in (local / "_delta_log").iterdir()
    )
    client = s3.client()
    for file in local.rglob("*"):
        if file.is_file():
            client.upload_file(str(file), "lake", f"delta/t/{file.relative_to(local).as_posix()}")
    deltaspark.register(s3a)
    try:
        read = s3a.read.format("delta").load("s3a://lake/delta/t")
        assert sorted(r[0] for r in read.collect()) == expected
        sink = tmp_path / "out"
        query = (
            s3a.readStream.format("delta")
            .option("maxFilesPerTrigger", 3)
            .load("s3a://lake/delta/t")
            .writeStream.format("parquet")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start(str(sink))
        )
        query.awaitTermination(120)
        assert query.exception() is None
        assert sorted(r[0] for r in s3a.read.parquet(str(sink)).collect()) == expected
    finally:
        for key in s3.s3a_settings():
            s3a.conf.unset(key)
        deltaspark.register(s3a)  # the session's format again, without the endpoint's settings
