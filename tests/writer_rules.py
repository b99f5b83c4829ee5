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
    partitions = metadata["partitionColumns"]
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
            if row_tracking and ("baseRowId" not in add or "defaultRowCommitVersion" not in add):
                problems.append(f"add {add['path']} lacks row tracking fields")
        if "remove" in action:
            remove = action["remove"]
            if "path" not in remove or "deletionTimestamp" not in remove or "dataChange" not in remove:
                problems.append(f"remove {remove.get('path')} lacks required fields")
        if "domainMetadata" in action and "domainMetadata" not in (protocol.get("writerFeatures") or []):
            problems.append("domainMetadata without the domainMetadata feature")
    return problems


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
