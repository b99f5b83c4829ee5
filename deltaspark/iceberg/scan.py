"""The rows of an Iceberg snapshot: data files read on the executors, deletes applied by the spec's
scope rules (Scan Planning):

- a deletion vector applies to its `referenced_data_file` when the data file's data sequence
  number is <= the vector's; position delete files apply the same way by the `file_path` in each of
  their rows, but not to a file that has a deletion vector (v3: the vector holds them all);
- an equality delete applies to a data file whose data sequence number is < the delete's, in the
  same partition (spec id and values) or anywhere when the delete's spec is unpartitioned; a NULL
  in a delete column matches a NULL (`<=>`).

Position deletes are grouped per data file and handed to the task reading that file, so a file's
rows are filtered where they are read; equality deletes are a left anti join per set of equality
field ids. The driver only learns which kinds of delete exist (one small job over the delete
manifests); no file list is collected.
"""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.errors import InvalidArgumentError, UnsupportedFeatureError
from deltaspark.iceberg import data_reader, manifests, puffin
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.pruning import Pruner
from deltaspark.iceberg.relocation import SCHEME_AUTHORITY
from deltaspark.iceberg.table_metadata import Snapshot, TableMetadata
from deltaspark.spark_compat import arrow_schema, check_python_workers

LINEAGE = ("_row_id", "_last_updated_sequence_number")
_KEY_PATTERN = SCHEME_AUTHORITY.pattern  # the one rule, applied by Spark here and Python there

cloudpickle.register_pickle_by_value(data_reader)
cloudpickle.register_pickle_by_value(puffin)


def match_key(column: Column) -> Column:
    """`relocation.match_key` as a Spark expression (same regex: Java and Python agree on it)."""
    return F.regexp_replace(F.regexp_replace(column, _KEY_PATTERN, ""), "^/+", "/")


_EXTRA_TYPES = {
    "_row_id": T.LongType(),
    "_last_updated_sequence_number": T.LongType(),
    "_spec_id": T.IntegerType(),
    "_partition": T.StringType(),
    "_data_seq": T.LongType(),
    "_file": T.StringType(),
    "_pos": T.LongType(),
}


def _output_schema(schema: dict[str, Any], extras: list[str]) -> T.StructType:
    """The Spark schema of rows read in `schema`, followed by the requested extra columns."""
    out = ice_types.struct_type(schema)
    for name in extras:
        out = out.add(name, _EXTRA_TYPES[name], True)
    return out


def _identity_map(metadata: TableMetadata) -> dict[str, dict[str, int]]:
    return {
        str(spec_id): {str(f.field_id): f.source_id for f in fields if f.transform == "identity"}
        for spec_id, fields in metadata.specs.items()
    }


def read_files(
    spark: SparkSession,
    metadata: TableMetadata,
    tasks: DataFrame,
    schema: dict[str, Any],
    extras: list[str],
    required_ids: list[int] | None = None,
) -> DataFrame:
    """The rows of the files in `tasks` (entry columns plus optional `delete_positions` and `dv_*`)."""
    spark_schema = _output_schema(schema, extras)
    columns = [
        "file_path",
        "file_format",
        "record_count",
        "spec_id",
        "partition",
        "sequence_number",
        "first_row_id",
    ]
    optional = ["delete_positions", "dv_path", "dv_offset", "dv_length", "dv_cardinality"]
    present = [c for c in optional if c in tasks.columns]
    check_python_workers(spark)
    reader = data_reader.data_file_reader(
        schema,
        arrow_schema(spark_schema),
        metadata.name_mapping(),
        _identity_map(metadata),
        extras,
        required_ids,
    )
    return tasks.select(*columns, *present).mapInArrow(reader, spark_schema)


def _unpartitioned_specs(metadata: TableMetadata) -> list[int]:
    return [
        spec_id for spec_id, fields in metadata.specs.items() if all(f.transform == "void" for f in fields)
    ]


def _field_paths(schema: dict[str, Any]) -> dict[int, list[str]]:
    """Field id -> names from the top-level column down, for fields reachable through structs only."""
    out: dict[int, list[str]] = {}

    def walk(fields: list[dict[str, Any]], prefix: list[str]) -> None:
        for f in fields:
            out[int(f["id"])] = prefix + [f["name"]]
            if isinstance(f["type"], dict) and f["type"].get("type") == "struct":
                walk(f["type"]["fields"], prefix + [f["name"]])

    walk(schema["fields"], [])
    return out


