"""Typed partition values from the log's strings ("Partition Value Serialization").

Every value is a string in `partitionValues` (keyed by physical name under column mapping); an
empty string or a missing key is null. Timestamps written without a zone are read in the Spark
session time zone, as Spark's Delta connector does; ISO-8601 values with `Z` are UTC.

A value that does not parse as its column's type is a damaged log, not a null: given the log file
and data file it belongs to, parsing fails the query naming both (`deltaspark: corrupt Delta log
file ...`), so that no filter can silently drop those rows.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DateType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.features.column_mapping import physical_name
from deltaspark.spark_compat import try_cast
from deltaspark.spark_errors import CORRUPT_LOG, own_error


class ValueSource:
    """Where partition values come from, for the error a value that does not parse raises: the log
    file holding the action (`log_file`) and the data file it describes (`data_file`)."""

    def __init__(self, log_file: Column, data_file: Column) -> None:
        self.log_file = log_file
        self.data_file = data_file

    def invalid(self, field: StructField, raw: Column) -> Column:
        reason = F.concat(
            F.lit("the partition value '"),
            raw,
            F.lit(f"' of column `{field.name}` is not a valid {field.dataType.simpleString()} (data file "),
            self.data_file,
            F.lit(")"),
        )
        return own_error(CORRUPT_LOG, self.log_file, reason)


def partition_fields(schema: StructType, partition_columns: tuple[str, ...] | list[str]) -> list[StructField]:
    """The schema fields of the partition columns, in `partitionColumns` order (case-insensitive)."""
    by_name = {f.name.lower(): f for f in schema.fields}
    return [by_name[c.lower()] for c in partition_columns if c.lower() in by_name]


def parse_partition_value(raw: Column, field: StructField, source: ValueSource | None = None) -> Column:
    """The typed value of one serialized partition value; with `source`, a value that does not
    parse fails the query, else it reads as null (only for callers that validate elsewhere)."""
    value = F.when(raw.isNull() | (raw == F.lit("")), F.lit(None)).otherwise(raw)
    data_type = field.dataType
    if isinstance(data_type, StringType):
        return value
    if isinstance(data_type, BinaryType):
        return value.cast(BinaryType())  # the string's characters, as UTF-8 bytes
    typed = try_cast(value, data_type)
    if source is None:
        return typed
    return F.when(value.isNotNull() & typed.isNull(), source.invalid(field, value)).otherwise(typed)


def typed_partition_values(
    partition_values: Column, fields: list[StructField], mode: str, source: ValueSource | None = None
) -> Column:
    """`struct<logical name: typed value, ...>` for a `partitionValues` map column."""
    if not fields:
        return F.lit(None).cast(StructType([]))
    parts = [
        parse_partition_value(partition_values.getItem(physical_name(f, mode)), f, source).alias(f.name)
        for f in fields
    ]
    return F.struct(*parts)


def partition_struct_type(fields: list[StructField]) -> StructType:
    return StructType([StructField(f.name, f.dataType, True) for f in fields])


def serialize_partition_value(value: Column, data_type: DataType) -> Column:
    """A typed value as the protocol's "Partition Value Serialization" writes it (null stays null):
    timestamps as ISO 8601 in UTC with microseconds, timestamp_ntz without a zone, dates as
    `yyyy-MM-dd`, numbers and booleans as Spark (Java) prints them, binary as the text its bytes
    encode in UTF-8 (bytes that are not UTF-8 fail the write)."""
    if isinstance(data_type, TimestampType):
        text = F.date_format(
            F.to_utc_timestamp(value, F.expr("current_timezone()")), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"
        )
    elif isinstance(data_type, TimestampNTZType):
        text = F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    elif isinstance(data_type, DateType):
        text = F.date_format(value, "yyyy-MM-dd")
    elif isinstance(data_type, BinaryType):
        # The bytes as UTF-8 text, which readers turn back into bytes: only valid UTF-8 survives
        # (Spark's cast keeps invalid bytes, which become U+FFFD once the value is JSON), and a
        # NUL byte cannot be in the partition directory's name.
        text = value.cast(StringType())
        survives = F.get_json_object(F.to_json(F.struct(text.alias("v"))), "$.v").cast(BinaryType()) == value
        refused = F.raise_error(
            F.lit(
                "deltaspark: a binary partition value is not valid UTF-8 or holds a NUL byte; the "
                "protocol serializes binary partition values as text, which cannot hold it (partition "
                "by another column, or by hex() of this one)"
            )
        )
        text = F.when(survives & (F.instr(text, "\u0000") == 0), text).otherwise(refused)
    else:
        text = value.cast(StringType())
    return F.when(value.isNull(), F.lit(None).cast(StringType())).otherwise(text)
