"""The damage generator: every kind of damage, on every kind of file of a few real tables.

Hand-picked cases (`test_damaged_tables.py`) test the damage someone thought of. Here each damage
kind - cut short, a torn last line, garbage, zero bytes, deleted, lines duplicated or reordered,
parquet pages that no longer decode - is applied to each kind of file a table has (commits, a
classic checkpoint, a V2 checkpoint and its sidecars, `_last_checkpoint`, `.crc`, data files,
deletion vectors) of three real tables, and two rules are checked:

1. every reader (the snapshot's file list, the rows, history, time travel) gives either the
   undamaged table's answer or an error that names the damaged file (or the missing version) -
   never a different answer;
2. after maintenance on the damaged table (a checkpoint, metadata cleanup of a log aged past its
   retention, vacuum), every version that was readable before is still readable with the same
   answer, unless cleanup deliberately retired it (older than the checkpoint it kept), and the
   latest version's rows survive vacuum.

Permission damage is tested where it can be (`test_damaged_tables.py`, in a child process that
drops root's capabilities); it cannot be applied here, as CI runs as root.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deltaspark import DeltaSparkError, DeltaTable, NonContiguousVersionsError, VersionNotFoundError
from tests import damage

pytestmark = pytest.mark.one_suite("3.5")

TABLES = ["basic-with-checkpoint", "table-with-dv-small", "v2-checkpoints-json-with-sidecars"]
DAY_MS = 86_400_000


# ---- damage kinds -------------------------------------------------------------------------------


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def duplicate_lines(path: Path) -> None:
    path.write_text("".join(f"{line}\n{line}\n" for line in _lines(path)))


def reorder_lines(path: Path) -> None:
    path.write_text("".join(f"{line}\n" for line in reversed(_lines(path))))


JSON_DAMAGES: dict[str, Callable[[Path], Any]] = {
    "torn last line": damage.cut_last_line,
    "garbage": damage.garbage,
    "zero bytes": damage.zero_bytes,
    "lines duplicated": duplicate_lines,
    "lines reordered": reorder_lines,
}
PARQUET_DAMAGES: dict[str, Callable[[Path], Any]] = {
    "truncated": damage.truncate,
    "garbage": damage.garbage,
    "pages": damage.damage_pages,
    "zero bytes": damage.zero_bytes,
    "deleted": Path.unlink,
}
DATA_DAMAGES = PARQUET_DAMAGES
DELETABLE: dict[str, Callable[[Path], Any]] = {
    "torn last line": damage.cut_last_line,
    "garbage": damage.garbage,
    "deleted": Path.unlink,
}
HINT_DAMAGES: dict[str, Callable[[Path], Any]] = {"garbage": damage.garbage, "deleted": Path.unlink}
DV_DAMAGES: dict[str, Callable[[Path], Any]] = {
    "truncated": damage.truncate,
    "garbage": damage.garbage,
    "deleted": Path.unlink,
}
# Deleting the newest commit leaves a valid table one version older: no reader can tell, so it is
# not among the damages. Any other commit deleted leaves a gap.


def _files_of(table: Path, live_data: list[str]) -> dict[str, tuple[Path, dict[str, Callable[[Path], Any]]]]:
    """The kinds of file `table` has, one of each, with the damages that apply to it."""
    log = table / "_delta_log"

    def named(pattern: str) -> list[Path]:  # not Hadoop's hidden `.<name>.crc` side files
        return sorted(p for p in log.glob(pattern) if not p.name.startswith("."))

    commits = [p for p in named("*.json") if len(p.stem) == 20 and p.stem.isdigit()]  # not V2 checkpoints
    checkpoints = named("*.checkpoint*")
    found = {
        "latest commit": (commits[-1], JSON_DAMAGES),
        # commit 1 where the log has more (a gap), else commit 0
        "earlier commit": (commits[1] if len(commits) > 2 else commits[0], DELETABLE),
        "data file": (table / live_data[0], DATA_DAMAGES),
    }
    if checkpoints:
        newest = checkpoints[-1]
        kinds = {**JSON_DAMAGES, "deleted": Path.unlink} if newest.suffix == ".json" else PARQUET_DAMAGES
        found["checkpoint"] = (newest, kinds)
        if newest.suffix == ".json":
            sidecars = [
                json.loads(line)["sidecar"]["path"]
                for line in _lines(newest)
                if line.startswith('{"sidecar"')
            ]
            found["sidecar"] = (log / "_sidecars" / sidecars[0], PARQUET_DAMAGES)
    if (log / "_last_checkpoint").exists():
        found["_last_checkpoint"] = (log / "_last_checkpoint", HINT_DAMAGES)
    crcs = named("*.crc")
    if crcs:
        found["checksum"] = (crcs[-1], HINT_DAMAGES)
    dvs = sorted(table.glob("deletion_vector_*.bin"))
    if dvs:
        found["deletion vector"] = (dvs[0], DV_DAMAGES)
    return found


# ---- readers and their answers ------------------------------------------------------------------


def _paths(dt: DeltaTable, version: int | None = None) -> list[str]:
    return sorted(r["path"] for r in dt.snapshot(version=version).files().select("path").collect())


def _rows(dt: DeltaTable) -> list[str]:
    return sorted(str(tuple(r)) for r in dt.toDF().collect())


def _history(dt: DeltaTable) -> list[tuple[int, str]]:
    return sorted((r["version"], r["operation"]) for r in dt.history().collect())


READERS: dict[str, Callable[[DeltaTable, int], Any]] = {
    "files": lambda dt, latest: _paths(dt),
    "rows": lambda dt, latest: _rows(dt),
    "history": lambda dt, latest: _history(dt),
    "time travel": lambda dt, latest: _paths(dt, 1),
}


def _answer(read: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", answer), or ("error", message) for a deltaspark error or a lazy Spark failure."""
    try:
        return "ok", read()
    except DeltaSparkError as exc:
        return "error", exc
    except Exception as exc:  # a lazy DataFrame's failure: Spark's, carrying the message
        return "lazy", exc