def _ref(alias: str, names: list[str]) -> Column:
    return F.col(".".join([alias] + ["`" + n.replace("`", "``") + "`" for n in names]))


def snapshot_rows(
    spark: SparkSession,
    metadata: TableMetadata,
    snapshot: Snapshot | None,
    rowLineage: bool = False,
    predicate: Any = None,
) -> DataFrame:
    """The rows of `snapshot` in its schema (the table's current schema for the current snapshot).
    Data files that cannot hold a row matching `predicate` (a `read.predicates` tree) are not read;
    the caller still filters the rows."""
    schema = metadata.schema_for(snapshot)
    extras = list(LINEAGE) if rowLineage else []
    if rowLineage and metadata.format_version < 3:
        raise InvalidArgumentError(
            f"Row lineage (_row_id, _last_updated_sequence_number) exists in Iceberg v3 tables; "
            f"{metadata.table_root} is format v{metadata.format_version}"
        )
    if snapshot is None:
        return spark.createDataFrame([], _output_schema(schema, extras))
    pruner = Pruner(metadata, schema, predicate) if predicate is not None else None
    data_files = manifests.entries(
        spark, metadata, snapshot, manifest_content=0, prune=pruner.manifests if pruner else None
    ).where((F.col("status") != 2) & (F.col("content") == 0))
    if pruner is not None:
        data_files = pruner.files(data_files)
    tasks, deletes, kinds = with_applicable_deletes(spark, metadata, snapshot, data_files)
    eq_sets = sorted({tuple(k["equality_ids"] or ()) for k in kinds if k["content"] == 2})
    tasks = tasks.repartition(manifests.parallelism(spark))
    eq_extras = ["_spec_id", "_partition", "_data_seq"] if eq_sets else []
    rows = read_files(spark, metadata, tasks, schema, extras + eq_extras)
    if eq_sets:
        rows = _apply_equality_deletes(spark, metadata, schema, deletes, eq_sets, rows)
        rows = rows.drop(*eq_extras)
    return rows


def with_applicable_deletes(
    spark: SparkSession, metadata: TableMetadata, snapshot: Snapshot, data_files: DataFrame
) -> tuple[DataFrame, DataFrame | None, list[Any]]:
    """`data_files` (live data entries) with `data_key`, the position deletes that apply to each
    (`delete_positions`) and the deletion vector that applies (`dv_path`, `dv_offset`, `dv_length`,
    `dv_cardinality`), where the snapshot has such deletes; also the live deletes and their kinds."""
    data_files = data_files.withColumn("data_key", match_key(F.col("file_path")))
    kinds: list[Any] = []
    deletes = None
    if metadata.format_version >= 2:
        deletes = live_deletes(spark, metadata, snapshot)
        kinds = delete_kinds(deletes)
    tasks = data_files
    dv_kinds = [k for k in kinds if k["content"] == 1 and k["puffin"]]
    pos_kinds = [k for k in kinds if k["content"] == 1 and not k["puffin"]]
    if pos_kinds:
        tasks = tasks.join(positions_by_file(metadata, deletes), "data_key", "left")
        tasks = tasks.withColumn(
            "delete_positions", applicable_positions(F.col("pos_list"), F.col("sequence_number"))
        ).drop("pos_list")
    if dv_kinds:
        tasks = tasks.join(vectors_by_file(deletes), "data_key", "left")
        tasks = (
            tasks.withColumn("dv", applicable_vector(F.col("dv_list"), F.col("sequence_number")))
            .select("*", "dv.dv_path", "dv.dv_offset", "dv.dv_length", "dv.dv_cardinality")
            .drop("dv", "dv_list")
        )
    return tasks, deletes, kinds


def live_deletes(spark: SparkSession, metadata: TableMetadata, snapshot: Snapshot) -> DataFrame:
    """The snapshot's live delete files (position, deletion vector, equality), from delete manifests."""
    return manifests.entries(spark, metadata, snapshot, manifest_content=1).where(
        (F.col("status") != 2) & (F.col("content") != 0)
    )


def delete_kinds(deletes: DataFrame) -> list[Any]:
    """Which kinds of delete exist (content, Puffin or not, equality ids): one small job, so the plan
    only joins what the snapshot has."""
    return (
        deletes.groupBy("content", (F.col("file_format") == "PUFFIN").alias("puffin"), "equality_ids")
        .count()
        .collect()
    )


