"""Typed partition values from the log's strings ("Partition Value Serialization").

Every value is a string in `partitionValues` (keyed by physical name under column mapping); an
empty string or a missing key is null. Timestamps written without a zone are read in the Spark
session time zone, as Spark's Delta connector does; ISO-8601 values with `Z` are UTC.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from .column_mapping import physical_name
from .spark_compat import try_cast


def partition_fields(schema: StructType, partition_columns: tuple[str, ...] | list[str]) -> list[StructField]:
    """The schema fields of the partition columns, in `partitionColumns` order (case-insensitive)."""
    by_name = {f.name.lower(): f for f in schema.fields}
    return [by_name[c.lower()] for c in partition_columns if c.lower() in by_name]


def parse_partition_value(raw: Column, field: StructField) -> Column:
    value = F.when(raw.isNull() | (raw == F.lit("")), F.lit(None)).otherwise(raw)
    data_type = field.dataType
    if isinstance(data_type, StringType):
        return value
    if isinstance(data_type, BinaryType):
        return value.cast(BinaryType())  # the string's characters, as UTF-8 bytes
    return try_cast(value, data_type)


def typed_partition_values(partition_values: Column, fields: list[StructField], mode: str) -> Column:
    """`struct<logical name: typed value, ...>` for a `partitionValues` map column."""
    if not fields:
        return F.lit(None).cast(StructType([]))
    parts = [
        parse_partition_value(partition_values.getItem(physical_name(f, mode)), f).alias(f.name)
        for f in fields
    ]
    return F.struct(*parts)


def partition_struct_type(fields: list[StructField]) -> StructType:
    return StructType([StructField(f.name, f.dataType, True) for f in fields])
