"""Listing `_delta_log` and reading its small files through Spark's Hadoop FileSystem.

Both implementations go through Hadoop's FileSystem, so every store Spark can read (HDFS, S3A,
ABFS, GCS, local) works with the cluster's own configuration and credentials:

- `HadoopStorage` calls the FileSystem API over py4j (classic sessions);
- `DataFrameStorage` uses the DataFrame API only (Spark Connect, where the JVM is out of reach):
  a `binaryFile` scan lists a directory, a `text` scan reads a small file.
"""

from __future__ import annotations

import functools
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import DeltaSparkError, PermissionDeniedError, UnsupportedSessionError
from deltaspark.spark_compat import is_connect
from deltaspark.spark_errors import raise_translated

log = logging.getLogger(__name__)

T = TypeVar("T")


# A corrupt or missing log file must fail the read, whatever the session says about data files.
# On the local filesystem, Hadoop's client-side `.<name>.crc` files are bypassed: tools that edit
# a log by hand leave them stale, and they are no part of the Delta protocol (delta-rs ignores them
# too). Content is still validated: every line must parse as an action.
STRICT_READ_OPTIONS = {
    "ignoreCorruptFiles": "false",
    "ignoreMissingFiles": "false",
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


@dataclass(frozen=True)
class FileStatus:
    path: str  # fully qualified, as the FileSystem reports it
    name: str
    size: int
    modification_time: int  # milliseconds since the epoch


def join_path(parent: str, child: str) -> str:
    return parent.rstrip("/") + "/" + child


def parent_of(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def name_of(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class Storage(ABC):
    """The few file operations the log reader needs; everything bigger is a Spark scan."""

    # Whether `read_text` is a direct file read (not a Spark job), so reading a few small log
    # files on the driver is cheaper than a job.
    direct_reads = False

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @abstractmethod
    def qualify(self, path: str) -> str:
        """The fully qualified form of a path (scheme and authority added)."""

    @abstractmethod
    def list_dir(self, path: str, name_glob: str | None = None) -> list[FileStatus] | None:
        """Files directly in a directory (optionally only names matching a Hadoop glob);
        `None` when the directory does not exist."""

    @abstractmethod
    def read_text(self, path: str) -> str | None:
        """A small file's content as UTF-8; `None` when it does not exist."""

    def read_bytes(self, path: str) -> bytes | None:
        """A small file's bytes; only where `direct_reads` (the driver reads files itself)."""
        raise NotImplementedError(f"{type(self).__name__} reads no bytes on the driver")

    def read_tail(self, path: str, size: int, length: int, local: bool = True) -> bytes:
        """The last `length` bytes of a file of `size` bytes; only where `direct_reads`."""
        raise NotImplementedError(f"{type(self).__name__} reads no bytes on the driver")

    def last_lines(self, files: list[tuple[str, int]]) -> list[str | None]:
        """The last non-blank line of each `(path, size)` text file (empty when it has none, `None`
        when it is gone), reading only the files' ends, in parallel."""
        if len(files) == 1:
            return [self.last_line(*files[0])]
        with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(files))) as pool:
            return list(pool.map(lambda f: self.last_line(*f), files))

    def last_line(self, path: str, size: int) -> str | None:
        text = self.read_text(path)
        return None if text is None else last_non_blank_line(text)[0]

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    def statuses(self, paths: list[str]) -> list[FileStatus | None]:
        """The status of each file (`None` where it does not exist): a directory holding many of
        them is listed once, the others are asked for one by one, in parallel."""
        by_dir: dict[str, list[str]] = {}
        for p in paths:
            by_dir.setdefault(parent_of(p), []).append(p)
        found: dict[str, FileStatus | None] = {}
        single: list[str] = []
        for directory, files in by_dir.items():
            if len(files) < _LIST_DIR_FROM:
                single += files
                continue
            listed = {s.name: s for s in self.list_dir(directory) or []}
            found.update({p: listed.get(name_of(p)) for p in files})
        if single:
            with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(single))) as pool:
                found.update(zip(single, pool.map(self.status, single), strict=True))
        return [found[p] for p in paths]

    # ---- changing files: checkpoints and metadata cleanup (classic sessions only) ---------------
    def _cannot_write(self, operation: str) -> UnsupportedSessionError:
        return UnsupportedSessionError(
            f"Cannot {operation} on a Spark Connect session: deltaspark moves and deletes files in "
            "_delta_log through Hadoop's FileSystem over py4j, which Spark Connect does not expose; "
            "use a classic session (spark-submit, pyspark, a notebook attached to the cluster)"
        )

    def status(self, path: str) -> FileStatus | None:
        """A file's status; `None` when it does not exist."""
        raise self._cannot_write("stat files")

    def list_subdirs(self, path: str) -> list[FileStatus]:
        """The directories directly in `path` (empty when `path` does not exist)."""
        raise self._cannot_write("list directories")

    def mkdirs(self, path: str) -> None:
        raise self._cannot_write("create directories")

    def write_text(self, path: str, text: str, overwrite: bool = False) -> None:
        """Create a small UTF-8 file; fails if it exists unless `overwrite`."""
        self.write_bytes(path, text.encode("utf-8"), overwrite)

    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Create a small file; fails if it exists unless `overwrite`."""
        raise self._cannot_write("write files")

    def rename(self, src: str, dst: str) -> bool:
        """Move `src` to `dst` unless `dst` exists: never overwrites (False when `dst` was there)."""
        raise self._cannot_write("rename files")

    def replace(self, src: str, dst: str) -> None:
        """Move `src` over `dst`, for hints meant to be overwritten such as `_last_checkpoint`."""
        raise self._cannot_write("rename files")

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete a file (or a directory with `recursive`); False when there was nothing to delete."""
        raise self._cannot_write("delete files")

    def list_files_recursive(self, path: str) -> list[FileStatus]:
        """Every file under `path` (empty when it does not exist); for small staging directories."""
        raise self._cannot_write("list directories")

    def decode_base64_to(self, src: str, dst: str) -> int:
        """Create `dst` (never overwriting it) holding the bytes `src`'s base64 text encodes; returns
        its size. The bytes stream through the driver's JVM: Spark's writers write text, not bytes,
        so executors stage binary files (deletion vectors) as base64 text."""
        raise self._cannot_write("write files")


