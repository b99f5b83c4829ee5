"""Driver-side access to the few small Iceberg files the driver reads: the metadata folder's listing,
the version hint and the table metadata JSON (gzip too). Everything bigger (manifest lists,
manifests, data and delete files) is read by the executors through the same `pyarrow.fs`."""

from __future__ import annotations

import gzip
from typing import Any

from deltaspark.errors import StorageError
from deltaspark.read.arrow_file_reader import open_file


def _fs(path: str) -> tuple[Any, str]:
    try:
        return open_file(path)
    except Exception as exc:  # unknown scheme, missing credentials
        raise StorageError(f"Cannot open {path} with pyarrow.fs: {exc}") from exc


def list_names(directory: str) -> list[str] | None:
    """Names of the files directly in `directory`; None when it does not exist."""
    from pyarrow import fs

    filesystem, path = _fs(directory)
    info = filesystem.get_file_info(path)
    if info.type != fs.FileType.Directory:
        return None
    entries = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
    return sorted(e.base_name for e in entries if e.type == fs.FileType.File)


def read_bytes(path: str) -> bytes | None:
    """A small file's bytes; None when it does not exist."""
    filesystem, local = _fs(path)
    try:
        with filesystem.open_input_stream(local) as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def decompress(path: str, data: bytes) -> bytes:
    """Metadata JSON as written: gzip is recognised by its magic bytes, whatever the file is named."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    return data
