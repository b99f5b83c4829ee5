"""What an audit reports: one row per finding, in one schema for every check.

A finding names its check, a severity (`error`: the table is damaged or will read wrong;
`warning`: it works but needs care; `info`: a fact worth acting on, such as orphaned files), the
version and path it is about when there is one, a readable detail and a number (bytes, rows, age)
that can be summed or plotted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.spark_compat import held_frame

FINDINGS_SCHEMA = "check string, severity string, version long, path string, detail string, value double"
FINDING_COLUMNS = ["check", "severity", "version", "path", "detail", "value"]
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    detail: str
    version: int | None = None
    path: str | None = None
    value: float | None = None

    def row(self) -> tuple[Any, ...]:
        return (self.check, self.severity, self.version, self.path, self.detail, self.value)


def from_findings(spark: SparkSession, findings: Iterable[Finding]) -> DataFrame:
    """Findings made on the driver (from the log listing, small documents) as a DataFrame."""
    return held_frame(spark, [f.row() for f in findings], FINDINGS_SCHEMA)


def findings_of(
    frame: DataFrame,
    check: str,
    severity: str | Column,
    detail: Column,
    version: Column | None = None,
    path: Column | None = None,
    value: Column | None = None,
) -> DataFrame:
    """Rows of `frame` (already filtered to the problems) as findings of `check`; `severity`: one
    for every row, or a column of each row's."""
    return frame.select(
        F.lit(check).alias("check"),
        (F.lit(severity) if isinstance(severity, str) else severity).alias("severity"),
        (version if version is not None else F.lit(None)).cast("long").alias("version"),
        (path if path is not None else F.lit(None)).cast("string").alias("path"),
        detail.cast("string").alias("detail"),
        (value if value is not None else F.lit(None)).cast("double").alias("value"),
    )
