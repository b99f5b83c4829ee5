"""Executor-side reading of Iceberg data and delete files (Parquet, ORC) with pyarrow.

Columns are selected by field id (Parquet's `PARQUET:field_id`), else through the table's name
mapping (`schema.name-mapping.default`) for files written without ids (migrated Hive tables, ORC).
A field the file does not have is, in the spec's order: the identity partition value of the file's
partition tuple, the field's `initial-default`, or null. Rows are removed by the file's position
deletes and deletion vector before they leave the task. Runs inside `mapInArrow`; the functions here
return the task functions.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaspark.features import dv_codec
from deltaspark.file_io import carry_settings, open_file
from deltaspark.iceberg import puffin
from deltaspark.iceberg.relocation import PathMap, match_key
from deltaspark.iceberg.types import from_json
from deltaspark.read.arrow_file_reader import FIELD_ID

ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_FIELD_ID = 2147483539
POS_DELETE_PATH_ID = 2147483546
POS_DELETE_POS_ID = 2147483545
ORC_FIELD_ID = b"iceberg.id"  # Iceberg's ORC writers put field ids in this type attribute


class IcebergReadError(Exception):
    """Raised on executors; the message starts with `deltaspark:` and names the file."""


# ---- opening files ----------------------------------------------------------------------------
def _open(path: str, file_format: str) -> tuple[Any, int]:
    """(reader, row count): a pyarrow ParquetFile or ORCFile."""
    try:
        filesystem, local = open_file(path)
        if file_format == "ORC":
            from pyarrow import orc

            handle = orc.ORCFile(filesystem.open_input_file(local))
            return handle, handle.nrows
        if file_format != "PARQUET":
            raise IcebergReadError(
                f"deltaspark: Iceberg data file {path} is {file_format}; Parquet and ORC are read"
            )
        import pyarrow.parquet as pq

        handle = pq.ParquetFile(filesystem.open_input_file(local))
        return handle, handle.metadata.num_rows
    except IcebergReadError:
        raise
    except FileNotFoundError as exc:
        raise IcebergReadError(f"deltaspark: missing Iceberg data file {path}: {exc}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise IcebergReadError(f"deltaspark: corrupt Iceberg data file {path}: {exc}") from exc


def _read_columns(handle: Any, names: list[str], path: str) -> pa.Table:
    try:
        return handle.read(columns=names)
    except (OSError, pa.ArrowException) as exc:
        raise IcebergReadError(f"deltaspark: corrupt Iceberg data file {path}: {exc}") from exc


def _file_schema(handle: Any) -> pa.Schema:
    return handle.schema_arrow if hasattr(handle, "schema_arrow") else handle.schema


# ---- field resolution --------------------------------------------------------------------------
def _mapped_id(name: str, mapping: list[dict[str, Any]] | None) -> tuple[int | None, Any]:
    for entry in mapping or []:
        if name in (entry.get("names") or []):
            return entry.get("field-id"), entry.get("fields")
    return None, None


def stored_id(field: pa.Field) -> int | None:
    """The field id a writer stored with the column (Parquet field id or ORC attribute)."""
    if field.metadata:
        for key in (FIELD_ID, ORC_FIELD_ID):
            if key in field.metadata:
                return int(field.metadata[key])
    return None


def _ids_of(fields: list[pa.Field], mapping: list[dict[str, Any]] | None) -> dict[int, tuple[int, Any]]:
    """Field id -> (index in `fields`, name-mapping entries of its children)."""
    out: dict[int, tuple[int, Any]] = {}
    for index, f in enumerate(fields):
        mapped_id, children = _mapped_id(f.name, mapping)
        field_id = stored_id(f)
        if field_id is not None:
            out[field_id] = (index, children)
        elif mapped_id is not None:
            out[int(mapped_id)] = (index, children)
    return out


class _Context:
    def __init__(self, count: int, partition_values: dict[int, Any], path: str) -> None:
        self.count = count
        self.partition_values = partition_values  # source field id -> identity partition value
        self.path = path


def _missing(field: dict[str, Any], target: pa.DataType, ctx: _Context) -> pa.Array:
    """A field the file lacks: its identity partition value, else its `initial-default`, else null."""
    field_id = int(field["id"])
    if field_id in ctx.partition_values:
        value = from_json(ctx.partition_values[field_id], field["type"])
    else:
        value = from_json(field.get("initial-default"), field["type"])
    if value is None:
        return pa.nulls(ctx.count, target)
    return pa.array([value] * ctx.count, type=target)


def _primitive(array: pa.Array, iceberg_type: Any, target: pa.DataType, ctx: _Context) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if iceberg_type == "uuid":
        import uuid as _uuid

        values = [
            None if v is None else str(_uuid.UUID(bytes=v)) for v in array.cast(pa.binary()).to_pylist()
        ]
        return pa.array(values, pa.string())
    if iceberg_type == "time":
        if pa.types.is_time(array.type):
            unit = array.type.unit
            raw = array.cast(pa.int64() if array.type.bit_width == 64 else pa.int32()).cast(pa.int64())
            factor = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": None}[unit]
            return pc.divide(raw, 1000) if factor is None else pc.multiply(raw, factor)
        return array.cast(pa.int64())
    if array.type == target:
        return array
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(array.type):
        return array.cast(target, safe=False)
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise IcebergReadError(
            f"deltaspark: Iceberg data file {ctx.path}: column of type {array.type} cannot be read as "
            f"{iceberg_type}: {exc}"
        ) from exc


def _project(
    array: pa.Array, iceberg_type: Any, mapping: Any, target: pa.DataType, ctx: _Context
) -> pa.Array:
    """A stored value in the table's type: struct fields by id, renamed and reordered."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not isinstance(iceberg_type, dict):
        if iceberg_type == "variant":
            from deltaspark.read.arrow_file_reader import _conform

            return _conform(array, {"kind": "struct", "variant": True}, target)
        return _primitive(array, iceberg_type, target, ctx)
    kind = iceberg_type["type"]
    if kind == "struct":
        file_fields = list(array.type)
        ids = _ids_of(file_fields, mapping)
        children = []
        for f, target_field in zip(iceberg_type["fields"], target, strict=True):
            found = ids.get(int(f["id"]))
            if found is None:
                children.append(_missing(f, target_field.type, _Context(len(array), {}, ctx.path)))
            else:
                index, child_mapping = found
                children.append(
                    _project(array.field(index), f["type"], child_mapping, target_field.type, ctx)
                )
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if kind == "list":
        element_mapping = _mapped_id("element", mapping)[1]
        values = _project(array.values, iceberg_type["element"], element_mapping, target.value_type, ctx)
        offsets = array.offsets
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=array.is_null())
    if kind == "map":
        keys = _project(array.keys, iceberg_type["key"], _mapped_id("key", mapping)[1], target.key_type, ctx)
        items = _project(
            array.items, iceberg_type["value"], _mapped_id("value", mapping)[1], target.item_type, ctx
        )
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=array.is_null())
    raise IcebergReadError(f"deltaspark: unknown Iceberg type {kind} in {ctx.path}")


