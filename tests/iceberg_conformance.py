"""The Iceberg conformance tables (`../shared/conformance/iceberg/`) and the figures their README
publishes for each: entry metadata file, path prefixes to relocate, rows per snapshot."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ENV = "DELTASPARK_ICEBERG_CONFORMANCE"
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "iceberg"


def root() -> Path:
    """The conformance folder; skips (or fails under CI=true) when it is absent."""
    folder = Path(os.environ.get(ENV, str(DEFAULT)))
    if not (folder / "README.md").is_file():
        message = f"Iceberg conformance tables not found at {folder} (set {ENV})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return folder


@dataclass(frozen=True)
class Table:
    name: str
    path: Path
    entry_metadata: str
    prefixes: tuple[str, ...]
    rows: dict[int, int]  # snapshot id -> rows the README's independent reader counts
    current: int | None

    def relocate(self) -> dict[str, str]:
        return {prefix.rstrip("/"): str(self.path) for prefix in self.prefixes}


def tables() -> list[Table]:
    folder = root()
    text = (folder / "README.md").read_text()
    out = []
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        name = block.split("\n", 1)[0].strip()
        if not (folder / name).is_dir():
            continue
        entry = re.search(r"Entry metadata: `([^`]+)`", block).group(1)
        prefixes: list[str] = []
        for line in block.splitlines():
            if line.startswith("- Paths in metadata:"):
                prefixes += [p for p in re.findall(r"`([^`]+)`", line) if "/" in p]
        rows: dict[int, int] = {}
        current = None
        match = re.search(r"- Rows per snapshot[^:]*: (.*)", block)
        if match:
            for part in match.group(1).split(";"):
                item = re.match(r"\s*(\d+)( \(current\))? [\w-]+=(\d+)", part)
                if item:
                    rows[int(item.group(1))] = int(item.group(3))
                    if item.group(2):
                        current = int(item.group(1))
        out.append(Table(name, folder / name, entry.split("/")[-1], tuple(prefixes), rows, current))
    return out


def table_names() -> list[str]:
    """Names to parametrize tests by; one placeholder when the folder is absent, so that one test
    reports the skip (or, under CI, the failure)."""
    try:
        return [t.name for t in tables()]
    except BaseException:
        return ["<conformance folder>"]
