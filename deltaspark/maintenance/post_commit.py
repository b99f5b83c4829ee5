"""After a commit: a checkpoint every `delta.checkpointInterval` versions (default 10).

A failed checkpoint never fails the commit that triggered it (the commit has landed; readers
simply replay a longer tail), as in delta-spark; it is logged with its reason.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from deltaspark.errors import DeltaSparkError
from deltaspark.maintenance.checkpoint_writer import (
    CheckpointResult,
    protected_before_version,
    write_checkpoint,
)
from deltaspark.snapshot import load_version
from deltaspark.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 10


def checkpoint_if_due(
    spark: SparkSession, storage: Storage, table_path: str, version: int, interval: str | None
) -> CheckpointResult | None:
    """Write the checkpoint of `version` when the table's interval says so."""
    try:
        every = int(interval) if interval else DEFAULT_CHECKPOINT_INTERVAL
    except ValueError:
        log.warning(
            "delta.checkpointInterval=%r of %s is not a number; using %d",
            interval,
            table_path,
            DEFAULT_CHECKPOINT_INTERVAL,
        )
        every = DEFAULT_CHECKPOINT_INTERVAL
    if version <= 0 or every <= 0 or version % every != 0:
        return None
    try:
        snapshot = load_version(spark, storage, table_path, version, None)
        return write_checkpoint(snapshot, protectedBeforeVersion=protected_before_version(snapshot))
    except DeltaSparkError as exc:
        log.warning(
            "Version %d of %s was committed, but its checkpoint was not written: %s", version, table_path, exc
        )
        return None
