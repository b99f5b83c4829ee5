"""Log segment planning from a listing: no Spark needed."""

from __future__ import annotations

import fnmatch
import re

import pytest

from deltaspark.errors import NonContiguousVersionsError, TableNotFoundError, VersionNotFoundError
from deltaspark.log.files import LogFileKind, names_from_version_glob, parse_log_file
from deltaspark.log.segment import build_log_segment


def listing(*names: str):
    files = [parse_log_file(n, f"file:/t/_delta_log/{n}", 10, 1000) for n in names]
    return [f for f in files if f is not None]


def c(v: int) -> str:
    return f"{v:020d}.json"


def test_file_names_are_classified():
    assert parse_log_file(c(7), "p", 1, 1).kind is LogFileKind.COMMIT
    classic = parse_log_file(f"{5:020d}.checkpoint.parquet", "p", 1, 1)
    assert classic.kind is LogFileKind.CHECKPOINT_CLASSIC and classic.version == 5
    part = parse_log_file(f"{5:020d}.checkpoint.0000000002.0000000003.parquet", "p", 1, 1)
    assert (part.kind, part.part, part.num_parts) == (LogFileKind.CHECKPOINT_MULTIPART, 2, 3)
    v2 = parse_log_file(f"{5:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json", "p", 1, 1)
    assert v2.kind is LogFileKind.CHECKPOINT_UUID and v2.file_format == "json"
    comp = parse_log_file(f"{4:020d}.{6:020d}.compacted.json", "p", 1, 1)
    assert (comp.kind, comp.start_version, comp.version) == (LogFileKind.COMPACTION, 4, 6)
    assert parse_log_file(f"{6:020d}.{6:020d}.compacted.json", "p", 1, 1) is None  # y must exceed x
    assert parse_log_file(f"{3:020d}.crc", "p", 1, 1).kind is LogFileKind.CHECKSUM
    for junk in (
        "_last_checkpoint",
        "1.json",
        f".{c(1)}.crc",
        f"{c(1)}.tmp",
        "00000000000000000001.checkpoint.x.parquet",
    ):
        assert parse_log_file(junk, "p", 1, 1) is None


def test_json_only_log_reads_every_commit():
    seg = build_log_segment("t", listing(c(0), c(1), c(2)))
    assert seg.version == 2 and seg.checkpoint is None
    assert [f.version for f in seg.commits] == [0, 1, 2]
    assert seg.commit_at_version.version == 2


def test_newest_checkpoint_at_or_below_version_is_used():
    names = [c(v) for v in range(0, 13)] + [f"{5:020d}.checkpoint.parquet", f"{10:020d}.checkpoint.parquet"]
    latest = build_log_segment("t", listing(*names))
    assert latest.checkpoint.version == 10 and [f.version for f in latest.commits] == [11, 12]
    travel = build_log_segment("t", listing(*names), version=9)
    assert travel.checkpoint.version == 5 and [f.version for f in travel.commits] == [6, 7, 8, 9]
    exact = build_log_segment("t", listing(*names), version=10)
    assert exact.checkpoint.version == 10 and exact.commits == ()


def test_incomplete_multipart_checkpoint_is_ignored():
    names = [c(v) for v in range(0, 6)] + [
        f"{2:020d}.checkpoint.parquet",
        f"{4:020d}.checkpoint.0000000001.0000000003.parquet",
        f"{4:020d}.checkpoint.0000000003.0000000003.parquet",  # part 2 of 3 missing
    ]
    seg = build_log_segment("t", listing(*names))
    assert seg.checkpoint.version == 2
    complete = names + [f"{4:020d}.checkpoint.0000000002.0000000003.parquet"]
    seg = build_log_segment("t", listing(*complete))
    assert seg.checkpoint.version == 4 and seg.checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    assert [f.part for f in seg.checkpoint.files] == [1, 2, 3]


