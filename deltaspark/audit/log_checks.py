"""Checks of the log's shape, made on the driver from the `_delta_log` listing and small documents:
contiguous versions, torn files, incomplete checkpoints, `_last_checkpoint`, in-commit timestamps,
and whether the protocol and the table properties agree."""

from __future__ import annotations

from typing import Any

from deltaspark.audit.context import AuditContext
from deltaspark.audit.findings import Finding
from deltaspark.features.enablement import (
    DEPENDENCIES,
    PROPERTY_FEATURES,
    READER_WRITER_FEATURES,
    WRITER_ONLY_FEATURES,
    features_for_properties,
)
from deltaspark.features.protocol import SUPPORTED_READER_FEATURES
from deltaspark.log.files import LogFileKind
from deltaspark.log.json_checksum import checksum_of, parse_json_preserving_numbers
from deltaspark.log.last_checkpoint import LAST_CHECKPOINT_NAME
from deltaspark.log.segment import build_log_segment, complete_checkpoints
from deltaspark.spark_compat import is_connect
from deltaspark.storage import join_path

_CHECKPOINT_KINDS = (
    LogFileKind.CHECKPOINT_CLASSIC,
    LogFileKind.CHECKPOINT_MULTIPART,
    LogFileKind.CHECKPOINT_UUID,
)
# Writer features of the protocol that deltaspark does not write itself but recognizes.
_OTHER_KNOWN = {
    "icebergCompatV1",
    "icebergCompatV2",
    "icebergWriterCompatV1",
    "materializePartitionColumns",
    "catalogManaged",
    "variantShredding",
}


def versions(ctx: AuditContext) -> list[Finding]:
    """Commits are contiguous over the retained range, the latest version is reconstructable, no log
    file is empty (a torn write) and every multi-part checkpoint is complete."""
    out: list[Finding] = []
    commits = sorted(f.version for f in ctx.files_of(LogFileKind.COMMIT))
    if commits:
        present = set(commits)
        gaps = [v for v in range(commits[0], commits[-1] + 1) if v not in present]
        for v in gaps:
            out.append(
                Finding(
                    "log.versions",
                    "error",
                    f"commit {v} is missing between {commits[0]} and {commits[-1]}",
                    v,
                )
            )
    try:
        build_log_segment(ctx.table_path, ctx.listing)
    except Exception as exc:  # noqa: BLE001 - any planning failure is the finding
        out.append(Finding("log.versions", "error", f"the latest version cannot be reconstructed: {exc}"))
    for f in ctx.listing:
        if f.size == 0 and f.kind is not LogFileKind.CHECKSUM:
            out.append(Finding("log.versions", "error", "empty log file (a torn write)", f.version, f.path))
    complete = complete_checkpoints(ctx.listing)
    parts: dict[tuple[int, int], set[int]] = {}
    for f in ctx.files_of(LogFileKind.CHECKPOINT_MULTIPART):
        parts.setdefault((f.version, f.num_parts or 0), set()).add(f.part or 0)
    for (version, num_parts), seen in sorted(parts.items()):
        if seen != set(range(1, num_parts + 1)):
            severity = "warning" if version in complete else "error"
            missing = sorted(set(range(1, num_parts + 1)) - seen)
            out.append(
                Finding(
                    "log.versions",
                    severity,
                    f"multi-part checkpoint at version {version} lacks part(s) {missing} of {num_parts}",
                    version,
                )
            )
    return out


def last_checkpoint(ctx: AuditContext) -> list[Finding]:
    """`_last_checkpoint` parses, its checksum holds, and it names a complete checkpoint whose parts
    and size it describes (V2: the top-level file it names). The file is a hint, and readers that
    check it (deltaspark, delta-spark) list the log instead, so most findings are warnings. One is
    an error: a hint naming a version at and after which there is no complete checkpoint. delta-rs
    and the other readers built on delta-kernel-rs list the log from the version it names and
    refuse a listing without a checkpoint ("Had a _last_checkpoint hint but didn't find any
    checkpoints"): they cannot open the table's latest version. A hint naming an older version
    than the newest checkpoint is only stale: those readers take the newer checkpoint."""
    location = join_path(join_path(ctx.root, "_delta_log"), LAST_CHECKPOINT_NAME)
    if is_connect(ctx.spark):  # Spark's file sources cannot read a name starting with `_`
        return [
            Finding(
                "log.last_checkpoint", "info", "not checked: unreadable through Spark Connect", None, location
            )
        ]
    text = ctx.storage.read_text(location)
    checkpoints = complete_checkpoints(ctx.listing)
    check = "log.last_checkpoint"
    if text is None:
        if checkpoints:
            newest = max(checkpoints)
            return [
                Finding(
                    check, "info", f"absent, but a checkpoint exists at version {newest}", newest, location
                )
            ]
        return []
    try:
        doc: Any = parse_json_preserving_numbers(text)
    except ValueError as exc:
        return [Finding(check, "warning", f"not valid JSON: {exc}", None, location)]
    if not isinstance(doc, dict) or not str(doc.get("version", "")).lstrip("-").isdigit():
        return [Finding(check, "warning", "has no integer `version`", None, location)]
    out: list[Finding] = []
    version = int(str(doc["version"]))
    if doc.get("checksum") is not None and str(doc["checksum"]).lower() != checksum_of(doc):
        out.append(
            Finding(
                check, "warning", f"checksum {doc['checksum']} does not match its content", version, location
            )
        )
    checkpoint = checkpoints.get(version)
    if checkpoint is None:
        newer = sorted(v for v in checkpoints if v > version)
        if newer:
            detail = (
                f"names version {version}, which has no complete checkpoint; readers that list the "
                f"log from it take the newest checkpoint, at version {newer[-1]}"
            )
            out.append(Finding(check, "warning", detail, version, location))
            return out
        remedy = (
            "write a checkpoint (DeltaTable.checkpoint(), which rewrites the hint)"
            if version <= ctx.latest_version
            else "delete it (it names a version the log does not have, and a checkpoint "
            "leaves a hint naming a newer version in place), then write a checkpoint"
        )
        out.append(
            Finding(
                check,
                "error",
                f"names version {version}, which has no complete checkpoint, and no checkpoint follows "
                "it: delta-rs and the other readers built on delta-kernel-rs cannot open the table "
                '("Had a _last_checkpoint hint but didn\'t find any checkpoints"); deltaspark and '
                f"delta-spark list the log instead. To repair, {remedy}",
                version,
                location,
            )
        )
        return out
    if checkpoints and version < max(checkpoints):
        out.append(
            Finding(
                check,
                "warning",
                f"names version {version}; the newest checkpoint is {max(checkpoints)}",
                version,
                location,
            )
        )
    parts = doc.get("parts")
    actual_parts = len(checkpoint.files) if checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART else None
    if parts is not None and int(str(parts)) != (actual_parts or 1):
        out.append(
            Finding(
                check,
                "warning",
                f"says {parts} part(s), the checkpoint has {actual_parts or 1}",
                version,
                location,
            )
        )
    size_in_bytes = doc.get("sizeInBytes")
    if (
        size_in_bytes is not None
        and checkpoint.kind is not LogFileKind.CHECKPOINT_UUID
        and "v2Checkpoint" not in doc
    ):
        actual = sum(f.size for f in checkpoint.files)
        if int(str(size_in_bytes)) != actual:
            out.append(
                Finding(
                    check,
                    "warning",
                    f"says sizeInBytes {size_in_bytes}, the checkpoint files hold {actual}",
                    version,
                    location,
                )
            )
    v2 = doc.get("v2Checkpoint")
    if isinstance(v2, dict) and v2.get("path") and v2["path"] not in {f.name for f in checkpoint.files}:
        out.append(
            Finding(
                check, "warning", f"names V2 checkpoint {v2['path']}, which is not there", version, location
            )
        )
    return out


