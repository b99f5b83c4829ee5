"""Metadata cleanup (`DeltaTable.cleanupLog`): what goes, what stays, and that every retained version
still loads - in deltaspark and in delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
import uuid

import pytest

from deltaspark import DeltaTable, VersionNotFoundError
from deltaspark.errors import UnsupportedWriterFeatureError
from deltaspark.maintenance.log_cleanup import cleanup_log
from deltaspark.storage import HadoopStorage
from tests import damage
from tests.log_builder import add, commit_info, metadata, protocol, remove

DAY = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 60 * DAY  # well past the default 30-day log retention


def _names(log) -> set[str]:
    return {n for n in os.listdir(log.log) if not os.path.isdir(log.log / n)}


def _set_mtime(path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def _state(version: int, config: dict | None = None) -> list[dict]:
    """What a checkpoint of `version` holds (with the table's configuration)."""
    return [protocol(), metadata(configuration=config), *[add(f"f{v}") for v in range(version + 1)]]


@pytest.fixture
def aged(log):
    """Commits 0-9 sixty days old, 10-12 recent; checkpoints at 5 and 8, an incomplete multi-part
    one at 3, checksums, compactions, staged commits and a Hadoop `.crc` sidecar file."""
    log.commit(0, protocol(), metadata(), add("f0"), commit_info(), mtime_ms=OLD)
    for v in range(1, 13):
        mtime = OLD + v * 1000 if v < 10 else NOW - (13 - v) * 60_000
        log.commit(v, add(f"f{v}"), commit_info(), mtime_ms=mtime)
    for v in range(13):
        log.raw(f"{v:020d}.crc", "{}")
    log.classic_checkpoint(5, _state(5))
    log.classic_checkpoint(8, _state(8))
    log.multipart_checkpoint(3, [_state(3)[:2], _state(3)[2:]], skip=(2,))
    log.compaction(2, 4, add("f2"), add("f3"), add("f4"))
    log.compaction(9, 11, add("f9"), add("f10"), add("f11"))
    log.raw(f"_staged_commits/{4:020d}.{uuid.uuid4()}.json", "{}")
    log.raw(f"_staged_commits/{11:020d}.{uuid.uuid4()}.json", "{}")
    log.raw(f".{0:020d}.json.crc", "crc")
    return log


def test_cleanup_keeps_the_newest_checkpoint_before_the_cutoff_and_everything_after_it(spark, aged):
    log = aged
    table = DeltaTable.forPath(spark, log.path)
    before = sorted(r["path"] for r in table.snapshot().files().select("path").collect())
    all_names = _names(log)

    dry = table.cleanupLog()  # dry run by default
    assert dry.dryRun and _names(log) == all_names
    assert (dry.cutoffCommitVersion, dry.checkpointVersion) == (9, 8)
    expected = (
        {f"{v:020d}.json" for v in range(8)}
        | {f"{v:020d}.crc" for v in range(8)}
        | {f"{5:020d}.checkpoint.parquet", f"{3:020d}.checkpoint.0000000001.0000000002.parquet"}
        | {f"{2:020d}.{4:020d}.compacted.json"}  # a compaction starting at or before the checkpoint
    )
    listed = [p.rsplit("/", 1)[-1] for p in dry.files]
    staged = [n for n in listed if n.startswith(f"{4:020d}.") and n.count("-") == 4]
    assert set(listed) - set(staged) == expected and len(staged) == 1
    versions = [int(n[:20]) for n in listed if n in expected]
    assert versions == sorted(versions)  # oldest first: an interrupted cleanup leaves a loadable log

    done = table.cleanupLog(dryRun=False)
    assert sorted(done.files) == sorted(dry.files)
    left = _names(log)
    assert not left & expected and f".{0:020d}.json.crc" not in left
    assert {f"{v:020d}.json" for v in range(8, 13)} <= left  # the commit at the checkpoint is kept
    assert {f"{8:020d}.checkpoint.parquet", f"{9:020d}.{11:020d}.compacted.json"} <= left
    assert len(os.listdir(log.log / "_staged_commits")) == 1

    assert sorted(r["path"] for r in table.snapshot().files().select("path").collect()) == before
    assert table.snapshot(version=8).version == 8
    with pytest.raises(VersionNotFoundError):
        table.snapshot(version=7)
    from deltalake import DeltaTable as RsTable

    rs = RsTable(log.path)
    assert rs.version() == 12 and len(rs.file_uris()) == len(before)
    assert table.cleanupLog(dryRun=False).files == []  # nothing more to do


def test_cutoff_is_midnight_utc_of_the_retention_day_and_times_are_monotonic(spark, log):
    now = int(dt.datetime(2024, 6, 10, 15, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
    midnight = int(dt.datetime(2024, 6, 8, tzinfo=dt.timezone.utc).timestamp() * 1000)  # now - 2 days, 00:00
    config = {"delta.logRetentionDuration": "interval 2 days"}
    log.commit(0, protocol(), metadata(configuration=config), add("f0"), mtime_ms=midnight - 5 * DAY)
    log.commit(1, add("f1"), mtime_ms=midnight - 3_600_000)  # before the cutoff
    log.commit(2, add("f2"), mtime_ms=midnight + 3_600_000)  # after midnight, before now - 2 days
    log.commit(3, add("f3"), mtime_ms=midnight - 7 * DAY)  # file time goes backwards: counts as 2's + 1
    log.classic_checkpoint(1, _state(1, config))
    log.classic_checkpoint(2, _state(2, config))
    log.classic_checkpoint(3, _state(3, config))
    table = DeltaTable.forPath(spark, log.path)
    result = cleanup_log(table._storage, table.path, dry_run=True, now_ms=now)
    assert result.cutoffTimestamp == "2024-06-08T00:00:00+00:00"
    assert (result.cutoffCommitVersion, result.checkpointVersion) == (1, 1)
    assert [p.rsplit("/", 1)[-1] for p in result.files] == [f"{0:020d}.json"]
    a_day_later = cleanup_log(table._storage, table.path, dry_run=True, now_ms=now + DAY)
    assert (a_day_later.cutoffCommitVersion, a_day_later.checkpointVersion) == (3, 3)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({}, "no usable checkpoint at or before version 2"),
        ({"delta.enableExpiredLogCleanup": "false"}, "delta.enableExpiredLogCleanup is false"),
        ({"delta.logRetentionDuration": "interval 365 days"}, "no commit is older than the cutoff"),
    ],
)
def test_nothing_is_deleted_without_a_safe_boundary_or_when_disabled(spark, log, config, reason):
    log.commit(0, protocol(), metadata(configuration=config), add("f0"), mtime_ms=OLD)
    log.commit(1, add("f1"), mtime_ms=OLD + 1)
    log.commit(2, add("f2"), mtime_ms=OLD + 2)
    log.commit(3, add("f3"))
    log.classic_checkpoint(3, _state(3, config))  # newer than the cutoff commit: cannot be the boundary
    names = _names(log)
    result = DeltaTable.forPath(spark, log.path).cleanupLog(dryRun=False)
    assert result.files == [] and reason in result.skipped and _names(log) == names


def test_sidecars_go_only_when_unreferenced_and_older_than_a_day(spark, log):
    features = ["v2Checkpoint"]
    config = {"delta.checkpointPolicy": "v2"}
    log.commit(0, protocol(3, 7, features, features), metadata(configuration=config), add("f0"), mtime_ms=OLD)
    for v in range(1, 7):
        log.commit(v, add(f"f{v}"), mtime_ms=OLD + v if v < 4 else NOW - (7 - v) * 60_000)
    table = DeltaTable.forPath(spark, log.path)
    first = table.checkpoint(version=1)
    kept = table.checkpoint(version=3)
    sidecars = log.log / "_sidecars"
    for name in os.listdir(sidecars):
        _set_mtime(sidecars / name, NOW - 3 * DAY)
    orphan_old, orphan_new = sidecars / f"{uuid.uuid4()}.parquet", sidecars / f"{uuid.uuid4()}.parquet"
    orphan_old.write_bytes(b"x")
    orphan_new.write_bytes(b"x")  # could belong to a V2 checkpoint being written right now
    _set_mtime(orphan_old, NOW - 3 * DAY)
    stale, fresh = log.log / "_deltaspark_tmp" / "stale-run", log.log / "_deltaspark_tmp" / "fresh-run"
    stale.mkdir(parents=True)
    fresh.mkdir(parents=True)
    (stale / "part-00000.parquet").write_bytes(b"x")
    _set_mtime(stale, NOW - 3 * DAY)

    result = table.cleanupLog(dryRun=False)
    assert result.checkpointVersion == 3
    left = set(os.listdir(sidecars))
    assert left == {*kept.sidecars, orphan_new.name}
    assert not set(first.sidecars) & left and orphan_old.name not in left
    assert not stale.exists() and fresh.exists()
    assert first.files[0] not in _names(log) and kept.files[0] in _names(log)
    snapshot = table.snapshot()
    assert snapshot.version == 6 and snapshot.segment.checkpoint.version == 3
    assert len(snapshot.files().collect()) == 7


def test_an_interrupted_cleanup_leaves_every_retained_version_loadable(spark, aged, monkeypatch):
    table = DeltaTable.forPath(spark, aged.path)
    real, calls = HadoopStorage.delete, []

    def failing(self, path, recursive=False):
        calls.append(path)
        if len(calls) == 6:
            raise OSError("storage went away")
        return real(self, path, recursive)

    monkeypatch.setattr(HadoopStorage, "delete", failing)
    with pytest.raises(OSError, match="storage went away"):
        table.cleanupLog(dryRun=False)
    monkeypatch.undo()
    for version in (8, 10, 12):
        assert table.snapshot(version=version).version == version
    assert table.cleanupLog(dryRun=False).checkpointVersion == 8  # a re-run finishes the job
    assert min(int(n[:20]) for n in _names(aged) if n[:20].isdigit()) == 8


def test_cleanup_refuses_unknown_writer_features(spark, log):
    log.commit(0, protocol(1, 7, writer_features=["someFutureFeature"]), metadata(), mtime_ms=OLD)
    log.commit(1, remove("x", 1), mtime_ms=OLD + 1)
    with pytest.raises(UnsupportedWriterFeatureError, match="someFutureFeature"):
        DeltaTable.forPath(spark, log.path).cleanupLog(dryRun=True)


# ---- the boundary checkpoint is proven usable before anything is deleted ------------------------


V2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])


