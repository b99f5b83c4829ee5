"""Protocol and metadata of JSON commits read on the driver: a few small ones, or local ones.

A Spark job costs a notebook user about half a second even for a table of three commits, most
of it building the job. When the segment is only a few small JSON commits (or a held answer
covers everything before them, see `protocol_metadata_cache`), their protocol,
metaData and commitInfo lines are read here instead. So are longer commits on a local disk (up
to `spark.deltaspark.snapshot.driverLocalLogBytes`): Python reads their bytes and drops the file
actions by their first bytes without decoding them - 421 MB of commits in 0.9 s, where the Spark
job, which parses nothing more, took 6.3 s in a new session. Both with the same rules as the Spark path
(`protocol_metadata.frame`): the same lines selected, the newest non-null value of each
action wins. This path only answers when every line it looks at is clean and typed exactly as
the action schema says; anything else (a corrupt line, a field of an unexpected type, two
different values at one version) returns `None`, and the Spark path gives the answer or the
error, so a damaged log reads exactly as it did before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession

from deltaspark.log import action_schemas as schemas
from deltaspark.log.files import LogFile
from deltaspark.log.replay import ACTION_KEY, DRIVER_JSON_BYTES, DRIVER_JSON_FILES, FILE_ACTION_PREFIXES
from deltaspark.log.typed_json import UnclearError, json_object, parquet_actions, typed
from deltaspark.spark_compat import conf_get
from deltaspark.storage import local_file

# Segments above these stay on Spark: the driver only ever reads a few small files...
MAX_FILES = DRIVER_JSON_FILES
MAX_BYTES = DRIVER_JSON_BYTES
# ... or local ones, up to this many bytes in all (a session setting; 0: only small logs), each
# file read whole and dropped before the next.
LOCAL_BYTES_CONF = "spark.deltaspark.snapshot.driverLocalLogBytes"
DEFAULT_LOCAL_BYTES = 1 << 30
MAX_LOCAL_FILE_BYTES = 256 << 20

_KINDS = ("protocol", "metaData", "commitInfo")
# The Spark path's regex with Java's `\s`, not Python's Unicode whitespace.
_ACTION_KEY = re.compile(ACTION_KEY.replace(r"\s", r"[ \t\n\x0b\f\r]"))
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # Hadoop's line reader, as `storage.LINE_BREAK`
_FILE_ACTION_PREFIXES = tuple(p.encode() for p in FILE_ACTION_PREFIXES)
_TYPES = {"protocol": schemas.PROTOCOL, "metaData": schemas.METADATA}


def _typed(kind: str, value: Any) -> Any:
    if not isinstance(value, dict):
        raise UnclearError
    if kind in _TYPES:
        return typed(value, _TYPES[kind])
    return value  # commitInfo is free-form


def _actions_of(data: bytes) -> list[dict[str, Any]]:
    """The protocol/metaData/commitInfo values of one file's lines, selected as the Spark path does.

    File actions are dropped by their first bytes before anything is decoded (no UTF-8 sequence
    holds a line break byte, so a line decodes alone as it does within its file)."""
    lines = _LINE_BREAK.split(data) if b"\r" in data else data.split(b"\n")
    found = []
    for raw in lines:
        if raw.startswith(_FILE_ACTION_PREFIXES):
            continue
        line = raw.decode("utf-8", "replace")
        if line.strip(" ") == "":
            continue
        key = _ACTION_KEY.match(line)
        if key is None:
            raise UnclearError  # not an action: the Spark path names the file
        if key[1] not in _KINDS:
            continue
        parsed = json_object(line)
        found.append({k: _typed(k, parsed[k]) for k in _KINDS if parsed.get(k) is not None})
    return found


def eligible(files: list[LogFile], has_checkpoint: bool, local_bytes: int = 0) -> bool:
    """Whether these files are few and small enough to read on the driver, or all on a local disk
    and at most `local_bytes` in all (after a checkpoint only when an earlier answer covers it, see
    `protocol_metadata_cache`)."""
    if has_checkpoint or not files:
        return False
    size = sum(f.size for f in files)
    if len(files) <= MAX_FILES and size <= MAX_BYTES:
        return True
    local = all(local_file(f.path) is not None and f.size <= MAX_LOCAL_FILE_BYTES for f in files)
    return local and size <= local_bytes


def local_bytes(spark: SparkSession) -> int:
    """The session's `driverLocalLogBytes` (a negative or unreadable value: the default)."""
    value = conf_get(spark, LOCAL_BYTES_CONF, str(DEFAULT_LOCAL_BYTES)).strip()
    try:
        return max(0, int(value))
    except ValueError:
        return DEFAULT_LOCAL_BYTES


