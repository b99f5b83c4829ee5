"""The log replayed in plain Python, where a Python data source plans (no JVM, no Spark jobs).

The driver's shortcut replay (`driver_replay`) reads only logs it is sure Spark would read the
same way, and hands anything else to Spark. A data source's planning process has no Spark to hand
to, so this replay reads every checkpoint kind itself - classic, multi-part, V2 (parquet or JSON)
with its sidecars - and every commit and compaction after it, taking from each action only the
fields a read needs (statistics only when asked: a pushed filter on a data column needs them, and
they are most of an `add`'s bytes). The rules are the protocol's
("Action Reconciliation"): per logical file `(path, deletion vector id)` the newest action wins and
within one version a `remove` beats an `add`; the newest `protocol` and `metaData` win.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from deltaspark.datasource.arrow_storage import ArrowStorage
from deltaspark.errors import CorruptLogError
from deltaspark.features.deletion_vectors import dv_unique_id_of
from deltaspark.log.paths import absolute_path, path_key
from deltaspark.log.segment import LogSegment
from deltaspark.storage import join_path, parent_of

ADD_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)
REMOVE_FIELDS = ("path", "deletionVector")
STATS_FIELDS = ("stats", "stats_parsed")  # JSON text, or a checkpoint's typed struct


@dataclass
class Replayed:
    """The newest protocol and metaData, and the live `add` actions by logical file."""

    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    # per logical file: (version, is_add, the action's fields in `ADD_FIELDS` order: a tuple, which
    # holds a million files in a third of the memory dicts take)
    entries: dict[tuple[str, str], tuple[int, bool, tuple[Any, ...]]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)  # protocol / metaData: the version they came from
    fields: tuple[str, ...] = ADD_FIELDS  # what is kept of an add (`ADD_FIELDS`, with statistics or not)

    def small(self, kind: str, value: dict[str, Any], version: int) -> None:
        if version >= self.versions.get(kind, -1):
            self.versions[kind] = version
            setattr(self, "protocol" if kind == "protocol" else "metadata", value)

    def file(self, version: int, is_add: bool, action: dict[str, Any], root: str) -> None:
        path = action.get("path")
        if path is None:
            return
        location = path_key(path, root) or absolute_path(path, root)
        key = (location, dv_unique_id_of(action.get("deletionVector")))
        held = self.entries.get(key)
        if held is None or version > held[0] or (version == held[0] and (held[1] or not is_add)):
            self.entries[key] = (
                version,
                is_add,
                tuple(action.get(name) for name in self.fields) if is_add else (),
            )

    def live(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The live adds, each given up as it is yielded (the replay's memory is freed as the
        caller builds its own list: the two are not both held at their full size)."""
        while self.entries:
            (location, _), (_, is_add, values) = self.entries.popitem()
            if is_add:
                yield location, dict(zip(self.fields, values, strict=True))


def _json_actions(text: str, where: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptLogError(where, f"line {number} is not JSON: {exc}") from exc
        if isinstance(action, dict):
            yield action


def _parquet_actions(data: bytes, where: str, add_fields: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """The rows of a parquet checkpoint part or sidecar, only the columns a read needs."""
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(io.BytesIO(data))
    except Exception as exc:
        raise CorruptLogError(where, f"not a readable parquet file: {exc}") from exc
    names = set(handle.schema_arrow.names)
    wanted = {
        "add": add_fields,
        "remove": REMOVE_FIELDS,
        "protocol": None,
        "metaData": None,
        "sidecar": ("path",),
    }
    columns = []
    for top, fields in wanted.items():
        if top not in names:
            continue
        if fields is None:
            columns.append(top)
            continue
        present = {f.name for f in handle.schema_arrow.field(top).type}
        columns += [f"{top}.{name}" for name in fields if name in present]
    try:
        table = handle.read(columns=columns)
    except Exception as exc:
        raise CorruptLogError(where, f"its pages do not decode: {exc}") from exc
    for row in table.to_pylist():
        yield {
            kind: _as_dicts(kind, value)
            for kind, value in row.items()
            if value is not None and _present(kind, value)
        }


# Map columns, which pyarrow gives as lists of (key, value) pairs.
_MAPS = {"add": ("partitionValues",), "metaData": ("configuration",)}


def _as_dicts(kind: str, value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    value = dict(value)
    for name in _MAPS.get(kind, ()):
        if isinstance(value.get(name), list):
            value[name] = dict(value[name])
    if kind == "metaData" and isinstance(value.get("format"), dict):
        options = value["format"].get("options")
        if isinstance(options, list):
            value["format"] = {**value["format"], "options": dict(options)}
    return value


def _present(kind: str, value: Any) -> bool:
    """A checkpoint row holds one action; the other columns are null structs, or structs of nulls
    where a writer filled them so."""
    if not isinstance(value, dict):
        return True
    if kind in ("add", "remove", "sidecar"):
        return value.get("path") is not None
    return any(v is not None for v in value.values())


def replay(storage: ArrowStorage, segment: LogSegment, root: str, stats: bool = False) -> Replayed:
    """Replay `segment`: its checkpoint (with sidecars), then its commits and compactions; with
    `stats`, each live add keeps its statistics too."""
    out = Replayed(fields=ADD_FIELDS + STATS_FIELDS if stats else ADD_FIELDS)
    checkpoint = segment.checkpoint
    if checkpoint is not None:
        sidecars: list[str] = []
        for part in checkpoint.files:
            for action in _read(storage, part.path, part.file_format, out.fields):
                _apply(out, action, checkpoint.version, root)
                if "sidecar" in action:
                    sidecars.append(action["sidecar"]["path"])
        log_dir = parent_of(checkpoint.files[0].path)
        for name in sidecars:
            where = name if "://" in name or name.startswith("/") else join_path(log_dir, "_sidecars/" + name)
            for action in _read(storage, where, "parquet", out.fields):
                _apply(out, action, checkpoint.version, root)
    for f in segment.tail_files:
        for action in _read(storage, f.path, f.file_format, out.fields):
            _apply(out, action, f.version, root)
    return out


def _read(
    storage: ArrowStorage, where: str, file_format: str, add_fields: tuple[str, ...]
) -> Iterator[dict[str, Any]]:
    if file_format == "parquet":
        data = storage.read_bytes(where)
        if data is None:
            raise CorruptLogError(where, "the log file listed is gone (cleaned up while reading?)")
        yield from _parquet_actions(data, where, add_fields)
        return
    text = storage.read_text(where)
    if text is None:
        raise CorruptLogError(where, "the log file listed is gone (cleaned up while reading?)")
    yield from _json_actions(text, where)


def _apply(out: Replayed, action: dict[str, Any], version: int, root: str) -> None:
    for kind, value in action.items():
        if value is None:
            continue
        if kind in ("protocol", "metaData"):
            out.small(kind, value, version)
        elif kind == "add":
            out.file(version, True, value, root)
        elif kind == "remove":
            out.file(version, False, value, root)
