"""A small, independent log replay in plain Python (json + pyarrow, no Spark, no deltaspark).

It follows the reference implementation's in-memory replay: actions applied in log order, the
last action per `(path, dv uniqueId)` wins. It ignores log compaction files and always replays
the individual commits, so it also cross-checks deltaspark's use of compactions.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow.parquet as pq

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_UUID = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")


@dataclass
class ReferenceState:
    version: int
    protocol: dict
    metadata: dict
    files: dict[tuple[str, str], dict] = field(default_factory=dict)  # (decoded path, dv id) -> add
    tombstones: dict[tuple[str, str], dict] = field(default_factory=dict)
    txns: dict[str, dict] = field(default_factory=dict)
    domains: dict[str, dict] = field(default_factory=dict)


def dv_id(dv: dict | None) -> str:
    if not dv:
        return ""
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    return base if dv.get("offset") is None else f"{base}@{dv['offset']}"


def _key(action: dict) -> tuple[str, str]:
    return unquote(action["path"]), dv_id(action.get("deletionVector"))


def _json_actions(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _parquet_actions(path: str) -> list[dict]:
    out = []
    for row in pq.read_table(path).to_pylist():
        for kind, value in row.items():
            if value is not None:
                if isinstance(value, dict):
                    value = {
                        k: (dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) else v)
                        for k, v in value.items()
                    }
                out.append({kind: value})
    return out


def _checkpoint_files(log_dir: str, names: list[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    multi: dict[tuple[int, int], set[int]] = {}
    for name in names:
        if m := _CLASSIC.match(name):
            found.setdefault(int(m[1]), [name])
        elif m := _UUID.match(name):
            found[int(m[1])] = [name]
        elif m := _MULTI.match(name):
            multi.setdefault((int(m[1]), int(m[3])), set()).add(int(m[2]))
    for (version, n), parts in multi.items():
        if parts == set(range(1, n + 1)) and version not in found:
            found[version] = [f"{version:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)]
    return found


def replay(table_dir: str) -> ReferenceState:
    log_dir = os.path.join(table_dir, "_delta_log")
    names = sorted(os.listdir(log_dir))
    commits = {int(m[1]): n for n in names if (m := _COMMIT.match(n))}
    checkpoints = _checkpoint_files(log_dir, names)
    latest = max([*commits, *checkpoints])
    base = max((v for v in checkpoints if v <= latest), default=-1)

    state = ReferenceState(version=latest, protocol={}, metadata={})

    def apply(action: dict) -> None:
        ((kind, body),) = action.items()
        if kind == "protocol":
            state.protocol = body
        elif kind == "metaData":
            state.metadata = body
        elif kind == "txn":
            state.txns[body["appId"]] = body
        elif kind == "domainMetadata":
            if body.get("removed"):
                state.domains.pop(body["domain"], None)
            else:
                state.domains[body["domain"]] = body
        elif kind == "add":
            state.files[_key(body)] = body
            state.tombstones.pop(_key(body), None)
        elif kind == "remove":
            state.files.pop(_key(body), None)
            state.tombstones[_key(body)] = body

    if base >= 0:
        for name in checkpoints[base]:
            path = os.path.join(log_dir, name)
            actions = _json_actions(path) if name.endswith(".json") else _parquet_actions(path)
            for action in actions:
                if "sidecar" in action:
                    sidecar = os.path.join(log_dir, "_sidecars", unquote(action["sidecar"]["path"]))
                    for inner in _parquet_actions(sidecar):
                        apply(inner)
                elif "checkpointMetadata" not in action:
                    apply(action)
    for version in range(base + 1, latest + 1):
        for action in _json_actions(os.path.join(log_dir, commits[version])):
            if len(action) == 1 and next(iter(action)) not in ("commitInfo", "cdc"):
                apply(action)
    return state
