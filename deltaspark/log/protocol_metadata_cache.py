"""Recent protocol/metadata answers per log segment, so that reloading a table reads only new commits.

A notebook or a job loads the same table again and again: after every commit, before every read.
Each answer is kept with the identity (name, size, modification time) of every file it was read
from. A later segment built on the same checkpoint whose commits start with exactly those files
needs only its newer commits read (on the driver, see `small_log`); the same segment needs nothing.
Delta never rewrites a log file, and a table deleted and created again at the same path has files
of other sizes or times, so an identity match means the same bytes. Small: a bounded number of
entries, each a protocol, a metadata and the few fields around them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from deltaspark.log.files import LogFile
from deltaspark.log.segment import LogSegment

MAX_ENTRIES = 64
MAX_SCHEMA_CHARS = 1 << 20  # a metadata this large is not worth holding

_FileKey = tuple[str, int, int]

_lock = threading.Lock()
_entries: OrderedDict[tuple[str, tuple[_FileKey, ...]], list[tuple[int, tuple[_FileKey, ...], dict]]] = (
    OrderedDict()
)


def _key(f: LogFile) -> _FileKey:
    return (f.path, f.size, f.modification_time)


def _base_of(segment: LogSegment) -> tuple[str, tuple[_FileKey, ...]]:
    checkpoint = () if segment.checkpoint is None else tuple(_key(f) for f in segment.checkpoint.files)
    return (segment.table_path, checkpoint)


def lookup(segment: LogSegment) -> tuple[dict[str, Any] | None, list[LogFile], bool]:
    """The newest held answer for this segment's checkpoint and a prefix of its JSON tail, the tail
    files after that prefix, and whether the answer is this very segment's; `(None, tail, False)`
    when nothing applies."""
    tail = list(segment.tail_files)
    keys = [_key(f) for f in tail]
    base = _base_of(segment)
    with _lock:
        held = _entries.get(base)
        if held is None:
            return None, tail, False
        _entries.move_to_end(base)
        best: tuple[int, dict] | None = None
        for version, prefix, answer in held:
            n = len(prefix)
            if n > len(keys) or tuple(keys[:n]) != prefix:
                continue
            if version == segment.version and n == len(keys):
                return dict(answer), [], True
            if version < segment.version and (best is None or n > best[0]):
                best = (n, answer)
    if best is None:
        return None, tail, False
    return dict(best[1]), tail[best[0] :], False


def store(segment: LogSegment, answer: dict[str, Any]) -> None:
    """Remember `answer` for this segment (its checkpoint and JSON tail)."""
    meta = answer.get("metaData") or {}
    if len(meta.get("schemaString") or "") > MAX_SCHEMA_CHARS:
        return
    # The commit at a checkpoint's version adds only its commitInfo (its state is the checkpoint's),
    # so the tail alone identifies what the answer was read from.
    prefix = tuple(_key(f) for f in segment.tail_files)
    base = _base_of(segment)
    with _lock:
        held = _entries.setdefault(base, [])
        _entries.move_to_end(base)
        held[:] = [e for e in held if e[1] != prefix][-3:]  # a few versions per checkpoint
        held.append((segment.version, prefix, dict(answer)))
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)


def clear() -> None:
    with _lock:
        _entries.clear()
