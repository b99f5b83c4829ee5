"""The log segment: exactly which files reconstruct one version of a table.

Pure planning over a listing, no I/O: the newest complete checkpoint at or below the version,
then the commits after it (replaced by log compaction files where they fit), which must be
contiguous. Everything that can go wrong with a log's shape is detected here, before Spark runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from deltaspark.errors import (
    CorruptLogError,
    NonContiguousVersionsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from deltaspark.log.files import LogFile, LogFileKind

# When several complete checkpoints exist for one version any may be used; prefer the atomic
# kinds (UUID-named V2, then classic) over deprecated multi-part ones.
_KIND_PREFERENCE = {
    LogFileKind.CHECKPOINT_UUID: 0,
    LogFileKind.CHECKPOINT_CLASSIC: 1,
    LogFileKind.CHECKPOINT_MULTIPART: 2,
}


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: one file, or every part of a multi-part one, in part order."""

    version: int
    kind: LogFileKind
    files: tuple[LogFile, ...]

    @property
    def is_v2_named(self) -> bool:
        return self.kind is LogFileKind.CHECKPOINT_UUID


@dataclass(frozen=True)
class LogSegment:
    table_path: str
    version: int
    checkpoint: Checkpoint | None
    commits: tuple[LogFile, ...]  # commit files read after the checkpoint (not covered by compactions)
    compactions: tuple[LogFile, ...] = ()
    commit_at_version: LogFile | None = None  # the JSON commit of `version`, for its commitInfo
    earliest_version: int = 0  # oldest version this listing can reconstruct
    latest_version: int = 0
    listing: tuple[LogFile, ...] = field(default=(), repr=False)

    @property
    def tail_files(self) -> tuple[LogFile, ...]:
        """JSON files replayed on top of the checkpoint, oldest first."""
        return tuple(sorted(self.commits + self.compactions, key=lambda f: (f.version, f.name)))

    @property
    def tail_bytes(self) -> int:
        return sum(f.size for f in self.tail_files)


def complete_checkpoints(files: Iterable[LogFile]) -> dict[int, Checkpoint]:
    """The best complete checkpoint per version; multi-part sets with a missing part are ignored."""
    singles: dict[int, list[Checkpoint]] = defaultdict(list)
    parts: dict[tuple[int, int], dict[int, LogFile]] = defaultdict(dict)
    for f in files:
        if f.kind in (LogFileKind.CHECKPOINT_CLASSIC, LogFileKind.CHECKPOINT_UUID):
            singles[f.version].append(Checkpoint(f.version, f.kind, (f,)))
        elif f.kind is LogFileKind.CHECKPOINT_MULTIPART and f.num_parts and f.part:
            parts[(f.version, f.num_parts)][f.part] = f
    for (version, num_parts), by_part in parts.items():
        if num_parts == 1 or set(by_part) != set(range(1, num_parts + 1)):
            continue  # incomplete (or malformed "1 of 1") multi-part sets are ignored
        files_in_order = tuple(by_part[i] for i in range(1, num_parts + 1))
        singles[version].append(Checkpoint(version, LogFileKind.CHECKPOINT_MULTIPART, files_in_order))
    return {
        version: min(candidates, key=lambda c: (_KIND_PREFERENCE[c.kind], c.files[0].name))
        for version, candidates in singles.items()
    }


def _choose_compactions(
    compactions: Iterable[LogFile], start: int, end: int, commits: dict[int, LogFile]
) -> tuple[list[LogFile], list[LogFile], list[int]]:
    """Walk versions start..end, taking the widest compaction that starts at each step."""
    by_start: dict[int, list[LogFile]] = defaultdict(list)
    for c in compactions:
        if c.start_version is not None and c.start_version >= start and c.version <= end:
            by_start[c.start_version].append(c)
    chosen: list[LogFile] = []
    used_commits: list[LogFile] = []
    missing: list[int] = []
    v = start
    while v <= end:
        if by_start.get(v):
            widest = max(by_start[v], key=lambda c: (c.version, c.name))
            chosen.append(widest)
            v = widest.version + 1
            continue
        if v in commits:
            used_commits.append(commits[v])
        else:
            missing.append(v)
        v += 1
    return chosen, used_commits, missing


def build_log_segment(
    table_path: str,
    listing: Iterable[LogFile],
    version: int | None = None,
    use_compactions: bool = True,
    skip_checkpoints: frozenset[int] = frozenset(),
) -> LogSegment:
    """Plan the files that reconstruct `version` (the latest when `None`) from a `_delta_log` listing.

    `skip_checkpoints`: versions whose checkpoints turned out unreadable, so that an older checkpoint
    (or commit 0) is used instead, as Spark's Delta does. A file of the segment that is empty
    (0 bytes) is a torn write, never an empty commit: `CorruptLogError`.
    """
    files = list(listing)
    commits = {f.version: f for f in files if f.kind is LogFileKind.COMMIT}
    checkpoints = complete_checkpoints(files)
    usable = {v: c for v, c in checkpoints.items() if v not in skip_checkpoints}
    if not commits and not checkpoints:
        raise TableNotFoundError(table_path, "no commit or checkpoint files in _delta_log")

    latest = max([*commits, *checkpoints])
    recoverable_starts = sorted(usable) + ([0] if 0 in commits else [])
    earliest = min(recoverable_starts) if recoverable_starts else min(commits, default=latest)
    target = latest if version is None else version
    if target < 0 or target > latest:
        raise VersionNotFoundError(target, earliest, latest)

    base = max((v for v in usable if v <= target), default=None)
    checkpoint = usable[base] if base is not None else None
    if checkpoint is None and 0 not in commits:
        oldest = min(usable, default=None)
        first_commit = min(commits, default=latest + 1)
        detail = (
            f"commit 0 is gone and the oldest checkpoint is at version {oldest}"
            if oldest is not None
            else f"commit 0 is gone and there is no usable checkpoint; the oldest commit is {first_commit}"
            if commits
            else "commit 0 is gone and there is no usable checkpoint"
        )
        if oldest is None:
            raise NonContiguousVersionsError(table_path, range(0, first_commit), detail)
        raise VersionNotFoundError(target, earliest, latest, detail)

    start = checkpoint.version + 1 if checkpoint else 0
    compaction_files = [f for f in files if f.kind is LogFileKind.COMPACTION] if use_compactions else []
    chosen, used_commits, missing = _choose_compactions(compaction_files, start, target, commits)
    if missing:
        raise NonContiguousVersionsError(
            table_path,
            missing,
            f"reconstructing version {target} from "
            + (f"the checkpoint at version {checkpoint.version}" if checkpoint else "version 0"),
        )
    for f in [*(checkpoint.files if checkpoint else ()), *used_commits, *chosen]:
        if f.size == 0:
            raise CorruptLogError(f.path, "the file is empty (0 bytes): a torn or interrupted write")
    return LogSegment(
        table_path=table_path,
        version=target,
        checkpoint=checkpoint,
        commits=tuple(used_commits),
        compactions=tuple(chosen),
        commit_at_version=commits.get(target),
        earliest_version=earliest,
        latest_version=latest,
        listing=tuple(files),
    )