def _v2_state(version: int) -> tuple[list[dict], list[list[dict]]]:
    adds = [add(f"f{v}") for v in range(version + 1)]
    return [V2, metadata()], [adds[: len(adds) // 2], adds[len(adds) // 2 :]]


def _classic_damage(log, kind: str) -> str:
    """Damage checkpoint 8 (classic); returns what the warning must name."""
    checkpoint = log.log / f"{8:020d}.checkpoint.parquet"
    if kind == "truncated":
        damage.truncate(checkpoint)
    elif kind == "garbage":
        damage.garbage(checkpoint)
    elif kind == "pages":
        damage.damage_pages(checkpoint)
    elif kind == "no metaData":
        log.classic_checkpoint(8, [protocol(), *_state(8)[2:]])
    elif kind == "_last_checkpoint disagrees":
        log.last_checkpoint(8, size=11, numOfAddFiles=3)  # the checkpoint holds 9 adds
        return "numOfAddFiles=3"
    return checkpoint.name


def _v2_damage(log, kind: str) -> str:
    """Damage a sidecar of checkpoint 8 (V2, JSON top-level file)."""
    (top,) = log.log.glob(f"{8:020d}.checkpoint.*.json")
    lines = [json.loads(line) for line in top.read_text().splitlines()]
    sidecar = log.log / "_sidecars" / [a["sidecar"]["path"] for a in lines if "sidecar" in a][-1]
    if kind == "sidecar missing":
        sidecar.unlink()
    elif kind == "sidecar truncated":
        damage.truncate(sidecar)
    elif kind == "sidecar pages":
        damage.damage_pages(sidecar)
    return sidecar.name


# The cleanup's Spark jobs are the same on both Spark lines: these run in the 3.5 suite, the shorter.
@pytest.mark.one_suite("3.5")
@pytest.mark.parametrize(
    "kind",
    [
        "truncated",
        "garbage",
        "pages",
        "no metaData",
        "_last_checkpoint disagrees",
        "sidecar missing",
        "sidecar truncated",
        "sidecar pages",
    ],
)
def test_a_checkpoint_that_cannot_be_read_is_never_the_boundary(spark, log, kind):
    """Cleanup deletes the commits a boundary checkpoint replaces, after which nothing can pass over
    it: a boundary that is not all readable - whichever byte is damaged - would lose the table.
    Such a checkpoint is passed over, named in a warning, for the older one."""
    v2 = kind.startswith("sidecar")
    log.commit(0, V2 if v2 else protocol(), metadata(), add("f0"), mtime_ms=OLD)
    for v in range(1, 13):
        log.commit(v, add(f"f{v}"), mtime_ms=OLD + v * 1000 if v < 10 else NOW)
    for version in (5, 8):
        if v2:
            log.v2_checkpoint(version, *_v2_state(version))
        else:
            log.classic_checkpoint(version, _state(version))
    table = DeltaTable.forPath(spark, log.path)
    expected = {v: sorted(r["path"] for r in table.snapshot(version=v).files().collect()) for v in (5, 8, 12)}
    named = (_v2_damage if v2 else _classic_damage)(log, kind)

    result = table.cleanupLog(dryRun=False)
    assert result.checkpointVersion == 5, result.warnings
    assert len(result.warnings) == 1 and "checkpoint 8" in result.warnings[0] and named in result.warnings[0]
    assert {f"{v:020d}.json" for v in range(5, 13)} <= _names(log)
    for version, paths in expected.items():
        files = DeltaTable.forPath(spark, log.path).snapshot(version=version).files()
        if kind == "sidecar pages" and version >= 8:
            # Its size is right, so reads use the checkpoint (a load reads no sidecar) and fail naming it.
            with pytest.raises(Exception, match=named):  # noqa: PT011 - Spark's FAILED_READ_FILE
                files.collect()
            continue
        assert sorted(r["path"] for r in files.collect()) == paths
    # delta-rs does not pass over a damaged checkpoint; the versions before it are intact for it too.
    from deltalake import DeltaTable as RsTable

    assert len(RsTable(log.path, version=7).file_uris()) == 8


def test_a_real_table_whose_only_checkpoint_is_damaged_keeps_every_commit(
    spark, conformance, tmp_path, capsys
):
    table = tmp_path / "basic-with-checkpoint"
    shutil.copytree(conformance / "basic-with-checkpoint", table)
    log_dir = table / "_delta_log"
    for f in log_dir.iterdir():
        _set_mtime(f, OLD)
    (checkpoint,) = log_dir.glob("*.checkpoint.parquet")
    damage.damage_pages(checkpoint)
    names = sorted(os.listdir(log_dir))
    result = DeltaTable.forPath(spark, str(table)).cleanupLog(dryRun=False)
    assert result.files == [] and result.checkpointVersion is None
    assert "no usable checkpoint" in result.skipped
    assert checkpoint.name in result.warnings[0] and sorted(os.listdir(log_dir)) == names
    from deltaspark.cli import main

    assert main(["cleanup", str(table)]) == 0  # the command line says so too, on stderr
    printed = capsys.readouterr()
    assert "Nothing to delete" in printed.out and "warning: checkpoint 10" in printed.err
    assert checkpoint.name in printed.err and sorted(os.listdir(log_dir)) == names


@pytest.mark.one_suite("3.5")
def test_every_conformance_checkpoint_is_proven_usable(spark, conformance):
    """No false alarm: every complete checkpoint of the conformance tables passes the proof, with
    `_last_checkpoint`'s counts where it describes it (real writers' conventions for `size`)."""
    from deltaspark.log.checkpoint_check import verify_checkpoint
    from deltaspark.log.listing import list_log_files, read_last_checkpoint
    from deltaspark.log.segment import complete_checkpoints

    storage = HadoopStorage(spark)
    checked = 0
    for table in sorted(conformance.iterdir()):
        if not (table / "_delta_log").is_dir() or table.name.startswith("300k"):  # 300k: no checkpoint
            continue
        log_dir = str(table / "_delta_log")
        listing = list_log_files(storage, log_dir) or []
        last = read_last_checkpoint(storage, log_dir)
        for checkpoint in complete_checkpoints(listing).values():
            contents = verify_checkpoint(spark, storage, checkpoint, last)
            assert contents.actions >= 2, (table.name, checkpoint.version)
            checked += 1
    assert checked >= 20
