"""Decoding deletion vectors ("Deletion Vector Format", "Deletion Vector File Storage Format").

Pure functions over bytes - no Spark, no file system - because they run inside Spark tasks
(`mapInArrow`) on executors, which only need `pyarrow` and `pyroaring`. A DV is a
RoaringBitmapArray: magic number 1681511377 (little endian) followed by a 64-bit roaring bitmap in
the portable format (`pyroaring.BitMap64`). On disk it is framed as
`dataSize (4 bytes BE) | bitmap | CRC-32 of bitmap (4 bytes BE)` at the descriptor's offset.
Inline DVs are Z85-encoded in the log.

Errors are `DeletionVectorError`s whose message starts with `deltaspark:` and names the data file
and the DV: raised inside a Spark task, that message is all that reaches the user.

Writing (`dv_file_encoder`): each Spark task turns its files' deleted row indexes into one DV file
(`deletion_vector_<uuid>.bin`: the format version byte `1`, then one framed bitmap per data file)
and the descriptors that point into it.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

from deltaspark.errors import DeletionVectorError

FILE_FORMAT_VERSION = 1  # first byte of a DV file
PORTABLE_MAGIC = 1681511377  # little endian, portable 64-bit roaring format
NATIVE_MAGIC = 1681511376  # big endian, older native layout
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {ch: i for i, ch in enumerate(_Z85)}


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ base-85) to bytes.

    Spark's Delta pads the bytes to a multiple of 4 and encodes whole 5-character groups. Other
    writers (delta-rs) encode a short tail of n bytes as n + 1 characters left-padded with `#` to a
    full group; such a group cannot be a whole one (its value would exceed 2^32), so a group that
    starts with `#` is read as that tail.
    """
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        group = text[i : i + 5]
        digits = group.lstrip("#") if group.startswith("#") else group
        value = 0
        for ch in digits:
            try:
                value = value * 85 + _Z85_VALUE[ch]
            except KeyError:
                raise DeletionVectorError(f"invalid Z85 character {ch!r}") from None
        if len(digits) < 5:
            out += value.to_bytes(max(len(digits) - 1, 0), "big")
        else:
            out += (value & 0xFFFFFFFF).to_bytes(4, "big")  # Spark's Delta keeps the low 32 bits too
    return bytes(out)


def z85_encode(data: bytes) -> str:
    """Bytes (length a multiple of 4) to Z85; used to build test fixtures."""
    if len(data) % 4:
        raise DeletionVectorError("Z85 input length must be a multiple of 4")
    chars = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        group = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            group.append(_Z85[digit])
        chars += reversed(group)
    return "".join(chars)


def inline_bitmap_bytes(encoded: str, size_in_bytes: int) -> bytes:
    """The RoaringBitmapArray bytes of an inline (`storageType = 'i'`) DV."""
    return z85_decode(encoded)[:size_in_bytes]


