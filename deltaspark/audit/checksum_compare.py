"""Comparing a version checksum (`N.crc`) with the replay of the log at N, field by field.

Pure Python over JSON documents, run in Spark tasks (`mapInArrow`): one input row per checksum file
with its text, the file-state aggregates Spark computed at that version and the small-action
state swept on the driver. Every field the protocol and delta-spark define is compared, the
histograms included; a difference is one finding naming the field and both values. A field the
file does not hold is not compared: a checksum in an older format (without the protocol and
metadata the current protocol requires) is checked on what it holds, and the absent fields noted.
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


# Fields the current protocol requires. Older writers (Databricks runtimes, delta-spark before
# it recorded the table's protocol and metadata) wrote `tableSizeBytes`, `numFiles`, `numMetadata`,
# `numProtocol` and `numTransactions` only: an absent field is not compared, and noted.
REQUIRED = ("tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "metadata", "protocol")


def differences(crc: dict[str, Any], state: dict[str, Any], small: dict[str, Any]) -> list[str]:
    """What `crc` says differently from the replay (`state`: file aggregates, `small`: the rest)."""
    return [detail for severity, detail in findings(crc, state, small) if severity == "error"]


def findings(crc: dict[str, Any], state: dict[str, Any], small: dict[str, Any]) -> list[tuple[str, str]]:
    """`(severity, detail)` of every field of `crc` that differs from the replay (errors), of what
    could not be compared (info), and which required fields are absent, with the fields that were
    compared (info: a file in an older format, checked on what it holds)."""
    crc = {k: v for k, v in crc.items() if v is not None or k == "inCommitTimestampOpt"}
    out: list[str] = []
    notes: list[str] = []
    compared: list[str] = []
    for key in ("tableSizeBytes", "numFiles"):
        if key in crc:
            compared.append(key)
            if crc[key] != state[key]:
                out.append(f"{key} is {crc[key]}, the log replays to {state[key]}")
    for key in ("numMetadata", "numProtocol"):
        if key in crc:
            compared.append(key)
            if crc[key] != 1:
                out.append(f"{key} is {crc[key]}, must be 1")
    if "numTransactions" in crc:  # the older format's count of live transaction identifiers
        compared.append("numTransactions")
        live = len(small.get("txns", []))
        if crc["numTransactions"] != live:
            out.append(f"numTransactions is {crc['numTransactions']}, the log has {live}")
    for key, name in (
        ("numDeletedRecordsOpt", "numDeletedRecords"),
        ("numDeletionVectorsOpt", "numDeletionVectors"),
    ):
        if key in crc:
            compared.append(key)
            if crc[key] != state[name]:
                out.append(f"{key} is {crc[key]}, the log replays to {state[name]}")
    if "inCommitTimestampOpt" in crc:
        compared.append("inCommitTimestampOpt")
        if crc["inCommitTimestampOpt"] is not None and crc["inCommitTimestampOpt"] != small.get("ict"):
            out.append(
                f"inCommitTimestampOpt is {crc['inCommitTimestampOpt']}, the commit has {small.get('ict')}"
            )
        if small.get("ict") is not None and crc["inCommitTimestampOpt"] is None:
            out.append("inCommitTimestampOpt is null, the commit has an in-commit timestamp")
    if "setTransactions" in crc:
        compared.append("setTransactions")
        have = sorted((t.get("appId"), t.get("version")) for t in crc["setTransactions"])
        want = sorted((t.get("appId"), t.get("version")) for t in small.get("txns", []))
        if have != want:
            out.append(f"setTransactions are {have}, the log has {want}")
    if "domainMetadata" in crc:
        compared.append("domainMetadata")
        have_d = sorted(
            (d.get("domain"), d.get("configuration")) for d in crc["domainMetadata"] if not d.get("removed")
        )
        want_d = sorted((d.get("domain"), d.get("configuration")) for d in small.get("domains", []))
        if have_d != want_d:
            out.append(f"domainMetadata is {have_d}, the log has {want_d}")
    if isinstance(crc.get("protocol"), dict) and small.get("protocol"):
        compared.append("protocol")
        out += _protocol_differences(crc["protocol"], small["protocol"])
    if isinstance(crc.get("metadata"), dict) and small.get("metadata"):
        compared.append("metadata")
        out += _metadata_differences(crc["metadata"], small["metadata"])
    for key in ("histogramOpt", "fileSizeHistogram"):
        histogram = crc.get(key)
        if not isinstance(histogram, dict):
            continue
        if list(histogram.get("sortedBinBoundaries") or []) != list(state["bins"]):
            notes.append(f"{key} uses other bin boundaries than the standard ones; not compared")
            continue
        compared.append(key)
        for field in ("fileCounts", "totalBytes"):
            problem = _array_difference(list(histogram.get(field) or []), list(state[field]), state["bins"])
            if problem:
                out.append(f"{key}.{field} {problem}")
    deleted = crc.get("deletedRecordCountsHistogramOpt")
    if isinstance(deleted, dict):
        compared.append("deletedRecordCountsHistogramOpt")
        counts = list(deleted.get("deletedRecordCounts") or [])
        problem = _array_difference(counts, list(state["deletedRecordCounts"]), None)
        if problem:
            out.append(f"deletedRecordCountsHistogramOpt.deletedRecordCounts {problem}")
    absent = [key for key in REQUIRED if key not in crc]
    result = [("error", detail) for detail in out] + [("info", note) for note in notes]
    if not compared:
        result.append(("warning", "holds none of a version checksum's fields: nothing to compare"))
    elif absent:
        verdict = "every one matches the log" if not out else "the errors say which differ"
        result.append(
            (
                "info",
                f"{', '.join(absent)} absent (required by the current protocol; older writers did not "
                f"record them): compared the fields it holds, {', '.join(compared)}: {verdict}",
            )
        )
    return result


def text_findings(text: str | None, state: dict[str, Any], small: dict[str, Any]) -> list[tuple[str, str]]:
    """`findings` of a checksum file's text; an error when it is not one JSON object."""
    try:
        crc = json.loads(text or "")
        if not isinstance(crc, dict):
            raise ValueError("not a JSON object")
        return findings(crc, state, small)
    except ValueError as exc:
        return [("error", f"unreadable checksum file: {exc}")]


def compare_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """`mapInArrow` body: rows `version, path, text, state, small` -> finding rows."""
    for batch in batches:
        out: list[tuple[Any, ...]] = []
        for row in batch.to_pylist():
            state, small = json.loads(row["state"]), json.loads(row["small"])
            for severity, detail in text_findings(row["text"], state, small):
                out.append((CHECK, severity, row["version"], row["path"], detail, None))
        yield emit_findings(out)