# ---- deletes within one file ---------------------------------------------------------------------
def _dv_positions(row: dict[str, Any]) -> Any:
    """The deletion vector's positions (a BitMap64), checked against its length, CRC and cardinality."""
    location, offset, length = row["dv_path"], row.get("dv_offset") or 0, row.get("dv_length")
    where = f"deletion vector in {location} at offset {offset}"
    try:
        filesystem, local = open_file(location)
        with filesystem.open_input_file(local) as handle:
            if length is None:
                length = handle.size() - offset
            handle.seek(offset)
            blob = handle.read(length)
        if len(blob) != length:
            raise dv_codec.DeletionVectorError(f"{where}: truncated ({len(blob)} of {length} bytes)")
        bitmap = puffin.deletion_vector(blob, where)
    except dv_codec.DeletionVectorError as exc:
        raise IcebergReadError(f"deltaspark: data file {row['file_path']}: {exc}") from exc
    except FileNotFoundError as exc:
        raise IcebergReadError(f"deltaspark: missing deletion vector file {location}: {exc}") from exc
    except OSError as exc:
        raise IcebergReadError(f"deltaspark: cannot read deletion vector file {location}: {exc}") from exc
    expected = row.get("dv_cardinality")
    if expected is not None and len(bitmap) != expected:
        raise IcebergReadError(
            f"deltaspark: data file {row['file_path']}: {where} holds {len(bitmap)} positions, its "
            f"manifest entry says {expected}"
        )
    return bitmap


