"""The distributed read path: data files opened by the executors, the file list never on the driver.

Spark's file scan needs every path it reads on the driver. For tables above
`spark.deltaspark.read.maxDriverFiles` live files the pruned file list stays a DataFrame: it is
spread over tasks and each task opens its files with pyarrow (`arrow_file_reader`), applies
column mapping, type widening, deletion vectors, partition values and row tracking, and returns
Arrow batches in the table's schema. Executors need pyarrow and pyroaring, and file system access
through `pyarrow.fs` (local, HDFS, S3 - `s3a://` is read as `s3://` with AWS default credentials -,
GCS, Azure).
"""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from deltaspark import errors
from deltaspark.features.column_mapping import ID_KEY, physical_name
from deltaspark.log.paths import canonical_path
from deltaspark.read import arrow_file_reader
from deltaspark.spark_compat import arrow_schema, check_python_workers, conf_get

cloudpickle.register_pickle_by_value(arrow_file_reader)
cloudpickle.register_pickle_by_value(errors)


def type_plan(data_type: DataType, mode: str) -> dict[str, Any]:
    """How to find and rename the nested fields of a stored value (see `arrow_file_reader._conform`)."""
    if isinstance(data_type, getattr(T, "VariantType", ())):  # Spark 4+
        return {"kind": "struct", "variant": True}
    if isinstance(data_type, StructType):
        return {
            "kind": "struct",
            "fields": [
                {
                    "physical": physical_name(f, mode),
                    "id": int(f.metadata[ID_KEY]) if mode == "id" and ID_KEY in f.metadata else None,
                    "type": type_plan(f.dataType, mode),
                }
                for f in data_type.fields
            ],
        }
    if isinstance(data_type, ArrayType):
        return {"kind": "array", "element": type_plan(data_type.elementType, mode)}
    if isinstance(data_type, MapType):
        return {
            "kind": "map",
            "key": type_plan(data_type.keyType, mode),
            "value": type_plan(data_type.valueType, mode),
        }
    return {"kind": "primitive"}


def read_distributed(
    snapshot: Any,
    reader: Any,
    files: DataFrame,
    row_tracking: bool,
    extra: list[StructField],
    carry: list[str],
    apply_deletion_vectors: bool,
    keep_row_index: bool,
    output: StructType,
) -> DataFrame:
    columns: list[dict[str, Any]] = []
    for field in reader.logical_schema.fields:
        if field.name.lower() in reader.partition_names:
            columns.append({"kind": "partition", "name": field.name})
        else:
            columns.append(
                {
                    "kind": "data",
                    "physical": physical_name(field, reader.mode),
                    "id": int(field.metadata[ID_KEY])
                    if reader.mode == "id" and ID_KEY in field.metadata
                    else None,
                    "type": type_plan(field.dataType, reader.mode),
                }
            )
    columns += [
        {"kind": "data", "physical": f.name, "id": None, "type": type_plan(f.dataType, "none")} for f in extra
    ]
    # in the order of `scan._output_schema`: carried file columns, the row index, row tracking
    columns += [{"kind": "carry", "name": c} for c in carry]
    if keep_row_index:
        columns.append({"kind": "row_index"})
    if row_tracking:
        row_id_column, commit_column = reader.materialized
        columns.append(
            {"kind": "row_tracking", "row_id_column": row_id_column, "commit_column": commit_column}
        )
    target = arrow_schema(output)
    dv = (
        F.col("deletionVector")
        if apply_deletion_vectors
        else F.lit(None).cast(files.schema["deletionVector"].dataType)
    )
    tasks = files.select(
        canonical_path("path", snapshot.tableRoot).alias("path"),
        "partitionValues_parsed",
        dv.alias("deletionVector"),
        "baseRowId",
        "defaultRowCommitVersion",
        *[F.col("`" + c.replace("`", "``") + "`") for c in carry],
    ).repartition(int(conf_get(snapshot._spark, "spark.sql.shuffle.partitions", "200")))
    check_python_workers(snapshot._spark)
    return tasks.mapInArrow(arrow_file_reader.make_reader(columns, target, snapshot.tableRoot), output)
