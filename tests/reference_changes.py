"""A change data feed derived independently, in plain Python, for tables delta-rs cannot read.

Per commit: its `cdc` files when it has any; otherwise the rows present after minus the rows
present before, per data file, where an `add` makes the file's rows (minus its DV) present and a
`remove` made them present before (minus its DV).
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from tests.reference_replay import replay
from tests.reference_rows import _convert, _parse_partition, _physical, deleted_rows


def _file_rows(
    table_dir: str, path: str, fields: list[dict], partitions: set[str], values: dict, mode: str
) -> list[dict]:
    location = os.path.join(table_dir, unquote(path))
    table = pq.read_table(location)
    out = []
    columns = {}
    for field in fields:
        name = field["name"]
        if name.lower() in partitions:
            columns[name] = [
                _parse_partition(values.get(_physical(field, mode)), field["type"])
            ] * table.num_rows
        else:
            physical = _physical(field, mode)
            column = (
                table.column(physical).to_pylist()
                if physical in table.column_names
                else [None] * table.num_rows
            )
            columns[name] = [_convert(v, field["type"], mode) for v in column]
    extra = table.column("_change_type").to_pylist() if "_change_type" in table.column_names else None
    for i in range(table.num_rows):
        row = {name: column[i] for name, column in columns.items()}
        if extra is not None:
            row["_change_type"] = extra[i]
        out.append(row)
    return out


def reference_changes(table_dir: str, start: int, end: int) -> list[dict[str, Any]]:
    state = replay(table_dir)
    schema = json.loads(state.metadata["schemaString"])
    configuration = state.metadata.get("configuration") or {}
    features = state.protocol.get("readerFeatures") or []
    cm = state.protocol.get("minReaderVersion") == 2 or "columnMapping" in features
    mode = configuration.get("delta.columnMapping.mode", "none") if cm else "none"
    partitions = {c.lower() for c in state.metadata.get("partitionColumns") or []}
    fields = [f for f in schema["fields"] if f["type"] != "void"]
    changes: list[dict[str, Any]] = []
    for version in range(start, end + 1):
        with open(os.path.join(table_dir, "_delta_log", f"{version:020d}.json")) as fh:
            actions = [json.loads(line) for line in fh if line.strip()]
        cdc = [a["cdc"] for a in actions if "cdc" in a]
        if cdc:
            for action in cdc:
                for row in _file_rows(
                    table_dir, action["path"], fields, partitions, action.get("partitionValues") or {}, mode
                ):
                    changes.append({**row, "_commit_version": version})
            continue
        per_file: dict[str, dict[str, Any]] = {}
        for action in actions:
            for kind in ("add", "remove"):
                body = action.get(kind)
                if body is not None and body.get("dataChange", True):
                    per_file.setdefault(unquote(body["path"]), {})[kind] = body
        for path, sides in per_file.items():
            any_side = sides.get("add") or sides["remove"]
            rows = _file_rows(
                table_dir, path, fields, partitions, any_side.get("partitionValues") or {}, mode
            )
            present_after = (
                set(range(len(rows))) - deleted_rows(table_dir, sides["add"].get("deletionVector"))
                if "add" in sides
                else set()
            )
            present_before = (
                set(range(len(rows))) - deleted_rows(table_dir, sides["remove"].get("deletionVector"))
                if "remove" in sides
                else set()
            )
            for index in sorted(present_after - present_before):
                changes.append({**rows[index], "_change_type": "insert", "_commit_version": version})
            for index in sorted(present_before - present_after):
                changes.append({**rows[index], "_change_type": "delete", "_commit_version": version})
    return changes
