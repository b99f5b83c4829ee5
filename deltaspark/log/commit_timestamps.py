"""Commit timestamps and timestamp-based time travel ("In-Commit Timestamps").

Without in-commit timestamps a commit's time is its JSON file's modification time, made
monotonic (a commit is never earlier than the one before it, as Spark's Delta does). With
`delta.enableInCommitTimestamps`, versions from `delta.inCommitTimestampEnablementVersion` on use
`commitInfo.inCommitTimestamp`, and a timestamp at or after the enablement timestamp is only
resolved among those versions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from deltaspark.errors import CorruptLogError, InvalidArgumentError, TimestampOutOfRangeError
from deltaspark.features.metadata import Metadata
from deltaspark.features.protocol import Protocol
from deltaspark.log.files import LogFile, LogFileKind
from deltaspark.log.replay import read_json_actions
from deltaspark.spark_compat import try_cast


@dataclass(frozen=True)
class InCommitTimestamps:
    enabled: bool
    enablement_version: int = 0
    enablement_timestamp: int | None = None

    @classmethod
    def of(cls, protocol: Protocol, metadata: Metadata) -> InCommitTimestamps:
        conf = metadata.configuration
        enabled = (
            protocol.hasFeature("inCommitTimestamp")
            and conf.get("delta.enableInCommitTimestamps", "").lower() == "true"
        )
        if not enabled:
            return cls(False)
        version = conf.get("delta.inCommitTimestampEnablementVersion")
        stamp = conf.get("delta.inCommitTimestampEnablementTimestamp")
        return cls(True, int(version) if version else 0, int(stamp) if stamp else None)

    def applies_to(self, version: int) -> bool:
        return self.enabled and version >= self.enablement_version


def monotonic_file_times(commits: Sequence[LogFile]) -> dict[int, int]:
    """Commit version -> file modification time, adjusted so that times never go backwards."""
    out: dict[int, int] = {}
    previous: int | None = None
    for f in sorted((c for c in commits if c.kind is LogFileKind.COMMIT), key=lambda c: c.version):
        stamp = f.modification_time if previous is None else max(f.modification_time, previous + 1)
        out[f.version] = stamp
        previous = stamp
    return out


def to_epoch_ms(spark: SparkSession, timestamp: str | dt.datetime | dt.date | int) -> int:
    """A user's timestamp in ms since the epoch; strings and naive datetimes are read in the
    Spark session time zone, like `timestampAsOf` in Spark's Delta."""
    if isinstance(timestamp, bool):
        raise InvalidArgumentError(f"Not a timestamp: {timestamp!r}")
    if isinstance(timestamp, int):
        return timestamp
    if isinstance(timestamp, dt.datetime) and timestamp.tzinfo is not None:
        return int(timestamp.timestamp() * 1000)
    text = timestamp.isoformat(sep=" ") if isinstance(timestamp, dt.datetime) else str(timestamp)
    row = spark.range(1).select(F.unix_millis(try_cast(F.lit(text), TimestampType())).alias("ms")).first()
    if row is None or row["ms"] is None:
        raise InvalidArgumentError(f"Cannot interpret {timestamp!r} as a timestamp")
    return int(row["ms"])


