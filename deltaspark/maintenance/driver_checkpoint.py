"""The checkpoint of a small state, written on the driver without a Spark job.

A streaming sink or a pipeline commits often, and every `delta.checkpointInterval`-th commit writes
a checkpoint. As a Spark job that costs about a second even for a table of a hundred files (most of
it building the write's plans, then the job). When the state was replayed on the driver
(`log.driver_replay`), its rows are already here: they are shaped into the columns and types the
Spark route writes (`checkpoint_writer.checkpoint_columns`), with the same values (file actions
with `dataChange` false, tombstones without `stats` and `tags` and only those not expired, the
newest txn per application after `delta.setTransactionRetentionDuration`, the live domains), and
written by pyarrow into the checkpoint's staging directory. From there the Spark route's own code
reads the file back, checks what it holds and moves it into place.

Only what the two routes write alike is written here: a classic single-file checkpoint with
statistics as JSON (the default), compressed with zstd, snappy, gzip or nothing. A V2 checkpoint,
`delta.checkpoint.writeStatsAsStruct`, another codec, a state the driver did not replay, or a txn
or domain it could not read exactly as Spark would (`FileState.newest` is `None`): the Spark route.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from deltaspark.features.durations import parse_interval_ms
from deltaspark.log.typed_json import UnclearError, typed
from deltaspark.storage import join_path

if TYPE_CHECKING:
    import pyarrow as pa

    from deltaspark.log.driver_replay import FileState
    from deltaspark.snapshot import Snapshot

log = logging.getLogger(__name__)

# Spark's codec names and pyarrow's for the same parquet compression (Spark's `lz4` is Hadoop's
# framing, which pyarrow does not write: left to Spark).
CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none"}
# The footer entry Spark's parquet reader takes the columns' Spark types from.
SPARK_SCHEMA_KEY = "org.apache.spark.sql.parquet.row.metadata"


def arrow_type(data_type: DataType) -> pa.DataType:
    """The Arrow type pyarrow writes as Spark writes `data_type` (the checkpoint's types only)."""
    import pyarrow as pa

    if isinstance(data_type, StringType):
        return pa.string()
    if isinstance(data_type, LongType):
        return pa.int64()
    if isinstance(data_type, IntegerType):
        return pa.int32()
    if isinstance(data_type, BooleanType):
        return pa.bool_()
    if isinstance(data_type, ArrayType):
        return pa.list_(pa.field("element", arrow_type(data_type.elementType)))
    if isinstance(data_type, MapType):
        return pa.map_(arrow_type(data_type.keyType), arrow_type(data_type.valueType))
    if isinstance(data_type, StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType)) for f in data_type.fields])
    raise UnclearError  # not a type of the checkpoint's columns without parsed statistics


def _arrow_value(value: Any, data_type: DataType) -> Any:
    """A typed value (`typed_json.typed`) as pyarrow takes it: maps as lists of pairs."""
    if value is None:
        return None
    if isinstance(data_type, MapType):
        return [(k, _arrow_value(v, data_type.valueType)) for k, v in value.items()]
    if isinstance(data_type, StructType):
        return {f.name: _arrow_value(value.get(f.name), f.dataType) for f in data_type.fields}
    if isinstance(data_type, ArrayType):
        return [_arrow_value(v, data_type.elementType) for v in value]
    return value


def _field_type(columns: StructType, name: str) -> StructType:
    data_type = columns[name].dataType
    assert isinstance(data_type, StructType)
    return data_type


def _file_actions(state: FileState, columns: StructType, cutoff_ms: int) -> tuple[list[dict], int, int]:
    """The live files and unexpired tombstones as checkpoint rows, and how many of each."""
    add_type, remove_type = _field_type(columns, "add"), _field_type(columns, "remove")
    rows: list[dict[str, Any]] = []
    adds = removes = 0
    for _, is_add, action in state.entries.values():
        value = json.loads(action)
        if not is_add and (value.get("deletionTimestamp") or 0) <= cutoff_ms:
            continue  # expired, as `checkpoint_writer._checkpointed_rows` leaves it out
        value["dataChange"] = False  # as Spark's Delta writes checkpoints
        if is_add:
            adds += 1
            rows.append({"add": _arrow_value(value, add_type)})
        else:
            removes += 1
            rows.append({"remove": _arrow_value(value, remove_type)})
    return rows, adds, removes


def _typed_value(value: Any, data_type: DataType) -> Any:
    """A Python value as Spark's `from_json` of its JSON reads it (the Spark route's literal)."""
    return _arrow_value(typed(json.loads(json.dumps(value)), data_type), data_type)


def _non_file_actions(
    snapshot: Snapshot, state: FileState, columns: StructType, protocol: dict
) -> list[dict]:
    """protocol, metaData, the newest txn per appId (after the retention) and the live domains."""
    assert state.newest is not None
    rows = [
        {"protocol": _typed_value(protocol, columns["protocol"].dataType)},
        {"metaData": _typed_value(snapshot.metadata.asDict(), columns["metaData"].dataType)},
    ]
    retention = snapshot.metadata.configuration.get("delta.setTransactionRetentionDuration")
    txn_cutoff = int(time.time() * 1000) - parse_interval_ms(retention) if retention else None
    for (kind, _), (_, value) in sorted(state.newest.items()):
        if kind == "txn":
            updated = value.get("lastUpdated")
            if txn_cutoff is not None and (updated is None or updated <= txn_cutoff):
                continue
            rows.append({"txn": _arrow_value(value, columns["txn"].dataType)})
        elif not value.get("removed"):
            value = {**value, "removed": False}
            rows.append({"domainMetadata": _arrow_value(value, columns["domainMetadata"].dataType)})
    return rows


def write(
    snapshot: Snapshot,
    state: FileState,
    columns: StructType,
    protocol: dict,
    codec: str,
    zstd_level: int,
    directory: str,
) -> dict[str, int] | None:
    """Write the checkpoint of `state` in `columns` into `directory` as Spark's writer would name
    it; the adds and tombstones written (`{"add": n, "remove": m}`), or `None` (nothing written)
    when this state is for the Spark route."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if state.newest is None or codec not in CODECS:
        return None
    try:
        schema = pa.schema([pa.field(f.name, arrow_type(f.dataType)) for f in columns.fields])
        file_rows, adds, removes = _file_actions(state, columns, snapshot.tombstoneRetentionCutoffMs())
        rows = file_rows + _non_file_actions(snapshot, state, columns, protocol)
    except UnclearError:
        return None
    log.info("Writing the checkpoint of version %d on the driver", snapshot.version)
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    options = {"compression_level": zstd_level} if codec == "zstd" else {}
    # As the Spark route's writer: no dictionary pages, Spark's types in the footer, no Arrow schema.
    with pq.ParquetWriter(
        sink, schema, compression=CODECS[codec], use_dictionary=False, store_schema=False, **options
    ) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({SPARK_SCHEMA_KEY: columns.json()})
    suffix = "" if codec == "uncompressed" else f".{codec}"
    name = f"part-00000-{uuid.uuid4()}-c000{suffix}.parquet"
    snapshot._storage.write_bytes(join_path(directory, name), sink.getvalue().to_pybytes())
    return {"add": adds, "remove": removes}
