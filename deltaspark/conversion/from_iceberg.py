"""CONVERT TO DELTA for Iceberg tables: a Delta log over the Iceberg table's Parquet data files, in
place, as one commit; no data file is rewritten.

- Columns keep their Iceberg field ids: the table uses column mapping in `id` mode, each column's
  `delta.columnMapping.id` its Iceberg id and its physical name the name its data files store it
  under (`stored_names`: Iceberg's writers sanitise names such as `Breed Name` to `Breed_x20Name`,
  and files written before a rename hold the old name), so readers that resolve columns by name
  (delta-rs) find them; where files disagree, the name holding the most rows wins and a warning
  says which column. Statistics and partition values are keyed by those physical names.
  `delta.columnMapping.maxColumnId` is Iceberg's `last-column-id`, so dropped ids are never reused.
- Partitioning: the identity partition columns become Delta partition columns (values from each
  file's partition tuple), when every live file's spec has the same ones and Delta can hold their
  values; otherwise the table is not partitioned (Iceberg data files hold their partition source
  columns, so every spec of a table with partition evolution reads alike), which is refused when a
  file lacks an identity column (DuckDB writes such files). Statistics from the Iceberg metrics let
  Delta's data skipping prune as Iceberg would.
- Position deletes and deletion vectors become Delta deletion vectors (new DV files under the table
  root; the bitmaps are checked as a read checks them). Equality deletes cannot be expressed as
  positions without reading every row, and are refused by name.
- Each file's Parquet footer is read on the executors: the row count must match its manifest entry
  and every column must carry a field id (files added without Iceberg's writer are resolved through
  a name mapping, which Delta cannot express).
- Before the commit, files, rows and deleted rows are counted on both sides.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.conversion import file_describer
from deltaspark.errors import CorruptIcebergMetadataError, UnsupportedFeatureError
from deltaspark.features import dv_codec
from deltaspark.features.enablement import features_for_schema, required_protocol
from deltaspark.iceberg import manifests, scan, stored_names, table_metadata
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.job_errors import eager
from deltaspark.log.paths import normalize_root
from deltaspark.operations.deletion_vector_writer import DV_ROWS_SCHEMA, encoded_descriptor, stage_dv_files
from deltaspark.operations.write import new_table_metadata
from deltaspark.storage import Storage
from deltaspark.transaction.transaction import CommitResult, Transaction

cloudpickle.register_pickle_by_value(file_describer)
cloudpickle.register_pickle_by_value(stored_names)

log = logging.getLogger(__name__)
ID_KEY = "delta.columnMapping.id"
PHYSICAL_KEY = "delta.columnMapping.physicalName"
_REFUSED_TYPES = {
    "uuid": "Delta has no UUID type (Spark reads the 16 bytes as binary, not as the UUID's string)",
    "time": "Spark has no TIME type that reads Parquet TIME columns",
    "variant": "not converted yet",
    "unknown": "Delta has no column type for it",
}


def _check_types(iceberg_type: Any, where: str) -> None:
    if isinstance(iceberg_type, str):
        if iceberg_type in _REFUSED_TYPES:
            raise UnsupportedFeatureError(
                f"Iceberg column {where} has type {iceberg_type}, which the conversion cannot keep: "
                f"{_REFUSED_TYPES[iceberg_type]}",
                [f"iceberg-type-{iceberg_type}"],
            )
        return
    kind = iceberg_type.get("type")
    if kind == "struct":
        for f in iceberg_type["fields"]:
            name = f"{where}.{f['name']}" if where else f["name"]
            if f.get("initial-default") is not None:
                raise UnsupportedFeatureError(
                    f"Iceberg column {name} has an initial default; files written before it was added "
                    "would read it as NULL in Delta",
                    ["iceberg-initial-default"],
                )
            _check_types(f["type"], name)
    elif kind == "list":
        _check_types(iceberg_type["element"], f"{where}.element")
    elif kind == "map":
        _check_types(iceberg_type["key"], f"{where}.key")
        _check_types(iceberg_type["value"], f"{where}.value")


def _mapped(data_type: T.DataType, physical: dict[int, str]) -> T.DataType:
    """`data_type` with column mapping metadata (id and physical name) on every struct field; the
    physical name from `physical` by field id, else the field's name."""
    if isinstance(data_type, T.StructType):
        fields = []
        for f in data_type.fields:
            metadata = {k: v for k, v in f.metadata.items() if k != ice_types.FIELD_ID_KEY}
            field_id = int(f.metadata[ice_types.FIELD_ID_KEY])
            metadata[ID_KEY] = field_id
            metadata[PHYSICAL_KEY] = physical.get(field_id, f.name)
            fields.append(T.StructField(f.name, _mapped(f.dataType, physical), f.nullable, metadata))
        return T.StructType(fields)
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_mapped(data_type.elementType, physical), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return T.MapType(
            _mapped(data_type.keyType, physical),
            _mapped(data_type.valueType, physical),
            data_type.valueContainsNull,
        )
    return data_type