def _fmt(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


MISSING_ICT = (
    "in-commit timestamps are enabled (from version {version} at the latest) but the commit's "
    "commitInfo has no inCommitTimestamp"
)


def in_commit_timestamps(spark: SparkSession, commits: Sequence[LogFile]) -> dict[int, int]:
    """`commitInfo.inCommitTimestamp` of each commit (a distributed scan of the commits' first lines);
    every commit given must have one (they are the commits in-commit timestamps apply to)."""
    if not commits:
        return {}
    rows = (
        read_json_actions(spark, commits, ["commitInfo"])
        .select("version", F.get_json_object("commitInfo", "$.inCommitTimestamp").cast("long").alias("ict"))
        .collect()
    )
    found = {int(r["version"]): int(r["ict"]) for r in rows if r["ict"] is not None}
    for commit in commits:
        if commit.version not in found:
            raise CorruptLogError(commit.path, MISSING_ICT.format(version=commit.version))
    return found


def _candidate_times(
    spark: SparkSession | None,
    commits: Sequence[LogFile],
    ict: InCommitTimestamps,
    timestamp_ms: int,
    read_ict: Callable[[Sequence[LogFile]], dict[int, int]] | None = None,
) -> tuple[dict[int, int], dict[int, int]]:
    """(every commit's time, the commits a timestamp may resolve to) under the protocol's rule:
    at or after the enablement timestamp only in-commit-timestamp versions count, before it only
    the earlier ones."""
    commit_files = [c for c in commits if c.kind is LogFileKind.COMMIT]
    if not commit_files:
        raise TimestampOutOfRangeError("The table has no commit files to resolve a timestamp against")
    file_times = monotonic_file_times(commit_files)
    ict_files = [c for c in commit_files if ict.applies_to(c.version)]
    if not ict_files:
        ict_times: dict[int, int] = {}
    elif read_ict is not None:
        ict_times = read_ict(ict_files)
    else:
        assert spark is not None
        ict_times = in_commit_timestamps(spark, ict_files)
    times = {v: t for v, t in file_times.items() if not ict.applies_to(v)}
    use_ict = bool(ict_times) and (
        ict.enablement_timestamp is None or timestamp_ms >= ict.enablement_timestamp or not times
    )
    return {**times, **ict_times}, (ict_times if use_ict else times)


def version_at_timestamp(
    spark: SparkSession | None,
    commits: Sequence[LogFile],
    ict: InCommitTimestamps,
    timestamp_ms: int,
    read_ict: Callable[[Sequence[LogFile]], dict[int, int]] | None = None,
) -> int:
    """The latest version committed at or before `timestamp_ms` (in-commit timestamps read by
    `read_ict` where there is no session: a Python data source's worker)."""
    every, candidates = _candidate_times(spark, commits, ict, timestamp_ms, read_ict)
    latest_version, earliest_version = max(every), min(every)
    if timestamp_ms > every[latest_version]:
        raise TimestampOutOfRangeError(
            f"The timestamp {_fmt(timestamp_ms)} is after the latest commit (version {latest_version} at "
            f"{_fmt(every[latest_version])}); use a timestamp at or before it"
        )
    eligible = [v for v, t in candidates.items() if t <= timestamp_ms]
    if not eligible:
        raise TimestampOutOfRangeError(
            f"The timestamp {_fmt(timestamp_ms)} is before the earliest available commit (version "
            f"{earliest_version} at {_fmt(every[earliest_version])})"
        )
    return max(eligible)


def first_version_at_or_after(
    spark: SparkSession | None,
    commits: Sequence[LogFile],
    ict: InCommitTimestamps,
    timestamp_ms: int,
    read_ict: Callable[[Sequence[LogFile]], dict[int, int]] | None = None,
) -> int:
    """The earliest version committed at or after `timestamp_ms` (a change feed's start)."""
    every, candidates = _candidate_times(spark, commits, ict, timestamp_ms, read_ict)
    eligible = [v for v, t in {**every, **candidates}.items() if t >= timestamp_ms]
    if not eligible:
        latest = max(every)
        raise TimestampOutOfRangeError(
            f"The timestamp {_fmt(timestamp_ms)} is after the latest commit (version {latest} at "
            f"{_fmt(every[latest])})"
        )
    return min(eligible)


def latest_version_at_or_before(
    spark: SparkSession,
    commits: Sequence[LogFile],
    ict: InCommitTimestamps,
    timestamp_ms: int,
) -> int | None:
    """The latest version committed at or before `timestamp_ms` (the latest version when the
    timestamp is after every commit); None when every commit is newer or there is none."""
    if not any(c.kind is LogFileKind.COMMIT for c in commits):
        return None
    _, candidates = _candidate_times(spark, commits, ict, timestamp_ms)
    eligible = [v for v, t in candidates.items() if t <= timestamp_ms]
    return max(eligible) if eligible else None
