"""Protocol and metadata from a version checksum file (`N.crc`), so that loading a snapshot needs no
scan of the log for them.

The protocol's "Version Checksum File" holds the table's `protocol` and `metadata` as of version N;
delta-spark writes one after every commit, and so does deltaspark. delta-spark and the Delta
kernels take protocol and metadata from it instead of replaying the log for them, and so does this
module: the newest `.crc` at or below the snapshot version and not older than the checkpoint is
the base, and the commits after it (and the snapshot version's own commit, for its commitInfo) are
read on the driver by `small_log`, newest value winning, as always.

It gives no answer - the log is read as before, the checksum being optional - when:

- the `.crc` is unreadable, not one JSON object, or its protocol/metadata are missing or not typed
  exactly as the action schema says (`typed_json`);
- a commit between it and the snapshot version is missing from the listing (compacted away), or
  those commits are too many or too big for the driver;
- the table has a checkpoint and its protocol names `v2Checkpoint`, or the checkpoint is UUID-named
  (V2): the checkpoint's sidecar list is read from the checkpoint only.

A `.crc` whose protocol or metadata differ from the log's is a damaged table, read as delta-spark
reads it; `audit` reports the difference (`log.checksum`), and
`spark.deltaspark.snapshot.protocolFromChecksum=false` reads protocol and metadata from the log.
"""

from __future__ import annotations

from typing import Any

from deltaspark.log import action_schemas as schemas
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.segment import LogSegment
from deltaspark.log.typed_json import UnclearError, json_object, typed

ENABLED_CONF = "spark.deltaspark.snapshot.protocolFromChecksum"
# The commits read on top of the checksum: the snapshot version's own commit alone can be big (one
# commit adding 10,000 files is ~5 MB); only its protocol/metaData/commitInfo lines are parsed.
MAX_COMMITS = 64
MAX_COMMIT_BYTES = 32 * 1024 * 1024


def plan(segment: LogSegment) -> tuple[LogFile, list[LogFile]] | None:
    """The `.crc` to start from and the commits to read after it, oldest first; `None` when the
    segment has no usable checksum."""
    if segment.checkpoint is not None and segment.checkpoint.is_v2_named:
        return None  # a V2 checkpoint: its sidecar list is read from it
    floor = segment.checkpoint.version if segment.checkpoint is not None else 0
    checksums = [
        f
        for f in segment.listing
        if f.kind is LogFileKind.CHECKSUM and floor <= f.version <= segment.version and f.size > 0
    ]
    if not checksums:
        return None
    crc = max(checksums, key=lambda f: f.version)
    commits = {f.version: f for f in segment.listing if f.kind is LogFileKind.COMMIT}
    newer = [commits.get(v) for v in range(crc.version + 1, segment.version + 1)]
    if any(f is None for f in newer):
        return None
    files = [f for f in newer if f is not None]
    if crc.version == segment.version and segment.commit_at_version is not None:
        files.append(segment.commit_at_version)
    if len(files) > MAX_COMMITS or sum(f.size for f in files) > MAX_COMMIT_BYTES:
        return None
    return crc, files


def _has_v2_checkpoints(protocol: dict[str, Any]) -> bool:
    # Any listing of the feature counts, even one `Protocol.hasFeature` would ignore (below reader 3 /
    # writer 7): such a checkpoint may still carry sidecars, which only the log path reads.
    features = [*(protocol.get("readerFeatures") or []), *(protocol.get("writerFeatures") or [])]
    return "v2Checkpoint" in features


def base_answer(crc: LogFile, text: str | None, has_checkpoint: bool) -> dict[str, Any] | None:
    """The checksum's protocol and metadata in the shape of the Spark path's one-row frame; `None`
    when it gives no clear answer (see the module docstring)."""
    if not text:
        return None
    try:
        document = json_object(text.strip())
        raw_protocol, raw_metadata = document.get("protocol"), document.get("metadata")
        if not isinstance(raw_protocol, dict) or not isinstance(raw_metadata, dict):
            return None
        protocol = typed(raw_protocol, schemas.PROTOCOL)
        metadata = typed(raw_metadata, schemas.METADATA)
    except UnclearError:
        return None
    if protocol.get("minReaderVersion") is None or protocol.get("minWriterVersion") is None:
        return None
    if metadata.get("id") is None or (has_checkpoint and _has_v2_checkpoints(protocol)):
        return None
    return {
        "protocol": protocol,
        "metaData": metadata,
        "commitInfo": None,
        "protocolFile": crc.path,
        "metaDataFile": crc.path,
        "sidecars": [],
    }
