"""Driver-side access to the few small Iceberg files the driver reads: the metadata folder's listing,
the version hint and the table metadata JSON (gzip too). Everything bigger (manifest lists,
manifests, data and delete files) is read by the executors through the same `pyarrow.fs`."""

from __future__ import annotations

import gzip
from typing import Any

from deltaspark.errors import PermissionDeniedError, StorageError
from deltaspark.file_io import open_file


def _fs(path: str) -> tuple[Any, str]:
    try:
        return open_file(path)
    except Exception as exc:  # unknown scheme, missing credentials
        raise StorageError(path, f"pyarrow.fs cannot open it ({exc})") from exc


def _refused(path: str, exc: OSError) -> StorageError:
    """The store's refusal (denied, unreachable) as deltaspark's error, naming the path."""
    text = str(exc)
    kind = (
        PermissionDeniedError if "ACCESS_DENIED" in text or isinstance(exc, PermissionError) else StorageError
    )
    return kind(path, f"cannot read it ({text})")


def list_names(directory: str) -> list[str] | None:
    """Names of the files directly in `directory`; None when it does not exist."""
    from pyarrow import fs

    filesystem, path = _fs(directory)
    try:
        info = filesystem.get_file_info(path)
        if info.type != fs.FileType.Directory:
            return None
        entries = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
    except OSError as exc:
        raise _refused(directory, exc) from exc
    return sorted(e.base_name for e in entries if e.type == fs.FileType.File)


def read_bytes(path: str) -> bytes | None:
    """A small file's bytes; None when it does not exist."""
    filesystem, local = _fs(path)
    try:
        with filesystem.open_input_stream(local) as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refused(path, exc) from exc


def decompress(path: str, data: bytes) -> bytes:
    """Metadata JSON as written: gzip is recognised by its magic bytes, whatever the file is named."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    return data
