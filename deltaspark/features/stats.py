"""Per-file statistics ("Per-file Statistics"): `numRecords`, `minValues`, `maxValues`, `nullCount`,
`tightBounds`, parsed into a struct that mirrors the table's data columns.

The log stores stats as JSON text (keyed by physical names) and checkpoints may also store them
as a `stats_parsed` struct. Both are turned into the same logical-name struct here.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.features.column_mapping import physical_name
from deltaspark.features.schema import conform_by_name

MIN_MAX_TYPES = (
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    DateType,
    TimestampType,
    TimestampNTZType,
    StringType,
)


def _min_max_struct(fields: list[StructField], mode: str, physical: bool) -> StructType:
    out = []
    for f in fields:
        name = physical_name(f, mode) if physical else f.name
        if isinstance(f.dataType, StructType):
            nested = _min_max_struct(f.dataType.fields, mode, physical)
            if nested.fields:
                out.append(StructField(name, nested, True))
        elif isinstance(f.dataType, MIN_MAX_TYPES):
            out.append(StructField(name, f.dataType, True))
    return StructType(out)


def _null_count_struct(fields: list[StructField], mode: str, physical: bool) -> StructType:
    out = []
    for f in fields:
        name = physical_name(f, mode) if physical else f.name
        if isinstance(f.dataType, StructType):
            out.append(StructField(name, _null_count_struct(f.dataType.fields, mode, physical), True))
        else:
            out.append(StructField(name, LongType(), True))
    return StructType(out)


def stats_schema(data_fields: list[StructField], mode: str, physical: bool) -> StructType:
    """The stats struct for the given (non-partition) columns, by physical or logical names."""
    min_max = _min_max_struct(data_fields, mode, physical)
    return StructType(
        [
            StructField("numRecords", LongType(), True),
            StructField("minValues", min_max, True),
            StructField("maxValues", min_max, True),
            StructField("nullCount", _null_count_struct(data_fields, mode, physical), True),
            StructField("tightBounds", BooleanType(), True),
        ]
    )


def parse_stats_json(stats: Column, physical: StructType, logical: StructType) -> Column:
    """Stats JSON (physical names) to the logical-name struct. The two schemas have one shape, so a
    positional struct cast does the renaming."""
    return F.from_json(stats, physical).cast(logical)


def conform_parsed_stats(column: Column, written: DataType, physical: StructType) -> Column:
    """A checkpoint's `stats_parsed`, in whatever layout its writer chose, realigned by name to the
    table's physical stats struct (missing fields null, leaves cast)."""
    return conform_by_name(column, written, physical)