_READ_THREADS = 16
_LIST_DIR_FROM = 8  # files of one directory from which `statuses` lists it instead
LINE_BREAK = re.compile(r"\r\n|\r|\n")  # how Hadoop's line reader splits a text file


def last_non_blank_line(text: str) -> tuple[str, bool]:
    """The last non-blank line of `text` and whether a line break precedes it (so that it is
    whole even when `text` is only the end of a file)."""
    lines = LINE_BREAK.split(text)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip(" \t") != "":
            return lines[i], i > 0
    return "", False


def last_line_of(read: Callable[[int, int], bytes], size: int) -> str:
    """The last non-blank line of a file of `size` bytes, read backwards in growing chunks
    (`read(begin, end)`) until the line is whole."""
    chunk, start, data = 8192, size, b""
    while start > 0:
        begin = max(0, start - chunk)
        data = read(begin, start) + data
        start, chunk = begin, chunk * 4
        # A chunk may start inside a multi-byte character: only text after a line break counts.
        line, whole = last_non_blank_line(data.decode("utf-8", "replace"))
        if whole or start == 0:
            return line
    return ""


# A path's scheme and authority, as Hadoop's `Path` splits them.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(?://([^/]*))?")
_CLASSES: dict[tuple[int, str], tuple[Any, Any]] = {}