def _names_the_damage(error: BaseException, damaged: Path) -> bool:
    text = str(error)
    if damaged.name in text or damaged.name.replace("%", "%25") in text:
        return True
    version = damaged.name[:20]
    if version.isdigit() and isinstance(error, (NonContiguousVersionsError, VersionNotFoundError)):
        return str(int(version)) in text
    return False


# How Spark's parquet reader fails a lazy query over a damaged file: 4.x, 3.5, Parquet's own words.
SPARK_READER = ("FAILED_READ_FILE", "Encountered error while reading file", "is not a Parquet file")
DATA_KINDS = ("data file", "deletion vector")


def _check(outcome: tuple[str, Any], expected: Any, damaged: Path, what: str, log_file: bool) -> None:
    """The undamaged answer, or an error naming the damaged file; a lazy failure over a damaged log
    file (sidecars included) in deltaspark's words, over a data file in deltaspark's or Spark's
    parquet reader's (4.x, 3.5)."""
    kind, value = outcome
    if kind == "ok":
        assert value == expected, f"{what}: a different answer, not an error naming {damaged.name}"
    else:
        assert _names_the_damage(value, damaged), f"{what}: {kind} error without the file: {value!r}"[:2000]
        if kind == "lazy" and log_file:
            assert "deltaspark:" in str(value), f"{what}: {value!r}"[:2000]
        elif kind == "lazy":
            assert "deltaspark:" in str(value) or any(s in str(value) for s in SPARK_READER), what