def delta_schema(schema: dict[str, Any], physical: dict[int, str] | None = None) -> T.StructType:
    """The Delta schema of an Iceberg schema (JSON), with column mapping by Iceberg field id and
    physical names from `physical` (field id -> name stored in the data files; default: the
    Iceberg names)."""
    _check_types(schema, "")
    return _mapped(ice_types.struct_type(schema), physical or {})


def _leaves(schema: dict[str, Any]) -> dict[int, tuple[list[str], str]]:
    """Field id -> (names through structs, Iceberg type) of the primitive columns statistics cover."""
    types = {fid: f["type"] for fid, f in ice_types.field_index(schema).items()}
    return {
        fid: (names, types[fid])
        for fid, names in scan._field_paths(schema).items()
        if isinstance(types.get(fid), str)
    }


_IDENTIFIER = re.compile(r"^\s*iceberg\s*\.\s*`(.+)`\s*$", re.IGNORECASE | re.DOTALL)


def parse_iceberg_identifier(identifier: str) -> str | None:
    """The path of ``iceberg.`/path` `` (delta-spark's form); None for any other identifier."""
    match = _IDENTIFIER.match(identifier)
    return match.group(1) if match else None


@eager  # a damaged manifest or file fails a Spark job: named as the Iceberg reader names it
def convert_iceberg(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    metadata_location: str | None = None,
    relocate: dict[str, str] | None = None,
) -> CommitResult:
    root = normalize_root(storage.qualify(table_path))
    metadata = table_metadata.load(root, metadata_location, relocate)
    snapshot = metadata.snapshots.get(metadata.current_snapshot_id or -1)
    iceberg_schema = metadata.schema_for(snapshot)
    schema = delta_schema(iceberg_schema)
    txn = Transaction(spark, storage, table_path, None)  # refuses sessions that cannot commit

    described = None
    cached: list[DataFrame] = []
    deletes_present = False
    if snapshot is not None:
        data_files = manifests.entries(spark, metadata, snapshot, manifest_content=0).where(
            (F.col("status") != 2) & (F.col("content") == 0)
        )
        tasks, _, kinds = scan.with_applicable_deletes(spark, metadata, snapshot, data_files)
        if any(k["content"] == 2 for k in kinds):
            raise UnsupportedFeatureError(
                f"The Iceberg table {root} has equality deletes; Delta deletes rows by position, and "
                "finding those positions means reading every row: rewrite the table in Iceberg "
                "(e.g. rewrite_data_files) or copy it, then convert",
                ["iceberg-equality-deletes"],
            )
        deletes_present = any(k["content"] == 1 for k in kinds)
        absent = {"delete_positions": "array<bigint>", "dv_path": "string", "dv_offset": "bigint"}
        absent.update(dv_length="bigint", dv_cardinality="bigint")
        for column, kind in absent.items():
            if column not in tasks.columns:  # the snapshot has no deletes of that kind
                tasks = tasks.withColumn(column, F.lit(None).cast(kind))
        identity, partition_fields = _identity_fields(metadata, iceberg_schema)
        describer = file_describer.file_describer(root, _leaves(iceberg_schema), identity, partition_fields)
        spark.sparkContext.setJobDescription(f"deltaspark: describing the data files of Iceberg table {root}")
        described_schema = file_describer.DESCRIBED.append(stored_names.NAMES_FIELD)
        described = (
            tasks.repartition(manifests.parallelism(spark))
            .mapInArrow(stored_names.with_stored_names(describer), _spark_schema(described_schema))
            .persist()
        )
    try:
        configuration = {
            "delta.columnMapping.mode": "id",
            "delta.columnMapping.maxColumnId": str(int(metadata.raw.get("last-column-id") or 0)),
        }
        features = features_for_schema(schema) | {"columnMapping"}
        if deletes_present:
            configuration["delta.enableDeletionVectors"] = "true"
            features.add("deletionVectors")
        counts: dict[str, Any] = {"files": 0, "rows": 0, "deleted": 0}
        partition_columns: list[str] = []
        if described is not None:
            counts = _survey(described)
            partition_columns = _partitioning(metadata, counts, identity, partition_fields)
            physical = _physical_names(described, iceberg_schema)
            schema = delta_schema(iceberg_schema, physical)
        txn.updateProtocol(required_protocol(None, features))
        txn.updateMetadata(new_table_metadata(schema, partition_columns, configuration))
        if described is not None:
            modified = snapshot.timestamp_ms
            keyed = _physically_keyed(described, iceberg_schema, physical, partition_columns)
            adds = _adds(storage, root, keyed, modified, cached, counts, bool(partition_columns))
            txn.addFiles(adds)
            _validate(spark, metadata, snapshot, root, counts)
        parameters = {
            "numFiles": counts["files"],
            "partitionedBy": partition_columns,
            "collectStats": False,
            "sourceFormat": "iceberg",
            "icebergSnapshotId": snapshot.snapshot_id if snapshot else None,
            "icebergMetadata": metadata.metadata_file,
        }
        metrics = {
            "numConvertedFiles": counts["files"],
            "numOutputRows": counts["rows"] - counts["deleted"],
            "numDeletionVectorsAdded": counts.get("vectors", 0),
        }
        log.info("Converting Iceberg table %s: %d data files", root, counts["files"])
        return txn.commit("CONVERT", parameters, metrics)
    finally:
        for frame in [*cached, *([described] if described is not None else [])]:
            frame.unpersist()


