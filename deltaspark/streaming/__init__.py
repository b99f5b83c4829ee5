"""Spark's structured streaming over Delta tables: the exactly-once sink (`writeStream`)."""

from deltaspark.streaming.sink import writeStream

__all__ = ["writeStream"]
