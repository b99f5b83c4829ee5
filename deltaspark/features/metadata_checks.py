"""What a table's `metaData` must satisfy before anything is read with it.

Each rule is one a damaged or hand-edited log can break, and each would otherwise turn into a
silently wrong answer: a partition column missing from the schema reads as nulls, an unknown column
mapping mode reads physical names as logical ones, a type this Spark cannot read garbles the scan.
Lenient where the reference implementation is lenient with what old writers left: a `metaData`
without `schemaString` is an empty schema.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from deltaspark.errors import CorruptLogError, UnsupportedFeatureError
from deltaspark.features.column_mapping import MODE_KEY, MODES
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol


def _type_names(data_type: DataType) -> set[str]:
    if isinstance(data_type, StructType):
        return (
            set().union(*(_type_names(f.dataType) for f in data_type.fields)) if data_type.fields else set()
        )
    if isinstance(data_type, ArrayType):
        return _type_names(data_type.elementType)
    if isinstance(data_type, MapType):
        return _type_names(data_type.keyType) | _type_names(data_type.valueType)
    return {data_type.typeName()}


def check_metadata(
    protocol: Protocol, metadata: Metadata, where: str, spark_version: tuple[int, int] = (4, 0)
) -> None:
    """Refuse metadata that cannot be read correctly; `where` is the log file that holds it."""
    if metadata.formatProvider.lower() != "parquet":
        raise UnsupportedFeatureError(
            f"{where}: the table's data files are `{metadata.formatProvider}`; Delta tables store parquet"
        )
    try:
        schema = metadata.schema(where)
    except UnsupportedFeatureError:
        if spark_version < (4, 0) and '"variant"' in metadata.schemaString:
            raise _variant_refused(where, spark_version) from None
        raise
    by_name: dict[str, DataType] = {}
    for field in schema.fields:
        if field.name.lower() in by_name:
            raise CorruptLogError(
                where, f"the schema has two columns named `{field.name}` (names are case-insensitive)"
            )
        by_name[field.name.lower()] = field.dataType
    seen: set[str] = set()
    for column in metadata.partitionColumns:
        data_type = by_name.get(column.lower())
        if data_type is None:
            raise CorruptLogError(
                where,
                f"metaData.partitionColumns names `{column}`, which is not a column of the table's schema "
                f"({', '.join(f.name for f in schema.fields) or 'no columns'})",
            )
        if isinstance(data_type, (StructType, ArrayType, MapType)):
            raise CorruptLogError(
                where,
                f"partition column `{column}` has type {data_type.simpleString()}: "
                "partition columns are of primitive types",
            )
        if column.lower() in seen:
            raise CorruptLogError(where, f"metaData.partitionColumns lists `{column}` twice")
        seen.add(column.lower())
    if protocol.hasFeature("columnMapping"):
        mode = (metadata.configuration.get(MODE_KEY) or "none").strip().lower()
        if mode not in MODES:
            raise UnsupportedFeatureError(
                f"{where}: {MODE_KEY}={metadata.configuration.get(MODE_KEY)!r} is not a column mapping mode "
                f"deltaspark knows ({', '.join(MODES)})",
                features=["columnMapping"],
            )
    if spark_version < (4, 0) and "variant" in _type_names(schema):
        raise _variant_refused(where, spark_version)


def _variant_refused(where: str, spark_version: tuple[int, int]) -> UnsupportedFeatureError:
    table = where.rsplit("/_delta_log", 1)[0]
    return UnsupportedFeatureError(
        f"Table {table} has variant columns, which Spark {spark_version[0]}.{spark_version[1]} cannot "
        "read: variant needs Spark 4.0 or later",
        features=["variantType"],
    )