def _physical_names(described: DataFrame, iceberg_schema: dict[str, Any]) -> dict[int, str]:
    """Field id -> the name the data files store the field under (see `stored_names.choose`)."""
    stored = described.groupBy("names").agg(F.sum("numRecords"), F.count(F.lit(1))).collect()
    physical, notes = stored_names.choose(iceberg_schema, [(r[0], r[1], r[2]) for r in stored])
    for note in notes:
        log.warning("Converting Iceberg: %s", note)
    return physical


def _physically_keyed(
    described: DataFrame,
    iceberg_schema: dict[str, Any],
    physical: dict[int, str],
    partition_columns: list[str],
) -> DataFrame:
    """`described` with statistics and partition values keyed by physical names, as Delta keys them
    under column mapping (the describer keys them by Iceberg names)."""
    tree = stored_names.rename_tree(iceberg_schema, physical)
    if not tree:
        return described
    keyed = described.mapInArrow(stored_names.stats_renamer(tree), described.schema)
    renamed = {name: tree[name][0] for name in partition_columns if name in tree}
    if renamed:
        pairs = F.create_map(*[F.lit(x) for pair in renamed.items() for x in pair])
        keyed = keyed.withColumn(
            "partitionValues",
            F.transform_keys("partitionValues", lambda k, _: F.coalesce(F.element_at(pairs, k), k)),
        )
    return keyed


def _identity_fields(
    metadata: Any, iceberg_schema: dict[str, Any]
) -> tuple[dict[int, dict[int, str]], dict[int, list[tuple[int, str, str]]]]:
    """Per partition spec: the source field ids (and names) of its identity transforms, and the
    `(partition field id, column name, type)` of those a Delta partition column can hold (a
    top-level column of a type whose serialized value reads back exactly)."""
    fields = ice_types.field_index(iceberg_schema)
    top_level = {int(f["id"]) for f in iceberg_schema["fields"]}
    identity: dict[int, dict[int, str]] = {}
    partition_fields: dict[int, list[tuple[int, str, str]]] = {}
    for spec_id, spec in metadata.specs.items():
        sources = [f for f in spec if f.transform == "identity"]
        identity[spec_id] = {f.source_id: fields.get(f.source_id, {}).get("name", "?") for f in sources}
        partition_fields[spec_id] = [
            (f.field_id, fields[f.source_id]["name"], fields[f.source_id]["type"])
            for f in sources
            if f.source_id in top_level and file_describer.partitionable(fields[f.source_id]["type"])
        ]
    return identity, partition_fields


def _survey(described: DataFrame) -> dict[str, Any]:
    """Files, rows, deleted rows and vectors to write, the partition specs of the live files, and a
    file lacking an identity column or a partition value Delta cannot hold: one aggregate."""
    totals = described.agg(
        F.count(F.lit(1)).alias("files"),
        F.coalesce(F.sum("numRecords"), F.lit(0)).alias("rows"),
        F.coalesce(F.sum(F.size("deleted")), F.lit(0)).alias("deleted"),
        F.count(F.when(F.size("deleted") > 0, 1)).alias("vectors"),
        F.collect_set("spec_id").alias("specs"),
        F.first(F.when(~F.col("holdsIdentity"), F.col("key")), ignorenulls=True).alias("lacking"),
        F.first("partitionProblem", ignorenulls=True).alias("problem"),
    ).first()
    counts: dict[str, Any] = {k: int(totals[k]) for k in ("files", "rows", "deleted", "vectors")}
    counts.update(specs=sorted(totals["specs"]), lacking=totals["lacking"], problem=totals["problem"])
    return counts


