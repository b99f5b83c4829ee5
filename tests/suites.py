"""Which conformance tables each CI suite sweeps.

CI runs the whole suite on pyspark 4.x and on 3.5. A sweep over every conformance table runs the
same engine code on more data; what differs between Spark versions is in the code paths, which one
table per feature reaches. So the 4.x suite sweeps every table and the 3.5 suite the tables below
(the checkpoint writer's, the reader's and the auditor's version-dependent parts are all among
them). `DELTASPARK_SWEEP_ALL_TABLES=1` sweeps every table on 3.5 too.
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
SWEEP_ALL = os.environ.get("DELTASPARK_SWEEP_ALL_TABLES", "") == "1"


def in_this_suite(name: str) -> bool:
    return PYSPARK_VERSION >= (4, 0) or SWEEP_ALL or name in SPARK_35_TABLES


def skip_unless_swept(name: str) -> None:
    if not in_this_suite(name):
        pytest.skip(
            "the pyspark 3.5 suite sweeps one conformance table per feature (tests/suites.py); "
            "the 4.x suite sweeps all"
        )
