"""Bytes of log files read on the driver, held until the second reader of one snapshot load.

Loading a small log reads its newest commits on the driver twice: for protocol and metadata
(`protocol_metadata`'s driver route, or the version's own commit after a checksum), then for the
file actions (`driver_replay`). On a local disk the second read comes from the page cache; through
Hadoop's FileSystem (an object store) each read is a request. The first reader holds the bytes
here and the second takes them, so each file is read once per load.

Entries are keyed by the file's identity (path, size, modification time), as the segment caches
are: Delta never rewrites a log file, and a table created again at the same path has files of
other sizes or times. `take` removes an entry; what no second reader takes is dropped, oldest
first, beyond `MAX_HELD_BYTES` in all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from deltaspark.log.files import LogFile

MAX_HELD_BYTES = 8 * 1024 * 1024

_FileKey = tuple[str, int, int]
_held: OrderedDict[_FileKey, bytes] = OrderedDict()
_lock = threading.Lock()
_total = 0


def _key(f: LogFile) -> _FileKey:
    return (f.path, f.size, f.modification_time)


def hold(f: LogFile, data: bytes) -> None:
    """Hold `data`, the bytes of `f` just read, for the next reader of `f` in this process."""
    global _total
    if len(data) != f.size or len(data) > MAX_HELD_BYTES:
        return  # not the listed file (it changed since the listing), or too big to hold
    with _lock:
        key = _key(f)
        if key in _held:
            _total -= len(_held.pop(key))
        _held[key] = data
        _total += len(data)
        while _total > MAX_HELD_BYTES:
            _total -= len(_held.popitem(last=False)[1])


def take(f: LogFile) -> bytes | None:
    """The bytes of `f` a first reader held (they are then no longer held), or None."""
    global _total
    with _lock:
        data = _held.pop(_key(f), None)
        if data is not None:
            _total -= len(data)
        return data


def clear() -> None:
    global _total
    with _lock:
        _held.clear()
        _total = 0
