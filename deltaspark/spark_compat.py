"""What differs between Spark versions and between classic and Spark Connect sessions.

deltaspark runs on Spark 3.5 and 4.x, classic (py4j) or Connect (no JVM on the client). Every
place that depends on that difference goes through this module.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session, where there is no py4j gateway to the JVM."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the connect extra
        return False
    return isinstance(spark, ConnectSession)


@lru_cache(maxsize=8)
def _major_minor(version: str) -> tuple[int, int]:
    major, minor, *_ = (int("".join(ch for ch in part if ch.isdigit()) or 0) for part in version.split("."))
    return major, minor


def spark_version(spark: SparkSession) -> tuple[int, int]:
    return _major_minor(spark.version)


def try_cast(column: Column, data_type: DataType) -> Column:
    """A cast that yields null instead of failing (Spark 4 runs in ANSI mode by default)."""
    if hasattr(column, "try_cast"):
        return column.try_cast(data_type)
    return column.cast(data_type)  # Spark 3.5: non-ANSI by default, casts already yield null


def url_decode(column: Column) -> Column:
    """RFC 2396 decoding of a path: `%XX` escapes only (a literal `+` stays a `+`)."""
    protected = F.regexp_replace(column, r"\+", "%2B")
    decoder = getattr(F, "try_url_decode", None) or F.url_decode
    return decoder(protected)


def conf_get(spark: SparkSession, key: str, default: str) -> str:
    """A session setting, or `default` (some Connect servers reject unknown keys with a default)."""
    try:
        value = spark.conf.get(key, default)
    except Exception:
        value = default
    return value if value is not None else default


_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def read_paths(spark: SparkSession, reader: Any, fmt: str, paths: list[str]) -> Any:
    """`reader.<fmt>(*paths)` (parquet, json, text), without a py4j round trip per path on classic
    sessions.

    PySpark converts a Python list to a JVM list one element at a time (tens of microseconds per
    path: half a minute for a million files); here the paths cross in one string and are split in
    the JVM. Spark then checks every path in a parallel job of up to 10,000 tasks; a few tasks per
    core do the same work without the per-task overhead.
    """
    if is_connect(spark) or len(paths) <= 32 or any("\0" in p for p in paths):
        return reader.parquet(*paths) if fmt == "parquet" else getattr(reader, fmt)(list(paths))
    jvm = spark._jvm
    split = jvm.java.util.regex.Pattern.compile("\\x00").split("\0".join(paths))  # a String[]
    tasks = max(1, min(10_000, spark.sparkContext.defaultParallelism * 4))
    previous = spark.conf.get(_LISTING_PARALLELISM, None)
    spark.conf.set(_LISTING_PARALLELISM, str(tasks))
    try:
        return reader._df(getattr(reader._jreader, fmt)(split))  # the Java varargs overload
    finally:
        if previous is None:
            spark.conf.unset(_LISTING_PARALLELISM)
        else:
            spark.conf.set(_LISTING_PARALLELISM, previous)
