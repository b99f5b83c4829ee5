"""One Spark session for the whole run, plus a Spark Connect session served by the same JVM."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.log_builder import LogBuilder

REPO = Path(__file__).resolve().parent.parent
CONFORMANCE_ENV = "DELTASPARK_CONFORMANCE_TABLES"
DEFAULT_CONFORMANCE = REPO.parent / "shared" / "conformance" / "tables"


# pyspark picks classic or Connect column functions per process, so the Connect suite runs in a
# process of its own (launched by tests/test_spark_connect.py) with this variable set.
CONNECT = os.environ.get("DELTASPARK_TEST_CONNECT") == "1"

# The cluster run (launched by tests/test_cluster.py): the session's master is a standalone
# cluster's, and deltaspark reaches its executors as a zip (`addPyFile`): their Python does not
# have it installed.
CLUSTER_MASTER = os.environ.get("DELTASPARK_TEST_MASTER")
CLUSTER_PY_FILES = os.environ.get("DELTASPARK_TEST_PY_FILES")


def pytest_collection_modifyitems(config, items):
    from deltaspark.spark_compat import PYSPARK_VERSION

    # CI runs the suite on pyspark 4.x and on 3.5; a version-independent check runs in one of them.
    suite = "4.x" if PYSPARK_VERSION >= (4, 0) else "3.5"
    for item in items:
        marker = item.get_closest_marker("one_suite")
        if marker is not None and marker.args[0] != suite:
            reason = f"one_suite: version-independent, run in the pyspark {marker.args[0]} suite"
            item.add_marker(pytest.mark.skip(reason=reason))
    if CONNECT:
        # A Connect client reads no file itself, so every replay runs as Spark jobs: the session's
        # default route is then the `spark` variant of `replay` and one of the explicit plans of
        # `plan`. Run each such test once per distinct route (the default, and each explicit plan).
        keep = [
            item for item in items if item.get_closest_marker("connect") and not _same_route_on_connect(item)
        ]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


def _same_route_on_connect(item: pytest.Item) -> bool:
    """A variant that, on a Connect session, takes the route another variant takes: `replay`'s
    `spark` (the default is Spark's route there) and `plan`'s `driver` (the default plan there)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("replay") == "spark" or params.get("plan") == "driver"


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # Python workers (mapInArrow) must run this interpreter, which has pyarrow and pyroaring.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    if CONNECT:
        session = (
            SparkSession.builder.remote("local[2]")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        yield session
        session.stop()
        return
    # A real catalog: Spark's Hive client with an embedded Derby metastore, in a temp folder.
    catalog_dir = tempfile.mkdtemp(prefix="deltaspark-metastore-")
    builder = SparkSession.builder.master(CLUSTER_MASTER or "local[2]")
    if CLUSTER_MASTER:  # one executor per worker (1 core each), within the workers' memory
        builder = builder.config("spark.executor.memory", "640m").config("spark.executor.cores", "1")
    session = (
        builder.appName("deltaspark-tests")
        .enableHiveSupport()
        .config("spark.sql.warehouse.dir", os.path.join(catalog_dir, "warehouse"))
        .config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={os.path.join(catalog_dir, 'metastore_db')};create=true",
        )
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={catalog_dir}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    if CLUSTER_PY_FILES:
        session.sparkContext.addPyFile(CLUSTER_PY_FILES)
    yield session
    session.stop()
    shutil.rmtree(catalog_dir, ignore_errors=True)


DRIVER_REPLAY_CONF = "spark.deltaspark.replay.driverMaxBytes"
DRIVER_DV_CONF = "spark.deltaspark.read.driverDeletedRows"
DRIVER_DV_WRITE_CONF = "spark.deltaspark.write.driverDeletionVectorBytes"


def _spark_only(spark, on: bool) -> None:
    for key in (DRIVER_REPLAY_CONF, DRIVER_DV_CONF, DRIVER_DV_WRITE_CONF):
        if on:
            spark.conf.set(key, "0")
        else:
            spark.conf.unset(key)


BROADCAST_TAIL_CONF = "spark.deltaspark.replay.broadcastTailBytes"


@contextlib.contextmanager
def replay_plan(spark, plan: str) -> Iterator[str]:
    """Replay small logs by one plan: `driver` (the default), or by Spark with the `broadcast` or
    the `union` reconciliation plan (anything else: Spark's plan for a log without a checkpoint)."""
    if plan != "driver":
        spark.conf.set(DRIVER_REPLAY_CONF, "0")
        spark.conf.set(BROADCAST_TAIL_CONF, str(1 << 40) if plan == "broadcast" else "0")
    try:
        yield plan
    finally:
        spark.conf.unset(BROADCAST_TAIL_CONF)
        spark.conf.unset(DRIVER_REPLAY_CONF)


@pytest.fixture
def spark_replay(spark):
    """Small logs replayed and deletion vectors decoded and written by Spark jobs, as big ones
    are (the driver-side shortcuts for small reads and writes are turned off)."""
    _spark_only(spark, True)
    yield "spark"
    _spark_only(spark, False)


@pytest.fixture(params=["driver", "spark"])
def replay(request, spark):
    """Run a test both ways: small logs replayed and deletion vectors decoded and written on the
    driver, and by Spark jobs only."""
    _spark_only(spark, request.param == "spark")
    yield request.param
    _spark_only(spark, False)


@pytest.fixture
def log(tmp_path) -> LogBuilder:
    return LogBuilder(tmp_path / "table")


def conformance_root() -> Path | None:
    root = Path(os.environ.get(CONFORMANCE_ENV, str(DEFAULT_CONFORMANCE)))
    if root.is_dir():
        return root
    if os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(
            f"Conformance tables not found at {root} (set {CONFORMANCE_ENV}); required under CI=true"
        )
    return None


@pytest.fixture(scope="session")
def conformance() -> Path:
    root = conformance_root()
    if root is None:
        pytest.skip(f"conformance tables not found (set {CONFORMANCE_ENV} to the folder of tables)")
    return root


@pytest.fixture
def spark_job_count(monkeypatch):
    """How many times the Spark path ran (the driver path and the cache run none)."""
    from deltaspark.log import protocol_metadata

    calls = []
    real = protocol_metadata.frame

    def counting(spark, segment):
        calls.append(segment.version)
        return real(spark, segment)

    monkeypatch.setattr(protocol_metadata, "frame", counting)
    return calls