def uuid_relative_path(path_or_inline_dv: str) -> str:
    """`<random prefix>/deletion_vector_<uuid>.bin` for `storageType = 'u'` (last 20 chars: Z85 UUID)."""
    if len(path_or_inline_dv) < 20:
        raise DeletionVectorError(f"pathOrInlineDv {path_or_inline_dv!r} is too short for a Z85 UUID")
    prefix, encoded = path_or_inline_dv[:-20], path_or_inline_dv[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def dv_path_batches(strict: bool, keep: tuple[str, ...] = ()):  # noqa: ANN201 - a mapInArrow function
    """`mapInArrow` body: rows `storageType, pathOrInlineDv` (+ `keep` columns) -> `path` (+ `keep`),
    where an on-disk DV lives (relative to the table root for `u`, as logged for `p`; inline DVs
    have none). An id that does not decode fails the task when `strict` (vacuum must know every
    DV file it keeps), and is passed over otherwise (the audit's DV check reports it)."""

    def paths(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            names = ["path", *keep]
            out: dict[str, list[Any]] = {name: [] for name in names}
            for row in batch.to_pylist():
                try:
                    if row["storageType"] == "u":
                        path = uuid_relative_path(row["pathOrInlineDv"])
                    elif row["storageType"] == "p":
                        path = row["pathOrInlineDv"]
                    else:
                        continue
                except Exception as exc:
                    if strict:
                        name = describe(row["storageType"], row["pathOrInlineDv"], None)
                        raise DeletionVectorError(
                            f"deltaspark: deletion vector {name}: its file cannot be located ({exc})"
                        ) from None
                    continue
                out["path"].append(path)
                for name in keep:
                    out[name].append(row[name])
            arrays = [pa.array(out["path"], pa.string())]
            arrays += [pa.array(out[name], batch.schema.field(name).type) for name in keep]
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    return paths


def unframe(blob: bytes, size_in_bytes: int, where: str) -> bytes:
    """The bitmap bytes from an on-disk DV record (`dataSize | data | crc`), checking size and CRC-32."""
    if len(blob) < size_in_bytes + 8:
        raise DeletionVectorError(f"{where}: truncated deletion vector ({len(blob)} bytes)")
    (data_size,) = struct.unpack(">i", blob[:4])
    if data_size != size_in_bytes:
        raise DeletionVectorError(
            f"{where}: stored size {data_size} != descriptor sizeInBytes {size_in_bytes}"
        )
    data = blob[4 : 4 + data_size]
    (expected,) = struct.unpack(">I", blob[4 + data_size : 8 + data_size])
    actual = zlib.crc32(data) & 0xFFFFFFFF
    if actual != expected:
        raise DeletionVectorError(
            f"{where}: CRC-32 mismatch (stored {expected:#010x}, computed {actual:#010x})"
        )
    return data


def _native_bitmap(data: bytes):  # noqa: ANN202 - pyroaring.BitMap64
    """The older "native" layout (big endian): count of 32-bit bitmaps, then each as
    `size | roaring bytes`, bitmap i holding the rows whose high 32 bits are i. The protocol's
    inline DV example (rows 3, 4, 7, 11, 18, 29) uses it."""
    from pyroaring import BitMap, BitMap64

    (count,) = struct.unpack(">i", data[4:8])
    result, position = BitMap64(), 8
    for high in range(count):
        (size,) = struct.unpack(">i", data[position : position + 4])
        low = BitMap.deserialize(data[position + 4 : position + 4 + size])
        result.update((high << 32) | value for value in low)
        position += 4 + size
    return result


def decode_bitmap(data: bytes, where: str):  # noqa: ANN201 - pyroaring.BitMap64
    """A RoaringBitmapArray (magic + 64-bit roaring bitmap) as a `pyroaring.BitMap64`."""
    from pyroaring import BitMap64

    if len(data) < 4:
        raise DeletionVectorError(f"{where}: deletion vector shorter than its magic number")
    try:
        if struct.unpack("<I", data[:4])[0] == PORTABLE_MAGIC:
            return BitMap64.deserialize(data[4:])
        if struct.unpack(">I", data[:4])[0] == NATIVE_MAGIC:
            return _native_bitmap(data)
    except Exception as exc:  # pyroaring raises ValueError / OverflowError on bad input
        raise DeletionVectorError(f"{where}: malformed roaring bitmap ({exc})") from exc
    raise DeletionVectorError(f"{where}: unknown deletion vector magic number {data[:4].hex()}")


def encode_bitmap(rows: Iterator[int] | list[int]) -> bytes:
    """RoaringBitmapArray bytes of the given row indexes; used to build test fixtures."""
    from pyroaring import BitMap64

    return struct.pack("<I", PORTABLE_MAGIC) + BitMap64(rows).serialize()


def frame(data: bytes) -> bytes:
    """An on-disk DV record for `data`; used to build test fixtures."""
    return struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data) & 0xFFFFFFFF)


def describe(storage_type: str | None, path_or_inline_dv: str | None, location: str | None) -> str:
    """How a DV is named in errors: its file (and offset) on disk, or its inline text."""
    if storage_type == "i":
        text = path_or_inline_dv or ""
        return f"(inline, {text[:40]}{'...' if len(text) > 40 else ''})"
    return location or f"({storage_type}, {path_or_inline_dv})"


