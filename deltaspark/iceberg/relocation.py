"""Paths of Iceberg tables that were written somewhere else.

Iceberg metadata stores absolute paths (`hdfs://nn:8020/warehouse/t/...`, `s3://bucket/t/...`). A
table copied to another place must have them rewritten on read: a prefix map from where the table
was written to where it is now. Values inside delete files (position deletes' `file_path`, deletion
vectors' `referenced_data_file`) are matched to data files by `match_key`, which ignores scheme and
authority, because writers disagree on them (`/warehouse/t` in a manifest, `hdfs://nn/warehouse/t`
in the delete file written by another engine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEME_AUTHORITY = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?")


def strip_scheme(path: str) -> str:
    """The path part of a URI: `hdfs://nn:8020/a/b` and `file:///a/b` and `/a/b` all give `/a/b`."""
    stripped = SCHEME_AUTHORITY.sub("", path, count=1)
    if stripped.startswith("//"):
        stripped = "/" + stripped.lstrip("/")
    return stripped


def match_key(path: str) -> str:
    """What two references to the same file have in common (see the module docstring)."""
    return strip_scheme(path)


@dataclass(frozen=True)
class PathMap:
    """Ordered (old prefix, new prefix) pairs; the longest matching old prefix wins."""

    prefixes: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(mapping: dict[str, str] | None) -> PathMap:
        pairs = [(old.rstrip("/"), new.rstrip("/")) for old, new in (mapping or {}).items() if old]
        pairs.sort(key=lambda pair: -len(pair[0]))
        return PathMap(tuple(pairs))

    def apply(self, path: str | None) -> str | None:
        if path is None:
            return None
        for old, new in self.prefixes:
            if path.startswith(old) and (len(path) == len(old) or path[len(old)] == "/"):
                return new + path[len(old) :]
        bare = strip_scheme(path)
        for old, new in self.prefixes:
            old_bare = strip_scheme(old)
            if (
                old_bare
                and bare.startswith(old_bare)
                and (len(bare) == len(old_bare) or bare[len(old_bare)] == "/")
            ):
                return new + bare[len(old_bare) :]
        return path