def _keep_mask(row: dict[str, Any], positions: pa.Array) -> pa.Array | None:
    """Which rows (at `positions`) survive the deletion vector or position deletes; None: all."""
    if row.get("dv_path"):
        deleted = pa.array(_dv_positions(row).to_array(), pa.int64())
    elif row.get("delete_positions"):
        deleted = pa.array(row["delete_positions"], pa.int64())
    else:
        return None
    if len(deleted) == 0:
        return None
    return pc.invert(pc.is_in(positions, value_set=deleted))


def row_counter():  # noqa: ANN201 - a mapInArrow function
    """Input rows: data files (`file_path`, `record_count`, `pos_deleted`: rows removed by position
    deletes, and the applicable deletion vector's `dv_*`, null when none); output per batch: (`rows`,
    `deleted`). A file with a vector counts the vector's positions below its `record_count` (position
    deletes do not apply to it); the vector is read and checked (length, CRC, cardinality) as it is
    when rows are read."""

    def count(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            rows = pc.sum(batch.column("record_count")).as_py() or 0
            with_vector = pc.is_valid(batch.column("dv_path"))
            deleted = pc.sum(pc.if_else(with_vector, 0, batch.column("pos_deleted"))).as_py() or 0
            for row in batch.filter(with_vector).to_pylist():
                bitmap = _dv_positions(row)
                records = row["record_count"]
                deleted += bitmap.rank(records - 1) if records > 0 else 0
            yield pa.RecordBatch.from_pydict({"rows": [rows], "deleted": [deleted]})

    return carry_settings(count)


# ---- the task function ---------------------------------------------------------------------------
def _identity_values(row: dict[str, Any], identity: dict[str, dict[str, int]]) -> dict[int, Any]:
    """Source field id -> JSON partition value, for the identity fields of the file's spec."""
    fields = identity.get(str(row.get("spec_id")), {})
    values = json.loads(row.get("partition") or "{}")
    return {int(source): values[str(pid)] for pid, source in fields.items() if str(pid) in values}


def data_file_reader(
    schema: dict[str, Any],
    target: pa.Schema,
    mapping: list[dict[str, Any]] | None,
    identity: dict[str, dict[str, int]],
    extras: list[str],
    required_ids: list[int] | None = None,
):  # noqa: ANN201 - a mapInArrow function
    """Reads the data file named by each input row, yielding rows in `target` (the table's columns,
    then `extras`: `_row_id`, `_last_updated_sequence_number`, `_spec_id`, `_partition`,
    `_data_seq`, `_file`, `_pos`)."""

    def read(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            for row in batch.to_pylist():
                yield from _read_one(row, schema, target, mapping, identity, extras, required_ids)

    return carry_settings(read)


def _materialized_or(stored: Any, inherited: pa.Array) -> pa.Array:
    """A row-lineage column: the value the file stores where it is not null, else the inherited one."""
    if stored is None:
        return inherited
    return pc.coalesce(stored.combine_chunks().cast(pa.int64()), inherited)


def _read_one(row, schema, target, mapping, identity, extras, required_ids):  # noqa: ANN001, ANN202
    path, file_format = row["file_path"], (row.get("file_format") or "PARQUET").upper()
    handle, count = _open(path, file_format)
    # A data file whose row count differs from its manifest entry is not the file that was
    # committed. Delete files are not checked: Impala records wrong counts for equality deletes
    # (conformance table impala-iceberg_v2_delete_equality_nulls: 1 recorded, 2 stored).
    expected = row.get("record_count") if required_ids is None else None
    if expected is not None and expected != count:
        raise IcebergReadError(
            f"deltaspark: Iceberg data file {path} has {count} rows; its manifest entry says {expected}"
        )
    file_fields = list(_file_schema(handle))
    if mapping is None and file_fields and all(stored_id(f) is None for f in file_fields):
        # Without ids or a name mapping no column can be matched; reading them as NULL (as the
        # spec's last rule would) hides the problem, so the file is refused by name.
        raise IcebergReadError(
            f"deltaspark: Iceberg data file {path} has no field ids and the table has no "
            "schema.name-mapping.default to resolve its columns"
        )
    ids = _ids_of(file_fields, mapping)
    wanted = {int(f["id"]) for f in schema["fields"]}
    if "_row_id" in extras:
        wanted.add(ROW_ID_FIELD_ID)
    if "_last_updated_sequence_number" in extras:
        wanted.add(LAST_UPDATED_FIELD_ID)
    for field_id in required_ids or []:
        if field_id not in ids:
            raise IcebergReadError(
                f"deltaspark: equality delete file {path} lacks equality field id {field_id}"
            )
    names = sorted({file_fields[ids[i][0]].name for i in wanted if i in ids})
    table = _read_columns(handle, names, path) if names else None
    ctx = _Context(count, _identity_values(row, identity), path)

    def column(field_id: int) -> pa.Array | None:
        if field_id not in ids or table is None:
            return None
        return table.column(file_fields[ids[field_id][0]].name)

    arrays = []
    for f, target_field in zip(schema["fields"], target, strict=False):
        stored = column(int(f["id"]))
        if stored is None:
            arrays.append(_missing(f, target_field.type, ctx))
        else:
            arrays.append(_project(stored, f["type"], ids[int(f["id"])][1], target_field.type, ctx))
    positions = pa.array(np.arange(count, dtype=np.int64))
    for name in extras:
        if name == "_row_id":
            first = row.get("first_row_id")
            inherited = pc.add(positions, first) if first is not None else pa.nulls(count, pa.int64())
            arrays.append(_materialized_or(column(ROW_ID_FIELD_ID), inherited))
        elif name == "_last_updated_sequence_number":
            inherited = pa.array([row.get("sequence_number")] * count, pa.int64())
            arrays.append(_materialized_or(column(LAST_UPDATED_FIELD_ID), inherited))
        elif name == "_spec_id":
            arrays.append(pa.array([row.get("spec_id")] * count, pa.int32()))
        elif name == "_partition":
            arrays.append(pa.array([row.get("partition")] * count, pa.string()))
        elif name == "_data_seq":
            arrays.append(pa.array([row.get("sequence_number")] * count, pa.int64()))
        elif name == "_file":
            arrays.append(pa.array([path] * count, pa.string()))
        elif name == "_pos":
            arrays.append(positions)
        else:
            raise ValueError(name)
    out = pa.Table.from_arrays(arrays, schema=target)
    keep = _keep_mask(row, positions)
    if keep is not None:
        out = out.filter(keep)
    yield from out.to_batches(max_chunksize=65536)


POSITION_DELETE_SCHEMA = pa.schema(
    [("data_key", pa.string()), ("pos", pa.int64()), ("delete_seq", pa.int64())]
)


def position_delete_reader(paths: PathMap):  # noqa: ANN201 - a mapInArrow function
    """Input rows: position delete files (`file_path`, `file_format`, `sequence_number`); output:
    (`data_key`, `pos`, `delete_seq`) with the data file's path relocated and reduced to its match key.
    Rows with a null `file_path` (invalid; written by old Impala) are skipped, as Impala does."""

    def read(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            for row in batch.to_pylist():
                path, file_format = row["file_path"], (row.get("file_format") or "PARQUET").upper()
                handle, _ = _open(path, file_format)
                fields = list(_file_schema(handle))
                by_id = {stored_id(f): f.name for f in fields if stored_id(f) is not None}
                path_col = by_id.get(POS_DELETE_PATH_ID, "file_path")
                pos_col = by_id.get(POS_DELETE_POS_ID, "pos")
                if path_col not in [f.name for f in fields] or pos_col not in [f.name for f in fields]:
                    raise IcebergReadError(
                        f"deltaspark: position delete file {path} has no file_path/pos columns"
                    )
                table = _read_columns(handle, [path_col, pos_col], path)
                files = table.column(path_col).combine_chunks()
                if pa.types.is_dictionary(files.type):
                    files = files.dictionary_decode()
                unique = {v: match_key(paths.apply(v)) for v in pc.unique(files.drop_null()).to_pylist()}
                keys = pa.array([None if v is None else unique[v] for v in files.to_pylist()], pa.string())
                out = pa.Table.from_arrays(
                    [
                        keys,
                        table.column(pos_col).combine_chunks().cast(pa.int64()),
                        pa.array([row["sequence_number"]] * table.num_rows, pa.int64()),
                    ],
                    schema=POSITION_DELETE_SCHEMA,
                ).filter(pc.is_valid(keys))
                yield from out.to_batches(max_chunksize=65536)

    return carry_settings(read)