def decode_descriptor(
    storage_type: str | None,
    path_or_inline_dv: str | None,
    offset: int | None,
    size_in_bytes: int | None,
    cardinality: int | None,
    record: bytes | None,
    where: str,
):  # noqa: ANN201 - pyroaring.BitMap64
    """The deleted row indexes of one DV descriptor; `record` holds the on-disk bytes read from
    `offset` (null for inline DVs). Every field the protocol requires is checked."""
    if storage_type not in ("i", "u", "p"):
        raise DeletionVectorError(f"unknown storageType {storage_type!r}")
    if size_in_bytes is None or size_in_bytes < 0:
        raise DeletionVectorError(f"sizeInBytes is {size_in_bytes!r}")
    if cardinality is None or cardinality < 0:
        raise DeletionVectorError(f"cardinality is {cardinality!r}")
    if not path_or_inline_dv:
        raise DeletionVectorError("pathOrInlineDv is empty")
    if storage_type == "i":
        data = inline_bitmap_bytes(path_or_inline_dv, size_in_bytes)
        if len(data) < size_in_bytes:
            raise DeletionVectorError(f"inline data is {len(data)} bytes, sizeInBytes says {size_in_bytes}")
    else:
        if offset is not None and offset < 0:
            raise DeletionVectorError(f"offset {offset} is negative")
        if record is None:
            raise DeletionVectorError("the deletion vector file is missing or unreadable")
        data = unframe(record, size_in_bytes, where)
    bitmap = decode_bitmap(data, where)
    if len(bitmap) != cardinality:
        raise DeletionVectorError(f"{len(bitmap)} rows in the bitmap, cardinality says {cardinality}")
    return bitmap


def contextualize(exc: Exception, data_file: str, dv: str) -> DeletionVectorError:
    """`exc` (from decoding) as the error users see: the data file and the DV named."""
    reason = str(exc)
    if reason.startswith(dv + ": "):
        reason = reason[len(dv) + 2 :]
    return DeletionVectorError(f"deltaspark: deletion vector {dv} of data file {data_file}: {reason}")


def deleted_row_batches(batches):  # noqa: ANN001, ANN201 - Arrow batches in, Arrow batches out
    """`mapInArrow` body: descriptor rows -> one `(key, row_index)` row per deleted row.

    Input columns: `key` (string), `file` (the data file), `storageType`, `pathOrInlineDv`,
    `offset`, `sizeInBytes`, `cardinality`, `record` (binary: the on-disk `dataSize|data|crc`
    record; null for inline DVs), `where` (the DV file and offset).
    """
    import pyarrow as pa

    for batch in batches:
        keys: list[str] = []
        indexes: list[int] = []
        for row in batch.to_pylist():
            bitmap = decode_row(row)
            keys += [row["key"]] * len(bitmap)
            indexes += list(bitmap)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.string()), pa.array(indexes, pa.int64())], names=["key", "row_index"]
        )


def decode_row(row: dict[str, Any]):  # noqa: ANN201 - pyroaring.BitMap64
    """The deleted rows of one descriptor row (the columns `deleted_row_batches` takes), or the
    decoding failure as the `DeletionVectorError` users see."""
    where = describe(row["storageType"], row["pathOrInlineDv"], row["where"])
    try:
        return decode_descriptor(
            row["storageType"],
            row["pathOrInlineDv"],
            row["offset"],
            row["sizeInBytes"],
            row["cardinality"],
            row["record"],
            where,
        )
    except Exception as exc:  # any decoding failure, named
        raise contextualize(exc, row["file"], where) from exc


def dv_file_name(file_id: uuid.UUID) -> str:
    return f"deletion_vector_{file_id}.bin"


def uuid_path_or_inline_dv(file_id: uuid.UUID, prefix: str = "") -> str:
    """`pathOrInlineDv` of a `storageType = 'u'` DV: the random prefix and the Z85 of the UUID."""
    return prefix + z85_encode(file_id.bytes)


def wide_bounds(stats: str | None) -> str | None:
    """`stats` JSON with top-level `tightBounds` set to false (a DV makes the bounds wide).

    Only the top level is touched: the text is scanned for its top-level keys, so a column named
    `tightBounds` inside `minValues` is left alone and numbers keep their exact spelling.
    """
    if stats is None or not stats.strip():
        return stats
    text = stats.strip()
    if not text.startswith("{") or not text.endswith("}"):
        raise DeletionVectorError(f"stats is not a JSON object: {text[:60]!r}")
    members = _top_level_members(text)
    kept = [text[a:b] for a, b, key in members if key != "tightBounds"]
    return "{" + ",".join([*kept, '"tightBounds":false']) + "}"


def _top_level_members(text: str) -> list[tuple[int, int, str]]:
    """(start, end, key) of each top-level `"key":value` member of a JSON object's text."""
    members: list[tuple[int, int, str]] = []
    depth, in_string, escaped = 0, False, False
    start, key_end = 1, None
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 1 and key_end is None:
                    key_end = i + 1
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                _close_member(text, start, i, key_end, members)
        elif ch == "," and depth == 1:
            _close_member(text, start, i, key_end, members)
            start, key_end = i + 1, None
    return members