def _partitioning(
    metadata: Any,
    counts: dict[str, Any],
    identity: dict[int, dict[int, str]],
    partition_fields: dict[int, list[tuple[int, str, str]]],
) -> list[str]:
    """The Delta partition columns: the identity partition columns, when every live file's spec has
    the same ones and Delta can hold their values (as delta-spark's converter partitions by them);
    else none, which is refused if a file lacks one of them (Iceberg readers fill those columns
    from the partition values; an unpartitioned Delta table would read NULL)."""
    specs = counts["specs"]
    if not specs:
        return []
    sources = {frozenset(identity.get(s, {})) for s in specs}
    why = None
    if len(sources) > 1:
        why = f"its live data files have partition specs {specs} with different identity fields"
    else:
        common = identity.get(specs[0], {})
        held = {name for _, name, _ in partition_fields.get(specs[0], [])}
        other = sorted(set(common.values()) - held)
        if other:
            why = f"Delta cannot partition by {', '.join(other)} (a nested column or a type it cannot hold)"
        elif counts["problem"]:
            why = counts["problem"]
    if why is None:
        default = metadata.default_spec_id if metadata.default_spec_id in specs else specs[0]
        return [name for _, name, _ in partition_fields.get(default, [])]
    if counts["lacking"]:
        raise UnsupportedFeatureError(
            f"Iceberg data file {counts['lacking']} does not hold its identity partition column(s) "
            "(Iceberg readers take them from the partition values) and they cannot be Delta "
            f"partition columns: {why}; an unpartitioned Delta table would read them as NULL",
            ["iceberg-identity-partition-values"],
        )
    log.info("Converting to an unpartitioned Delta table: %s", why)
    return []


def _adds(
    storage: Storage,
    root: str,
    described: DataFrame,
    modified: int,
    cached: list[DataFrame],
    counts: dict[str, Any],
    partitioned: bool,
) -> DataFrame:
    """The `add` actions (with new DVs for files that lost rows, and partition values when the
    table is partitioned); what it caches is appended to `cached`, to be released after the
    commit."""
    descriptors = None
    if counts["vectors"]:
        write_id = uuid.uuid4().hex
        tasks = max(1, min(-(-counts["vectors"] // 1000), 200))
        encoded = (
            described.where(F.size("deleted") > 0)
            .select("key", F.col("deleted").alias("rows"), "stats", "numRecords")
            .repartition(tasks, "key")
            .sortWithinPartitions("key")
            .mapInArrow(dv_codec.dv_file_encoder(write_id), DV_ROWS_SCHEMA)
            .persist()
        )
        cached.append(encoded)  # the descriptors must describe exactly the bytes written
        stage_dv_files(storage, root, encoded, write_id)
        descriptors = encoded.where(F.col("key").isNotNull()).select(
            "key",
            encoded_descriptor().alias("dv"),
            F.col("stats").alias("dv_stats"),
        )
    files = described if descriptors is None else described.join(descriptors, "key", "left")
    dv = F.col("dv") if descriptors is not None else F.lit(None)
    stats = F.coalesce(F.col("dv_stats"), F.col("stats")) if descriptors is not None else F.col("stats")
    adds = files.select(
        F.struct(
            F.col("path").alias("path"),
            (F.col("partitionValues") if partitioned else F.create_map().cast("map<string,string>")).alias(
                "partitionValues"
            ),
            F.col("size").alias("size"),
            F.lit(modified).cast("long").alias("modificationTime"),
            F.lit(True).alias("dataChange"),
            stats.alias("stats"),
            dv.alias("deletionVector"),
        ).alias("add"),
        F.col("numRecords").alias("num_records"),
    )
    return adds


def _validate(spark: SparkSession, metadata: Any, snapshot: Any, root: str, counts: dict[str, int]) -> None:
    """The files and rows the Iceberg metadata holds against what the adds describe."""
    from deltaspark.iceberg import row_count

    expected = row_count.metadata_count(spark, metadata, snapshot)
    live = counts["rows"] - counts["deleted"]
    if expected is not None and expected != live:
        raise CorruptIcebergMetadataError(
            metadata.metadata_file,
            f"its snapshot counts {expected} rows, but the data files of {root} less their deletes "
            f"hold {live}; nothing was committed",
        )


def _spark_schema(arrow_schema: Any) -> T.StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)
