"""A pure-Python check of commits against the protocol's rules for writers (no Spark, no deltaspark).

Used on every commit the write tests produce, so a writer bug is caught even where delta-rs would
read the table anyway.
"""

from __future__ import annotations

import json
from pathlib import Path

REQUIRED_ADD = ("path", "partitionValues", "size", "modificationTime", "dataChange")


def check_commit(table: Path, version: int) -> list[str]:
    """Every rule a commit breaks, as text (empty when it is valid)."""
    problems: list[str] = []
    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in lines if line.strip()]
    for action in actions:
        if len(action) != 1:
            problems.append(f"a line holds {len(action)} actions: {sorted(action)}")
    kinds = [next(iter(a)) for a in actions]
    if kinds.count("commitInfo") > 1 or kinds.count("protocol") > 1 or kinds.count("metaData") > 1:
        problems.append("more than one commitInfo, protocol or metaData action")
    protocol, metadata = _state_at(table, version)
    physical = _physical_names(protocol, metadata)
    partitions = [physical.get(c, c) for c in metadata["partitionColumns"]]
    ict = protocol is not None and "inCommitTimestamp" in (protocol.get("writerFeatures") or [])
    enabled = metadata.get("configuration", {}).get("delta.enableInCommitTimestamps") == "true"
    if ict and enabled and (kinds[0] != "commitInfo" or "inCommitTimestamp" not in actions[0]["commitInfo"]):
        problems.append("in-commit timestamps: commitInfo with inCommitTimestamp must come first")
    seen: set[str] = set()
    row_tracking = "rowTracking" in (protocol.get("writerFeatures") or [])
    for action in actions:
        if "add" in action:
            add = action["add"]
            missing = [k for k in REQUIRED_ADD if k not in add]
            if missing:
                problems.append(f"add {add.get('path')} lacks {missing}")
            if add["path"] in seen:
                problems.append(f"two adds of {add['path']}")
            seen.add(add["path"])
            if sorted(add["partitionValues"]) != sorted(partitions):
                problems.append(f"add {add['path']} partitionValues keys {sorted(add['partitionValues'])}")
            if not (table / _decoded(add["path"])).is_file():
                problems.append(f"add {add['path']} names no file")
            elif (table / _decoded(add["path"])).stat().st_size != add["size"]:
                problems.append(f"add {add['path']} size differs from the file")
            if "stats" in add:
                stats = json.loads(add["stats"])
                if not isinstance(stats.get("numRecords"), int):
                    problems.append(f"add {add['path']} stats without numRecords")
                named = set(stats.get("minValues", {})) | set(stats.get("nullCount", {}))
                if physical and not named <= set(physical.values()):
                    problems.append(f"add {add['path']} stats name {sorted(named)}, not physical names")
            if row_tracking and ("baseRowId" not in add or "defaultRowCommitVersion" not in add):
                problems.append(f"add {add['path']} lacks row tracking fields")
            if add.get("deletionVector"):
                problems += _dv_problems(table, add, protocol)
        if "remove" in action:
            remove = action["remove"]
            if "path" not in remove or "deletionTimestamp" not in remove or "dataChange" not in remove:
                problems.append(f"remove {remove.get('path')} lacks required fields")
        if "domainMetadata" in action and "domainMetadata" not in (protocol.get("writerFeatures") or []):
            problems.append("domainMetadata without the domainMetadata feature")
    return problems


def _physical_names(protocol: dict, metadata: dict) -> dict[str, str]:
    """Top-level logical name -> physical name under column mapping (empty without it)."""
    mode = metadata.get("configuration", {}).get("delta.columnMapping.mode", "none")
    features = set(protocol.get("readerFeatures") or [])
    if mode == "none" or not (protocol.get("minReaderVersion") == 2 or "columnMapping" in features):
        return {}
    fields = json.loads(metadata["schemaString"])["fields"]
    return {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}


def _dv_problems(table: Path, add: dict, protocol: dict) -> list[str]:
    """A DV descriptor and the bytes it points at, checked against the protocol's DV format."""
    import struct
    import uuid
    import zlib

    from pyroaring import BitMap64

    from tests.reference_rows import _z85

    dv, where = add["deletionVector"], f"add {add['path']} DV"
    if "deletionVectors" not in (protocol.get("readerFeatures") or []):
        return [f"{where} without the deletionVectors reader feature"]
    stats = json.loads(add.get("stats") or "{}")
    if not isinstance(stats.get("numRecords"), int):
        return [f"{where}: a file with a DV must have numRecords"]
    if stats.get("tightBounds") is not False:
        return [f"{where}: stats must say tightBounds false"]
    if dv["storageType"] != "u":
        return []  # only on-disk UUID DVs are written by deltaspark
    encoded = dv["pathOrInlineDv"]
    prefix, name = encoded[:-20], f"deletion_vector_{uuid.UUID(bytes=_z85(encoded[-20:]))}.bin"
    file = table / prefix / name
    if not file.is_file():
        return [f"{where}: {file} is missing"]
    blob = file.read_bytes()
    offset, size = dv["offset"], dv["sizeInBytes"]
    if blob[0] != 1 or offset < 1:
        return [f"{where}: format version {blob[0]}, offset {offset}"]
    (stored,) = struct.unpack(">i", blob[offset : offset + 4])
    data = blob[offset + 4 : offset + 4 + size]
    (crc,) = struct.unpack(">I", blob[offset + 4 + size : offset + 8 + size])
    if stored != size or crc != zlib.crc32(data):
        return [f"{where}: size {stored} vs {size} or CRC mismatch"]
    if struct.unpack("<I", data[:4])[0] != 1681511377:
        return [f"{where}: not the portable RoaringBitmapArray magic"]
    bitmap = BitMap64.deserialize(data[4:])
    if len(bitmap) != dv["cardinality"] or (bitmap and bitmap.max() >= stats["numRecords"]):
        return [f"{where}: cardinality {len(bitmap)} vs {dv['cardinality']} or row beyond numRecords"]
    return []


def _decoded(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _state_at(table: Path, version: int) -> tuple[dict, dict]:
    protocol: dict = {}
    metadata: dict = {}
    for v in range(version + 1):
        for line in (table / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            protocol = action.get("protocol", protocol)
            metadata = action.get("metaData", metadata)
    return protocol, metadata


def check_table(table: Path) -> None:
    versions = sorted(int(p.name[:20]) for p in (table / "_delta_log").glob("*.json"))
    assert versions == list(range(len(versions))), versions
    for version in versions:
        problems = check_commit(table, version)
        assert not problems, f"version {version}: {problems}"