def in_commit_timestamps(ctx: AuditContext) -> list[Finding]:
    """From the enablement version on, every commit has an in-commit timestamp, strictly greater
    than the previous commit's."""
    snapshot = ctx.snapshot
    if snapshot is None or not snapshot.inCommitTimestamps.enabled:
        return []
    start = max(snapshot.inCommitTimestamps.enablement_version or 0, ctx.timeline.base_version + 1)
    times = ctx.timeline.in_commit_timestamps
    out: list[Finding] = []
    previous: int | None = None
    for commit in ctx.timeline.commits:
        v = commit.version
        if v < start:
            continue
        stamp = times.get(v)
        if stamp is None:
            out.append(
                Finding(
                    "log.in_commit_timestamps", "error", "commitInfo has no inCommitTimestamp", v, commit.path
                )
            )
        elif previous is not None and stamp <= previous:
            out.append(
                Finding(
                    "log.in_commit_timestamps",
                    "error",
                    f"inCommitTimestamp {stamp} is not greater than the previous commit's {previous}",
                    v,
                    commit.path,
                )
            )
        previous = stamp if stamp is not None else previous
    return [f for f in out if f.version is None or ctx.in_range(f.version)]


def protocol_and_properties(ctx: AuditContext) -> list[Finding]:
    """The protocol lists what the properties enable (and what those features depend on), reader
    features are writer features too, and every feature is one deltaspark knows; a feature listed
    but not enabled by its property is reported as information."""
    snapshot = ctx.snapshot
    if snapshot is None:
        return []
    check, v = "log.protocol", snapshot.version
    protocol, config = snapshot.protocol, snapshot.configuration
    out: list[Finding] = []
    try:
        wanted = features_for_properties(config)
    except Exception as exc:  # noqa: BLE001 - a malformed delta.feature.* property
        out.append(Finding(check, "error", str(exc), v))
        wanted = set()
    for feature in sorted(wanted):
        if not protocol.hasFeature(feature) and not protocol.hasFeature(f"{feature}-preview"):
            out.append(
                Finding(
                    check, "error", f"a property enables {feature}, which the protocol does not support", v
                )
            )
    have = set(protocol.tableFeatures)
    for feature in sorted(have):
        for needed in DEPENDENCIES.get(feature, ()):
            if needed not in have:
                out.append(
                    Finding(check, "error", f"{feature} is supported without {needed}, which it requires", v)
                )
    if protocol.supportsReaderFeatures and protocol.supportsWriterFeatures:
        readers = set(protocol.readerFeatures or ())
        writers = set(protocol.writerFeatures or ())
        for feature in sorted(readers - writers):
            out.append(
                Finding(check, "error", f"reader feature {feature} is not listed as a writer feature", v)
            )
    known = READER_WRITER_FEATURES | WRITER_ONLY_FEATURES | SUPPORTED_READER_FEATURES | _OTHER_KNOWN
    for feature in sorted(f for f in have - known if not f.endswith("-preview")):
        out.append(Finding(check, "warning", f"table feature {feature} is unknown to deltaspark", v))
    properties = {feature: key for key, (_, feature) in PROPERTY_FEATURES.items()}
    explicit = set(protocol.writerFeatures or ()) if protocol.supportsWriterFeatures else set()
    for feature in sorted(explicit & set(properties)):
        if feature not in wanted and feature != "appendOnly":
            key = properties[feature]
            out.append(
                Finding(check, "info", f"{feature} is supported but not enabled ({key} is not set)", v)
            )
    return out
