"""Puffin files: the footer that lists their blobs, and deletion-vector blobs.

A deletion-vector-v1 blob is the same bytes as a Delta deletion vector record: big-endian length of
magic + bitmap, magic `D1 D3 39 64`, a portable 64-bit RoaringBitmap, big-endian CRC-32 — so it is
decoded by `features.dv_codec`. Manifests locate a vector by `content_offset` and
`content_size_in_bytes`, so scans never need the footer; `blobs` is for inspecting files.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from deltaspark.errors import CorruptIcebergMetadataError
from deltaspark.features import dv_codec

MAGIC = b"PFA1"


def blobs(path: str, data: bytes) -> list[dict[str, Any]]:
    """The footer's blob metadata (type, offset, length, properties, ...)."""
    if len(data) < 16 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise CorruptIcebergMetadataError(path, "not a Puffin file (magic PFA1 missing)")
    payload_size, flags = struct.unpack("<ii", data[-12:-4])
    start = len(data) - 12 - payload_size
    if payload_size < 0 or start < 8 or data[start - 4 : start] != MAGIC:
        raise CorruptIcebergMetadataError(path, "Puffin footer size does not match the file")
    if flags & 1:
        raise CorruptIcebergMetadataError(path, "compressed Puffin footers are not supported")
    try:
        return list(json.loads(data[start : start + payload_size])["blobs"])
    except (ValueError, KeyError) as exc:
        raise CorruptIcebergMetadataError(path, f"Puffin footer is not valid JSON: {exc}") from exc


def deletion_vector(blob: bytes, where: str) -> Any:
    """The positions of a deletion-vector-v1 blob (a `pyroaring.BitMap64`), CRC and magic checked."""
    if len(blob) < 12:
        raise dv_codec.DeletionVectorError(f"{where}: truncated deletion vector ({len(blob)} bytes)")
    data = dv_codec.unframe(blob, len(blob) - 8, where)
    return dv_codec.decode_bitmap(data, where)