def jvm_class(jvm: Any, name: str) -> Any:
    """The JVM class `name` (fully qualified), resolved once per JVM: py4j resolves
    `jvm.org.apache...` one package at a time, a round trip each."""
    held = _CLASSES.get((id(jvm), name))
    if held is None or held[0] is not jvm:
        found = jvm
        for part in name.split("."):
            found = getattr(found, part)
        held = _CLASSES[(id(jvm), name)] = (jvm, found)
    return held[1]


def local_file(path: str) -> str | None:
    """The local path of a `file:` URI (as Hadoop qualifies local paths), else None."""
    if path.startswith("file://"):
        rest = path[len("file://") :]
        return rest if rest.startswith("/") else None
    if path.startswith("file:/"):
        return path[len("file:") :]
    return None


def _named_errors(method: Callable[..., T]) -> Callable[..., T]:
    """File system failures (permission denied, no FileSystem for the scheme, ...) as deltaspark
    errors naming the path, instead of a py4j stack trace."""

    @functools.wraps(method)
    def wrapper(self: Storage, path: str, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, path, *args, **kwargs)
        except DeltaSparkError:
            raise
        except Exception as exc:
            raise_translated(exc, self.spark, path)
            raise  # pragma: no cover - raise_translated always raises

    return wrapper


