"""Canonical-JSON MD5 checksum of `_last_checkpoint` (protocol appendix "JSON checksum").

The JSON is flattened to `path=value` pairs, keys and strings URL-encoded with a strict rule,
pairs sorted by the UTF-8 bytes of their path, joined with `,`, and MD5-hashed. Numbers keep their
literal text, which is why parsing keeps them as raw strings.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")


class _RawNumber(str):
    """A JSON number kept exactly as written."""


class DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        raise DuplicateKeyError(f"duplicate keys {dupes}")
    return dict(pairs)


def url_encode(text: str) -> str:
    """Percent-encode every octet but the RFC 3986 unreserved set, hex digits in upper case."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


def parse_json_preserving_numbers(text: str) -> Any:
    """Parse JSON keeping number literals verbatim and rejecting duplicate keys (rule 7)."""
    return json.loads(
        text,
        parse_int=_RawNumber,
        parse_float=_RawNumber,
        parse_constant=_RawNumber,
        object_pairs_hook=_no_duplicates,
    )


def _leaves(value: Any, path: list[str], out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key, child in value.items():
            _leaves(child, [*path, f'"{url_encode(key)}"'], out)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            _leaves(child, [*path, str(index)], out)
    else:
        if value is None:
            literal = "null"
        elif value is True:
            literal = "true"
        elif value is False:
            literal = "false"
        elif isinstance(value, _RawNumber):
            literal = str(value)
        elif isinstance(value, str):
            literal = f'"{url_encode(value)}"'
        else:  # a number built in Python rather than parsed
            literal = json.dumps(value)
        out.append(("+".join(path), literal))


def canonicalize(document: dict[str, Any]) -> str:
    """The canonical form of a JSON object, ignoring its top-level `checksum` key (rule 6)."""
    pairs: list[tuple[str, str]] = []
    for key, child in document.items():
        if key == "checksum":
            continue
        _leaves(child, [f'"{url_encode(key)}"'], pairs)
    pairs.sort(key=lambda pair: pair[0].encode("utf-8"))
    return ",".join(f"{path}={literal}" for path, literal in pairs)


def checksum_of(document: dict[str, Any]) -> str:
    return hashlib.md5(canonicalize(document).encode("utf-8")).hexdigest()


def checksum_of_text(text: str) -> str:
    """Checksum of a JSON text, honoring number literals as written."""
    document = parse_json_preserving_numbers(text)
    if not isinstance(document, dict):
        raise ValueError("the last checkpoint JSON must be an object")
    return checksum_of(document)
