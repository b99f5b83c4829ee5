"""A small sample Delta table for `deltaspark demo` and the quickstart notebook, written through
deltaspark's own commit path (`deltaspark.write`), like any user's table.

Four commits: create and insert, append, a rewrite of one partition that drops some rows
(`replaceWhere`), and an append carrying an application transaction id. The change data feed is
enabled (without CDC files, so changes are derived from the added and removed files). Data files are
written by Spark with real per-file statistics, so every CLI command has something to show.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from pyspark.sql import SparkSession

SCHEMA = "id long, customer string, amount double, ordered_at timestamp, region string"


def _rows(start: int, count: int, region: str) -> list[tuple[Any, ...]]:
    base = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    return [
        (i, f"customer-{i % 7}", round(10 + (i * 37 % 500) / 3, 2), base + dt.timedelta(hours=i), region)
        for i in range(start, start + count)
    ]


def build_demo_table(root: str | os.PathLike[str], spark: SparkSession | None = None) -> str:
    """Write the sample table at `root` (which must not already hold a Delta table); return its path.
    Uses `spark`, or the active session."""
    from deltaspark.table import write

    session = spark or SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    path = str(root)

    def frame(rows: list[tuple[Any, ...]]) -> Any:
        return session.createDataFrame(rows, SCHEMA).coalesce(1)  # one file per partition

    properties = {"delta.checkpointInterval": "10", "delta.enableChangeDataFeed": "true"}
    write(
        frame(_rows(0, 40, "eu") + _rows(40, 60, "us")),
        path,
        mode="error",
        partitionBy=["region"],
        properties=properties,
    )
    write(frame(_rows(100, 30, "apac") + _rows(130, 20, "eu")), path)
    kept = [r for r in _rows(40, 60, "us") if r[0] % 5 != 0]
    write(frame(kept), path, mode="overwrite", replaceWhere="region = 'us'")
    write(frame(_rows(150, 10, "apac")), path, txnAppId="demo-stream", txnVersion=7)
    return path
