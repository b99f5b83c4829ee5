"""The log replayed in plain Python, where a Python data source plans (no JVM, no Spark jobs).

The driver's shortcut replay (`driver_replay`) reads only logs it is sure Spark would read the
same way, and hands anything else to Spark. A data source's planning process has no Spark to hand
to, so this replay reads every checkpoint kind itself - classic, multi-part, V2 (parquet or JSON)
with its sidecars - and every commit and compaction after it, taking from each action only the
fields a read needs (statistics only when asked: a pushed filter on a data column needs them, and
they are most of an `add`'s bytes). The rules are the protocol's
("Action Reconciliation"): per logical file `(path, deletion vector id)` the newest action wins and
within one version a `remove` beats an `add`; the newest `protocol` and `metaData` win.

The commits after the checkpoint are read newest first: an add is live unless a newer version
acted on its logical file, and only the keys acted on are kept; then the checkpoint, which holds
the reconciled state of its version, streams through them a batch of rows at a time. Live adds are
handed over as they are found (`live_adds`), never held here: the replay's memory is the commits'
keys and one batch of checkpoint rows whatever the table's size, and the caller decides what to
keep (a batch read, a list; a stream's initial snapshot of millions of files, runs sorted on
local disk). Without `live_adds`, only protocol and metaData are read (the checkpoint's two
columns, the commits' lines that are not file actions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from deltaspark.datasource.arrow_storage import ArrowStorage
from deltaspark.errors import CorruptLogError
from deltaspark.features.deletion_vectors import dv_unique_id_of
from deltaspark.log.paths import absolute_path, path_key
from deltaspark.log.replay import FILE_ACTION_PREFIXES
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
    """The newest protocol and metaData (the live adds went to the replay's `live_adds`)."""

    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    versions: dict[str, int] = field(default_factory=dict)  # protocol / metaData: the version they came from
    fields: tuple[str, ...] = ADD_FIELDS  # what is kept of an add (`ADD_FIELDS`, with statistics or not)

    def small(self, kind: str, value: dict[str, Any], version: int) -> None:
        if version >= self.versions.get(kind, -1):
            self.versions[kind] = version
            setattr(self, "protocol" if kind == "protocol" else "metadata", value)


def file_key(action: dict[str, Any], root: str) -> tuple[str, str]:
    """A file action's logical file: its canonical path and its deletion vector's unique id."""
    path = action["path"]
    return (path_key(path, root) or absolute_path(path, root), dv_unique_id_of(action.get("deletionVector")))


def _json_actions(text: str, where: str, files: bool = True) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or (not files and line.lstrip().startswith(FILE_ACTION_PREFIXES)):
            continue
        try:
            action = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptLogError(where, f"line {number} is not JSON: {exc}") from exc
        if isinstance(action, dict):
            yield action


BATCH_ROWS = 8192  # checkpoint rows decoded at a time: a part of millions of rows is never whole in memory


def _parquet_actions(
    storage: ArrowStorage, where: str, add_fields: tuple[str, ...] | None
) -> Iterator[dict[str, Any]]:
    """The rows of a parquet checkpoint part or sidecar, only the columns a read needs (without
    `add_fields`, protocol and metaData only), a batch of rows at a time."""
    source = storage.open_input(where)
    if source is None:
        raise CorruptLogError(where, "the log file listed is gone (cleaned up while reading?)")
    with source:
        yield from _parquet_rows(source, where, add_fields)


def _parquet_rows(source: Any, where: str, add_fields: tuple[str, ...] | None) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(source)
    except Exception as exc:
        raise CorruptLogError(where, f"not a readable parquet file: {exc}") from exc
    names = set(handle.schema_arrow.names)
    wanted: dict[str, tuple[str, ...] | None] = {"protocol": None, "metaData": None}
    if add_fields is not None:
        wanted.update({"add": add_fields, "remove": REMOVE_FIELDS, "sidecar": ("path",)})
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
        for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            for row in batch.to_pylist():
                yield {
                    kind: _as_dicts(kind, value)
                    for kind, value in row.items()
                    if value is not None and _present(kind, value)
                }
    except Exception as exc:
        raise CorruptLogError(where, f"its pages do not decode: {exc}") from exc


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


def replay(
    storage: ArrowStorage,
    segment: LogSegment,
    root: str,
    live_adds: Callable[[str, dict[str, Any]], None] | None = None,
    stats: bool = False,
) -> Replayed:
    """Replay `segment`: its commits and compactions newest first, then its checkpoint (with
    sidecars). Each live add goes to `live_adds` as (location, its fields in `Replayed.fields`;
    statistics too with `stats`) as soon as it is known live; without `live_adds`, protocol and
    metaData only are read (module doc)."""
    out = Replayed(fields=ADD_FIELDS + STATS_FIELDS if stats else ADD_FIELDS)
    add_fields = out.fields if live_adds is not None else None
    newer: set[tuple[str, str]] = set()  # every file key a version read so far acted on
    for f in reversed(segment.tail_files):  # newest first: an add is live unless a newer version acted
        actions = list(_read(storage, f.path, f.file_format, add_fields))
        _stream_version(out, actions, f.version, root, newer, live_adds)
    checkpoint = segment.checkpoint
    if checkpoint is None:
        return out
    version = checkpoint.version

    def apply(action: dict[str, Any]) -> None:
        # The checkpoint's removes are tombstones of files it does not hold: nothing to weigh.
        _apply_small(out, action, version)
        add = action.get("add")
        if live_adds is not None and add is not None and add.get("path") is not None:
            key = file_key(add, root)
            if key not in newer:
                live_adds(key[0], {name: add.get(name) for name in out.fields})

    sidecars: list[str] = []
    for part in checkpoint.files:
        for action in _read(storage, part.path, part.file_format, add_fields):
            apply(action)
            if live_adds is not None and "sidecar" in action:
                sidecars.append(action["sidecar"]["path"])
    log_dir = parent_of(checkpoint.files[0].path)
    for name in sidecars:
        where = name if "://" in name or name.startswith("/") else join_path(log_dir, "_sidecars/" + name)
        for action in _read(storage, where, "parquet", add_fields):
            apply(action)
    return out


def _stream_version(
    out: Replayed,
    actions: list[dict[str, Any]],
    version: int,
    root: str,
    newer: set[tuple[str, str]],
    live_adds: Callable[[str, dict[str, Any]], None] | None,
) -> None:
    """One version's actions, read after every newer version's (whose keys `newer` holds): its
    adds no newer version acted on are live, unless the version removes the same file too (a
    remove beats an add within a version; of two adds, the later)."""
    removed = set()
    for action in actions:
        _apply_small(out, action, version)
        remove = action.get("remove")
        if remove is not None and remove.get("path") is not None:
            removed.add(file_key(remove, root))
    if live_adds is None:
        return
    for action in reversed(actions):
        add = action.get("add")
        if add is None or add.get("path") is None:
            continue
        key = file_key(add, root)
        if key not in newer and key not in removed:
            newer.add(key)
            live_adds(key[0], {name: add.get(name) for name in out.fields})
    newer |= removed


def _apply_small(out: Replayed, action: dict[str, Any], version: int) -> None:
    for kind in ("protocol", "metaData"):
        if action.get(kind) is not None:
            out.small(kind, action[kind], version)


def _read(
    storage: ArrowStorage, where: str, file_format: str, add_fields: tuple[str, ...] | None
) -> Iterator[dict[str, Any]]:
    if file_format == "parquet":
        yield from _parquet_actions(storage, where, add_fields)
        return
    text = storage.read_text(where)
    if text is None:
        raise CorruptLogError(where, "the log file listed is gone (cleaned up while reading?)")
    yield from _json_actions(text, where, files=add_fields is not None)
