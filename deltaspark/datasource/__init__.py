"""Spark's own faces over deltaspark: `spark.read.format("delta")` as a Python data source."""

from deltaspark.datasource.registration import register

__all__ = ["register"]
