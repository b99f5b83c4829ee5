"""Turning what Spark, Hadoop and Python workers raise into deltaspark's own errors.

Failures inside Spark jobs reach the driver as Java or Python-worker exceptions whose text is all
that is left of the cause. deltaspark's own lazy checks (`raise_error` in a plan, errors raised by
its executor code) write messages in one shape, `deltaspark: <what> <path>: <reason>`, so that an
eager operation can raise the matching `DeltaSparkError`; Spark's and Hadoop's own messages for
unreadable, missing or forbidden files, and for missing file systems, are recognised too.
Anything else is left alone: a bug or a cluster problem must not be dressed up as a table problem.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.errors import AnalysisException
from pyspark.sql import Column
from pyspark.sql import functions as F

from deltaspark.errors import (
    CorruptDataFileError,
    CorruptLogError,
    DeletionVectorError,
    DeltaSparkError,
    MissingDataFileError,
    PermissionDeniedError,
    StorageError,
    UnsupportedFileSystemError,
    WorkerEnvironmentError,
)
from deltaspark.spark_compat import internal_plan

CORRUPT_LOG = "corrupt Delta log file"
CORRUPT_DATA = "corrupt data file"
MISSING_DATA = "missing data file"

# deltaspark's own messages, not the source lines raising them that a Python worker's traceback
# quotes (`raise ...(f"deltaspark: ...")`): never right after a quote.
_MINE = r"(?<![\"'])deltaspark: "
_OWN = re.compile(_MINE + r"(corrupt Delta log file|corrupt data file|missing data file) (.+?): ([^\n]*)")
_OWN_DV = re.compile(_MINE + r"(deletion vector [^\n]*)")
_OWN_ANY = re.compile(_MINE + r"([^\n]*)")
_READ_FILE = re.compile(
    r"(?:while reading file|footer for file:?|reading footer for file:?|Could not read footer for file:?)\s+"
    r"(?:FileStatus\{path=)?(\S+?)(?:;|\.?\s|$)"
)
_NOT_PARQUET = re.compile(r"(\S+) is not a Parquet file")
_NOT_FOUND = re.compile(
    r"(?:Path does not exist:|FileNotFoundException:\s*(?:File)?)\s*(\S+?)(?:\s+does not exist|\.?\s|$)"
)
_PERMISSION = re.compile(
    r"(?:(\S+) \(Permission denied\)"
    r"|AccessDeniedException:\s*(\S+)"
    r"|AccessControlException:[^\n]*?(?:inode|path)[ =]\"?([^\s\":]+)"
    r"|Permission denied[^\n]*?:\s*(/\S+|[a-z0-9]+:/\S+))"
)
_NOT_DIRECTORY = re.compile(r"ParentNotDirectoryException:\s*(?:Parent path is not a directory:\s*)?(\S+)")
_NO_FILESYSTEM = re.compile(r'No FileSystem for scheme[: ]+"?([A-Za-z0-9+.-]+)"?')
_MISSING_CLASS = re.compile(r"Class (org\.apache\.hadoop\.fs\.\S+FileSystem) not found")
_NO_MODULE = re.compile(r"No module named '([^']+)'")
_PARQUET_REASONS = (
    ("is not a Parquet file", "not a parquet file (no parquet magic number)"),
    ("footer is too large", "corrupt parquet footer"),
    ("Could not read footer", "unreadable parquet footer"),
    ("CANNOT_READ_FILE_FOOTER", "unreadable parquet footer"),
    ("can not read class org.apache.parquet", "corrupt parquet metadata"),
    ("EOFException", "file is truncated"),
    ("Premature EOF", "file is truncated"),
    ("ParquetDecodingException", "corrupt parquet data"),
    ("Malformed", "malformed content"),
)
# The connector each scheme needs: scheme -> (Maven artifact, what it provides)
_SCHEME_PACKAGES = {
    "s3a": ("org.apache.hadoop:hadoop-aws", "S3A (hadoop-aws and the AWS SDK bundle it depends on)"),
    "s3": ("org.apache.hadoop:hadoop-aws", "S3 through S3A (hadoop-aws; map s3:// to S3AFileSystem)"),
    "abfs": ("org.apache.hadoop:hadoop-azure", "ABFS (hadoop-azure)"),
    "abfss": ("org.apache.hadoop:hadoop-azure", "ABFS (hadoop-azure)"),
    "wasbs": ("org.apache.hadoop:hadoop-azure", "WASB (hadoop-azure)"),
    "gs": ("com.google.cloud.bigdataoss:gcs-connector", "GCS (the GCS connector)"),
}


# What some log files are part of, by file name, for messages about them (a sidecar's checkpoint):
# Spark's own read errors name only the file. Bounded; filled as snapshots are loaded.
_ROLES: OrderedDict[str, str] = OrderedDict()
_ROLES_MAX = 100_000


def note_role(path: str, role: str) -> None:
    """Remember what the log file at `path` is (e.g. "a sidecar of checkpoint ..."), so that an
    error Spark raises while reading it says so."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    _ROLES[name] = role
    _ROLES.move_to_end(name)
    while len(_ROLES) > _ROLES_MAX:
        _ROLES.popitem(last=False)


