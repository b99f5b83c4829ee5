"""Which conformance tables each CI suite sweeps.

CI runs the whole suite on pyspark 4.x and on 3.5. A sweep over every conformance table runs the
same engine code on more data; what differs between Spark versions is in the code paths, which one
table per feature reaches. So the 4.x suite sweeps every table and the 3.5 suite the tables below
(the checkpoint writer's, the reader's and the auditor's version-dependent parts are all among
them). `DELTASPARK_SWEEP_ALL_TABLES=1` sweeps every table on 3.5 too.

The Iceberg sweeps (tables from other Iceberg implementations, each sweep a subset chosen per kind
of delete, layout or refusal) run whole on 4.x; on 3.5 each runs the tables in `SPARK_35_ICEBERG`,
the ones whose reads reach Spark differently: position deletes, equality deletes and deletion
vectors applied by Spark's joins and Python workers, partitions, and Delta features Spark 3.5 reads
otherwise (variant).
"""

from __future__ import annotations

import os

import pytest

from deltaspark.spark_compat import PYSPARK_VERSION

SPARK_35_TABLES = {
    "app-txn-checkpoint",
    "basic-dv-with-checkpoint",
    "basic_partitioned",
    "cdf-column-mapping-name-mode",
    "cdf-table-with-cdc-and-dvs",
    "column-mapping-id",
    "compacted-log-files-table",
    "crc-full",
    "data-reader-primitives-column-mapping-name",
    "external-table-different-nullability",
    "mixed-nulls",
    "parsed-stats",
    "partitioned_with_materialize_feature",
    "timestamp-partitioned-table",
    "timestamp-truncation-stats",
    "type-widening",
    "v1-multi-part-partitioned-struct-stats-only",
    "v2-checkpoints-json-with-sidecars",
    "v2-checkpoints-parquet-with-sidecars",
    "void-column",
    "with-short-dv",
}
# Iceberg conformance tables (`DELTASPARK_ICEBERG_CONFORMANCE`) and the Delta tables exported to Iceberg.
SPARK_35_ICEBERG = {
    "impala-iceberg_v3_deletion_vectors",  # v3 deletion vectors (Puffin), read by Python workers
    "impala-iceberg_v2_delete_both_eq_and_pos",  # equality and position deletes together
    "impala-iceberg_v2_delete_equality_partitioned",  # equality deletes scoped by partition
    "impala-iceberg_v2_delete_positional",  # position deletes
    "duckdb-hive_partitioned_table",  # identity partitions become Delta partitions
    "duckdb-iceberg_v1_deprecated",  # format 1
    "duckdb-equality_deletes_partitioned",  # refused: equality deletes on conversion
    "basic-dv-with-checkpoint",  # exported: delta-spark's DVs become Puffin blobs
    "data-reader-partition-values-column-mapping-name",  # exported: partition values, mapped names
    "mixed-nulls",  # exported: null partition values and null counts
    "spark-variant-checkpoint",  # export refused: variant (Spark 3.5 reads no variant)
    "type-widening",  # export refused: a promotion Iceberg cannot read
    "void-column",  # export refused: void
}
SWEEP_ALL = os.environ.get("DELTASPARK_SWEEP_ALL_TABLES", "") == "1"


def in_this_suite(name: str, on_35: set[str] = SPARK_35_TABLES) -> bool:
    return PYSPARK_VERSION >= (4, 0) or SWEEP_ALL or name in on_35


def skip_unless_swept(name: str) -> None:
    if not in_this_suite(name):
        pytest.skip(
            "the pyspark 3.5 suite sweeps one conformance table per feature (tests/suites.py); "
            "the 4.x suite sweeps all"
        )


def skip_unless_iceberg_swept(name: str) -> None:
    if not in_this_suite(name, SPARK_35_ICEBERG):
        pytest.skip(
            "the pyspark 3.5 suite sweeps the Iceberg tables in SPARK_35_ICEBERG (tests/suites.py); "
            "the 4.x suite the whole CI subset"
        )
