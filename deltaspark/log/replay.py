"""Reading log files into one actions DataFrame, tagged with the version each action belongs to.

JSON files (commits, log compactions, V2 JSON checkpoints) are read as text, filtered by their
top-level action key before any JSON is parsed, then parsed with the action schema. Parquet
checkpoints and sidecars are read with an explicit schema. Either way the driver only sees
file names; the actions stay distributed.

A line that is not a JSON object with an action key, or that does not parse, fails the query
with the file named (Spark's `raise_error`), so a corrupt log is never silently read as empty.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from deltaspark.errors import DeltaSparkError
from deltaspark.log.action_schemas import CORRUPT_RECORD, action_schema
from deltaspark.log.files import LogFile
from deltaspark.spark_compat import is_connect, local_frame, read_paths
from deltaspark.spark_errors import raise_translated
from deltaspark.storage import LINE_BREAK, STRICT_READ_OPTIONS, name_of, storage_for

# How a line is selected before parsing (also by `small_log`, which must select the same lines):
# its action key, by a Java regex; file actions, as every writer spells them, by their prefix.
ACTION_KEY = r'^\s*\{\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*:'
FILE_ACTION_PREFIXES = ('{"add":', '{"remove":')
_COMPACTION_NAME = r"^\d{20}\.(\d{20})\.compacted\.json$"
_VERSION_PREFIX = r"^(\d{20})\."


def _version_from_name(name: Column) -> Column:
    """Version of a log file from its name; a compaction file counts as its end version."""
    # Evaluated once per action: plain string tests first, a regex only for compaction files.
    return (
        F.when(
            name.endswith(".compacted.json") & name.rlike(_COMPACTION_NAME),
            F.regexp_extract(name, _COMPACTION_NAME, 1),
        )
        .when(name.substr(21, 1) == ".", name.substr(1, 20))
        .otherwise(F.regexp_extract(name, _VERSION_PREFIX, 1))
        .cast("long")
    )


CORRUPT_LINE = "_corrupt_line"
# JSON log files read on the driver when they are at most this many, this big in all (`small_log`
# reads protocol and metadata within the same bounds).
DRIVER_JSON_FILES = 64
DRIVER_JSON_BYTES = 4 * 1024 * 1024
_LINES = StructType([StructField(name, StringType()) for name in ("value", "file", "name")])


def _file_action_line(value: Column) -> Column:
    """A line that is a file action as every writer spells it (by its prefix, before any parsing)."""
    return reduce(operator.or_, [value.startswith(p) for p in FILE_ACTION_PREFIXES])


def _corruption_error(file: Column, line: Column) -> Column:
    return F.raise_error(
        F.concat(
            F.lit("deltaspark: corrupt Delta log file "),
            file,
            F.lit(": cannot parse line: "),
            F.substring(line, 1, 200),
        )
    )


def lines_on_driver(spark: SparkSession, files: Sequence[LogFile]) -> DataFrame | None:
    """The lines of a few small JSON log files as Spark's text scan gives them (`value`, `file`,
    `name`), read on the driver into a local relation: what Spark then computes from them is folded
    into the relation when a query is planned, with the same expressions, and needs no job. None
    (read them with Spark) when they are many or big, cannot be read from here, or hold bytes that
    are not UTF-8 (Spark's scan keeps such bytes, a decoder would not)."""
    if is_connect(spark) or not 0 < len(files) <= DRIVER_JSON_FILES:
        return None
    if sum(f.size for f in files) > DRIVER_JSON_BYTES or any(f.file_format != "json" for f in files):
        return None
    storage = storage_for(spark)
    try:  # a local file is read by Python, bytes that are not UTF-8 replaced (checked below)
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            texts = list(pool.map(lambda f: storage.read_text(f.path), files))
    except (DeltaSparkError, OSError):
        return None  # Spark reads them and says what is wrong
    if any(text is None or "\ufffd" in text for text in texts):
        return None
    columns: dict[str, list[Any]] = {"value": [], "file": [], "name": []}
    for f, text in zip(files, texts, strict=True):
        lines = LINE_BREAK.split(text)  # type: ignore[arg-type]
        if lines and lines[-1] == "":
            lines.pop()  # a final line break ends the last line; it starts no new one
        uri = storage.uri_string(f.path)  # as Spark's `_metadata.file_path` shows it
        columns["value"] += lines
        columns["file"] += [uri] * len(lines)
        columns["name"] += [name_of(f.path)] * len(lines)
    return local_frame(spark, columns, _LINES)


def read_json_actions(
    spark: SparkSession,
    files: Sequence[LogFile],
    kinds: Sequence[str] | None = None,
    select_lines: bool = True,
) -> DataFrame:
    """Actions of JSON log files: `version`, `file`, one column per requested kind, `_corrupt_line`.

    `select_lines=True` reads the files as text and parses only lines whose action key is in
    `kinds`: right for picking a few actions (protocol, metaData, commitInfo) out of big commits.
    `select_lines=False` parses every line once in the JSON scan: right for state
    reconstruction, where most lines are wanted and later filters must not re-parse.

    A corrupt line fails the query when its `version` is evaluated. Consumers that filter on
    action columns must keep rows with `_corrupt_line` set so that the failure is not filtered away.
    """
    schema = action_schema(kinds, with_corrupt=True)
    wanted = [f.name for f in schema.fields if f.name != CORRUPT_RECORD]
    paths = [f.path for f in files]
    if select_lines:
        lines = lines_on_driver(spark, files)
        if lines is None:
            lines = read_paths(spark, spark.read.options(**STRICT_READ_OPTIONS), "text", paths).select(
                "value",
                F.col("_metadata.file_path").alias("file"),
                F.col("_metadata.file_name").alias("name"),
            )
        value = F.col("value")
        if kinds is not None and "add" not in kinds and "remove" not in kinds:
            # Most lines of a big log are file actions, as every writer spells them; a prefix test
            # drops them before the key regex (they would be dropped by their key anyway).
            lines = lines.where(~_file_action_line(value))
        lines = lines.where(F.trim("value") != "")
        key = F.regexp_extract("value", ACTION_KEY, 1)
        if kinds is not None:
            lines = lines.where(key.isin(list(kinds)) | (key == ""))
        parsed = F.from_json(
            "value", schema, {"columnNameOfCorruptRecord": CORRUPT_RECORD, "mode": "PERMISSIVE"}
        )
        corrupt = (key == "") | parsed.getField(CORRUPT_RECORD).isNotNull()
        line = F.col("value")
        actions = [parsed.getField(k).alias(k) for k in wanted]
        source = lines
    else:
        reader = (
            spark.read.options(**STRICT_READ_OPTIONS)
            .options(columnNameOfCorruptRecord=CORRUPT_RECORD, mode="PERMISSIVE")
            .schema(schema)
        )
        source = read_paths(spark, reader, "json", paths).select(
            "*", F.col("_metadata.file_path").alias("file"), F.col("_metadata.file_name").alias("name")
        )
        corrupt = F.col(CORRUPT_RECORD).isNotNull()
        line = F.col(CORRUPT_RECORD)
        actions = [F.col(k) for k in wanted]
    version = F.when(corrupt, _corruption_error(F.col("file"), line)).otherwise(
        _version_from_name(F.col("name"))
    )
    return source.select(version.alias("version"), "file", *actions, corrupt.alias(CORRUPT_LINE))


def keep_actions(frame: DataFrame, condition: Column) -> DataFrame:
    """Filter actions, keeping corrupt lines so that their error is raised downstream."""
    if CORRUPT_LINE in frame.columns:
        condition = condition | F.col(CORRUPT_LINE)
    return frame.where(condition)


def read_parquet_actions(
    spark: SparkSession,
    files: Sequence[LogFile] | Sequence[str],
    schema: StructType,
    version: int,
) -> DataFrame:
    """Actions of parquet checkpoint files or sidecars, all belonging to one checkpoint `version`."""
    paths = [f if isinstance(f, str) else f.path for f in files]
    return read_paths(
        spark, spark.read.options(**STRICT_READ_OPTIONS).schema(schema), "parquet", paths
    ).select(
        F.lit(version).cast("long").alias("version"),
        F.col("_metadata.file_path").alias("file"),
        "*",
        F.lit(False).alias(CORRUPT_LINE),
    )


def count_actions_bound(
    spark: SparkSession, files: Sequence[LogFile] | Sequence[str], kinds: Sequence[str] = ()
) -> dict[str, int]:
    """Upper bounds of the actions in log files, without parsing any: `actions`, the rows of parquet
    files (from their footers) plus the non-blank lines of JSON files; and per kind in `kinds`, the
    rows holding one, plus the lines whose action key is that kind or unreadable (file actions, as
    every writer spells them, are dropped by their prefix first). Reconciliation can only lower them."""
    paths = [f if isinstance(f, str) else f.path for f in files]
    parquet = [p for p in paths if p.endswith(".parquet")]
    json = [p for p in paths if not p.endswith(".parquet")]
    totals = dict.fromkeys(["actions", *kinds], 0)
    frames = []
    if parquet:
        reader = spark.read.options(**STRICT_READ_OPTIONS).schema(action_schema(kinds))
        rows = read_paths(spark, reader, "parquet", parquet)
        frames.append(rows.agg(F.count(F.lit(1)).alias("actions"), *[F.count(k).alias(k) for k in kinds]))
    if json:
        value = F.col("value")
        line = F.trim(value) != ""
        other = line & ~_file_action_line(value)
        key = F.regexp_extract(value, ACTION_KEY, 1)
        lines = read_paths(spark, spark.read.options(**STRICT_READ_OPTIONS), "text", json)
        frames.append(
            lines.agg(
                F.count(F.when(line, 1)).alias("actions"),
                *[F.count(F.when(other & ((key == k) | (key == "")), 1)).alias(k) for k in kinds],
            )
        )
    for frame in frames:
        row = frame.first()
        for name in totals:
            totals[name] += int(row[name]) if row is not None else 0
    return totals


def parquet_file_schema(spark: SparkSession, path: str) -> StructType:
    """The schema a parquet log file was written with (its footer), read under the same options.
    An unreadable footer is a `CorruptLogError` naming the file (and, for a sidecar, its checkpoint)."""
    try:
        return spark.read.options(**STRICT_READ_OPTIONS).parquet(path).schema
    except Exception as exc:
        raise_translated(exc, spark, path)
        raise  # unreachable: raise_translated always raises


def read_checkpoint_actions(
    spark: SparkSession,
    files: Sequence[LogFile],
    kinds: Sequence[str],
    version: int,
    parquet_schema: StructType | None = None,
) -> DataFrame:
    """Actions of a checkpoint's own files (parquet parts or a V2 JSON top-level file)."""
    json_files = [f for f in files if f.file_format == "json"]
    if json_files:
        return read_json_actions(spark, json_files, kinds)  # `n.checkpoint.<uuid>.json`: version n
    return read_parquet_actions(spark, files, parquet_schema or action_schema(kinds), version)
