"""Executor-side work of the file checks (`mapInArrow` bodies): stat files, read parquet footers,
read and verify deletion vectors. Only pyarrow and pyroaring are needed on the executors; every
problem becomes a finding row instead of failing the task, so one bad file never hides the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from deltaspark.features import dv_codec
from deltaspark.file_io import carry_settings

FINDING_NAMES = ["check", "severity", "version", "path", "detail", "value"]
FIELD_ID = b"PARQUET:field_id"


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("check", pa.string()),
            ("severity", pa.string()),
            ("version", pa.int64()),
            ("path", pa.string()),
            ("detail", pa.string()),
            ("value", pa.float64()),
        ]
    )


def _filesystems() -> Callable[[str], tuple[Any, str]]:
    """`open_file`, with one filesystem object per scheme and authority within a task."""
    from deltaspark.file_io import open_file

    cache: dict[str, tuple[Any, str]] = {}

    def fs_for(uri: str) -> tuple[Any, str]:
        if uri.startswith(("file:", "/")):
            return open_file(uri)  # local: cheap
        key = "/".join(uri.split("/", 3)[:3])
        if key not in cache:
            fs, local = open_file(uri)
            cache[key] = (fs, uri[: len(uri) - len(local)] if uri.endswith(local) else "")
        fs, prefix = cache[key]
        return (fs, uri[len(prefix) :]) if prefix else open_file(uri)

    return fs_for


def emit_findings(rows: list[tuple[Any, ...]]) -> Any:
    """Finding rows `(check, severity, version, path, detail, value)` as one Arrow batch."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in FINDING_NAMES]
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), t.type) for c, t in zip(columns, _schema(), strict=True)], schema=_schema()
    )