def checkpoint_eligible(files: list[LogFile]) -> bool:
    """Whether a checkpoint's own files are parquet and small enough to read on the driver."""
    parquet = all(f.file_format == "parquet" for f in files)
    return parquet and 0 < len(files) <= MAX_FILES and sum(f.size for f in files) <= MAX_BYTES // 8


_CHECKPOINT_KINDS = {"protocol": schemas.PROTOCOL, "metaData": schemas.METADATA, "sidecar": schemas.SIDECAR}
# The Spark path keeps a checkpoint row for a kind when these (required) fields are set.
_REQUIRED = {"protocol": ("minReaderVersion",), "metaData": ("id",), "sidecar": ("path", "sizeInBytes")}


def checkpoint_protocol_and_metadata(
    files: list[LogFile], parts: list[bytes | None]
) -> dict[str, Any] | None:
    """The protocol, metaData and sidecars of a parquet checkpoint's parts, as the Spark path's
    one-row frame has them; `None` when unclear (two protocols, a row the Spark path's filter
    would treat otherwise, a column typed otherwise than the schema). `UnreadableParquetError`
    (naming the part) when a part's pages do not decode."""
    found: dict[str, tuple[Any, str]] = {}
    sidecars: list[dict[str, Any]] = []
    try:
        for f, data in zip(files, parts, strict=True):
            if data is None:
                return None
            for row in parquet_actions(data, _CHECKPOINT_KINDS, f.path):
                for kind, value in row.items():
                    if value is None:
                        continue
                    kept = any(value.get(name) is not None for name in _REQUIRED[kind])
                    if not kept or (kind != "sidecar" and any(value.get(n) is None for n in _REQUIRED[kind])):
                        return None  # a row the Spark path's filter reads its own way
                    if kind == "sidecar":
                        sidecars.append(value)
                    elif kind in found and found[kind][0] != value:
                        return None  # two different values in one checkpoint
                    else:
                        found[kind] = (value, f.path)
    except UnclearError:
        return None
    return {
        "protocol": found["protocol"][0] if "protocol" in found else None,
        "metaData": found["metaData"][0] if "metaData" in found else None,
        "commitInfo": None,
        "protocolFile": found["protocol"][1] if "protocol" in found else None,
        "metaDataFile": found["metaData"][1] if "metaData" in found else None,
        "sidecars": sidecars,
    }


def protocol_and_metadata(
    files: list[LogFile],
    contents: Iterable[bytes | None],
    version: int,
    base: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The same fields as the Spark path's one-row frame, from the files' bytes (taken one file at
    a time, `None` for a file gone since listing); `None` when unclear.

    `version` is the snapshot's version: only its commitInfo is kept. `base` is the answer for the
    log before `files` (all newer than it), which they update.
    """
    newest: dict[str, tuple[int, Any, str | None]] = {}
    if base is not None:
        for kind, file_key in (("protocol", "protocolFile"), ("metaData", "metaDataFile")):
            if base.get(kind) is not None:
                newest[kind] = (-1, base[kind], base.get(file_key))
    try:
        for f, data in zip(files, contents, strict=True):
            if data is None:
                return None  # vanished since listing: let Spark report it
            for action in _actions_of(data):
                for kind, value in action.items():
                    if kind == "commitInfo" and f.version != version:
                        continue
                    held = newest.get(kind)
                    if held is not None and held[0] == f.version and held[1] != value:
                        return None  # two different values at one version: Spark's tie rule
                    if held is None or f.version >= held[0]:
                        newest[kind] = (f.version, value, f.path)
    except UnclearError:
        return None

    def pick(kind: str, index: int) -> Any:
        held = newest.get(kind)
        return None if held is None else held[index]

    return {
        "protocol": pick("protocol", 1),
        "metaData": pick("metaData", 1),
        "commitInfo": pick("commitInfo", 1),
        "protocolFile": pick("protocol", 2),
        "metaDataFile": pick("metaData", 2),
        "sidecars": list(base["sidecars"] or []) if base is not None else [],
    }
