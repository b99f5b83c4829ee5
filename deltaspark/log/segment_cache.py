"""Answers computed from a log segment, kept so that reloading a table reads only its new commits.

A notebook or a job loads the same table again and again: after every commit, before every read.
Each answer is kept with the identity (name, size, modification time) of every file it was read
from. A later segment built on the same checkpoint whose JSON files start with exactly those files
needs only its newer files read; the same segment needs nothing. Delta never rewrites a log file,
and a table deleted and created again at the same path has files of other sizes or times, so an
identity match means the same bytes. The cache is bounded: a few answers per checkpoint, a number
of checkpoints, and optionally a total size, the least recently used going first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from deltaspark.log.files import LogFile
from deltaspark.log.segment import LogSegment

T = TypeVar("T")
_FileKey = tuple[str, int, int]
_Base = tuple[str, tuple[_FileKey, ...]]


def _key(f: LogFile) -> _FileKey:
    return (f.path, f.size, f.modification_time)


def _base_of(segment: LogSegment) -> _Base:
    checkpoint = () if segment.checkpoint is None else tuple(_key(f) for f in segment.checkpoint.files)
    return (segment.table_path, checkpoint)


class SegmentCache(Generic[T]):
    """Answers per (checkpoint, JSON tail); `size_of` and `max_size` bound the total they hold."""

    def __init__(
        self,
        max_bases: int,
        per_base: int,
        size_of: Callable[[T], int] | None = None,
        max_size: int | None = None,
    ) -> None:
        self._max_bases, self._per_base = max_bases, per_base
        self._size_of, self._max_size = size_of, max_size
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Base, list[tuple[int, tuple[_FileKey, ...], T]]] = OrderedDict()

    def lookup(self, segment: LogSegment) -> tuple[T | None, list[LogFile], bool]:
        """The newest held answer for this segment's checkpoint and a prefix of its JSON tail, the
        tail files after that prefix, and whether the answer is this very segment's;
        `(None, tail, False)` when nothing applies."""
        tail = list(segment.tail_files)
        keys = [_key(f) for f in tail]
        base = _base_of(segment)
        with self._lock:
            held = self._entries.get(base)
            if held is None:
                return None, tail, False
            self._entries.move_to_end(base)
            best: tuple[int, T] | None = None
            for version, prefix, answer in held:
                n = len(prefix)
                if n > len(keys) or tuple(keys[:n]) != prefix:
                    continue
                if version == segment.version and n == len(keys):
                    return answer, [], True
                if version < segment.version and (best is None or n > best[0]):
                    best = (n, answer)
        if best is None:
            return None, tail, False
        return best[1], tail[best[0] :], False

    def store(self, segment: LogSegment, answer: T) -> None:
        """Remember `answer` for this segment (its checkpoint and JSON tail)."""
        if (
            self._max_size is not None
            and self._size_of is not None
            and self._size_of(answer) > self._max_size
        ):
            return
        # The commit at a checkpoint's version adds only its commitInfo (its state is the
        # checkpoint's), so the tail alone identifies what the answer was read from.
        prefix = tuple(_key(f) for f in segment.tail_files)
        base = _base_of(segment)
        with self._lock:
            held = self._entries.setdefault(base, [])
            self._entries.move_to_end(base)
            others = [e for e in held if e[1] != prefix]
            held[:] = others[len(others) - (self._per_base - 1) :] if self._per_base > 1 else []
            held.append((segment.version, prefix, answer))
            while len(self._entries) > self._max_bases or self._too_big():
                self._entries.popitem(last=False)

    def _too_big(self) -> bool:
        if self._max_size is None or self._size_of is None or len(self._entries) <= 1:
            return False
        size_of = self._size_of
        return sum(size_of(a) for held in self._entries.values() for _, _, a in held) > self._max_size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
