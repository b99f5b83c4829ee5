"""Validating the `delta.*` table properties a user sets, as delta-spark's `DeltaConfigs` does.

A property a writer reads later (`delta.appendOnly`, `delta.checkpointInterval`, a retention
duration) that holds a value it cannot parse is found only when it matters, and then guessed
around ("not a number; using 10"). So every `delta.*` key a user passes - to `setProperties`, a
table builder or a new table's write - is checked before anything is committed: booleans, positive
integers, intervals without months, enumerations, column lists. Known keys are stored in their
canonical spelling (keys are case-insensitive, as in delta-spark); an unknown `delta.*` key is
refused unless the session allows it (`spark.deltaspark.properties.allowUnknown`, or delta-spark's
`spark.databricks.delta.allowArbitraryProperties.enabled`), since it is most often a typo. Keys
outside `delta.` are the user's own and stored as they are. Properties already in a table (written
by any engine) are never re-checked: only what a user sets now.

`delta.constraints.*` (CHECK constraints) are expressions, resolved against the table's columns
(`check_user_properties`, with Spark).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from deltaspark.errors import InvalidArgumentError
from deltaspark.features.durations import parse_interval_ms
from deltaspark.features.expressions import resolve_expression
from deltaspark.spark_compat import conf_get

ALLOW_UNKNOWN_CONFS = (
    "spark.deltaspark.properties.allowUnknown",
    "spark.databricks.delta.allowArbitraryProperties.enabled",
)
CONSTRAINT_PREFIX = "delta.constraints."
FEATURE_PREFIX = "delta.feature."

_INTEGER = re.compile(r"^[+-]?\d+$")
_SIZE = re.compile(r"^(\d+)\s*(b|k|kb|m|mb|g|gb|t|tb)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _boolean(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(value)
    return value.lower() == "true"


def _integer(value: str) -> int:
    if not _INTEGER.match(value):
        raise ValueError(value)
    return int(value)


def _interval(value: str) -> int:
    try:
        return parse_interval_ms(value)
    except InvalidArgumentError as exc:
        raise ValueError(value) from exc


def _size(value: str) -> int:
    match = _SIZE.match(value.strip())
    if not match:
        raise ValueError(value)
    return int(match[1]) * _SIZE_UNITS[(match[2] or "").lower()[:1]]


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in {a.lower() for a in allowed}:
            raise ValueError(value)
        return value

    return parse


def _formats(value: str) -> list[str]:
    formats = [f.strip().lower() for f in value.split(",")] if value.strip() else []
    if len(set(formats)) != len(formats) or not set(formats) <= {"iceberg", "hudi"}:
        raise ValueError(value)
    return formats


def stats_column_names(value: str) -> list[list[str]]:
    """`delta.dataSkippingStatsColumns`: comma-separated column paths, each a dotted list of names,
    backticks around names with special characters (a doubled backtick inside is one backtick)."""
    columns: list[list[str]] = []
    parts: list[str] = []
    name, i, quoted_name = "", 0, False
    while i <= len(value):
        c = value[i] if i < len(value) else ","
        if c == "`":
            end = i + 1
            while True:
                end = value.find("`", end)
                if end < 0:
                    raise ValueError(value)
                if value[end + 1 : end + 2] == "`":
                    end += 2
                    continue
                break
            if name.strip():
                raise ValueError(value)
            name, quoted_name, i = value[i + 1 : end].replace("``", "`"), True, end + 1
            continue
        if c in ".,":
            if not quoted_name:
                name = name.strip()
                if not name or not re.match(r"^\w+$", name):
                    raise ValueError(value)
            parts.append(name)
            name, quoted_name = "", False
            if c == ",":
                columns.append(parts)
                parts = []
        elif quoted_name:
            if not c.isspace():
                raise ValueError(value)
        else:
            name += c
        i += 1
    return columns


@dataclass(frozen=True)
class _Property:
    key: str
    parse: Callable[[str], Any]
    valid: Callable[[Any], bool]
    help: str
    settable: bool = True


_BOOLEAN = "needs to be a boolean (true or false)"
_DURATION = (
    "needs to be a calendar interval such as 'interval 2 weeks' or '7 days'; months and years are "
    "not accepted (use '365 days' for a year)"
)


def _properties() -> dict[str, _Property]:
    def boolean(key: str) -> _Property:
        return _Property(key, _boolean, lambda _: True, _BOOLEAN)

    def duration(key: str) -> _Property:
        return _Property(key, _interval, lambda ms: ms >= 0, _DURATION)

    def internal(key: str, what: str) -> _Property:
        return _Property(key, str, lambda _: True, f"is set by the writer ({what}), not by users", False)

    entries = [
        boolean("delta.appendOnly"),
        boolean("delta.enableChangeDataFeed"),
        boolean("delta.enableChangeDataCapture"),
        boolean("delta.enableDeletionVectors"),
        boolean("delta.enableRowTracking"),
        boolean("delta.enableInCommitTimestamps"),
        boolean("delta.enableTypeWidening"),
        boolean("delta.enableExpiredLogCleanup"),
        boolean("delta.enableFullRetentionRollback"),
        boolean("delta.enableIcebergCompatV1"),
        boolean("delta.enableIcebergCompatV2"),
        boolean("delta.enableIcebergCompatV3"),
        boolean("delta.randomizeFilePrefixes"),
        boolean("delta.checkpoint.writeStatsAsJson"),
        boolean("delta.checkpoint.writeStatsAsStruct"),
        boolean("delta.compatibility.symlinkFormatManifest.enabled"),
        boolean("delta.autoOptimize"),
        boolean("delta.autoOptimize.optimizeWrite"),
        boolean("delta.tuneFileSizesForRewrites"),
        boolean("delta.ignoreProtocolDefaults"),
        _Property(
            "delta.autoOptimize.autoCompact",
            _choice("true", "false", "auto", "legacy"),
            lambda _: True,
            "needs to be true, false, auto or legacy",
        ),
        duration("delta.logRetentionDuration"),
        duration("delta.deletedFileRetentionDuration"),
        duration("delta.setTransactionRetentionDuration"),
        duration("delta.checkpointRetentionDuration"),
        duration("delta.sampleRetentionDuration"),
        duration("delta.dropFeatureTruncateHistory.retentionDuration"),
        _Property("delta.checkpointInterval", _integer, lambda n: n > 0, "needs to be a positive integer"),
        _Property("delta.randomPrefixLength", _integer, lambda n: n > 0, "needs to be a positive integer"),
        _Property(
            "delta.dataSkippingNumIndexedCols", _integer, lambda n: n >= -1, "needs to be an integer >= -1"
        ),
        _Property(
            "delta.dataSkippingStringPrefixLength",
            _integer,
            lambda n: n >= 0,
            "needs to be a non-negative integer",
        ),
        _Property(
            "delta.dataSkippingStatsColumns",
            stats_column_names,
            lambda _: True,
            "needs to be a comma-separated list of column names (nested fields dotted, names with "
            "special characters in backticks)",
        ),
        _Property(
            "delta.requireCheckpointProtectionBeforeVersion",
            _integer,
            lambda n: n >= 0,
            "needs to be a non-negative integer",
        ),
        _Property(
            "delta.targetFileSize",
            _size,
            lambda n: n > 0,
            "needs to be a positive size in bytes (e.g. 134217728 or 128mb)",
        ),
        _Property(
            "delta.columnMapping.mode",
            _choice("none", "name", "id"),
            lambda _: True,
            "needs to be none, name or id",
        ),
        _Property(
            "delta.checkpointPolicy", _choice("classic", "v2"), lambda _: True, "needs to be classic or v2"
        ),
        _Property(
            "delta.isolationLevel",
            _choice("Serializable", "WriteSerializable"),
            lambda _: True,
            "needs to be Serializable or WriteSerializable",
        ),
        _Property(
            "delta.universalFormat.enabledFormats",
            _formats,
            lambda _: True,
            "needs to be a comma-separated list of distinct formats from {iceberg, hudi}",
        ),
        _Property(
            "delta.parquet.compression.codec",
            _choice("none", "uncompressed", "snappy", "gzip", "lz4", "lz4_raw", "zstd"),
            lambda _: True,
            "needs to be one of none, uncompressed, snappy, gzip, lz4, lz4_raw, zstd",
        ),
        internal("delta.columnMapping.maxColumnId", "column mapping"),
        internal("delta.rowTracking.materializedRowIdColumnName", "row tracking"),
        internal("delta.rowTracking.materializedRowCommitVersionColumnName", "row tracking"),
        internal("delta.inCommitTimestampEnablementVersion", "in-commit timestamps"),
        internal("delta.inCommitTimestampEnablementTimestamp", "in-commit timestamps"),
        _Property(
            "delta.minReaderVersion",
            str,
            lambda _: False,
            "is the protocol's, not a property: use upgradeTableProtocol(reader, writer)",
        ),
        _Property(
            "delta.minWriterVersion",
            str,
            lambda _: False,
            "is the protocol's, not a property: use upgradeTableProtocol(reader, writer)",
        ),
    ]
    return {p.key.lower(): p for p in entries}


PROPERTIES = _properties()


def validate_properties(
    properties: Mapping[str, str], schema: StructType | None = None, allow_unknown: bool = False
) -> dict[str, str]:
    """`properties` with known `delta.*` keys in their canonical spelling, after checking each
    value; `InvalidArgumentError` naming the key, the value and what it needs. `schema`: the
    table's, to check that `delta.dataSkippingStatsColumns` names its columns."""
    checked: dict[str, str] = {}
    for raw_key, raw_value in properties.items():
        key, value = str(raw_key), str(raw_value)
        lower = key.lower()
        if not lower.startswith("delta.") or lower.startswith((CONSTRAINT_PREFIX, FEATURE_PREFIX)):
            checked[key] = value
            continue
        spec = PROPERTIES.get(lower)
        if spec is None:
            if allow_unknown:
                checked[key] = value
                continue
            raise InvalidArgumentError(
                f"Unknown table property {key}: not a Delta table property (a typo?). Set "
                f"{ALLOW_UNKNOWN_CONFS[0]}=true to store it anyway"
            )
        if not spec.settable:
            raise InvalidArgumentError(f"Table property {spec.key} {spec.help}")
        try:
            parsed = spec.parse(value)
            valid = spec.valid(parsed)
        except ValueError:
            valid = False
        if not valid:
            raise InvalidArgumentError(f"Table property {spec.key}={value!r} {spec.help}")
        if spec.key == "delta.dataSkippingStatsColumns" and schema is not None:
            _check_stats_columns(value, schema)
        checked[spec.key] = value
    return checked