def positions_by_file(metadata: TableMetadata, deletes: DataFrame) -> DataFrame:
    """(`data_key`, `pos_list`): every position delete of `deletes` grouped by the data file it names,
    as (`delete_seq`, `pos`) structs. A position may be listed by several delete files."""
    pos_files = deletes.where((F.col("content") == 1) & (F.col("file_format") != "PUFFIN"))
    positions = pos_files.select("file_path", "file_format", "sequence_number").mapInArrow(
        data_reader.position_delete_reader(metadata.paths),
        T.StructType(
            [
                T.StructField("data_key", T.StringType()),
                T.StructField("pos", T.LongType()),
                T.StructField("delete_seq", T.LongType()),
            ]
        ),
    )
    return positions.groupBy("data_key").agg(F.collect_list(F.struct("delete_seq", "pos")).alias("pos_list"))


def applicable_positions(pos_list: Column, data_seq: Column) -> Column:
    """The positions of `pos_list` that apply to a data file of sequence number `data_seq`: those of
    delete files whose sequence number is >= the data file's."""
    return F.transform(F.filter(pos_list, lambda p: p["delete_seq"] >= data_seq), lambda p: p["pos"])


def vectors_by_file(deletes: DataFrame) -> DataFrame:
    """(`data_key`, `dv_list`): the deletion vectors of `deletes` grouped by their referenced data
    file, as structs of (`dv_seq`, `dv_path`, `dv_offset`, `dv_length`, `dv_cardinality`)."""
    vectors = deletes.where((F.col("content") == 1) & (F.col("file_format") == "PUFFIN"))
    return vectors.groupBy(match_key(F.col("referenced_data_file")).alias("data_key")).agg(
        F.collect_list(
            F.struct(
                F.col("sequence_number").alias("dv_seq"),
                F.col("file_path").alias("dv_path"),
                F.col("content_offset").alias("dv_offset"),
                F.col("content_size_in_bytes").alias("dv_length"),
                F.col("record_count").alias("dv_cardinality"),
            )
        ).alias("dv_list")
    )


def applicable_vector(dv_list: Column, data_seq: Column) -> Column:
    """The deletion vector of `dv_list` that applies to a data file of sequence number `data_seq`: the
    newest whose sequence number is >= the data file's (structs order by their first field, `dv_seq`);
    null when none does."""
    return F.array_max(F.filter(dv_list, lambda d: d["dv_seq"] >= data_seq))


def _apply_equality_deletes(
    spark: SparkSession,
    metadata: TableMetadata,
    schema: dict[str, Any],
    deletes: DataFrame,
    eq_sets: list[tuple[int, ...]],
    rows: DataFrame,
) -> DataFrame:
    paths = _field_paths(schema)
    global_specs = _unpartitioned_specs(metadata)
    for ids in eq_sets:
        missing = [i for i in ids if i not in paths]
        if not ids or missing:
            raise UnsupportedFeatureError(
                f"Equality deletes of {metadata.table_root} use field ids {list(ids)}; "
                + (
                    f"{missing} are not columns (or struct fields) of the schema read"
                    if missing
                    else "none given"
                ),
                ["iceberg-equality-delete-fields"],
            )
        tops = {paths[i][0] for i in ids}
        sub_schema = {"type": "struct", "fields": [f for f in schema["fields"] if f["name"] in tops]}
        files = deletes.where(
            (F.col("content") == 2) & (F.col("equality_ids") == F.array(*[F.lit(i) for i in ids]))
        )
        delete_rows = read_files(
            spark, metadata, files, sub_schema, ["_spec_id", "_partition", "_data_seq"], list(ids)
        )
        condition = None
        for i in ids:
            term = _ref("r", paths[i]).eqNullSafe(_ref("d", paths[i]))
            condition = term if condition is None else condition & term
        same_partition = (F.col("d._spec_id") == F.col("r._spec_id")) & (
            F.col("d._partition") == F.col("r._partition")
        )
        scope = same_partition
        if global_specs:
            scope = F.col("d._spec_id").isin(global_specs) | same_partition
        condition = condition & (F.col("d._data_seq") > F.col("r._data_seq")) & scope
        rows = rows.alias("r").join(delete_rows.alias("d"), condition, "left_anti")
    return rows
