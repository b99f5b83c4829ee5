"""After a commit: a checkpoint every `delta.checkpointInterval` versions (default 10).

A failed checkpoint never fails the commit that triggered it (the commit has landed; readers
simply replay a longer tail), as in delta-spark; it is logged with its reason.

A streaming sink asks for it in the background (as Databricks' asynchronous checkpointing of
streaming writes does): the micro-batch returns once its commit has landed, and the checkpoint is
written by a thread of its own while the next batches run. Readers never see it half-written (its
parts are staged and renamed, `_last_checkpoint` replaced last), and at most one runs per table:
one due while the previous is still being written is left to the next interval.
"""

from __future__ import annotations

import logging
import threading

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
_BACKGROUND: dict[str, threading.Thread] = {}  # table path -> the thread writing its checkpoint
_BACKGROUND_LOCK = threading.Lock()


def checkpoint_if_due(
    spark: SparkSession,
    storage: Storage,
    table_path: str,
    version: int,
    interval: str | None,
    background: bool = False,
) -> CheckpointResult | None:
    """Write the checkpoint of `version` when the table's interval says so; with `background`, in
    a thread of its own (None is returned at once)."""
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
    if background:
        with _BACKGROUND_LOCK:
            running = _BACKGROUND.get(table_path)
            if running is not None and running.is_alive():
                log.info("A checkpoint of %s is being written; version %d's is left out", table_path, version)
                return None
            thread = threading.Thread(
                target=_checkpoint,
                args=(spark, storage, table_path, version),
                name=f"deltaspark-checkpoint-{version}",
            )
            _BACKGROUND[table_path] = thread
            thread.start()
        return None
    return _checkpoint(spark, storage, table_path, version)


def wait_for_background_checkpoints(table_path: str | None = None) -> None:
    """Wait until the background checkpoints (of `table_path`, or of every table) are written."""
    with _BACKGROUND_LOCK:
        threads = [t for path, t in _BACKGROUND.items() if table_path is None or path == table_path]
    for thread in threads:
        thread.join()


def _checkpoint(
    spark: SparkSession, storage: Storage, table_path: str, version: int
) -> CheckpointResult | None:
    try:
        snapshot = load_version(spark, storage, table_path, version, None)
        return write_checkpoint(snapshot, protectedBeforeVersion=protected_before_version(snapshot))
    except DeltaSparkError as exc:
        log.warning(
            "Version %d of %s was committed, but its checkpoint was not written: %s", version, table_path, exc
        )
        return None
