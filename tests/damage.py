"""Ways storage, crashed writers and careless hands damage the files of a table, for tests.

Each function changes one file in place, the way it happens in practice, and never through
deltaspark: a torn write cuts a file short, a bad disk or copy replaces bytes, a parquet file can
keep an intact footer over pages that no longer decode.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq


def truncate(path: Path, keep: float = 0.5) -> None:
    """Keep only the first `keep` of the file (a torn write or an interrupted copy)."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def garbage(path: Path) -> None:
    """Replace the content with bytes of the same length that mean nothing."""
    size = path.stat().st_size
    path.write_bytes(bytes((i * 37 + 11) % 256 for i in range(size)))


def zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def damage_pages(path: Path) -> None:
    """Overwrite the page header of the largest column chunk of a parquet file's first row group,
    leaving its footer (and so its schema and row counts) intact: only decoding the pages fails."""
    metadata = pq.ParquetFile(path).metadata
    group = metadata.row_group(0)
    chunk = max((group.column(i) for i in range(group.num_columns)), key=lambda c: c.total_compressed_size)
    offset = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[offset : offset + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))


def cut_last_line(path: Path, after: str | None = None) -> str:
    """Cut a JSON log file's last line short - in its middle, or just after the last occurrence of
    `after` in it (e.g. `}` inside a nested object, which a check for a closing brace would
    miss) - as a torn write leaves it; returns the line as left."""
    text = path.read_text().rstrip("\n")
    head, _, last = text.rpartition("\n")
    # `after` is looked for before the line's closing braces, so the cut always leaves it open.
    cut = last.rindex(after, 0, len(last) - 3) + len(after) if after else len(last) // 2
    assert 0 < cut < len(last), "the cut must leave part of the line"
    path.write_text((head + "\n" if head else "") + last[:cut])
    return last[:cut]


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))