def _corrupt_log(path: str, reason: str) -> CorruptLogError:
    role = _ROLES.get(path.rstrip("/").rsplit("/", 1)[-1])
    return CorruptLogError(path, f"{reason} ({role})" if role and role not in reason else reason)


def own_error(what: str, path: Column | str, reason: Column | str) -> Column:
    """A lazy failure in deltaspark's message shape: `deltaspark: <what> <path>: <reason>`."""
    path_col = F.lit(path) if isinstance(path, str) else path
    reason_col = F.lit(reason) if isinstance(reason, str) else reason
    return F.raise_error(F.concat(F.lit(f"deltaspark: {what} "), path_col, F.lit(": "), reason_col))


def _text(exc: BaseException) -> str:
    parts = [str(exc)]
    # py4j errors and PySpark's captured exceptions keep the Java throwable: walk its causes.
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None and hasattr(java, "getCause"):
        try:
            parts.append(str(java.toString()))
            cause = java.getCause()
            depth = 0
            while cause is not None and depth < 8:
                parts.append(str(cause.toString()))
                cause = cause.getCause()
                depth += 1
        except Exception:  # noqa: S110 - the JVM may be gone; the Python text is enough
            pass
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        parts.append(str(cause))
    return "\n".join(parts)


def _reason(text: str) -> str:
    for needle, reason in _PARQUET_REASONS:
        if needle in text:
            return reason
    return "cannot be read"


def _is_log_path(path: str) -> bool:
    return "/_delta_log/" in path or path.rstrip("/").endswith("/_delta_log")


def hadoop_version_hint(spark: Any = None) -> str:
    """The Hadoop version the session's JVM runs (e.g. "3.4.1"), or empty when it cannot tell."""
    try:
        return f"{spark._jvm.org.apache.hadoop.util.VersionInfo.getVersion()}"  # type: ignore[union-attr]
    except Exception:
        return ""


def unsupported_file_system(scheme: str, path: str, spark: Any = None) -> UnsupportedFileSystemError:
    artifact, provides = _SCHEME_PACKAGES.get(
        scheme.lower(), ("the Hadoop FileSystem implementation", f"the {scheme}:// scheme")
    )
    version = hadoop_version_hint(spark)
    # Hadoop's own connectors are released with Hadoop: the cluster's version is the one to use.
    coordinate = (
        f"{artifact}:{version}" if version and artifact.startswith("org.apache.hadoop:") else artifact
    )
    return UnsupportedFileSystemError(
        path,
        f"This Spark cluster has no Hadoop FileSystem for {scheme}:// paths; it needs {provides} on its "
        f"classpath, matching its Hadoop version{f' {version}' if version else ''} (e.g. "
        f"--packages {coordinate}, or the platform's own connector: EMR and Databricks ship one)",
    )