def _check_stats_columns(value: str, schema: StructType) -> None:
    for path in stats_column_names(value):
        fields: Any = schema
        for name in path:
            by_name = {f.name.lower(): f for f in getattr(fields, "fields", [])}
            if name.lower() not in by_name:
                columns = ", ".join(f.name for f in schema.fields)
                raise InvalidArgumentError(
                    f"Table property delta.dataSkippingStatsColumns={value!r} names "
                    f"{'.'.join(path)}, which is not a column of the table ({columns})"
                )
            fields = by_name[name.lower()].dataType


def allow_unknown(conf_get: Callable[[str, str], str]) -> bool:
    """Whether the session allows unknown `delta.*` properties (`conf_get(key, default)`)."""
    return any(conf_get(key, "false").strip().lower() == "true" for key in ALLOW_UNKNOWN_CONFS)


def check_user_properties(
    spark: SparkSession, properties: Mapping[str, str], schema: StructType, table: str
) -> dict[str, str]:
    """`validate_properties` under the session's setting for unknown keys, and every CHECK
    constraint (`delta.constraints.<name>`) resolved as a condition over `schema`."""
    allowed = allow_unknown(lambda key, default: conf_get(spark, key, default))
    checked = validate_properties(properties, schema, allowed)
    for key, value in checked.items():
        if key.lower().startswith(CONSTRAINT_PREFIX):
            resolve_expression(spark, schema, value, f"The CHECK constraint {key}", table)
    return checked
