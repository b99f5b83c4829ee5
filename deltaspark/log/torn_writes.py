"""Torn writes: a JSON log file whose last line is cut short.

A commit written by a process that died mid-write (on a store without atomic puts), or a file
truncated by a copy, ends in an incomplete line, and nobody knows what actions followed it. The
readers that parse only some lines of a commit - protocol and metadata, history, the change data
feed - never look at most lines, so they check the last one: the file's last non-blank line must
be a whole JSON object, or the file is corrupt (`CorruptLogError` naming it); a file with no action
at all (0 bytes, or blank lines) is a torn write too, never an empty commit.

Only the end of each file is read, on the driver (a few kilobytes per file, `Storage.last_lines`);
files whose text the driver already holds are checked from it. A file found complete is
remembered (log files are never rewritten), so a table read again is not checked again.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import CorruptLogError
from deltaspark.log.action_schemas import CORRUPT_RECORD, action_schema
from deltaspark.log.files import LogFile
from deltaspark.storage import Storage, last_line_of

TORN = "the last line is not a complete JSON action (a torn or truncated write): "
EMPTY = "the file holds no action (empty or only blank lines): a torn or interrupted write"
_CHECKED_MAX = 100_000
_checked: OrderedDict[tuple[str, int], None] = OrderedDict()


def _parses(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _spark_parses(spark: SparkSession, line: str) -> bool:
    """Whether Spark's JSON parser (which the readers use, and which accepts a little more than
    Python's: single quotes, for one) reads `line` as an object: asked only when Python cannot."""
    schema = action_schema(None, with_corrupt=True)
    options = {"columnNameOfCorruptRecord": CORRUPT_RECORD, "mode": "PERMISSIVE"}
    parsed = F.from_json(F.lit(line), schema, options)
    row = spark.range(1).select(parsed.getField(CORRUPT_RECORD).isNull().alias("ok")).first()
    return bool(row and row["ok"])


def _remember(f: LogFile) -> None:
    _checked[(f.path, f.size)] = None
    _checked.move_to_end((f.path, f.size))
    while len(_checked) > _CHECKED_MAX:
        _checked.popitem(last=False)


def _check_line(spark: SparkSession, f: LogFile, line: str | None) -> None:
    if line is None:
        return  # gone since it was listed: the read that follows reports it
    if not line:
        raise CorruptLogError(f.path, EMPTY)
    if not _parses(line) and not _spark_parses(spark, line):
        raise CorruptLogError(f.path, TORN + line[-200:])
    _remember(f)


def check_bytes(spark: SparkSession, f: LogFile, data: bytes) -> None:
    """Check a file whose bytes the driver holds, reading only its last line."""
    if (f.path, f.size) not in _checked:
        _check_line(spark, f, last_line_of(lambda begin, end: data[begin:end], len(data)))


def check_files(spark: SparkSession, storage: Storage, files: Iterable[LogFile]) -> None:
    """Check the last line of each JSON log file not checked before (reading only its end)."""
    todo = [f for f in files if f.file_format == "json" and (f.path, f.size) not in _checked]
    for f in todo:
        if f.size == 0:
            raise CorruptLogError(f.path, EMPTY)
    if not todo:
        return
    lines = storage.last_lines([(f.path, f.size) for f in todo])
    for f, line in zip(todo, lines, strict=True):
        _check_line(spark, f, line)
