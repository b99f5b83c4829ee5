"""Executor-side reading of data files with pyarrow, for the distributed read path.

Runs inside `mapInArrow` tasks: each input row names one data file (plus its partition values,
deletion vector and row-tracking fields); each file is opened through `pyarrow.fs`, its columns
resolved by physical name or parquet field id, widened to the table's types, rows removed by the
deletion vector, and emitted as Arrow batches in the table's logical schema. Only pyarrow and
pyroaring are needed on the executors (this module is shipped by value).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaspark.errors import DeltaSparkError
from deltaspark.features import dv_codec
from deltaspark.file_io import carry_settings, open_file

FIELD_ID = b"PARQUET:field_id"


def _child(array: Any, arrow_type: Any, name: str | None, field_id: int | None) -> Any:
    """The child of a struct array (or table column) by field id, else by name; None if absent."""
    for index, field in enumerate(list(arrow_type)):
        if field_id is not None:
            matches = bool(field.metadata) and field.metadata.get(FIELD_ID) == str(field_id).encode()
        else:
            matches = field.name == name
        if matches:
            return array.column(index) if isinstance(array, pa.Table) else array.field(index)
    return None


def _conform(array: Any, plan: dict[str, Any], target: Any) -> Any:
    """`array` (as stored in the file) in the logical `target` Arrow type, following `plan`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = plan["kind"]
    if kind == "struct":
        if plan.get("variant"):
            names = {f.name for f in array.type}
            if "typed_value" in names:
                raise ValueError("shredded variant columns need Spark's own parquet reader")
            value, metadata = array.field("value"), array.field("metadata")
            return pa.StructArray.from_arrays(
                [value.cast(target.field(0).type), metadata.cast(target.field(1).type)],
                fields=list(target),
                mask=array.is_null(),
            )
        children = []
        for child_plan, target_field in zip(plan["fields"], target, strict=True):
            raw = _child(array, array.type, child_plan["physical"], child_plan.get("id"))
            if raw is None:
                children.append(pa.nulls(len(array), target_field.type))
            else:
                children.append(_conform(raw, child_plan["type"], target_field.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if kind == "array":
        values = _conform(array.values, plan["element"], target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=array.is_null())
    if kind == "map":
        keys = _conform(array.keys, plan["key"], target.key_type)
        items = _conform(array.items, plan["value"], target.item_type)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=array.is_null())
    if array.type == target:
        return array
    return array.cast(target)


def _deleted(fs_for: Any, row: dict[str, Any], table_root: str) -> set[int]:
    dv = row.get("deletionVector")
    if not dv:
        return set()
    location = None
    where = dv_codec.describe(dv["storageType"], dv["pathOrInlineDv"], None)
    try:
        record = None
        if dv["storageType"] in ("u", "p"):
            if dv["storageType"] == "u":
                location = table_root.rstrip("/") + "/" + dv_codec.uuid_relative_path(dv["pathOrInlineDv"])
            else:
                location = unquote(dv["pathOrInlineDv"])
            where = dv_codec.describe(dv["storageType"], dv["pathOrInlineDv"], location)
            offset = dv.get("offset") or 0
            if offset >= 0 and dv.get("sizeInBytes") is not None:
                filesystem, path = fs_for(location)
                with filesystem.open_input_file(path) as handle:
                    handle.seek(offset)
                    record = handle.read(dv["sizeInBytes"] + 8)
        bitmap = dv_codec.decode_descriptor(
            dv["storageType"],
            dv["pathOrInlineDv"],
            dv.get("offset"),
            dv.get("sizeInBytes"),
            dv.get("cardinality"),
            record,
            where,
        )
    except Exception as exc:
        raise dv_codec.contextualize(exc, row["path"], where) from exc
    return set(bitmap)


def _read_data_file(location: str) -> Any:
    """A data file as an Arrow table; a missing or unreadable file fails naming it."""
    try:
        filesystem, path = open_file(location)
        return pq.read_table(path, filesystem=filesystem)
    except FileNotFoundError as exc:
        raise DeltaSparkError(f"deltaspark: missing data file {location}: {exc}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise DeltaSparkError(f"deltaspark: corrupt data file {location}: {exc}") from exc


def make_reader(columns: list[dict[str, Any]], target: Any, table_root: str):  # noqa: ANN201
    """The `mapInArrow` function reading the files listed in its input batches."""

    def read(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            yield from read_files(batch.to_pylist(), columns, target, table_root)

    return carry_settings(read)


def read_files(rows: list[dict[str, Any]], columns: list[dict[str, Any]], target: Any, table_root: str):  # noqa: ANN201
    """Arrow batches in `target`'s schema of the data files `rows` name (path, typed partition
    values, deletion vector, row tracking fields), each file's deleted rows left out."""
    for row in rows:
        table = _read_data_file(row["path"])
        count = table.num_rows
        deleted = _deleted(open_file, row, table_root)
        keep = None
        if deleted:
            keep = pa.array([i not in deleted for i in range(count)], pa.bool_())
        arrays = []
        for spec, field in zip(columns, target, strict=True):
            arrays.append(_column(spec, field, table, row, count))
        out = pa.Table.from_arrays(arrays, schema=target)
        if keep is not None:
            out = out.filter(keep)
        yield from out.to_batches()


def _column(spec: dict[str, Any], field: Any, table: Any, row: dict[str, Any], count: int) -> Any:
    kind = spec["kind"]
    if kind == "partition":
        value = (row.get("partitionValues_parsed") or {}).get(spec["name"])
        return pa.array([value] * count, type=field.type)
    if kind == "row_index":
        return pa.array(range(count), pa.int64())
    if kind == "carry":
        return pa.array([row.get(spec["name"])] * count, type=field.type)
    if kind == "data":
        raw = _child(table, table.schema, spec["physical"], spec.get("id"))
        if raw is None:
            return pa.nulls(count, field.type)
        return _conform(raw, spec["type"], field.type)
    if kind == "row_tracking":
        index = pa.array(range(count), pa.int64())
        base, version = row.get("baseRowId"), row.get("defaultRowCommitVersion")
        row_id = (
            pc.add(index, pa.scalar(base, pa.int64())) if base is not None else pa.nulls(count, pa.int64())
        )
        commit = pa.array([version] * count, pa.int64())
        if spec.get("row_id_column"):
            materialized = _child(table, table.schema, spec["row_id_column"], None)
            if materialized is not None:
                row_id = pc.coalesce(materialized.combine_chunks().cast(pa.int64()), row_id)
        if spec.get("commit_column"):
            materialized = _child(table, table.schema, spec["commit_column"], None)
            if materialized is not None:
                commit = pc.coalesce(materialized.combine_chunks().cast(pa.int64()), commit)
        return pa.StructArray.from_arrays([row_id, commit], fields=list(field.type))
    raise ValueError(kind)


def read_change_files(
    tasks: list[dict[str, Any]], columns: list[dict[str, Any]], target: Any, table_root: str
):  # noqa: ANN201
    """Arrow batches of a change data feed (`target`: the table's columns, then `_change_type`,
    `_commit_version`, `_commit_timestamp`). A task is a commit's CDC file (`cdc`: its rows as
    written, `_change_type` among them) or a data file the commit added and/or removed: the rows
    present after it (an add, minus its deletion vector) but not before (a remove, minus its
    deletion vector) are inserts, the rows present before but not after are deletes."""
    data_fields = list(target)[: len(columns)]
    for task in tasks:
        table = _read_data_file(task["path"])
        count = table.num_rows
        arrays = [
            _column(spec, field, table, task, count) for spec, field in zip(columns, data_fields, strict=True)
        ]
        if task["cdc"]:
            kinds = _child(table, table.schema, "_change_type", None)
            kinds = (
                pa.nulls(count, pa.string()) if kinds is None else kinds.combine_chunks().cast(pa.string())
            )
            yield from _with_change(arrays, kinds, None, task, target, count)
            continue
        after = _present(task, "add", table_root, count)
        before = _present(task, "remove", table_root, count)
        inserts = pc.and_(after, pc.invert(before))
        deletes = pc.and_(before, pc.invert(after))
        for kind, mask in (("insert", inserts), ("delete", deletes)):
            if pc.any(mask).as_py():
                yield from _with_change(
                    arrays, pa.array([kind] * count, pa.string()), mask, task, target, count
                )


def _present(task: dict[str, Any], side: str, table_root: str, count: int) -> Any:
    """Which rows of the file the commit's `side` action (add or remove) lists as present."""
    if not task[f"has_{side}"]:
        return pa.array([False] * count, pa.bool_())
    deleted = _deleted(open_file, {"path": task["path"], "deletionVector": task[f"{side}_dv"]}, table_root)
    return (
        pa.array([i not in deleted for i in range(count)], pa.bool_())
        if deleted
        else pa.array([True] * count)
    )


def _with_change(arrays: list[Any], kinds: Any, mask: Any, task: dict[str, Any], target: Any, count: int):  # noqa: ANN202
    version = pa.array([task["version"]] * count, pa.int64())
    micros = task["timestamp"] * 1000  # the commit's time, in ms
    stamp = pa.array([micros] * count, pa.int64()).cast(target.field(len(arrays) + 2).type)
    out = pa.Table.from_arrays([*arrays, kinds, version, stamp], schema=target)
    if mask is not None:
        out = out.filter(mask)
    yield from out.to_batches()