def _close_member(text: str, start: int, end: int, key_end: int | None, out: list) -> None:
    import json

    body = text[start:end].strip()
    if not body:
        return
    if key_end is None:
        raise DeletionVectorError(f"stats member without a key: {body[:60]!r}")
    offset = len(text[start:end]) - len(text[start:end].lstrip())
    key = json.loads(text[start + offset : key_end])
    out.append((start + offset, start + offset + len(body), key))


def dv_file_encoder(write_id: str, prefix: str = "", skip_whole: bool = False):  # noqa: ANN201 - a mapInArrow function
    """The `mapInArrow` body that writes DVs: one DV file per task.

    Input rows (sorted by `key` within the task): `key` (the data file's canonical path), `rows`
    (array of deleted row indexes: the old DV's and the new ones), `stats`, `numRecords` and
    optionally `oldCardinality`. Output: one row per data file with its descriptor
    (`pathOrInlineDv`, `offset`, `sizeInBytes`, `cardinality`), the rows it deletes beyond
    `oldCardinality` (`newlyDeleted`; all of them without that column) and its stats with wide
    bounds, then one row per task with `key` null holding the DV file (`content`, base64) and its
    `fileSize`. The file's UUID is derived from `write_id` and the first key whose DV the task
    writes, so a recomputed task writes the same bytes under the same name.

    `skip_whole`: a data file whose DV would delete every row (`cardinality >= numRecords`) - one
    the caller removes instead - gets a row with its cardinality and no bytes in the DV file
    (`pathOrInlineDv`, `dvFile` null), and a task whose files are all such writes no DV file.
    """

    def encode(batches):  # noqa: ANN001, ANN202
        import base64

        import pyarrow as pa
        from pyroaring import BitMap64

        schema = pa.schema(
            [
                ("key", pa.string()),
                ("dvFile", pa.string()),
                ("pathOrInlineDv", pa.string()),
                ("offset", pa.int32()),
                ("sizeInBytes", pa.int32()),
                ("cardinality", pa.int64()),
                ("newlyDeleted", pa.int64()),
                ("stats", pa.string()),
                ("content", pa.string()),
                ("fileSize", pa.int64()),
            ]
        )
        body = bytearray([FILE_FORMAT_VERSION])
        file_id = None
        for batch in batches:
            columns = {name: [] for name in schema.names}
            keys = batch.column("key").to_pylist()
            rows = batch.column("rows")
            stats = batch.column("stats").to_pylist()
            counts = batch.column("numRecords").to_pylist()
            names = batch.schema.names
            olds = batch.column("oldCardinality").to_pylist() if "oldCardinality" in names else None
            for i, key in enumerate(keys):
                values = rows[i].values.to_numpy(zero_copy_only=False)
                bitmap = BitMap64(values.tolist())
                if counts[i] is not None and bitmap.max() >= counts[i]:
                    raise DeletionVectorError(
                        f"deltaspark: data file {key}: row index {bitmap.max()} is beyond its "
                        f"numRecords {counts[i]}"
                    )
                deleted = len(bitmap) - ((olds[i] or 0) if olds is not None else 0)
                if skip_whole and counts[i] is not None and len(bitmap) >= counts[i]:
                    whole = {"key": key, "cardinality": len(bitmap), "newlyDeleted": deleted}
                    for name in schema.names:
                        columns[name].append(whole.get(name))
                    continue
                if file_id is None:
                    file_id = uuid.uuid5(uuid.NAMESPACE_URL, f"deltaspark-dv:{write_id}:{key}")
                data = struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize()
                columns["key"].append(key)
                columns["dvFile"].append(dv_file_name(file_id))
                columns["pathOrInlineDv"].append(uuid_path_or_inline_dv(file_id, prefix))
                columns["offset"].append(len(body))
                columns["sizeInBytes"].append(len(data))
                columns["cardinality"].append(len(bitmap))
                columns["newlyDeleted"].append(deleted)
                columns["stats"].append(wide_bounds(stats[i]))
                columns["content"].append(None)
                columns["fileSize"].append(None)
                body += frame(data)
            yield pa.RecordBatch.from_pydict(columns, schema=schema)
        if file_id is not None:
            yield pa.RecordBatch.from_pydict(
                {
                    "key": [None],
                    "dvFile": [dv_file_name(file_id)],
                    "pathOrInlineDv": [None],
                    "offset": [None],
                    "sizeInBytes": [None],
                    "cardinality": [None],
                    "newlyDeleted": [None],
                    "stats": [None],
                    "content": [base64.b64encode(bytes(body)).decode("ascii")],
                    "fileSize": [len(body)],
                },
                schema=schema,
            )

    return encode
