"""Comparing a version checksum (`N.crc`) with the replay of the log at N, field by field.

Pure Python over JSON documents, run in Spark tasks (`mapInArrow`): one input row per checksum file
with its text, the file-state aggregates Spark computed at that version and the small-action
state swept on the driver. Every field the protocol and delta-spark define is compared, the
histograms included; a difference is one finding naming the field and both values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from deltaspark.audit.file_tasks import emit_findings

CHECK = "log.checksum"


def _features(protocol: dict[str, Any], key: str) -> list[str] | None:
    value = protocol.get(key)
    return sorted(value) if value is not None else None


def _protocol_differences(crc: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    out = []
    for key in ("minReaderVersion", "minWriterVersion"):
        if crc.get(key) != expected.get(key):
            out.append(f"protocol.{key} is {crc.get(key)}, the log has {expected.get(key)}")
    for key in ("readerFeatures", "writerFeatures"):
        if _features(crc, key) != _features(expected, key):
            out.append(f"protocol.{key} is {_features(crc, key)}, the log has {_features(expected, key)}")
    return out


def _parsed(schema: Any) -> Any:
    """A schema string as JSON (writers differ in whitespace); other values as they are."""
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except ValueError:
            return schema
    return schema


def _metadata_differences(crc: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    out = []
    for key in (
        "id",
        "name",
        "description",
        "schemaString",
        "partitionColumns",
        "createdTime",
        "configuration",
    ):
        have, want = crc.get(key), expected.get(key)
        if key == "configuration":
            have, want = have or {}, want or {}
        if key == "partitionColumns":
            have, want = have or [], want or []
        if key == "schemaString":
            have, want = _parsed(have), _parsed(want)
        if have != want:
            shown_have = have if key != "schemaString" else "(a different schema)"
            shown_want = want if key != "schemaString" else "(another)"
            out.append(f"metadata.{key} is {shown_have}, the log has {shown_want}")
    provider = (crc.get("format") or {}).get("provider")
    logged = (expected.get("format") or {}).get("provider")
    if provider is not None and provider != logged:
        out.append(f"metadata.format.provider is {provider}, the log has {logged}")
    return out


def _array_difference(have: list[Any], want: list[Any], bins: list[int] | None) -> str | None:
    """How two histogram arrays differ, naming the first few bins; None when they are equal."""
    if have == want:
        return None
    if len(have) != len(want):
        return f"has {len(have)} bins, {len(want)} expected"
    shown = []
    for i, (a, b) in enumerate(zip(have, want, strict=True)):
        if a != b:
            label = f"bin {i}" + (f" (from {bins[i]} bytes)" if bins else "")
            shown.append(f"{label}: {a}, the log replays to {b}")
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    return "differs at " + "; ".join(shown[:3]) + more


def differences(crc: dict[str, Any], state: dict[str, Any], small: dict[str, Any]) -> list[str]:
    """What `crc` says differently from the replay (`state`: file aggregates, `small`: the rest)."""
    out: list[str] = []
    for key in ("tableSizeBytes", "numFiles"):
        if key not in crc:
            out.append(f"required field {key} is absent")
        elif crc[key] != state[key]:
            out.append(f"{key} is {crc[key]}, the log replays to {state[key]}")
    for key in ("numMetadata", "numProtocol"):
        if key not in crc:
            out.append(f"required field {key} is absent")
        elif crc[key] != 1:
            out.append(f"{key} is {crc[key]}, must be 1")
    for key, name in (
        ("numDeletedRecordsOpt", "numDeletedRecords"),
        ("numDeletionVectorsOpt", "numDeletionVectors"),
    ):
        if crc.get(key) is not None and crc[key] != state[name]:
            out.append(f"{key} is {crc[key]}, the log replays to {state[name]}")
    if crc.get("inCommitTimestampOpt") is not None and crc["inCommitTimestampOpt"] != small.get("ict"):
        out.append(
            f"inCommitTimestampOpt is {crc['inCommitTimestampOpt']}, the commit has {small.get('ict')}"
        )
    if (
        small.get("ict") is not None
        and crc.get("inCommitTimestampOpt") is None
        and "inCommitTimestampOpt" in crc
    ):
        out.append("inCommitTimestampOpt is null, the commit has an in-commit timestamp")
    if crc.get("setTransactions") is not None:
        have = sorted((t.get("appId"), t.get("version")) for t in crc["setTransactions"])
        want = sorted((t.get("appId"), t.get("version")) for t in small.get("txns", []))
        if have != want:
            out.append(f"setTransactions are {have}, the log has {want}")
    if crc.get("domainMetadata") is not None:
        have_d = sorted(
            (d.get("domain"), d.get("configuration")) for d in crc["domainMetadata"] if not d.get("removed")
        )
        want_d = sorted((d.get("domain"), d.get("configuration")) for d in small.get("domains", []))
        if have_d != want_d:
            out.append(f"domainMetadata is {have_d}, the log has {want_d}")
    if isinstance(crc.get("protocol"), dict) and small.get("protocol"):
        out += _protocol_differences(crc["protocol"], small["protocol"])
    elif "protocol" not in crc:
        out.append("required field protocol is absent")
    if isinstance(crc.get("metadata"), dict) and small.get("metadata"):
        out += _metadata_differences(crc["metadata"], small["metadata"])
    elif "metadata" not in crc:
        out.append("required field metadata is absent")
    for key in ("histogramOpt", "fileSizeHistogram"):
        histogram = crc.get(key)
        if not isinstance(histogram, dict):
            continue
        if list(histogram.get("sortedBinBoundaries") or []) != list(state["bins"]):
            out.append(f"{key} uses other bin boundaries than the standard ones; not compared")
            continue
        for field in ("fileCounts", "totalBytes"):
            problem = _array_difference(list(histogram.get(field) or []), list(state[field]), state["bins"])
            if problem:
                out.append(f"{key}.{field} {problem}")
    deleted = crc.get("deletedRecordCountsHistogramOpt")
    if isinstance(deleted, dict):
        counts = list(deleted.get("deletedRecordCounts") or [])
        problem = _array_difference(counts, list(state["deletedRecordCounts"]), None)
        if problem:
            out.append(f"deletedRecordCountsHistogramOpt.deletedRecordCounts {problem}")
    return out


def compare_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """`mapInArrow` body: rows `version, path, text, state, small` -> finding rows."""
    for batch in batches:
        out: list[tuple[Any, ...]] = []
        for row in batch.to_pylist():
            try:
                crc = json.loads(row["text"] or "")
                if not isinstance(crc, dict):
                    raise ValueError("not a JSON object")
                problems = differences(crc, json.loads(row["state"]), json.loads(row["small"]))
            except ValueError as exc:
                problems = [f"unreadable checksum file: {exc}"]
            for problem in problems:
                severity = "info" if problem.endswith("not compared") else "error"
                out.append((CHECK, severity, row["version"], row["path"], problem, None))
        yield emit_findings(out)
