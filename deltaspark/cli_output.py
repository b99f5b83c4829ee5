"""Printing command results: aligned tables for people, JSON lines for programs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


def _print_rows(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    def cell(value: Any, nested: bool = False) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={cell(v, True)}" for k, v in value.items())
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ", timespec="seconds")
        if value is None:
            return "null" if nested else ""
        return _shorten(str(value))

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(t[i]) for t in table]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))


MAX_CELL = 72


def _shorten(text: str) -> str:
    """A long value (a path under deep partition folders) cut in the middle, to keep columns readable."""
    if len(text) <= MAX_CELL:
        return text
    keep = (MAX_CELL - 3) // 2
    return text[:keep] + "..." + text[-keep:]


def _emit_json(rows: Any) -> None:
    for row in rows:
        print(json.dumps(row, default=str))


def print_files(
    files: Any, json_lines: bool, order_by: str, limit: int, heading: str, columns: Sequence[str]
) -> None:
    """A file listing: every file as a JSON line, or the count and the first `limit` by path."""
    if json_lines:
        _emit_json(r.asDict(recursive=True) for r in files.toLocalIterator())
        return
    total = files.count()
    rows = [r.asDict(recursive=True) for r in files.orderBy(order_by).limit(limit).collect()]
    print(f"{total:,} file(s) {heading}" + (f"; first {len(rows)} by path" if total > len(rows) else ""))
    _print_rows(rows, columns)
