"""Recent protocol/metadata answers per log segment, so that reloading a table reads only new commits.

See `segment_cache`: a later segment on the same checkpoint whose commits start with the files an
answer was read from needs only its newer commits read (on the driver, see `small_log`); the same
segment needs nothing. Small: a bounded number of entries, each a protocol, a metadata and the few
fields around them.
"""

from __future__ import annotations

from typing import Any

from deltaspark.log.segment import LogSegment
from deltaspark.log.segment_cache import SegmentCache

MAX_ENTRIES = 64
MAX_SCHEMA_CHARS = 1 << 20  # a metadata this large is not worth holding

_cache: SegmentCache[dict[str, Any]] = SegmentCache(max_bases=MAX_ENTRIES, per_base=4)


def lookup(segment: LogSegment) -> tuple[dict[str, Any] | None, list, bool]:
    """See `SegmentCache.lookup`; the answer is a copy the caller may change."""
    answer, tail, exact = _cache.lookup(segment)
    return (None if answer is None else dict(answer)), tail, exact


def store(segment: LogSegment, answer: dict[str, Any]) -> None:
    meta = answer.get("metaData") or {}
    if len(meta.get("schemaString") or "") > MAX_SCHEMA_CHARS:
        return
    _cache.store(segment, dict(answer))


def clear() -> None:
    _cache.clear()
