"""Describing an Iceberg data file as a Delta `add`, on the executors (a `mapInArrow`).

For each live data file: its Parquet footer is read and checked (the row count its manifest entry
gives; field ids on its columns, by which a Delta table in column mapping `id` mode resolves them)
and its real size taken; its Iceberg metrics become Delta statistics (`numRecords`, and `minValues`,
`maxValues`, `nullCount` where they are true bounds); the rows its deletes remove (the applicable
deletion vector, else the applicable position deletes, below the file's row count) are listed for
a Delta deletion vector. Its path becomes a URI relative to the table root when it lies under it.

Its identity partition values are serialized as Delta `partitionValues`; whether the table is
partitioned by them is decided once every file is described (`holdsIdentity`, `partitionProblem`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from deltaspark.file_io import carry_settings, open_file
from deltaspark.iceberg import types as ice_types
from deltaspark.iceberg.data_reader import IcebergReadError, _dv_positions, stored_id

DESCRIBED = pa.schema(
    [
        ("key", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("numRecords", pa.int64()),
        ("stats", pa.string()),
        ("deleted", pa.list_(pa.int64())),
        ("spec_id", pa.int32()),
        ("holdsIdentity", pa.bool_()),
        ("partitionValues", pa.map_(pa.string(), pa.string())),
        ("partitionProblem", pa.string()),
    ]
)
# Iceberg types a Delta partition column can hold with a value Delta's serialization keeps exactly
PARTITIONABLE = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string")
_BOUNDED = ("int", "long", "float", "double", "date", "timestamp", "timestamptz", "string")
_SAFE = "/=:@-._~!$&'()*+,;"


def _bounded(kind: str) -> bool:
    """Types whose Iceberg bounds are Delta statistics: decimals only where a JSON double holds them
    exactly (15 significant digits)."""
    if kind.startswith("decimal("):
        return int(kind[8:].split(",")[0]) <= 15
    return kind in _BOUNDED


def _stat_value(value: Any, iceberg_type: str, is_max: bool) -> Any:
    """An Iceberg bound as Delta writes statistics: timestamps in milliseconds (Delta readers widen
    a maximum by one millisecond), dates ISO, decimals as numbers."""
    if isinstance(value, dt.datetime):
        text = value.isoformat(timespec="milliseconds")
        if iceberg_type == "timestamptz":
            return text.replace("+00:00", "") + "Z"
        return text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _set(tree: dict[str, Any], names: list[str], value: Any) -> None:
    for name in names[:-1]:
        tree = tree.setdefault(name, {})
    tree[names[-1]] = value


def _stats(row: dict[str, Any], leaves: dict[int, tuple[list[str], str]]) -> dict[str, Any]:
    lower, upper = dict(row["lower_bounds"] or ()), dict(row["upper_bounds"] or ())
    nulls, nans = dict(row["null_value_counts"] or ()), dict(row["nan_value_counts"] or ())
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    null_count: dict[str, Any] = {}
    for field_id, (names, kind) in leaves.items():
        if field_id in nulls and nulls[field_id] is not None:
            _set(null_count, names, int(nulls[field_id]))
        if not _bounded(kind) or field_id not in lower or field_id not in upper:
            continue
        if kind in ("float", "double") and nans.get(field_id) != 0:
            continue  # Iceberg's bounds leave NaN out; Delta's statistics would not
        lo, hi = ice_types.from_bytes(lower[field_id], kind), ice_types.from_bytes(upper[field_id], kind)
        if lo is None or hi is None or (isinstance(lo, float) and (math.isinf(lo) or math.isinf(hi))):
            continue
        _set(low, names, _stat_value(lo, kind, False))
        _set(high, names, _stat_value(hi, kind, True))
    stats: dict[str, Any] = {"numRecords": row["record_count"]}
    if low:
        stats["minValues"], stats["maxValues"] = low, high
    if null_count:
        stats["nullCount"] = null_count
    return stats


def partitionable(iceberg_type: Any) -> bool:
    if not isinstance(iceberg_type, str):
        return False
    return iceberg_type in PARTITIONABLE or iceberg_type.startswith("decimal(")


def delta_partition_value(value: Any, iceberg_type: str) -> str | None:
    """An Iceberg JSON single value as Delta's "Partition Value Serialization" writes it. An empty
    string is refused (ValueError): Delta reads an empty partition value as null."""
    typed = ice_types.from_json(value, iceberg_type)
    if typed is None:
        return None
    if isinstance(typed, bool):
        return "true" if typed else "false"
    if isinstance(typed, float):
        if math.isnan(typed):
            return "NaN"
        if math.isinf(typed):
            return "Infinity" if typed > 0 else "-Infinity"
        return repr(typed)
    if isinstance(typed, decimal.Decimal):
        return format(typed, "f")
    if isinstance(typed, dt.datetime):
        if iceberg_type == "timestamptz":
            utc = typed.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return utc.isoformat(timespec="microseconds") + "Z"
        return typed.isoformat(sep=" ", timespec="microseconds")  # years below 1000 keep 4 digits
    if isinstance(typed, dt.date):
        return typed.isoformat()
    if isinstance(typed, str) and typed == "":
        raise ValueError("an empty string, which Delta reads as null")
    return str(typed)


def _partition_values(
    row: dict[str, Any], fields: list[tuple[int, str, str]]
) -> tuple[list[tuple[str, str | None]], str | None]:
    """`partitionValues` of a data file from its manifest entry's partition tuple (canonical JSON
    keyed by partition field id), and why they cannot be written (None: they can)."""
    given = json.loads(row.get("partition") or "{}")
    values = []
    for field_id, name, kind in fields:
        try:
            values.append((name, delta_partition_value(given.get(str(field_id)), kind)))
        except (ValueError, TypeError, ArithmeticError) as exc:
            return [], f"the partition value of {name} in {row['file_path']} is {exc}"
    return values, None


def _footer(location: str, record_count: int) -> tuple[int, set[int]]:
    """Check the file's footer against its manifest entry; its size in bytes and the field ids of
    its columns. A Delta `add` must give the real size (readers fetch the footer from it); some
    writers (DuckDB) record another."""
    import pyarrow.parquet as pq

    try:
        filesystem, local = open_file(location)
        with filesystem.open_input_file(local) as handle:
            actual = handle.size()
            meta = pq.ParquetFile(handle).metadata
            schema = meta.schema.to_arrow_schema()
    except FileNotFoundError as exc:
        raise IcebergReadError(f"deltaspark: missing Iceberg data file {location}: {exc}") from exc
    except Exception as exc:
        raise IcebergReadError(f"deltaspark: cannot read the Parquet footer of {location}: {exc}") from exc
    if any(stored_id(f) is None for f in schema):
        raise IcebergReadError(
            f"deltaspark: Iceberg data file {location} has columns without field ids (a file added "
            "without Iceberg's writer, read through a name mapping); a Delta table resolves columns "
            "by id or by one physical name, so it cannot be converted in place"
        )
    if meta.num_rows != record_count:
        raise IcebergReadError(
            f"deltaspark: Iceberg data file {location} holds {meta.num_rows} rows, its manifest entry "
            f"says {record_count}"
        )
    return actual, {stored_id(f) for f in schema}


def file_describer(  # noqa: ANN201 - mapInArrow
    root: str,
    leaves: dict[int, tuple[list[str], str]],
    identity: dict[int, dict[int, str]],
    partition_fields: dict[int, list[tuple[int, str, str]]],
):
    """Input rows: entry columns plus `delete_positions` and `dv_*` (as the Iceberg scan joins
    them); output: DESCRIBED per data file. `identity` lists, per partition spec id, the source
    field ids (and names) of its identity transforms (`holdsIdentity`: the file holds them all);
    `partition_fields` the `(partition field id, column name, type)` of those that could be Delta
    partition columns."""

    def run(batches):  # noqa: ANN001, ANN202
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                location = row["file_path"]
                if (row.get("file_format") or "").upper() != "PARQUET":
                    raise IcebergReadError(
                        f"deltaspark: Iceberg data file {location} is {row.get('file_format')}; "
                        "Delta tables hold Parquet files only"
                    )
                records = row["record_count"]
                size, held = _footer(location, records)
                spec_id = row["spec_id"]
                values, problem = _partition_values(row, partition_fields.get(spec_id, []))
                if row.get("dv_path"):
                    deleted = [p for p in _dv_positions(row).to_array().tolist() if p < records]
                else:
                    deleted = sorted({p for p in row.get("delete_positions") or () if 0 <= p < records})
                inside = location.startswith(root + "/")
                path = quote(location[len(root) + 1 :], safe=_SAFE) if inside else location
                out.append(
                    {
                        "key": location,
                        "path": path,
                        "size": size,
                        "numRecords": records,
                        "stats": json.dumps(_stats(row, leaves), separators=(",", ":")),
                        "deleted": deleted,
                        "spec_id": spec_id,
                        "holdsIdentity": all(f in held for f in identity.get(spec_id, {})),
                        "partitionValues": values,
                        "partitionProblem": problem,
                    }
                )
            if out:
                yield pa.RecordBatch.from_pylist(out, schema=DESCRIBED)

    return carry_settings(run)