# ---- existence -------------------------------------------------------------------------------------
def stat_batches(check: str, what: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Rows `path, size, version` (files the listing did not show) -> findings for those missing
    or of another size (`size` null: existence only)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        fs_for = _filesystems()
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                path = row["path"]
                try:
                    fs, local = fs_for(path)
                    info = fs.get_file_info(local)
                    found = info.type.name == "File"
                    size = info.size
                except Exception as exc:  # noqa: BLE001 - an unreachable file is reported
                    out.append(
                        (check, "error", row["version"], path, f"{what} cannot be checked: {exc}", None)
                    )
                    continue
                if not found:
                    out.append((check, "error", row["version"], path, f"{what} does not exist", None))
                elif row["size"] is not None and size != row["size"]:
                    detail = f"{what} is {size} bytes, the log says {row['size']}"
                    out.append((check, "error", row["version"], path, detail, float(size)))
            yield emit_findings(out)

    return carry_settings(run)


# ---- deletion vectors ------------------------------------------------------------------------------
def dv_batches(table_root: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Rows `path, version, numRecords, storageType, pathOrInlineDv, offset, sizeInBytes, cardinality`
    -> findings for DVs that are missing, fail their size/CRC/magic checks, disagree with their
    cardinality, or delete rows the file does not have."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        fs_for = _filesystems()
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                problem = _dv_problem(row, table_root, fs_for)
                if problem:
                    out.append(
                        ("files.deletion_vectors", "error", row["version"], row["path"], problem, None)
                    )
            yield emit_findings(out)

    return carry_settings(run)


def _dv_problem(row: dict[str, Any], table_root: str, fs_for: Callable[[str], tuple[Any, str]]) -> str | None:
    storage, value = row["storageType"], row["pathOrInlineDv"]
    location = None
    try:
        record = None
        if storage in ("u", "p"):
            relative = dv_codec.uuid_relative_path(value) if storage == "u" else unquote(value)
            location = relative if storage == "p" else table_root.rstrip("/") + "/" + relative
            offset = row["offset"] or 0
            fs, local = fs_for(location)
            try:
                with fs.open_input_file(local) as handle:
                    handle.seek(offset)
                    record = handle.read((row["sizeInBytes"] or 0) + 8)
            except FileNotFoundError:
                return f"deletion vector file {location} does not exist"
        bitmap = dv_codec.decode_descriptor(
            storage,
            value,
            row["offset"],
            row["sizeInBytes"],
            row["cardinality"],
            record,
            location or "(inline)",
        )
    except Exception as exc:  # noqa: BLE001 - every decoding failure is the finding
        return f"deletion vector: {exc}"
    records = row.get("numRecords")
    if len(bitmap) and records is not None and bitmap.max() >= records:
        return f"deletion vector deletes row {bitmap.max()}, the file has {records} rows"
    return None


# ---- parquet footers -------------------------------------------------------------------------------
def _kind(arrow_type: Any) -> str:
    import pyarrow.types as t

    checks = [
        (t.is_boolean, "boolean"),
        (t.is_integer, "integer"),
        (t.is_floating, "floating"),
        (t.is_decimal, "decimal"),
        (lambda x: t.is_string(x) or t.is_large_string(x), "string"),
        (lambda x: t.is_binary(x) or t.is_large_binary(x) or t.is_fixed_size_binary(x), "binary"),
        (t.is_date, "date"),
        (t.is_timestamp, "timestamp"),
        (t.is_struct, "struct"),
        (lambda x: t.is_list(x) or t.is_large_list(x), "array"),
        (t.is_map, "map"),
    ]
    for test, name in checks:
        if test(arrow_type):
            return name
    return str(arrow_type)


def _compatible(arrow_type: Any, plan: dict[str, Any]) -> str | None:
    """Why a stored column cannot be read as the table's type (None when it can): the type's family
    must match, and a stored number may be narrower than the table's (type widening), not wider."""
    import pyarrow.types as t

    want, have = plan["kind"], _kind(arrow_type)
    widened = plan.get("widened", False)
    if want in ("byte", "short", "integer", "long"):
        bits = {"byte": 8, "short": 16, "integer": 32, "long": 64}[want]
        if have != "integer" or arrow_type.bit_width > bits:
            return f"stored as {arrow_type}, the table says {want}"
        return None
    if want in ("float", "double"):
        if have == "floating" and (want == "double" or arrow_type.bit_width <= 32):
            return None
        if have in ("integer", "decimal") and want == "double" and widened:
            return None
        return f"stored as {arrow_type}, the table says {want}"
    if want == "decimal":
        if have == "decimal":
            p, s = plan["precision"], plan["scale"]
            if arrow_type.scale <= s and arrow_type.precision - arrow_type.scale <= p - s:
                return None
        if have == "integer" and widened:
            return None
        return f"stored as {arrow_type}, the table says decimal({plan['precision']},{plan['scale']})"
    if want == "timestamp_ntz" and have == "date" and widened:
        return None
    if want in ("timestamp", "timestamp_ntz"):
        return (
            None
            if have == "timestamp" or t.is_int64(arrow_type)
            else f"stored as {arrow_type}, the table says {want}"
        )
    if want == "date":
        return (
            None
            if have == "date" or t.is_int32(arrow_type)
            else f"stored as {arrow_type}, the table says date"
        )
    if want == "variant":
        return None if have == "struct" else f"stored as {arrow_type}, the table says variant"
    if want != have:
        return f"stored as {arrow_type}, the table says {want}"
    if want == "struct":
        for child in plan["fields"]:
            found = _find(list(arrow_type), child)
            if found is not None:
                problem = _compatible(found.type, child)
                if problem:
                    return f"{child['name']}: {problem}"
    elif want == "array":
        return _nested(arrow_type.value_type, plan["element"], "element")
    elif want == "map":
        return _nested(arrow_type.key_type, plan["key"], "key") or _nested(
            arrow_type.item_type, plan["value"], "value"
        )
    return None


def _nested(arrow_type: Any, plan: dict[str, Any], label: str) -> str | None:
    problem = _compatible(arrow_type, plan)
    return f"{label}: {problem}" if problem else None


def _find(fields: list[Any], plan: dict[str, Any]) -> Any:
    """The stored field of a table column: by parquet field id when the table has ids, else by name."""
    if plan.get("id") is not None:
        for f in fields:
            if f.metadata and f.metadata.get(FIELD_ID) == str(plan["id"]).encode():
                return f
    for f in fields:
        if f.name == plan["physical"]:
            return f
    return None


def footer_batches(columns: list[dict[str, Any]]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Rows `path, version, numRecords` -> findings for unreadable footers, row counts other than
    `numRecords`, and columns stored in a type the table cannot read them as."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.parquet as pq

        fs_for = _filesystems()
        for batch in batches:
            out = []
            for row in batch.to_pylist():
                path, version = row["path"], row["version"]
                try:
                    fs, local = fs_for(path)
                    with fs.open_input_file(local) as handle:
                        parquet = pq.ParquetFile(handle)
                        rows = parquet.metadata.num_rows
                        stored = parquet.schema_arrow
                except FileNotFoundError:
                    continue  # reported by files.exist
                except Exception as exc:  # noqa: BLE001 - not parquet, torn footer, ...
                    out.append(
                        ("files.footers", "error", version, path, f"not a readable parquet file: {exc}", None)
                    )
                    continue
                if row["numRecords"] is not None and rows != row["numRecords"]:
                    detail = f"the footer says {rows} rows, the log's numRecords says {row['numRecords']}"
                    out.append(("files.footers", "error", version, path, detail, float(rows)))
                for plan in columns:
                    found = _find(list(stored), plan)
                    problem = _compatible(found.type, plan) if found is not None else None
                    if problem:
                        out.append(
                            (
                                "files.footers",
                                "error",
                                version,
                                path,
                                f"column {plan['name']}: {problem}",
                                None,
                            )
                        )
            yield emit_findings(out)

    return carry_settings(run)
