"""Where a snapshot's protocol and metadata come from: one decision, routes tried in order.

`load` takes the first route that gives a clear answer, in this order:

1. an answer held for this segment, or for the same checkpoint and a prefix of its commits
   (`protocol_metadata_cache`): only the newer commits are read;
2. a version checksum (`N.crc`, see `version_checksum`) and the commits after it;
3. on the driver (`small_log`): a small parquet checkpoint with pyarrow, and the JSON commits
   when they are few and small or on a local disk;
4. one Spark job (`frame`) over the checkpoint's protocol/metaData/sidecar columns and the
   commits' non-file-action lines.

Every route gives the same one-row answer (`protocol`, `metaData`, the version's `commitInfo`,
the files each came from, the sidecars); a driver route that meets anything unclear hands over to
the next, so a damaged log is reported by the Spark job, naming its file. The JSON files read are
then checked for a torn last line (`torn_writes`). `snapshot.load_snapshot` validates and
assembles the answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from deltaspark.errors import DeltaSparkError
from deltaspark.log import action_schemas as schemas
from deltaspark.log import held_bytes, protocol_metadata_cache, small_log, torn_writes, version_checksum
from deltaspark.log.checkpoint_check import decode_parquet
from deltaspark.log.files import LogFile
from deltaspark.log.replay import keep_actions, read_checkpoint_actions, read_json_actions
from deltaspark.log.segment import LogSegment
from deltaspark.log.typed_json import UnreadableParquetError
from deltaspark.spark_compat import conf_get
from deltaspark.storage import Storage

log = logging.getLogger(__name__)


def load(spark: SparkSession, storage: Storage, segment: LogSegment) -> dict | None:
    """The answer for `segment` (`None`: the log holds no protocol or metadata), its JSON files
    checked for a torn last line."""
    found = _answer(spark, storage, segment)
    # The lines read are a few of each file: its last line shows whether the file is whole.
    checkpoint_json = (
        [f for f in segment.checkpoint.files if f.file_format == "json"] if segment.checkpoint else []
    )
    torn_writes.check_files(spark, storage, [*json_files(segment), *checkpoint_json])
    return found


def _answer(spark: SparkSession, storage: Storage, segment: LogSegment) -> dict | None:
    """The first route's answer (see the module's docstring)."""
    if storage.direct_reads:
        base, newer_tail, exact = protocol_metadata_cache.lookup(segment)
        if exact:
            return base
        found = _from_checksum(spark, storage, segment) if base is None else None
        if found is not None:
            protocol_metadata_cache.store(segment, found)
            return found
        checkpoint = segment.checkpoint
        if base is None and checkpoint is not None and small_log.checkpoint_eligible(list(checkpoint.files)):
            base = _checkpoint_on_driver(spark, storage, list(checkpoint.files))
        newer = json_files(segment, newer_tail)
        found = base if not newer else None
        after_checkpoint = checkpoint is not None and base is None
        if found is None and small_log.eligible(newer, after_checkpoint, small_log.local_bytes(spark)):
            found = _read_on_driver(spark, storage, newer, segment.version, base)
        if found is not None:
            protocol_metadata_cache.store(segment, found)
            return found
    row = frame(spark, segment).first()
    if row is None:
        return None
    found = row.asDict(recursive=True)
    if storage.direct_reads:
        protocol_metadata_cache.store(segment, found)
    return found


def _from_checksum(spark: SparkSession, storage: Storage, segment: LogSegment) -> dict | None:
    """Protocol and metadata from the newest usable `.crc` and the commits after it (see
    `version_checksum`), all read on the driver; `None` when it gives no clear answer."""
    if conf_get(spark, version_checksum.ENABLED_CONF, "true").strip().lower() == "false":
        return None
    planned = version_checksum.plan(segment)
    if planned is None:
        return None
    crc, commits = planned
    try:
        text = storage.read_text(crc.path)
    except DeltaSparkError:
        return None
    base = version_checksum.base_answer(crc, text, segment.checkpoint is not None)
    if base is None:
        log.info("Not using %s for protocol and metadata (unreadable or unclear)", crc.path)
        return None
    found = _read_on_driver(spark, storage, commits, segment.version, base) if commits else base
    if found is not None:
        log.debug("Protocol and metadata of version %d from %s", segment.version, crc.name)
    return found


def _read_on_driver(
    spark: SparkSession, storage: Storage, files: list[LogFile], version: int, base: dict | None
) -> dict | None:
    """`small_log`'s answer, the files read one at a time (each checked for a torn last line).
    Few enough bytes to hold are held for the driver replay, which reads the same files next
    (`held_bytes`)."""
    keep = sum(f.size for f in files) <= held_bytes.MAX_HELD_BYTES

    def contents() -> Iterator[bytes | None]:
        for f in files:
            try:
                data = storage.read_bytes(f.path)
            except DeltaSparkError:
                data = None  # no answer: the Spark path reads it again and reports what is wrong
            if data is not None:
                torn_writes.check_bytes(spark, f, data)
                if keep:
                    held_bytes.hold(f, data)
            yield data

    return small_log.protocol_and_metadata(files, contents(), version, base)


def _checkpoint_on_driver(spark: SparkSession, storage: Storage, files: list[LogFile]) -> dict | None:
    try:
        parts = [storage.read_bytes(f.path) for f in files]
    except DeltaSparkError:
        return None  # the Spark path reads them again and reports what is wrong
    for f, data in zip(files, parts, strict=True):
        if data is not None:
            held_bytes.hold(f, data)  # for the driver replay, which reads the checkpoint next
    try:
        return small_log.checkpoint_protocol_and_metadata(files, parts)
    except UnreadableParquetError as exc:
        # Damage, or a page pyarrow cannot decode: Spark decides (`CorruptLogError` naming the
        # part, which passes the checkpoint over, when it cannot decode it either).
        decode_parquet(spark, [exc.path])
        return None


def json_files(segment: LogSegment, tail: list[LogFile] | None = None) -> list[LogFile]:
    """The JSON files protocol and metadata are read from (on top of the checkpoint): the tail (or
    the part of it given) and the commit of the snapshot's version, for its commitInfo."""
    files = list(segment.tail_files if tail is None else tail)
    if segment.commit_at_version is not None and segment.commit_at_version not in files:
        files.append(segment.commit_at_version)
    return files


