"""The file names of `_delta_log` and what each one is.

The protocol encodes everything a reader needs to plan a replay in the names: the version
(zero-padded to 20 digits), the kind of file, and for checkpoints their part numbers or UUID.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class LogFileKind(enum.Enum):
    COMMIT = "commit"  # n.json
    CHECKPOINT_CLASSIC = "classic"  # n.checkpoint.parquet (V1 or V2 spec)
    CHECKPOINT_MULTIPART = "multipart"  # n.checkpoint.o.p.parquet (V1 spec only)
    CHECKPOINT_UUID = "uuid"  # n.checkpoint.<uuid>.json|parquet (V2 spec)
    COMPACTION = "compaction"  # x.y.compacted.json
    CHECKSUM = "checksum"  # n.crc


_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"\.(json|parquet)$"
)
_COMPACTION = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
_CHECKSUM = re.compile(r"^(\d{20})\.crc$")


@dataclass(frozen=True)
class LogFile:
    """One file of `_delta_log` as listed: its name, where it lives, size and modification time."""

    name: str
    path: str
    size: int
    modification_time: int  # milliseconds since the epoch
    kind: LogFileKind
    version: int  # for a compaction file: its end version
    start_version: int | None = None  # compaction files only
    part: int | None = None  # multi-part checkpoints only
    num_parts: int | None = None  # multi-part checkpoints only
    uuid: str | None = None  # UUID-named checkpoints only
    file_format: str = "json"  # json or parquet

    @property
    def is_checkpoint(self) -> bool:
        return self.kind in (
            LogFileKind.CHECKPOINT_CLASSIC,
            LogFileKind.CHECKPOINT_MULTIPART,
            LogFileKind.CHECKPOINT_UUID,
        )


def parse_log_file(name: str, path: str, size: int, modification_time: int) -> LogFile | None:
    """Classify a `_delta_log` entry by its name; `None` for names the protocol does not define."""
    common = {"name": name, "path": path, "size": size, "modification_time": modification_time}
    if m := _COMMIT.match(name):
        return LogFile(kind=LogFileKind.COMMIT, version=int(m[1]), **common)
    if m := _CLASSIC.match(name):
        return LogFile(
            kind=LogFileKind.CHECKPOINT_CLASSIC, version=int(m[1]), file_format="parquet", **common
        )
    if m := _MULTIPART.match(name):
        return LogFile(
            kind=LogFileKind.CHECKPOINT_MULTIPART,
            version=int(m[1]),
            part=int(m[2]),
            num_parts=int(m[3]),
            file_format="parquet",
            **common,
        )
    if m := _UUID.match(name):
        return LogFile(
            kind=LogFileKind.CHECKPOINT_UUID, version=int(m[1]), uuid=m[2].lower(), file_format=m[3], **common
        )
    if m := _COMPACTION.match(name):
        start, end = int(m[1]), int(m[2])
        if end <= start:  # the protocol requires y > x; anything else is not a compaction file
            return None
        return LogFile(kind=LogFileKind.COMPACTION, version=end, start_version=start, **common)
    if m := _CHECKSUM.match(name):
        return LogFile(kind=LogFileKind.CHECKSUM, version=int(m[1]), **common)
    return None


def commit_file_name(version: int) -> str:
    return f"{version:020d}.json"


def names_from_version_glob(version: int) -> str:
    """A Hadoop glob matching every 20-digit-prefixed log name whose version is >= `version`.

    Listing only the tail of a long log (from `_last_checkpoint`'s version) saves most of the
    listing cost on big tables; Hadoop's `globStatus` and Spark's `pathGlobFilter` both accept it.
    """
    digits = f"{version:020d}"
    alternatives = [digits + "*"]
    for i in range(len(digits) - 1, -1, -1):
        d = int(digits[i])
        if d < 9:
            alternatives.append(f"{digits[:i]}[{d + 1}-9]*")
    return "{" + ",".join(alternatives) + "}"
