"""`deltaspark.register(spark)`: the `delta` format for `spark.read` (Spark 4.0+).

Spark 4.0 added Python data sources. Registering one named `delta` makes
`spark.read.format("delta").load(path)` read through deltaspark. Where delta-spark's JAR is on the
session's class path, its `delta` source would clash with ours: the source is then registered as
`deltaspark` only, and `register` says so. Spark 3.5 has no Python data sources: a named error.
Partition pruning and data skipping take Spark 4.1's filter pushdown, which the session must allow
(`spark.sql.python.filterPushdown.enabled=true`) when `register` is called: Spark refuses a reader
that takes filters while it is off.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from deltaspark.datasource.file_order import RUN_FILES
from deltaspark.errors import InvalidArgumentError, UnsupportedSessionError
from deltaspark.file_io import session_settings
from deltaspark.spark_compat import conf_get, file_splitting, is_connect, spark_version

log = logging.getLogger(__name__)

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
DELTA_SPARK_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"
SNAPSHOT_RUN_FILES_CONF = "spark.deltaspark.stream.snapshotRunFiles"


def _has_delta_spark(spark: SparkSession) -> bool:
    if is_connect(spark):
        return False
    try:
        spark._jvm.java.lang.Class.forName(DELTA_SPARK_CLASS)  # type: ignore[union-attr]
        return True
    except Exception:
        return False


def snapshot_run_files(spark: SparkSession) -> int:
    """`SNAPSHOT_RUN_FILES_CONF`: how many files of a stream's initial snapshot are sorted in memory
    at a time (more are sorted through local files, see `file_order`)."""
    text = conf_get(spark, SNAPSHOT_RUN_FILES_CONF, str(RUN_FILES)).strip()
    if not text.isdigit() or int(text) <= 0:
        raise InvalidArgumentError(f"{SNAPSHOT_RUN_FILES_CONF} must be a positive whole number, got {text!r}")
    return int(text)


def register(spark: SparkSession) -> str:
    """Register deltaspark's data source with `spark` (idempotent); returns the format name to use:
    `delta`, or `deltaspark` when delta-spark's JAR already provides `delta`."""
    if spark_version(spark) < (4, 0):
        raise UnsupportedSessionError(
            "deltaspark.register needs Spark 4.0 or newer (Python data sources); this session runs "
            f"Spark {spark.version}: use deltaspark.DeltaTable.forPath(spark, path).toDF()"
        )
    from deltaspark.datasource.source import DeltaDataSource

    name = "deltaspark" if _has_delta_spark(spark) else "delta"
    if name != "delta":
        log.warning(
            "delta-spark's JAR provides format('delta'): deltaspark registered as format('deltaspark')"
        )

    source = type(
        "DeltaSparkDataSource" if name == "deltaspark" else "DeltaDataSourceForSession",
        (DeltaDataSource,),
        {
            "short_name": name,
            "time_zone": conf_get(spark, "spark.sql.session.timeZone", "UTC"),
            "settings": None if is_connect(spark) else session_settings(spark),
            # the planning process has no JVM to ask: Spark's task sizing, as the session has it now
            "splitting": file_splitting(spark),
            "snapshot_run_files": snapshot_run_files(spark),
            # Spark refuses a reader that can take filters when this is off: read it now
            "pushdown": spark_version(spark) >= (4, 1)
            and conf_get(spark, PUSHDOWN_CONF, "false").strip().lower() == "true",
        },
    )
    spark.dataSource.register(source)
    return name