def frame(spark: SparkSession, segment: LogSegment) -> DataFrame:
    """The Spark route: a one-row DataFrame with the answer."""
    frames: list[DataFrame] = []
    checkpoint = segment.checkpoint
    if checkpoint is not None:
        kinds = ["protocol", "metaData", "sidecar"]
        rows = read_checkpoint_actions(spark, checkpoint.files, kinds, checkpoint.version)
        if checkpoint.files[0].file_format == "json":  # a V2 top-level file: small, every action kept
            wanted = (
                F.col("protocol").isNotNull() | F.col("metaData").isNotNull() | F.col("sidecar").isNotNull()
            )
        else:
            # Required fields, so Spark can push the test into the parquet reader: row groups that
            # hold only file actions (all of a big checkpoint but its first) are skipped by their stats.
            wanted = (
                F.col("protocol.minReaderVersion").isNotNull()
                | F.col("metaData.id").isNotNull()
                | F.col("sidecar.path").isNotNull()
                | F.col("sidecar.sizeInBytes").isNotNull()
            )
        rows = keep_actions(rows, wanted)
        frames.append(
            rows.select(
                "version",
                "file",
                "protocol",
                "metaData",
                F.lit(None).cast("string").alias("commitInfo"),
                "sidecar",
            )
        )
    commits = json_files(segment)
    if commits:
        rows = read_json_actions(spark, commits, ["protocol", "metaData", "commitInfo"])
        frames.append(
            rows.select(
                "version",
                "file",
                "protocol",
                "metaData",
                F.when(F.col("version") == segment.version, F.col("commitInfo")).alias("commitInfo"),
                F.lit(None).cast(schemas.SIDECAR).alias("sidecar"),
            )
        )
    actions = reduce(lambda left, right: left.unionByName(right), frames)

    def newest(column: str, alias: str | None = None, value: str | None = None) -> Column:
        return F.max_by(value or column, F.when(F.col(column).isNotNull(), F.col("version"))).alias(
            alias or column
        )

    return actions.agg(
        newest("protocol"),
        newest("metaData"),
        newest("commitInfo"),
        newest("protocol", "protocolFile", "file"),
        newest("metaData", "metaDataFile", "file"),
        F.collect_list("sidecar").alias("sidecars"),
        F.max("version").alias("maxVersion"),  # evaluates every row's version: corrupt lines fail here
    )
