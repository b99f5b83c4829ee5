"""Per-file statistics of newly written data files, from the footers Spark's writer just wrote.

Spark's parquet writer already keeps, per row group and column, the row count, the null count and
the minimum and maximum (parquet's `Statistics`). The protocol's per-file statistics are those
values, combined over row groups and put in the protocol's form; reading the footers (a few KB per
file, on the driver, in parallel) replaces a second pass over the data the write produced.

The rules are those of `file_stats` (the read-back route, which stays for what footers cannot say):
nulls of a struct count for its fields (parquet's leaf null counts include them); a float or
double column holding NaN has no bounds in that file (parquet-java's ordering puts NaN last, so a
footer maximum of NaN says so); strings keep their minimum cut to 32 characters and their maximum
only when it has at most 32 characters (it is then exact); timestamps are written in milliseconds,
the minimum rounded down and the maximum up. Footers do not say how many arrays or maps are null,
and INT96 timestamps carry no statistics: a write with such indexed columns, a footer without the
statistics it needs, or a write of more files than `FOOTER_MAX_FILES_CONF` goes the read-back route
(`None` from `footer_adds`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import struct
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    TimestampNTZType,
    TimestampType,
)

from deltaspark.errors import CorruptDataFileError
from deltaspark.features.column_mapping import physical_name
from deltaspark.features.stats import MIN_MAX_TYPES
from deltaspark.operations.file_stats import STRING_PREFIX, Leaf
from deltaspark.spark_compat import conf_get
from deltaspark.storage import FileStatus, HadoopStorage, Storage, local_file

FOOTER_STATS_CONF = "spark.deltaspark.write.footerStats"  # "false": always read written files back
FOOTER_MAX_FILES_CONF = "spark.deltaspark.write.footerStatsMaxFiles"
DEFAULT_FOOTER_MAX_FILES = 10_000
_THREADS = 16
_TAIL = 64 * 1024  # read at once from a file's end: the whole footer of all but very wide files
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_EPOCH = dt.datetime(1970, 1, 1)


def footer_route(spark: Any, storage: Storage, leaves: list[Leaf]) -> bool:
    """Whether this write's statistics can come from footers: a session whose driver reads files
    (not Connect), the route not switched off, and no indexed array or map column."""
    if not isinstance(storage, HadoopStorage):
        return False
    if conf_get(spark, FOOTER_STATS_CONF, "true").lower() == "false":
        return False
    return not any(isinstance(leaf.field.dataType, (ArrayType, MapType)) for leaf in leaves)


def footer_adds(
    spark: Any,
    storage: HadoopStorage,
    out: str,
    write_id: str,
    partition_fields: list[StructField],
    leaves: list[Leaf],
    mode: str,
) -> list[tuple[dict[str, Any], int]] | None:
    """The `add` actions (and row counts) of the parquet files Spark wrote under `out`, their
    statistics from the footers; None when the footers cannot give every statistic asked for."""
    prefix = out.rstrip("/") + "/"
    files = [f for f in _list_written(storage, out) if not _hidden(f.path[len(prefix) :])]
    limit = int(conf_get(spark, FOOTER_MAX_FILES_CONF, str(DEFAULT_FOOTER_MAX_FILES)))
    if len(files) > limit:
        return None
    if len(files) <= 1:
        footers = [read_footer(storage, f.path, f.size) for f in files]
    else:
        with ThreadPoolExecutor(max_workers=min(_THREADS, len(files))) as pool:
            footers = list(pool.map(lambda f: read_footer(storage, f.path, f.size), files))
    names = {physical_name(f, mode): f.name for f in partition_fields}
    adds = []
    for status, footer in zip(files, footers, strict=True):
        if footer.num_rows == 0:
            continue  # Spark's file for an empty write: no rows, no add (as the read-back route)
        stats = file_stats(footer, leaves)
        if stats is None:
            return None
        relative = status.path[len(prefix) :] if status.path.startswith(prefix) else None
        if relative is None:
            return None
        values = _partition_values(relative, names)
        if values is None:
            return None
        add = {
            "path": uri_path(write_id + "/" + relative),
            "partitionValues": values,
            "size": status.size,
            "modificationTime": status.modification_time,
            "dataChange": True,
            "stats": stats,
        }
        adds.append((add, footer.num_rows))
    return adds


def _hidden(relative: str) -> bool:
    """Whether Spark's file index passes over this path (as the read-back route's reader does): a
    part named `.*`, `_*` without `=` (not a partition directory), or `*._COPYING_`."""
    return any(
        part.startswith(".") or (part.startswith("_") and "=" not in part) or part.endswith("._COPYING_")
        for part in relative.split("/")
    )


def _list_written(storage: HadoopStorage, out: str) -> list[FileStatus]:
    local = local_file(out)
    if local is None:
        return storage.list_files_recursive(out)
    found = []
    root = out.rstrip("/")
    for directory, _dirs, names in os.walk(local):
        relative = os.path.relpath(directory, local)
        for name in names:
            full = os.path.join(directory, name)
            info = os.stat(full)
            path = root + "/" + (name if relative == "." else relative + "/" + name)
            found.append(FileStatus(path, name, info.st_size, info.st_mtime_ns // 1_000_000))
    return sorted(found, key=lambda f: f.path)


def read_footer(storage: Storage, path: str, size: int, local: bool = True) -> pq.FileMetaData:
    """A parquet file's footer, reading only the file's end (`local` False: through Hadoop even for
    a local file)."""
    try:
        tail = storage.read_tail(path, size, min(size, _TAIL), local=local)
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise ValueError("no parquet footer at the end of the file")
        length = struct.unpack("<i", tail[-8:-4])[0]
        if length <= 0 or length + 12 > size:
            raise ValueError(f"footer length {length} does not fit a file of {size} bytes")
        if length + 8 > len(tail):
            tail = storage.read_tail(path, size, length + 8, local=local)
        return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :]))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorruptDataFileError(path, f"its parquet footer does not decode ({exc})") from None


def file_stats(footer: pq.FileMetaData, leaves: list[Leaf]) -> str | None:
    """The `stats` JSON of one file (None when its footer lacks a statistic asked for)."""
    columns: dict[str, int] = {}
    ambiguous: set[str] = set()  # a column `a.b` and a field `b` of a struct `a`: the same dotted path
    if footer.num_row_groups:
        first = footer.row_group(0)
        for i in range(first.num_columns):
            path = first.column(i).path_in_schema
            if path in columns:
                ambiguous.add(path)
            columns[path] = i
    mins: dict[tuple[str, ...], Any] = {}
    maxs: dict[tuple[str, ...], Any] = {}
    nulls: dict[tuple[str, ...], Any] = {}
    for leaf in leaves:
        dotted = ".".join(leaf.key)
        index = columns.get(dotted)
        data_type = leaf.field.dataType
        if dotted in ambiguous or getattr(data_type, "collation", "UTF8_BINARY") != "UTF8_BINARY":
            return None  # collated strings: their bounds follow the collation, not parquet's bytes
        if index is None:
            if footer.num_row_groups:
                return None  # a column the file should hold and does not: not ours to guess
            nulls[leaf.key] = 0
            continue
        summary = _column_summary(footer, index, data_type)
        if summary is None:
            return None
        null_count, low, high = summary
        nulls[leaf.key] = null_count
        if low is not None:
            mins[leaf.key] = low
        if high is not None:
            maxs[leaf.key] = high
    bounded = [leaf for leaf in leaves if _has_bounds(leaf.field.dataType)]
    parts = [f'"numRecords":{footer.num_rows}']
    for name, values, keys in (
        ("minValues", mins, bounded),
        ("maxValues", maxs, bounded),
        ("nullCount", nulls, leaves),
    ):
        if keys:
            parts.append(f'"{name}":' + _render_tree([leaf.key for leaf in keys], values))
    return "{" + ",".join(parts) + "}"


def _has_bounds(data_type: DataType) -> bool:
    return isinstance(data_type, MIN_MAX_TYPES)


def _column_summary(footer: pq.FileMetaData, index: int, data_type: DataType) -> tuple[int, Any, Any] | None:
    """(null count, min, max) of one column over the file's row groups, in the stats JSON's form."""
    nulls = 0
    low = high = None
    values = 0
    bounded = _has_bounds(data_type)
    nan = False
    for g in range(footer.num_row_groups):
        chunk = footer.row_group(g).column(index)
        stats = chunk.statistics
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        present = chunk.num_values - stats.null_count
        if not bounded or present <= 0:
            continue
        if not stats.has_min_max:
            return None
        decoded = _decode(stats, chunk.physical_type, data_type)
        if decoded is None:
            return None
        values += present
        a, b = decoded
        if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
            nan = True
            continue
        low = a if low is None or a < low else low
        high = b if high is None or b > high else high
    if not bounded or values == 0 or nan:
        return nulls, None, None
    return (nulls, *_rendered_bounds(low, high, data_type))


def _decode(stats: Any, physical: str, data_type: DataType) -> tuple[Any, Any] | None:
    """A row group's (min, max) as Python values comparable across row groups."""
    raw = (stats.min_raw, stats.max_raw)
    if isinstance(data_type, _INTEGRAL + (DateType,)):
        return (int(raw[0]), int(raw[1])) if physical in ("INT32", "INT64") else None
    if isinstance(data_type, (FloatType, DoubleType)):
        return (float(raw[0]), float(raw[1])) if physical in ("FLOAT", "DOUBLE") else None
    if isinstance(data_type, DecimalType):
        if physical in ("INT32", "INT64"):
            unscaled = (int(raw[0]), int(raw[1]))
        elif physical in ("FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY"):
            unscaled = tuple(int.from_bytes(bytes(r), "big", signed=True) for r in raw)  # type: ignore[assignment]
        else:
            return None
        return tuple(Decimal(u).scaleb(-data_type.scale) for u in unscaled)  # type: ignore[return-value]
    if isinstance(data_type, StringType):
        if physical != "BYTE_ARRAY":
            return None
        return tuple(bytes(r).decode("utf-8") for r in raw)  # type: ignore[return-value]
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        if physical != "INT64":
            return None  # INT96: parquet-java keeps no statistics for it
        unit = json.loads(stats.logical_type.to_json()).get("timeUnit")
        per_micro = {"milliseconds": None, "microseconds": 1, "nanoseconds": 1000}
        if unit not in per_micro:
            return None
        if unit == "milliseconds":
            return int(raw[0]) * 1000, int(raw[1]) * 1000
        return int(raw[0]) // per_micro[unit], -(-int(raw[1]) // per_micro[unit])  # type: ignore[operator]
    return None