def translate(exc: BaseException, spark: Any = None, path: str = "") -> DeltaSparkError | None:
    """The deltaspark error `exc` stands for, or None when it is not one deltaspark can name."""
    if isinstance(exc, DeltaSparkError):
        return exc
    text = _text(exc)
    # An analysis error is raised before anything runs: deltaspark's lazy messages in its text are
    # templates in a printed plan, not failures (they must not turn a bug into "corrupt log").
    runtime = not isinstance(exc, AnalysisException)
    if runtime and (m := _OWN_DV.search(text)):
        return DeletionVectorError(m.group(1).strip())
    if runtime and (m := _OWN.search(text)):
        what, where, reason = m.group(1), m.group(2), m.group(3).strip()
        if what == CORRUPT_LOG:
            return _corrupt_log(where, reason)
        if what == CORRUPT_DATA:
            return CorruptDataFileError(where, reason)
        return MissingDataFileError(where, reason)
    if m := _NO_MODULE.search(text):
        module = m.group(1)
        return WorkerEnvironmentError(
            f"Spark's Python workers cannot import `{module}`, which deltaspark's executor code needs "
            "(deletion vectors, the distributed reader). Install deltaspark's dependencies (pyarrow, "
            "pyroaring, pandas) in the Python the workers run, or point them at one that has them: "
            "PYSPARK_PYTHON=/path/to/python before the session starts, or spark.pyspark.python"
        )
    if (m := _NO_FILESYSTEM.search(text)) or (m := _MISSING_CLASS.search(text)):
        token = m.group(1)
        scheme = token if "." not in token else _scheme_of(path) or token
        return unsupported_file_system(scheme, path, spark)
    if m := _PERMISSION.search(text):
        where = next((g for g in m.groups() if g), path)
        return PermissionDeniedError(where, "Permission denied")
    if m := _NOT_DIRECTORY.search(text):
        return StorageError(m.group(1), "A file is in the way (a directory is needed here)")
    unreadable = (
        "FAILED_READ_FILE",
        "Encountered error while reading file",  # Spark 3.5's FAILED_READ_FILE
        "CANNOT_READ_FILE_FOOTER",
        "Could not read footer",
        "is not a Parquet file",
    )
    if any(needle in text for needle in unreadable):
        m = _READ_FILE.search(text) or _NOT_PARQUET.search(text)
        where = m.group(1) if m else path
        if "FileNotFoundException" in text or "does not exist" in text:
            return _missing(where or path)
        if _is_log_path(where):
            return _corrupt_log(where, _reason(text))
        return CorruptDataFileError(where, _reason(text))
    if m := _NOT_FOUND.search(text):
        return _missing(m.group(1))
    if runtime and (m := _OWN_ANY.search(text)):
        return DeltaSparkError(m.group(0).strip())
    return None


def _missing(path: str) -> DeltaSparkError:
    if _is_log_path(path):
        return _corrupt_log(path, "the file is missing (deleted while it was being read?)")
    return MissingDataFileError(path)


def _scheme_of(path: str) -> str | None:
    head = path.split("/", 1)[0]
    return head[:-1] if head.endswith(":") else None


def raise_translated(exc: BaseException, spark: Any = None, path: str = "") -> None:
    """Re-raise `exc` as the deltaspark error it stands for, if any (else re-raise it as is)."""
    translated = translate(exc, spark, path)
    if translated is None or translated is exc:
        raise exc
    raise translated from exc


F_ = TypeVar("F_", bound=Callable[..., Any])


def eager_with(translator: Callable[[BaseException, Any], DeltaSparkError | None]) -> Callable[[F_], F_]:
    """Mark an eager operation whose failures `translator(exc, spark)` names: whatever it runs, a
    failure it can name is a `DeltaSparkError`; others are re-raised as they are."""

    def decorate(func: F_) -> F_:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                with internal_plan():
                    return func(*args, **kwargs)
            except DeltaSparkError:
                raise
            except Exception as exc:
                # The session: the first argument's (a table, snapshot or storage), or that argument.
                first = args[0] if args else None
                spark = getattr(first, "_spark", None) or getattr(first, "spark", None) or first
                translated = translator(exc, spark if hasattr(spark, "_jvm") else None)
                if translated is None or translated is exc:
                    raise
                raise translated from exc

        return wrapper  # type: ignore[return-value]

    return decorate


def eager(func: F_) -> F_:
    """Mark an eager operation: whatever it runs, a failure it can name is a `DeltaSparkError`."""
    return eager_with(translate)(func)
