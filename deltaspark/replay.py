"""Reading log files into one actions DataFrame, tagged with the version each action belongs to.

JSON files (commits, log compactions, V2 JSON checkpoints) are read as text, filtered by their
top-level action key before any JSON is parsed, then parsed with the action schema. Parquet
checkpoints and sidecars are read with an explicit schema. Either way the driver only sees
file names; the actions stay distributed.

A line that is not a JSON object with an action key, or that does not parse, fails the query
with the file named (Spark's `raise_error`), so a corrupt log is never silently read as empty.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .action_schemas import CORRUPT_RECORD, action_schema
from .log_files import LogFile

_ACTION_KEY = r'^\s*\{\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*:'
_COMPACTION_NAME = r"^\d{20}\.(\d{20})\.compacted\.json$"
_VERSION_PREFIX = r"^(\d{20})\."

# A corrupt or missing log file must fail the read, whatever the session says about data files.
# On the local filesystem, Hadoop's client-side `.<name>.crc` files are bypassed: tools that edit
# a log by hand leave them stale, and they are no part of the Delta protocol (delta-rs ignores them
# too). Content is still validated: every line must parse as an action.
_STRICT = {
    "ignoreCorruptFiles": "false",
    "ignoreMissingFiles": "false",
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


def _version_from_name(name: Column) -> Column:
    """Version of a log file from its name; a compaction file counts as its end version."""
    return (
        F.when(name.rlike(_COMPACTION_NAME), F.regexp_extract(name, _COMPACTION_NAME, 1))
        .otherwise(F.regexp_extract(name, _VERSION_PREFIX, 1))
        .cast("long")
    )


def read_json_actions(
    spark: SparkSession,
    files: Sequence[LogFile],
    kinds: Sequence[str] | None = None,
) -> DataFrame:
    """Actions of JSON log files: `version`, `file`, and one column per requested action kind.

    Only lines whose action key is in `kinds` are parsed (all lines when `kinds` is None);
    lines that are not JSON objects at all are kept so that they fail loudly.
    """
    schema = action_schema(kinds, with_corrupt=True)
    wanted = [f.name for f in schema.fields if f.name != CORRUPT_RECORD]
    lines = (
        spark.read.options(**_STRICT)
        .text([f.path for f in files])
        .select(
            "value", F.col("_metadata.file_path").alias("file"), F.col("_metadata.file_name").alias("name")
        )
        .where(F.trim("value") != "")
    )
    key = F.regexp_extract("value", _ACTION_KEY, 1)
    if kinds is not None:
        lines = lines.where(key.isin(list(kinds)) | (key == ""))
    parsed = F.from_json("value", schema, {"columnNameOfCorruptRecord": CORRUPT_RECORD, "mode": "PERMISSIVE"})
    bad = (key == "") | parsed.getField(CORRUPT_RECORD).isNotNull()
    version = F.when(
        bad,
        F.raise_error(
            F.concat(
                F.lit("deltaspark: corrupt Delta log file "),
                F.col("file"),
                F.lit(": cannot parse line: "),
                F.substring("value", 1, 200),
            )
        ),
    ).otherwise(_version_from_name(F.col("name")))
    return lines.select(
        version.alias("version"),
        "file",
        *[parsed.getField(k).alias(k) for k in wanted],
    )


def read_parquet_actions(
    spark: SparkSession,
    files: Sequence[LogFile] | Sequence[str],
    schema: StructType,
    version: int,
) -> DataFrame:
    """Actions of parquet checkpoint files or sidecars, all belonging to one checkpoint `version`."""
    paths = [f if isinstance(f, str) else f.path for f in files]
    return (
        spark.read.options(**_STRICT)
        .schema(schema)
        .parquet(*paths)
        .select(F.lit(version).cast("long").alias("version"), F.col("_metadata.file_path").alias("file"), "*")
    )


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
        frame = read_json_actions(spark, json_files, kinds)
        return frame.withColumn("version", F.lit(version).cast("long"))
    return read_parquet_actions(spark, files, parquet_schema or action_schema(kinds), version)
