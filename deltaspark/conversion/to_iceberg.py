"""`DeltaTable.toIceberg`: Iceberg metadata for a Delta table, so that Iceberg engines read it in place.

The Delta snapshot's live files become one new Iceberg snapshot: manifests written on the executors
(`iceberg.manifest_writer`), then on the driver the manifest list (one row per manifest) and the
next `metadata/v{N}.metadata.json`, created only if absent (two conversions racing cannot both
commit; the loser's manifests are orphans no snapshot names), then `version-hint.text`. The
metadata records the Delta version it describes (`delta-version`, as Delta UniForm does); converting
again at that version writes nothing. Earlier snapshots stay in the metadata, so Iceberg time
travel reaches earlier conversions while their files exist.

Schema ids come from column mapping when the table has it, else they are kept from the previous
conversion by name (`iceberg.from_spark`); the partition spec is identity on the partition columns.
Deletion vectors need format 3: each becomes a `deletion-vector-v1` blob in a Puffin file (its bytes
are Delta's own record, re-read and checked), and format 3 also carries row lineage, which needs
Delta row tracking so that a row keeps its id across conversions.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltaspark.conversion import incremental
from deltaspark.errors import (
    IcebergCommitConflictError,
    IcebergExportMismatchError,
    IcebergTableNotFoundError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)
from deltaspark.features import row_tracking
from deltaspark.iceberg import avro_encode, from_spark, manifest_writer, table_metadata
from deltaspark.iceberg.manifests import parallelism
from deltaspark.log.paths import canonical_path, normalize_root
from deltaspark.read.data_skipping import DEFAULT_STRING_PREFIX_LENGTH
from deltaspark.snapshot import Snapshot
from deltaspark.storage import Storage

cloudpickle.register_pickle_by_value(manifest_writer)
cloudpickle.register_pickle_by_value(avro_encode)

log = logging.getLogger(__name__)
DELTA_VERSION = incremental.DELTA_VERSION  # as Delta UniForm records it
DELTA_TIMESTAMP = "delta-timestamp"
PARTITION_FIELD_BASE = 1000
# Delta writers with the change data feed may leave `_change_type` in data files; it is no column of
# the table. Name-mapped to Iceberg's reserved `_change_type` metadata column id, readers that refuse
# unmapped file columns (pyiceberg) read those files, and it never collides with a table column.
CHANGE_TYPE = ("_change_type", 2147483647 - 104)


@dataclass(frozen=True)
class IcebergExport:
    """What a conversion wrote (or found already written)."""

    metadata_location: str
    snapshot_id: int
    delta_version: int
    data_files: int
    deletion_vectors: int
    written: bool
    incremental: bool = False  # kept the manifests of files unchanged since the last conversion


def _previous(table_root: str) -> table_metadata.TableMetadata | None:
    try:
        metadata = table_metadata.load(table_root, None, None)
    except IcebergTableNotFoundError:
        return None
    if DELTA_VERSION not in metadata.properties:
        raise InvalidArgumentError(
            f"{table_root}/metadata holds Iceberg metadata that no Delta conversion wrote "
            f"({metadata.metadata_file}); refusing to add to it"
        )
    return metadata


def _stats_columns(
    schema: T.StructType, converted: from_spark.IcebergSchema
) -> dict[tuple[str, ...], tuple[int, str]]:
    """Stats path (logical names, structs only) -> (field id, Iceberg type) of primitive leaves."""
    out = {}
    for path, field_id in converted.ids_by_path.items():
        kind = converted.types_by_id.get(field_id)
        if isinstance(kind, str) and not any(p in ("element", "key", "value") for p in path):
            out[path] = (field_id, kind)
    return out


def _spec(
    snapshot: Snapshot, converted: from_spark.IcebergSchema
) -> tuple[list[dict[str, Any]], list[tuple[str, int, str]]]:
    fields, typed = [], []
    for i, name in enumerate(snapshot.metadata.partitionColumns):
        source = converted.ids_by_path[(name,)]
        field_id = PARTITION_FIELD_BASE + i
        fields.append({"name": name, "transform": "identity", "source-id": source, "field-id": field_id})
        typed.append((name, field_id, converted.types_by_id[source]))
    return fields, typed


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    strip = lambda d: {k: v for k, v in d.items() if k not in ("schema-id", "spec-id")}  # noqa: E731
    return strip(a) == strip(b)


def to_iceberg(spark: Any, storage: Storage, snapshot: Snapshot, format_version: int = 2) -> IcebergExport:
    if format_version not in (2, 3):
        raise InvalidArgumentError(f"formatVersion must be 2 or 3, not {format_version!r}")
    root = normalize_root(snapshot.tableRoot)
    previous = _previous(root)
    if previous is not None and previous.format_version > format_version:
        raise InvalidArgumentError(
            f"The Iceberg metadata of {root} is format {previous.format_version}; "
            f"it cannot go back to {format_version}"
        )
    if previous is not None and previous.properties.get(DELTA_VERSION) == str(snapshot.version):
        current = previous.snapshots.get(previous.current_snapshot_id or -1)
        if previous.format_version == format_version and current is not None:
            return IcebergExport(previous.metadata_file, current.snapshot_id, snapshot.version, -1, -1, False)
    tracking = row_tracking.is_enabled(snapshot.protocol, snapshot.metadata)
    if format_version >= 3 and not tracking:
        raise UnsupportedFeatureError(
            "Iceberg format 3 gives every row a stable id (row lineage); Delta keeps them with row "
            "tracking: enable it first (delta.enableRowTracking=true, which assigns ids to existing files)",
            ["rowTracking"],
        )
    files = snapshot.files()
    has_dvs = "deletionVectors" in snapshot.tableFeatures
    if has_dvs and format_version < 3:
        dv_count = files.where(F.col("deletionVector").isNotNull()).limit(1).count()
        if dv_count:
            raise UnsupportedFeatureError(
                "The table has deletion vectors; Iceberg carries them from format 3: use formatVersion=3",
                ["deletionVectors"],
            )

    prior_ids = from_spark.ids_by_path(previous.schema) if previous else None
    converted = from_spark.iceberg_schema(
        snapshot.schema,
        format_version,
        prior_ids,
        int((previous.raw.get("last-column-id") if previous else 0) or 0),
    )
    # Delta data files do not hold partition columns; Iceberg readers fill them from the partition
    # values, but some (pyiceberg) first refuse a required field the file lacks: declare them optional
    partition_names = set(snapshot.metadata.partitionColumns)
    for f in converted.schema["fields"]:
        if f["name"] in partition_names:
            f["required"] = False
    schemas = [dict(s) for s in (previous.raw.get("schemas", []) if previous else [])]
    schema_id = next((s["schema-id"] for s in schemas if _same(s, converted.schema)), None)
    if schema_id is None:
        schema_id = max([s.get("schema-id", 0) for s in schemas], default=-1) + 1
        schemas.append({"schema-id": schema_id, **converted.schema})
    schema_json = {"schema-id": schema_id, **converted.schema}
    spec_fields, typed = _spec(snapshot, converted)
    specs = [dict(s) for s in (previous.raw.get("partition-specs", []) if previous else [])]
    spec_id = next((s["spec-id"] for s in specs if s.get("fields") == spec_fields), None)
    if spec_id is None:
        spec_id = max([s.get("spec-id", 0) for s in specs], default=-1) + 1
        specs.append({"spec-id": spec_id, "fields": spec_fields})

    snapshot_id = random.getrandbits(62) + 1
    sequence = (previous.last_sequence_number if previous else 0) + 1
    metadata_dir = f"{root}/metadata"
    storage.mkdirs(metadata_dir)
    prefix = int(
        snapshot.configuration.get("delta.dataSkippingStringPrefixLength", DEFAULT_STRING_PREFIX_LENGTH)
    )
    header = avro_encode.manifest_metadata(schema_json, spec_fields, spec_id, format_version, "data")
    delete_header = avro_encode.manifest_metadata(
        schema_json, spec_fields, spec_id, format_version, "deletes"
    )
    writer = manifest_writer.manifest_writer(
        root, metadata_dir, snapshot_id, format_version, typed, _stats_columns(snapshot.schema, converted),
        header, delete_header, prefix,
    )  # fmt: skip
    partition = F.col("partitionValues_parsed") if typed else F.lit(None).cast("struct<_:int>")
    tasks = files.select(
        canonical_path("path", root).alias("file_path"),
        F.col("size"),
        partition.alias("partition"),
        F.col("stats_parsed.numRecords").alias("record_count"),
        F.col("stats_parsed").alias("stats"),
        F.col("deletionVector").alias("deletion_vector"),
        F.col("baseRowId").alias("base_row_id"),
    )
    increment = None
    if previous is not None:
        increment = incremental.plan(
            spark, storage, snapshot, previous, converted, spec_id, format_version, root
        )
    previous_rows: list[dict[str, Any]] = []
    data_bytes = 0  # of the data files the kept and rewritten manifests list
    if increment is not None:
        spark.sparkContext.setJobDescription(
            f"deltaspark: rewriting Iceberg manifests of {root} with files changed since the last conversion"
        )
        previous_rows, data_bytes = incremental.rewrite(spark, increment, snapshot_id, sequence, metadata_dir)
        tasks = tasks.join(increment.touched, tasks["file_path"] == increment.touched["path"], "left_semi")
    spark.sparkContext.setJobDescription(
        f"deltaspark: Iceberg manifests for {root} at version {snapshot.version}"
    )
    written = [
        r.asDict(recursive=True)
        for r in tasks.repartition(parallelism(spark)).mapInArrow(writer, _spark_schema()).collect()
    ]
    list_rows = previous_rows + [
        {
            **r,
            "partition_spec_id": spec_id,
            "sequence_number": sequence,
            "min_sequence_number": sequence,
            "added_snapshot_id": snapshot_id,
            "existing_files_count": 0,
            "deleted_files_count": 0,
            "existing_rows_count": 0,
            "deleted_rows_count": 0,
            "first_row_id": None,
        }
        for r in written
    ]

    def total(content: int, kind: str) -> int:
        return sum(
            (r[f"added_{kind}_count"] or 0) + (r[f"existing_{kind}_count"] or 0)
            for r in list_rows
            if r["content"] == content
        )

    data_files, vectors, data_rows = total(0, "files"), total(1, "files"), total(0, "rows")
    removed = sum(
        r["deleted_files_count"] or 0 for r in previous_rows if r["added_snapshot_id"] == snapshot_id
    )
    data_bytes += sum(r["data_bytes"] or 0 for r in written)
    _validate(files, root, snapshot.version, data_files, data_rows, total(1, "rows"), data_bytes)
    log.info(
        "Iceberg export of %s (%s): %d data files, %d deletion vectors, %d manifests (%d new)",
        root,
        "incremental" if increment is not None else "full",
        data_files,
        vectors,
        len(list_rows),
        len(written) + sum(1 for r in previous_rows if r["added_snapshot_id"] == snapshot_id),
    )

    manifest_list = f"{metadata_dir}/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
    list_meta = {
        "snapshot-id": str(snapshot_id),
        "sequence-number": str(sequence),
        "format-version": str(format_version),
    }
    if previous is not None and previous.current_snapshot_id is not None:
        list_meta["parent-snapshot-id"] = str(previous.current_snapshot_id)
    _write_bytes(
        manifest_list,
        avro_encode.avro_bytes(avro_encode.manifest_list_schema(format_version), list_rows, list_meta),
    )

    now = int(time.time() * 1000)
    timestamp = max(snapshot.timestampMs, (previous.raw.get("last-updated-ms", 0) if previous else 0) + 1)
    summary = {
        "operation": "overwrite" if previous is not None and (increment is None or removed) else "append",
        DELTA_VERSION: str(snapshot.version),
        incremental.DATA_BYTES: str(data_bytes),
        "total-data-files": str(data_files),
        "total-delete-files": str(vectors),
        "total-records": str(data_rows),
        "total-position-deletes": str(total(1, "rows")),
        "total-equality-deletes": "0",
    }
    new_snapshot: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": timestamp,
        "manifest-list": manifest_list,
        "summary": summary,
        "schema-id": schema_id,
    }
    if previous is not None and previous.current_snapshot_id is not None:
        new_snapshot["parent-snapshot-id"] = previous.current_snapshot_id
    next_row_id = None
    if format_version >= 3:
        mark = snapshot.rowIdHighWaterMark
        next_row_id = max(
            (mark + 1) if mark is not None else 0, (previous.next_row_id or 0) if previous else 0
        )
        new_snapshot["first-row-id"] = next_row_id
        new_snapshot["added-rows"] = 0  # every data file carries its Delta base row id
    raw = previous.raw if previous else {}
    properties = {
        **dict(raw.get("properties", {})),
        DELTA_VERSION: str(snapshot.version),
        DELTA_TIMESTAMP: str(snapshot.timestampMs),
        "schema.name-mapping.default": json.dumps(
            _kept_mappings(
                _name_mapping(converted),
                json.loads(raw.get("properties", {}).get("schema.name-mapping.default") or "[]"),
            )
        ),
    }
    version = (_metadata_version(previous.metadata_file) if previous else 0) + 1
    location = f"{metadata_dir}/v{version}.metadata.json"
    metadata = {
        "format-version": format_version,
        "table-uuid": raw.get("table-uuid") or str(uuid.uuid4()),
        "location": root,
        "last-sequence-number": sequence,
        "last-updated-ms": max(now, timestamp),
        "last-column-id": converted.last_column_id,
        "current-schema-id": schema_id,
        "schemas": schemas,
        "default-spec-id": spec_id,
        "partition-specs": specs,
        "last-partition-id": max(
            [PARTITION_FIELD_BASE - 1] + [f["field-id"] for s in specs for f in s["fields"]]
        ),
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": properties,
        "current-snapshot-id": snapshot_id,
        "refs": {**dict(raw.get("refs", {})), "main": {"snapshot-id": snapshot_id, "type": "branch"}},
        "snapshots": [*raw.get("snapshots", []), new_snapshot],
        "snapshot-log": [
            *raw.get("snapshot-log", []),
            {"timestamp-ms": timestamp, "snapshot-id": snapshot_id},
        ],
        "metadata-log": [
            *raw.get("metadata-log", []),
            *(
                [{"timestamp-ms": raw.get("last-updated-ms", now), "metadata-file": previous.metadata_file}]
                if previous
                else []
            ),
        ],
    }
    if next_row_id is not None:
        metadata["next-row-id"] = next_row_id
    try:
        storage.write_text(location, json.dumps(metadata, indent=1), overwrite=False)
    except Exception as exc:
        if storage.exists(location):
            raise IcebergCommitConflictError(
                f"Another conversion wrote {location} first; convert again to describe the latest version"
            ) from exc
        raise
    storage.write_text(f"{metadata_dir}/version-hint.text", str(version), overwrite=True)
    return IcebergExport(
        location, snapshot_id, snapshot.version, data_files, vectors, True, increment is not None
    )


def _validate(
    files: Any, root: str, version: int, data_files: int, rows: int, deleted: int, data_bytes: int
) -> None:
    """Before committing, check the manifests' own counts against the Delta snapshot, as UniForm
    does: live files, their bytes, their rows (when every file has `numRecords`) and the rows
    deletion vectors remove. A mismatch commits nothing."""
    expected = files.agg(
        F.count(F.lit(1)).alias("files"),
        F.sum("stats_parsed.numRecords").alias("rows"),
        F.count("stats_parsed.numRecords").alias("with_rows"),
        F.coalesce(F.sum("deletionVector.cardinality"), F.lit(0)).alias("deleted"),
        F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
    ).first()
    problems = []
    if expected["files"] != data_files:
        problems.append(f"{data_files} data files, the Delta snapshot has {expected['files']}")
    if expected["with_rows"] == expected["files"] and (expected["rows"] or 0) != rows:
        problems.append(f"{rows} rows, the Delta statistics count {expected['rows']}")
    if expected["bytes"] != data_bytes:
        problems.append(f"{data_bytes} bytes of data files, the Delta snapshot has {expected['bytes']}")
    if expected["deleted"] != deleted:
        problems.append(f"{deleted} deleted rows, the deletion vectors hold {expected['deleted']}")
    if problems:
        raise IcebergExportMismatchError(
            f"The Iceberg metadata for {root} at Delta version {version} would list "
            + "; ".join(problems)
            + ". Nothing was committed."
        )


def _name_mapping(converted: from_spark.IcebergSchema) -> list[dict[str, Any]]:
    mapping = list(converted.name_mapping)
    name, field_id = CHANGE_TYPE
    if all(name not in entry["names"] for entry in mapping):
        mapping.append({"field-id": field_id, "names": [name]})
    return mapping


def _kept_mappings(current: list[dict[str, Any]], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The name mapping with the previous one's entries for fields no longer in the schema: files
    of earlier snapshots (time travel) still hold those columns, and readers resolving them through
    the mapping (pyiceberg) fail on a column the mapping does not name. A name the current schema
    uses again at that level is left to the current field."""
    by_id = {e.get("field-id"): e for e in current if e.get("field-id") is not None}
    used = {n for e in current for n in e.get("names", [])}
    out = [dict(e) for e in current]
    index = {e.get("field-id"): i for i, e in enumerate(out) if e.get("field-id") is not None}
    for old in previous:
        field_id = old.get("field-id")
        if field_id is None:
            continue
        if field_id in by_id:
            if old.get("fields"):
                merged = _kept_mappings(by_id[field_id].get("fields") or [], old["fields"])
                out[index[field_id]] = {**out[index[field_id]], "fields": merged}
            continue
        names = [n for n in old.get("names", []) if n not in used]
        if names:
            out.append({**old, "names": names})
            used.update(names)
    return out


def _metadata_version(metadata_file: str) -> int:
    name = metadata_file.rsplit("/", 1)[-1]
    if name.startswith("v") and ".metadata.json" in name:
        return int(name[1 : name.index(".")])
    return 0


def _write_bytes(location: str, data: bytes) -> None:
    from deltaspark.file_io import open_file

    filesystem, path = open_file(location)
    with filesystem.open_output_stream(path) as out:
        out.write(data)


def _spark_schema() -> T.StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(manifest_writer.MANIFEST_ROW)