def _local_bytes(local: str, path: str) -> bytes | None:
    """The bytes of `path`, a file on a local disk at `local`; None when it does not exist."""
    try:
        with open(local, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except PermissionError:
        raise PermissionDeniedError(path, "Permission denied") from None


_STATUS_TEXT = re.compile(
    r"^\w*\{path=(?P<path>.+); isDirectory=(?P<dir>true|false)(?:; length=(?P<length>\d+))?"
    r".*?; modification_time=(?P<time>\d+);"
)


def _parse_statuses(text: str, directory: str) -> list[FileStatus] | None:
    """The files of a listing from its statuses' text (Hadoop's `FileStatus.toString`:
    `{path=...; isDirectory=...; length=...; ...; modification_time=...; ...}`), or None when any
    status does not read exactly so (another file system's own format): the caller then asks the
    JVM file by file. Each path must be a child of `directory`, as a listing's are."""
    out: list[FileStatus] = []
    if not text:
        return out
    prefix = directory.rstrip("/") + "/"  # the directory's path, without scheme and authority
    for item in text.split("\0"):
        match = _STATUS_TEXT.match(item)
        if match is None:
            return None
        if match["dir"] == "true":
            continue
        path = match["path"]
        name = path.rsplit("/", 1)[-1]
        if match["length"] is None or not name or not path.endswith(prefix + name):
            return None
        size, time = int(match["length"]), int(match["time"])
        out.append(FileStatus(path=path, name=name, size=size, modification_time=time))
    return out


class HadoopStorage(Storage):
    direct_reads = True

    def __init__(self, spark: SparkSession) -> None:
        super().__init__(spark)
        self._jvm = spark._jvm  # type: ignore[attr-defined]
        # The session's Hadoop conf includes `spark.hadoop.*` settings made on this session.
        self._conf = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
        self._path_class = jvm_class(self._jvm, "org.apache.hadoop.fs.Path")
        self._io_utils = jvm_class(self._jvm, "org.apache.commons.io.IOUtils")
        self._wrapper: str | None = None  # Scala's array wrapper that joins a listing's statuses
        # FileSystems by (scheme, authority) of the paths asked for: resolving one costs three
        # round trips into the JVM, and a commit touches a dozen files of one FileSystem.
        self._filesystems: dict[tuple[str, str], Any] = {}

    @property
    def jvm(self) -> Any:
        return self._jvm

    @property
    def hadoop_conf(self) -> Any:
        return self._conf

    def filesystem(self, path: str) -> tuple[Any, Any]:
        """The Hadoop FileSystem (raw on local disks) and Path of `path`, for the commit path."""
        return self._fs_and_path(path)

    def _fs_and_path(self, path: str):  # noqa: ANN202 - py4j objects
        jpath = self._path_class(path)
        scheme = _SCHEME.match(path)
        key = (scheme[1].lower(), scheme[2] or "") if scheme else ("", "")  # no scheme: the default FS
        fs = self._filesystems.get(key)
        if fs is None:
            fs = jpath.getFileSystem(self._conf)
            if str(fs.getScheme()) == "file":
                # Bypass Hadoop's client-side .crc files on local disks (see STRICT_READ_OPTIONS).
                fs = fs.getRawFileSystem()
            self._filesystems[key] = fs
        return fs, jpath

    @_named_errors
    def qualify(self, path: str) -> str:
        fs, jpath = self._fs_and_path(path)
        return str(fs.makeQualified(jpath).toString())

    @_named_errors
    def exists(self, path: str) -> bool:
        fs, jpath = self._fs_and_path(path)
        return bool(fs.exists(jpath))

    def uri_string(self, path: str) -> str:
        """`path` as Spark's scans name a file (`_metadata.file_path`: its URI, escaped)."""
        return str(self._path_class(path).toUri().toString())

    @_named_errors
    def list_dir(self, path: str, name_glob: str | None = None) -> list[FileStatus] | None:
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return None
        if name_glob:
            statuses = fs.globStatus(self._path_class(jpath, name_glob)) or []
        else:
            statuses = fs.listStatus(jpath)
        joined = self._statuses_text(statuses)
        parsed = None if joined is None else _parse_statuses(joined, str(jpath.toUri().getPath()))
        if parsed is not None:
            return parsed
        out = []
        for status in statuses:  # seven round trips into the JVM per file
            if status.isDirectory():
                continue
            file_path = status.getPath()
            out.append(
                FileStatus(
                    path=str(file_path.toString()),
                    name=str(file_path.getName()),
                    size=int(status.getLen()),
                    modification_time=int(status.getModificationTime()),
                )
            )
        return out

    def _statuses_text(self, statuses: Any) -> str | None:
        """Every status of a listing as its text (`FileStatus.toString`) in one round trip into
        the JVM, through Scala's array wrapper (`ArraySeq` in 2.13, `WrappedArray` in 2.12: py4j
        will not pass a `FileStatus[]` where Java's own helpers take `Object[]`); None when
        neither is there."""
        for wrapper in [self._wrapper] if self._wrapper else ["ArraySeq", "WrappedArray"]:
            try:
                text = str(getattr(self._jvm.scala.collection.mutable, wrapper).make(statuses).mkString("\0"))
            except Exception:  # noqa: BLE001 - not this Scala version: try the other, then go file by file
                continue
            self._wrapper = wrapper  # found once per storage
            return text
        return None

    @_named_errors
    def read_text(self, path: str) -> str | None:
        local = local_file(path)
        if local is not None:  # a local disk: Python reads it, without five round trips into the JVM
            data = _local_bytes(local, path)
            return None if data is None else data.decode("utf-8", "replace")
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            return str(self._io_utils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    @_named_errors
    def last_line(self, path: str, size: int) -> str | None:
        local = local_file(path)
        if local is not None:  # a local disk: Python reads it without py4j round trips
            try:
                with open(local, "rb") as handle:

                    def read_local(begin: int, end: int) -> bytes:
                        handle.seek(begin)
                        return handle.read(end - begin)

                    return last_line_of(read_local, size)
            except FileNotFoundError:
                return None
            except PermissionError:
                raise PermissionDeniedError(path, "Permission denied") from None
        fs, jpath = self._fs_and_path(path)
        try:
            stream = fs.open(jpath)
        except Exception as exc:
            if "FileNotFoundException" in str(exc):
                return None
            raise
        try:

            def read(begin: int, end: int) -> bytes:
                stream.seek(begin)
                return bytes(self._io_utils.toByteArray(stream, end - begin))

            return last_line_of(read, size)
        finally:
            stream.close()

    @_named_errors
    def read_tail(self, path: str, size: int, length: int, local: bool = True) -> bytes:
        """The last `length` bytes of a file of `size` bytes (a parquet footer): a local file is
        read by Python (`local`), anything else through its Hadoop FileSystem."""
        where = local_file(path) if local else None
        if where is not None:
            with open(where, "rb") as handle:
                handle.seek(size - length)
                return handle.read(length)
        fs, jpath = self._fs_and_path(path)
        stream = fs.open(jpath)
        try:
            stream.seek(size - length)
            return bytes(self._io_utils.toByteArray(stream, length))
        finally:
            stream.close()

    @_named_errors
    def read_bytes(self, path: str) -> bytes | None:
        """A small file's bytes (a checkpoint or deletion vector read on the driver); `None` when
        it does not exist. A local file is read by Python: through py4j a 10 kB file took 48 ms."""
        local = local_file(path)
        if local is not None:
            return _local_bytes(local, path)
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            return bytes(self._io_utils.toByteArray(stream))
        finally:
            stream.close()

    @_named_errors
    def status(self, path: str) -> FileStatus | None:
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return None
        s = fs.getFileStatus(jpath)
        return FileStatus(
            str(s.getPath().toString()),
            str(s.getPath().getName()),
            int(s.getLen()),
            int(s.getModificationTime()),
        )

    @_named_errors
    def list_subdirs(self, path: str) -> list[FileStatus]:
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return []
        return [
            FileStatus(
                str(s.getPath().toString()), str(s.getPath().getName()), 0, int(s.getModificationTime())
            )
            for s in fs.listStatus(jpath)
            if s.isDirectory()
        ]

    @_named_errors
    def mkdirs(self, path: str) -> None:
        fs, jpath = self._fs_and_path(path)
        fs.mkdirs(jpath)

    @_named_errors
    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        fs, jpath = self._fs_and_path(path)
        stream = fs.create(jpath, overwrite)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    @_named_errors
    def rename(self, src: str, dst: str) -> bool:
        fs, jsrc = self._fs_and_path(src)
        _, jdst = self._fs_and_path(dst)
        # HDFS and object stores refuse to rename onto an existing file, but the local filesystem
        # silently replaces it: check first, so that no engine's log file is ever overwritten.
        if fs.exists(jdst):
            return False
        return bool(fs.rename(jsrc, jdst))

    @_named_errors
    def replace(self, src: str, dst: str) -> None:
        fs, jsrc = self._fs_and_path(src)
        _, jdst = self._fs_and_path(dst)
        for _ in range(5):  # rename fails while `dst` exists on most stores; delete it and retry
            if fs.rename(jsrc, jdst):
                return
            if fs.exists(jdst):
                fs.delete(jdst, False)
        raise OSError(f"could not move {src} to {dst}")

    @_named_errors
    def delete(self, path: str, recursive: bool = False) -> bool:
        fs, jpath = self._fs_and_path(path)
        return bool(fs.delete(jpath, recursive))

    @_named_errors
    def list_files_recursive(self, path: str) -> list[FileStatus]:
        fs, jpath = self._fs_and_path(path)
        if not fs.exists(jpath):
            return []
        out, files = [], fs.listFiles(jpath, True)
        while files.hasNext():
            s = files.next()
            out.append(
                FileStatus(
                    str(s.getPath().toString()),
                    str(s.getPath().getName()),
                    int(s.getLen()),
                    int(s.getModificationTime()),
                )
            )
        return out

    @_named_errors
    def decode_base64_to(self, src: str, dst: str) -> int:
        fs, jsrc = self._fs_and_path(src)
        dst_fs, jdst = self._fs_and_path(dst)
        decoded = self._jvm.java.util.Base64.getMimeDecoder().wrap(fs.open(jsrc))
        out = dst_fs.create(jdst, False)  # fails if it exists: a DV file is never overwritten
        self._jvm.org.apache.hadoop.io.IOUtils.copyBytes(decoded, out, self._conf, True)
        return int(dst_fs.getFileStatus(jdst).getLen())


def _glob_escape(name: str) -> str:
    return "".join("\\" + ch if ch in "{}[]*?,\\" else ch for ch in name)


def _is_missing_path_error(exc: Exception) -> bool:
    text = str(exc)
    return "PATH_NOT_FOUND" in text or "Path does not exist" in text or "FileNotFound" in text


class DataFrameStorage(Storage):
    """Hadoop FileSystem access expressed as DataFrame scans, for Spark Connect sessions."""

    def qualify(self, path: str) -> str:
        # Without the JVM there is no FileSystem to ask; the log reader prefers the qualified
        # paths a listing reports and only falls back to this for a path with no scheme.
        if ":" in path.split("/", 1)[0]:
            return path
        return "file:" + path if path.startswith("/") else path

    @_named_errors
    def _scan(self, path: str, name_glob: str | None) -> list[FileStatus] | None:
        reader = self.spark.read.format("binaryFile")
        if name_glob:
            reader = reader.option("pathGlobFilter", name_glob)
        try:
            rows = (
                reader.load(path)
                .select("path", "length", F.unix_millis("modificationTime").alias("mtime"))
                .collect()
            )
        except Exception as exc:  # AnalysisException over Connect: match by message
            if _is_missing_path_error(exc):
                return None
            raise
        return [FileStatus(r["path"], name_of(r["path"]), int(r["length"]), int(r["mtime"])) for r in rows]

    def exists(self, path: str) -> bool:
        return self._scan(path, None) is not None

    def statuses(self, paths: list[str]) -> list[FileStatus | None]:
        # One scan per directory instead of one per file (each scan is a Spark job).
        by_dir: dict[str, list[str]] = {}
        for p in paths:
            by_dir.setdefault(parent_of(p), []).append(p)
        found: dict[str, FileStatus] = {}
        for directory, files in by_dir.items():
            names = ",".join(_glob_escape(name_of(p)) for p in files)
            listed = {s.name: s for s in self.list_dir(directory, "{" + names + "}") or []}
            found.update({p: listed[name_of(p)] for p in files if name_of(p) in listed})
        return [found.get(p) for p in paths]

    def list_dir(self, path: str, name_glob: str | None = None) -> list[FileStatus] | None:
        statuses = self._scan(path, name_glob)
        if statuses is None or not statuses:
            return statuses
        # binaryFile also lists non-hidden subdirectories; keep the files directly in `path`
        depth = min(s.path.count("/") for s in statuses)
        return [s for s in statuses if s.path.count("/") == depth]

    @_named_errors
    def read_text(self, path: str) -> str | None:
        if name_of(path).startswith(("_", ".")):
            # Spark's file sources skip names starting with `_` or `.` even when named
            # explicitly, so such files (e.g. `_last_checkpoint`) cannot be read this way.
            log.info("Cannot read %s through Spark Connect (hidden file name); treating it as absent", path)
            return None
        try:
            rows = self.spark.read.options(**STRICT_READ_OPTIONS).text(path, wholetext=True).collect()
        except Exception as exc:
            if _is_missing_path_error(exc):
                return None
            raise
        return "".join(r[0] for r in rows)

    @_named_errors
    def last_lines(self, files: list[tuple[str, int]]) -> list[str | None]:
        # One job for all files (each read here is a Spark job).
        if not files:
            return []
        lines = F.filter(F.split("value", r"\r\n|\r|\n"), lambda line: F.trim(line) != "")
        rows = (
            self.spark.read.options(**STRICT_READ_OPTIONS)
            .text([p for p, _ in files], wholetext=True)
            .select(
                F.col("_metadata.file_path").alias("path"), F.coalesce(F.element_at(lines, -1), F.lit(""))
            )
            .collect()
        )
        found = {r[0]: r[1] for r in rows}
        return [found.get(self.qualify(p), found.get(p)) for p, _ in files]


def storage_for(spark: SparkSession) -> Storage:
    return DataFrameStorage(spark) if is_connect(spark) else HadoopStorage(spark)
