"""Put-if-absent for `_delta_log`: create `N.json` only if no other writer has, never overwrite it.

Mutual exclusion between writers rests entirely on this one primitive (the protocol's "Requirements
for Writers"). How it is made atomic depends on the file system, as in delta-spark's LogStores:

- `link` (local disks): the commit is written to a hidden temporary file, then hard-linked to its
  name (`link(2)` fails atomically when the name exists, across processes and machines sharing the
  disk); the temporary name is removed. A reader never sees a half-written commit.
- `rename` (HDFS, ViewFS, ABFS, Ozone): Hadoop's `FileContext.rename(..., Rename.NONE)`, which these
  file systems perform atomically and refuse when the destination exists.
- `conditional-create` (S3A on Hadoop 3.4.2+, and any file system that declares the path capability
  `fs.option.create.conditional.overwrite`): a create that the store itself refuses when the object
  exists (`If-None-Match: *`); the object becomes visible only when complete.
- `create` (GCS): the connector's create without overwrite is a generation-0 precondition.
- `single-driver`: an existence check and a create under an in-process lock. Correct only if one
  Spark driver writes to the table at a time; never chosen automatically, only by setting
  `spark.deltaspark.log.commitProtocol=single-driver` (delta-spark's S3SingleDriverLogStore).

Any other file system is refused with `UnsafeCommitStoreError` naming the options. Spark Connect
sessions have no FileSystem to call, so commits there raise `UnsupportedSessionError`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from py4j.protocol import Py4JJavaError

from deltaspark.errors import CommitOutcomeUnknownError, UnsafeCommitStoreError, UnsupportedSessionError
from deltaspark.spark_compat import conf_get
from deltaspark.spark_errors import raise_translated
from deltaspark.storage import HadoopStorage, Storage, jvm_class, name_of, parent_of

log = logging.getLogger(__name__)

COMMIT_PROTOCOL_CONF = "spark.deltaspark.log.commitProtocol"
METHODS = ("link", "rename", "conditional-create", "create", "single-driver")
CONDITIONAL_CAPABILITY = "fs.option.create.conditional.overwrite"

# File systems whose rename is atomic and refuses an existing destination.
_ATOMIC_RENAME_SCHEMES = frozenset({"hdfs", "viewfs", "abfs", "abfss", "ofs", "o3fs"})
_SINGLE_DRIVER_LOCK = threading.Lock()


def choose_method(scheme: str, conditional_create: bool, configured: str | None) -> str:
    """The put-if-absent method for a scheme (see the module docstring); refuses unsafe stores."""
    choice = (configured or "auto").strip().lower()
    if choice != "auto":
        if choice not in METHODS:
            raise UnsafeCommitStoreError(
                f"{COMMIT_PROTOCOL_CONF}={configured!r} is not one of auto, {', '.join(METHODS)}"
            )
        return choice
    scheme = scheme.lower()
    if scheme == "file":
        return "link"
    if scheme in _ATOMIC_RENAME_SCHEMES:
        return "rename"
    if conditional_create:
        return "conditional-create"
    if scheme == "gs":
        return "create"
    hint = (
        " S3A gains conditional create (If-None-Match) with Hadoop 3.4.2 or later "
        "(fs.s3a.create.conditional.enabled=true, the default there)."
        if scheme in ("s3", "s3a", "s3n")
        else ""
    )
    raise UnsafeCommitStoreError(
        f"Cannot commit safely to {scheme}:// paths: this file system offers neither an atomic "
        "rename that refuses an existing destination nor a conditional create, so two writers could "
        "both write the same log version and one commit would be lost." + hint + " If only one Spark "
        f"driver ever writes to this table, set {COMMIT_PROTOCOL_CONF}=single-driver (as delta-spark's "
        "S3SingleDriverLogStore assumes)."
    )


def _java_class(exc: BaseException) -> str:
    if isinstance(exc, Py4JJavaError):
        try:
            return str(exc.java_exception.getClass().getName())
        except Exception:  # noqa: BLE001 - the gateway may be gone
            return ""
    return ""


def _already_exists(exc: BaseException) -> bool:
    name = _java_class(exc)
    text = str(exc)
    return (
        name.endswith("FileAlreadyExistsException")
        or "FileAlreadyExistsException" in text
        or "PreconditionFailed" in text
        or ("412" in text and "Precondition" in text)
    )


class LogStore:
    """Writes new files into `_delta_log` with put-if-absent semantics."""

    def __init__(self, storage: Storage) -> None:
        if not isinstance(storage, HadoopStorage):
            raise UnsupportedSessionError(
                "Cannot commit on a Spark Connect session: deltaspark creates log entries with "
                "put-if-absent through Hadoop's FileSystem over py4j, which Spark Connect does not "
                "expose; use a classic session (spark-submit, pyspark, a notebook attached to the cluster)"
            )
        self.storage = storage
        self._jvm = storage.jvm

    def method_for(self, path: str) -> str:
        fs, jpath = self.storage.filesystem(path)
        scheme = str(fs.getUri().getScheme())
        try:
            conditional = bool(fs.hasPathCapability(jpath.getParent(), CONDITIONAL_CAPABILITY))
        except Py4JJavaError:
            conditional = False
        return choose_method(scheme, conditional, conf_get(self.storage.spark, COMMIT_PROTOCOL_CONF, None))

    # ---- the entry point ------------------------------------------------------------------------
    def put_if_absent(self, path: str, head: str, parts: list[str] | tuple[str, ...] = ()) -> bool:
        """Create `path` holding `head` followed by the bytes of the files `parts` (a commit's bulk,
        written by Spark tasks), unless `path` exists. False when another writer was first.

        The content is streamed through the driver's JVM, never held by Python. For `link` and
        `rename` it goes to a hidden temporary file first, so a reader never sees it half-written.
        """
        method = self.method_for(path)
        write = self._writer(head, parts)
        if method not in ("link", "rename"):
            return self._create(path, method, write)
        temp = self._temp_name(path)
        fs, jtemp = self.storage.filesystem(temp)
        self._create_stream(fs, jtemp, temp, False, write)
        try:
            return self._link(temp, path) if method == "link" else self._rename(temp, path)
        finally:
            self.storage.delete(temp)

    def _writer(self, head: str, parts: list[str] | tuple[str, ...]) -> Any:
        data = bytearray(head.encode("utf-8"))
        conf = self.storage.hadoop_conf
        copy_bytes = jvm_class(self._jvm, "org.apache.hadoop.io.IOUtils").copyBytes

        def write(stream: Any) -> None:
            stream.write(data)
            for part in parts:
                fs, jpart = self.storage.filesystem(part)
                source = fs.open(jpart)
                try:
                    copy_bytes(source, stream, conf, False)
                finally:
                    source.close()

        return write

    # ---- methods --------------------------------------------------------------------------------
    def _temp_name(self, path: str) -> str:
        return f"{parent_of(path)}/.{name_of(path)}.{uuid.uuid4().hex}.tmp"

    def _link(self, src: str, dst: str) -> bool:
        _, jsrc = self.storage.filesystem(src)
        _, jdst = self.storage.filesystem(dst)
        files = jvm_class(self._jvm, "java.nio.file.Files")
        file_class = jvm_class(self._jvm, "java.io.File")
        source = file_class(jsrc.toUri().getPath()).toPath()
        target = file_class(jdst.toUri().getPath()).toPath()
        try:
            files.createLink(target, source)
        except Py4JJavaError as exc:
            if _already_exists(exc):
                return False
            raise_translated(exc, self.storage.spark, dst)
        return True

    def _rename(self, src: str, dst: str) -> bool:
        _, jsrc = self.storage.filesystem(src)
        _, jdst = self.storage.filesystem(dst)
        jvm = self._jvm
        context = jvm_class(jvm, "org.apache.hadoop.fs.FileContext").getFileContext(
            jdst.toUri(), self.storage.hadoop_conf
        )
        rename_enum = jvm.org.apache.hadoop.fs.Options.Rename  # a nested class: resolved as py4j does
        options = self.storage.spark.sparkContext._gateway.new_array(rename_enum, 1)
        options[0] = rename_enum.NONE
        try:
            context.rename(jsrc, jdst, options)
        except Py4JJavaError as exc:
            if _already_exists(exc):
                return False
            raise_translated(exc, self.storage.spark, dst)
        return True

    def _create(self, path: str, method: str, write: Any) -> bool:
        fs, jpath = self.storage.filesystem(path)
        if method == "single-driver":
            with _SINGLE_DRIVER_LOCK:
                if fs.exists(jpath):
                    return False
                return self._create_stream(fs, jpath, path, False, write)
        return self._create_stream(fs, jpath, path, method == "conditional-create", write)

    def _create_stream(self, fs: Any, jpath: Any, path: str, conditional: bool, write: Any) -> bool:
        try:
            if conditional:
                stream = fs.createFile(jpath).overwrite(False).must(CONDITIONAL_CAPABILITY, True).build()
            else:
                stream = fs.create(jpath, False)
        except Py4JJavaError as exc:
            if _already_exists(exc):
                return False
            raise_translated(exc, self.storage.spark, path)
        try:
            write(stream)
        except Py4JJavaError as exc:
            stream.close()
            raise_translated(exc, self.storage.spark, path)
        try:
            stream.close()  # object stores publish (and check the precondition) here
        except Py4JJavaError as exc:
            if _already_exists(exc):
                return False
            version = _version_of(path)
            raise CommitOutcomeUnknownError(path, version, str(exc).splitlines()[0]) from exc
        return True


def _version_of(path: str) -> int:
    head = name_of(path).split(".", 1)[0]
    return int(head) if head.isdigit() else -1
