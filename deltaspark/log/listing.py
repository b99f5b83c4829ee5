"""Listing `_delta_log` and planning a log segment from it.

For the latest version the listing starts at `_last_checkpoint`'s version (a glob on the file
names), which on a long log skips most of the directory. If the hint is absent, untrustworthy or
points at a checkpoint that is not there, the whole directory is listed instead.
"""

from __future__ import annotations

import logging

from deltaspark.errors import DeltaSparkError, TableNotFoundError
from deltaspark.log.files import LogFile, names_from_version_glob, parse_log_file
from deltaspark.log.last_checkpoint import LAST_CHECKPOINT_NAME, LastCheckpoint, parse_last_checkpoint
from deltaspark.log.segment import LogSegment, build_log_segment
from deltaspark.storage import Storage, join_path, parent_of

log = logging.getLogger(__name__)


def log_dir_of(table_path: str) -> str:
    return join_path(table_path, "_delta_log")


def read_last_checkpoint(storage: Storage, log_dir: str) -> LastCheckpoint | None:
    location = join_path(log_dir, LAST_CHECKPOINT_NAME)
    text = storage.read_text(location)
    return parse_last_checkpoint(text, location) if text is not None else None


def list_log_files(storage: Storage, log_dir: str, from_version: int | None = None) -> list[LogFile] | None:
    """The protocol's files in `_delta_log` (from a version on, if given); `None` if there is no log."""
    glob = names_from_version_glob(from_version) if from_version is not None else None
    statuses = storage.list_dir(log_dir, glob)
    if statuses is None:
        return None
    files = [parse_log_file(s.name, s.path, s.size, s.modification_time) for s in statuses]
    return sorted((f for f in files if f is not None), key=lambda f: (f.version, f.name))


def table_root_from(listing: list[LogFile], storage: Storage, table_path: str) -> str:
    """The qualified table root: the listing's own qualified paths when there are any."""
    if listing:
        return parent_of(parent_of(listing[0].path))
    return storage.qualify(table_path)


def plan_segment(
    storage: Storage,
    table_path: str,
    version: int | None = None,
    use_compactions: bool = True,
    listing: list[LogFile] | None = None,
    skip_checkpoints: frozenset[int] = frozenset(),
) -> LogSegment:
    """The log segment of `version` (latest when None), listing as little of the log as is safe;
    checkpoints at `skip_checkpoints` versions are not used (see `build_log_segment`)."""
    log_dir = log_dir_of(table_path)
    if listing is None:
        hint = read_last_checkpoint(storage, log_dir)
        if hint is not None and hint.version in skip_checkpoints:
            hint = None
        if hint is not None and (version is None or version >= hint.version):
            partial = list_log_files(storage, log_dir, from_version=hint.version)
            if partial:
                try:
                    segment = build_log_segment(
                        table_path, partial, version, use_compactions, skip_checkpoints
                    )
                    if segment.checkpoint is not None and segment.checkpoint.version >= hint.version:
                        log.info(
                            "Listed %d log files from version %d (after _last_checkpoint)",
                            len(partial),
                            hint.version,
                        )
                        return segment
                except DeltaSparkError:
                    pass
            log.info(
                "_last_checkpoint (version %d) does not lead to a usable checkpoint; listing all",
                hint.version,
            )
        listing = list_log_files(storage, log_dir)
        if listing is None:
            raise TableNotFoundError(table_path)
        log.info("Listed %d log files in %s", len(listing), log_dir)
    return build_log_segment(table_path, listing, version, use_compactions, skip_checkpoints)