@pytest.fixture(scope="module")
def pristine(spark, conformance, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each table's undamaged answers (from a copy: reading never writes, but a copy is certain)."""
    answers = {}
    for name in TABLES:
        copy = tmp_path_factory.mktemp("pristine") / name
        shutil.copytree(conformance / name, copy)
        dt = DeltaTable.forPath(spark, str(copy))
        latest = dt.snapshot().version
        answers[name] = {
            "latest": latest,
            **{reader: read(dt, latest) for reader, read in READERS.items()},
        }
    return answers


# CI applies each damage to each kind of file once, on the first table that has that kind (the
# engine's code paths are the same on the others), and checks maintenance after the damages that
# move its boundary (vacuuming after one of them); DELTASPARK_DAMAGE_ALL_TABLES=1 applies
# everything everywhere and checks maintenance after every damage of the log (about 15 minutes).
ALL = os.environ.get("DELTASPARK_DAMAGE_ALL_TABLES", "") == "1"
MAINTAINED = {
    ("latest commit", "torn last line"),
    ("earlier commit", "deleted"),
    ("checkpoint", "garbage"),
    ("checkpoint", "pages"),
    ("sidecar", "truncated"),
    ("_last_checkpoint", "garbage"),
}
VACUUMED = ("checkpoint", "garbage")


def _cases() -> list[tuple[str, str, str]]:
    from tests.conftest import conformance_root

    root = conformance_root()
    if root is None:
        return [("", "", "")]  # the fixture skips with the reason
    cases, seen = [], set()
    for name in TABLES:
        table = root / name
        live = _live_data_files(table)
        for kind, (_, damages) in _files_of(table, live).items():
            for d in damages:
                if ALL or (kind, d) not in seen:
                    cases.append((name, kind, d))
                    seen.add((kind, d))
    return cases


def _live_data_files(table: Path) -> list[str]:
    """Data files of the table's latest version that exist, from its log's adds and removes (plain
    Python: the generator must not depend on the reader it tests)."""
    from tests.reference_replay import replay

    return sorted({path for path, _ in replay(str(table)).files if (table / path).exists()})


@pytest.mark.parametrize(("table_name", "kind", "damage_name"), _cases())
def test_damage_is_named_or_harmless(spark, conformance, pristine, tmp_path, table_name, kind, damage_name):
    expected = pristine[table_name]
    table = tmp_path / table_name
    shutil.copytree(conformance / table_name, table)
    live = _live_data_files(table)
    target, damages = _files_of(table, live)[kind]
    damages[damage_name](target)
    what = f"{table_name}: {kind} ({target.name}) {damage_name}"

    dt = DeltaTable.forPath(spark, str(table))
    for reader, read in READERS.items():
        outcome = _answer(lambda read=read: read(dt, expected["latest"]))
        _report(table_name, kind, damage_name, reader, outcome, expected[reader])
        _check(outcome, expected[reader], target, f"{what}: {reader}", kind not in DATA_KINDS)

    if (kind, damage_name) in MAINTAINED or (ALL and kind not in DATA_KINDS):
        vacuum = (kind, damage_name) == VACUUMED  # vacuum's own listing is slow: once in CI
        _maintenance_keeps_what_reads(spark, table, target, expected, what, vacuum)


def _report(table_name: str, kind: str, damage_name: str, reader: str, outcome: tuple, expected: Any) -> None:
    """With DELTASPARK_DAMAGE_REPORT=<file>, one JSON line per reader: what the damage gave (the
    README's table of damages is made from it)."""
    report = os.environ.get("DELTASPARK_DAMAGE_REPORT")
    if not report:
        return
    status, value = outcome
    gave = "same answer" if status == "ok" and value == expected else type(value).__name__
    if status == "ok" and value != expected:
        gave = "DIFFERENT ANSWER"
    line = {"table": table_name, "file": kind, "damage": damage_name, "reader": reader, "gave": gave}
    with open(report, "a") as out:
        out.write(json.dumps(line) + "\n")


def _maintenance_keeps_what_reads(
    spark, table: Path, damaged: Path, expected: dict, what: str, vacuum: bool
) -> None:
    """After a checkpoint, metadata cleanup of a log aged past retention and vacuum, every version
    that read before reads the same, except what cleanup retired; the latest rows survive."""
    readable = {}
    latest = expected["latest"]
    for version in sorted({0, 1, latest - 1, latest}):
        kind, value = _answer(lambda v=version: _paths(DeltaTable.forPath(spark, str(table)), v))
        if kind == "ok":
            readable[version] = value
    old = int(time.time() * 1000) - 60 * DAY_MS
    for f in (table / "_delta_log").iterdir():
        os.utime(f, ns=(old * 1_000_000, old * 1_000_000))
    dt = DeltaTable.forPath(spark, str(table))
    _answer(dt.checkpoint)  # a damaged latest version: refused by name, else written
    cleanup = _answer(lambda: dt.cleanupLog(dryRun=False))
    if cleanup[0] == "ok" and cleanup[1].checkpointVersion is not None:
        retired = cleanup[1].checkpointVersion
    else:
        retired = 0
    for version, paths in readable.items():
        if version < retired:
            continue
        again = _answer(lambda v=version: _paths(DeltaTable.forPath(spark, str(table)), v))
        assert again == ("ok", paths), (
            f"{what}: version {version} read before maintenance, not after: {again}"
        )
    rows = _answer(lambda: _rows(DeltaTable.forPath(spark, str(table))))
    if rows[0] == "ok" and (vacuum or ALL):
        _answer(lambda: DeltaTable.forPath(spark, str(table)).vacuum().collect())
        assert _answer(lambda: _rows(DeltaTable.forPath(spark, str(table)))) == rows, f"{what}: vacuum"
