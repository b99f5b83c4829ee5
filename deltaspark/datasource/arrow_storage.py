"""`Storage` over `pyarrow.fs`, for code that runs where there is no JVM to ask.

A Python data source's methods (schema, planning, reading, a stream's offsets) run in Python
processes Spark starts, not in the driver's Python process: they have no py4j gateway, so Hadoop's
FileSystem (`HadoopStorage`) is out of reach. This storage reads the log with pyarrow, opening each
location as `file_io.open_file` does (local paths, `file:`, S3 with the session's S3A settings
carried over, HDFS, GCS, Azure through pyarrow's own file systems). It only reads.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from deltaspark.file_io import open_file
from deltaspark.storage import FileStatus, Storage, join_path

if TYPE_CHECKING:
    from pyarrow import fs

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class ArrowStorage(Storage):
    """Read-only `Storage` through pyarrow's file systems; paths are Hadoop-style URIs."""

    direct_reads = True

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type] - no session where this runs

    def qualify(self, path: str) -> str:
        if path.startswith("file:"):
            return "file:/" + path[len("file:") :].lstrip("/")
        if _SCHEME.match(path):
            return path.rstrip("/") if len(path.rstrip("/")) > len(path.split(":", 1)[0]) + 3 else path
        return "file:" + os.path.abspath(path)

    def _info(self, path: str):  # noqa: ANN202 - pyarrow FileInfo
        filesystem, inner = open_file(self.qualify(path))
        return filesystem, inner, filesystem.get_file_info(inner)

    def list_dir(self, path: str, name_glob: str | None = None) -> list[FileStatus] | None:
        """Every file of the directory (the glob, a hint for Hadoop, is not applied: the log
        reader parses and orders what it lists itself)."""
        from pyarrow import fs

        qualified = self.qualify(path)
        filesystem, inner = open_file(qualified)
        if filesystem.get_file_info(inner).type != fs.FileType.Directory:
            return None
        out = []
        for info in filesystem.get_file_info(fs.FileSelector(inner, recursive=False)):
            if info.type != fs.FileType.File:
                continue
            out.append(
                FileStatus(
                    join_path(qualified, info.base_name), info.base_name, info.size or 0, _millis(info)
                )
            )
        return out

    def read_bytes(self, path: str) -> bytes | None:
        handle = self.open_input(path)
        if handle is None:
            return None
        with handle:
            return handle.read()

    def open_input(self, path: str):  # noqa: ANN201 - a pyarrow NativeFile (random access)
        """The file opened for random access (a parquet reader reads what it needs of it); None
        when it is not there."""
        from pyarrow import fs

        filesystem, inner, info = self._info(path)
        if info.type != fs.FileType.File:
            return None
        return filesystem.open_input_file(inner)

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def exists(self, path: str) -> bool:
        from pyarrow import fs

        return self._info(path)[2].type != fs.FileType.NotFound

    def status(self, path: str) -> FileStatus | None:
        from pyarrow import fs

        _, _, info = self._info(path)
        if info.type != fs.FileType.File:
            return None
        return FileStatus(self.qualify(path), info.base_name, info.size or 0, _millis(info))


def _millis(info: fs.FileInfo) -> int:
    """A file's modification time in whole milliseconds, truncated as Hadoop's `FileStatus` (and
    so Spark's listing) gives it: from the nanoseconds, not from `mtime`, which pyarrow rounds
    to microseconds (a file modified at .787999721 s read as .788, a commit timestamp 1 ms later
    than the same log's read by Spark)."""
    return info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
