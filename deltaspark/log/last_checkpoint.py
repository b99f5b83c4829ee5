"""`_delta_log/_last_checkpoint`: a hint that points near the end of the log.

It is only a hint. A file that does not parse, fails its checksum, or names a checkpoint that is
not there must never break a read: the reader falls back to listing the whole log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from deltaspark.log.json_checksum import checksum_of, parse_json_preserving_numbers

log = logging.getLogger(__name__)

LAST_CHECKPOINT_NAME = "_last_checkpoint"


@dataclass(frozen=True)
class LastCheckpoint:
    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    checksum: str | None = None
    v2_checkpoint_path: str | None = None  # file name of the V2 checkpoint it describes, if any


def _as_int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def parse_last_checkpoint(text: str, location: str) -> LastCheckpoint | None:
    """Parse and validate the hint; `None` (with a warning) when it cannot be trusted."""
    try:
        document = parse_json_preserving_numbers(text)
    except ValueError as exc:
        log.warning("Ignoring %s: not valid JSON (%s); listing the log instead", location, exc)
        return None
    if not isinstance(document, dict) or _as_int(document.get("version")) is None:
        log.warning("Ignoring %s: no integer `version`; listing the log instead", location)
        return None
    expected = document.get("checksum")
    if expected is not None:
        actual = checksum_of(document)
        if str(expected).lower() != actual:
            log.warning(
                "Ignoring %s: checksum %s does not match its content (%s); listing the log instead",
                location,
                expected,
                actual,
            )
            return None
    v2 = document.get("v2Checkpoint")
    return LastCheckpoint(
        version=_as_int(document["version"]) or 0,
        size=_as_int(document.get("size")),
        parts=_as_int(document.get("parts")),
        size_in_bytes=_as_int(document.get("sizeInBytes")),
        num_of_add_files=_as_int(document.get("numOfAddFiles")),
        checksum=str(expected) if expected is not None else None,
        v2_checkpoint_path=str(v2.get("path")) if isinstance(v2, dict) and v2.get("path") else None,
    )