def test_uuid_checkpoint_is_preferred_at_the_same_version():
    names = [
        c(0),
        c(1),
        f"{1:020d}.checkpoint.parquet",
        f"{1:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet",
    ]
    seg = build_log_segment("t", listing(*names))
    assert seg.checkpoint.kind is LogFileKind.CHECKPOINT_UUID


def test_missing_commit_after_checkpoint_is_an_error():
    names = [c(0), c(1), f"{1:020d}.checkpoint.parquet", c(2), c(4)]
    with pytest.raises(NonContiguousVersionsError, match=r"missing commit\(s\) 3") as err:
        build_log_segment("t", listing(*names))
    assert err.value.missing == [3]


def test_missing_commit_without_checkpoint_is_an_error():
    with pytest.raises(NonContiguousVersionsError) as err:
        build_log_segment("t", listing(c(0), c(2), c(3)))
    assert err.value.missing == [1]


def test_log_without_version_zero_and_no_checkpoint_is_an_error():
    with pytest.raises(NonContiguousVersionsError, match="commit 0 is gone"):
        build_log_segment("t", listing(c(3), c(4)))


def test_versions_outside_the_log_are_refused():
    names = [c(v) for v in range(3, 8)] + [f"{4:020d}.checkpoint.parquet"]
    with pytest.raises(VersionNotFoundError, match="versions 4 to 7"):
        build_log_segment("t", listing(*names), version=8)
    with pytest.raises(VersionNotFoundError, match="oldest checkpoint is at version 4"):
        build_log_segment("t", listing(*names), version=3)
    with pytest.raises(VersionNotFoundError):
        build_log_segment("t", listing(*names), version=-1)


def test_empty_log_is_not_a_table():
    with pytest.raises(TableNotFoundError):
        build_log_segment("t", listing(f"{0:020d}.crc", "_last_checkpoint"))


def test_compactions_replace_the_commits_they_cover():
    names = [c(v) for v in range(0, 9)] + [
        f"{1:020d}.{3:020d}.compacted.json",
        f"{1:020d}.{5:020d}.compacted.json",  # wider, same start: preferred
        f"{6:020d}.{9:020d}.compacted.json",  # ends past version 8: not usable
    ]
    seg = build_log_segment("t", listing(*names))
    assert [(f.start_version, f.version) for f in seg.compactions] == [(1, 5)]
    assert [f.version for f in seg.commits] == [0, 6, 7, 8]
    assert [f.version for f in seg.tail_files] == [0, 5, 6, 7, 8]
    off = build_log_segment("t", listing(*names), use_compactions=False)
    assert off.compactions == () and [f.version for f in off.commits] == list(range(9))


def test_compaction_bridges_commits_removed_by_cleanup():
    names = [c(0), f"{1:020d}.{4:020d}.compacted.json", c(5)]
    seg = build_log_segment("t", listing(*names))
    assert [f.name for f in seg.tail_files][1].endswith("compacted.json")


def test_compaction_overlapping_the_checkpoint_is_not_used():
    names = [c(v) for v in range(0, 6)] + [
        f"{3:020d}.checkpoint.parquet",
        f"{2:020d}.{5:020d}.compacted.json",
    ]
    seg = build_log_segment("t", listing(*names))
    assert seg.compactions == () and [f.version for f in seg.commits] == [4, 5]


@pytest.mark.parametrize("start", [0, 7, 9, 10, 42, 99, 100, 12345, 10**19])
def test_version_glob_selects_exactly_the_later_versions(start):
    glob = names_from_version_glob(start)
    alternatives = glob[1:-1].split(",")
    probes = {max(start - 1, 0), start, start + 1, start + 9, start + 10, start * 10, 0, 5, 10**19 - 1}
    for v in probes:
        name = f"{v:020d}.json"
        matched = any(fnmatch.fnmatchcase(name, alt) for alt in alternatives)
        assert matched == (v >= start), (v, glob)
    assert re.fullmatch(r"\{[0-9\[\]\-*,]+\}", glob)