def _rendered_bounds(low: Any, high: Any, data_type: DataType) -> tuple[Any, Any]:
    if isinstance(data_type, StringType):
        return low[:STRING_PREFIX], (high if len(high) <= STRING_PREFIX else None)
    if isinstance(data_type, DateType):
        try:
            return _date(low), _date(high)
        except OverflowError:
            return None, None
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        zone = "Z" if isinstance(data_type, TimestampType) else ""
        try:
            return _millis(low // 1000, zone), _millis(-(-high // 1000), zone)
        except OverflowError:
            return None, None
    if isinstance(data_type, (FloatType, DoubleType)) and (math.isinf(low) or math.isinf(high)):
        # JSON has no infinity: an infinite bound is left out (a missing bound skips nothing)
        low, high = (None if math.isinf(low) else low), (None if math.isinf(high) else high)
        if low is None and high is None:
            return None, None
    if isinstance(data_type, (FloatType, DoubleType, DecimalType)):
        return tuple(None if v is None else _number(v, data_type) for v in (low, high))  # type: ignore[return-value]
    return low, high


def _number(value: Any, data_type: DataType) -> _Number:
    if isinstance(data_type, FloatType):
        return _Number(_float32(value))
    return _Number(repr(value) if isinstance(value, float) else str(value))


def _date(days: int) -> str:
    value = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    if value.year < 1 or value.year > 9999:
        raise OverflowError
    return value.isoformat()


def _millis(ms: int, zone: str) -> str:
    v = _EPOCH + dt.timedelta(milliseconds=ms)
    text = f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
    return f"{text}.{v.microsecond // 1000:03d}{zone}"


def _float32(value: float) -> str:
    """The shortest decimal that reads back as the same 32-bit float (as Java's Float.toString)."""
    for digits in range(6, 10):
        text = f"{value:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == value:
            return repr(float(text))
    return repr(value)


class _Number(str):
    """A number already rendered as JSON text (decimals, floats)."""


def _render_tree(keys: list[tuple[str, ...]], values: dict[tuple[str, ...], Any]) -> str:
    """JSON of `values` nested by their paths, in `keys` order; absent values left out but their
    structs kept (as Spark's `to_json` of the read-back route renders them)."""
    tree: dict[str, Any] = {}
    for key in keys:
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        if key in values:
            node[key[-1]] = values[key]

    def render(value: Any) -> str:
        if isinstance(value, dict):
            items = (f"{json.dumps(k, ensure_ascii=False)}:{render(v)}" for k, v in value.items())
            return "{" + ",".join(items) + "}"
        if isinstance(value, _Number):
            return str(value)
        return json.dumps(value, ensure_ascii=False)

    return render(tree)


def _partition_values(relative: str, names: dict[str, str]) -> dict[str, str | None] | None:
    """Partition values (keyed by the directory names: physical names) from the `key=value`
    directories Spark wrote, undoing Spark's escaping; None when they are not what was asked."""
    directories = relative.split("/")[:-1]
    if len(directories) != len(names):
        return None
    values: dict[str, str | None] = {}
    for directory, name in zip(directories, names, strict=True):
        key, sep, value = directory.partition("=")
        if not sep or _unescape(key) != name:
            return None
        values[name] = None if value == _HIVE_NULL else _unescape(value)
    return values


def _unescape(text: str) -> str:
    """Spark's `unescapePathName`: `%XX` (hex) back to the character."""
    if "%" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();/:@&=+$,")


def uri_path(path: str) -> str:
    """`path` as Hadoop's `Path.toUri().toString()` renders it (java.net.URI's quoting of a path:
    ASCII outside the URI's path characters as %XX of its UTF-8 bytes, other Unicode kept but
    spaces and controls), the form add paths take, as Spark's `_metadata.file_path`."""
    out = []
    for ch in path:
        code = ord(ch)
        if ch in _URI_PATH_SAFE or (code >= 0x80 and not _space_or_control(ch)):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def _space_or_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Zs", "Zl", "Zp") or 0x80 <= ord(ch) <= 0x9F
