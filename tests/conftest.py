"""One Spark session for the whole run, plus a Spark Connect session served by the same JVM."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.log_builder import LogBuilder

REPO = Path(__file__).resolve().parent.parent
CONFORMANCE_ENV = "DELTASPARK_CONFORMANCE_TABLES"
DEFAULT_CONFORMANCE = REPO.parent / "shared" / "conformance" / "tables"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_CONNECT_PORT = _free_port()


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("deltaspark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        # Serve Spark Connect from this JVM so Connect tests need no second cluster.
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", str(_CONNECT_PORT))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_spark(spark):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{_CONNECT_PORT}").getOrCreate()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    yield session
    session.stop()


@pytest.fixture(params=["classic", "connect"])
def any_spark(request, spark):
    """Runs a test once on the classic session and once on Spark Connect."""
    if request.param == "classic":
        return spark
    return request.getfixturevalue("connect_spark")


@pytest.fixture
def log(tmp_path) -> LogBuilder:
    return LogBuilder(tmp_path / "table")


def conformance_root() -> Path | None:
    root = Path(os.environ.get(CONFORMANCE_ENV, str(DEFAULT_CONFORMANCE)))
    if root.is_dir():
        return root
    if os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(f"Conformance tables not found at {root} (set {CONFORMANCE_ENV}); required under CI=true")
    return None


@pytest.fixture(scope="session")
def conformance() -> Path:
    root = conformance_root()
    if root is None:
        pytest.skip(f"conformance tables not found (set {CONFORMANCE_ENV} to the folder of tables)")
    return root
