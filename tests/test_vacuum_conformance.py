"""VACUUM on real tables: every conformance table (a copy whose data files are all made 30 days
old) must get, in a dry run, exactly the candidates derived here in plain Python from the rules
and the log (`reference_replay`), and the same data-file candidates as delta-rs's full vacuum
except where delta-rs is documented to differ (see `delta_rs_differences`).

CI vacuums a subset (`SUBSET`, one table per kind of file vacuum distinguishes), in the pyspark
4.x suite only;
`DELTASPARK_VACUUM_ALL_TABLES=1` vacuums every table.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

import pytest

from deltaspark import DeltaTable, TableNotFoundError, UnsupportedFeatureError
from deltaspark.spark_compat import PYSPARK_VERSION
from tests.conftest import conformance_root
from tests.reference_replay import replay

DAY_MS = 86_400_000
OLD_S = time.time() - 30 * 86_400
NOT_TABLES = {"crc-malformed", "partition_cm", "stats-writing-all-types"}
# deltaspark refuses to vacuum what it cannot write (the writer protocol is checked first).
DELTASPARK_REFUSES = {"catalog-owned-preview": "catalogManaged", "table-with-geo": "geospatial"}
VARIANT = {
    "spark-variant-checkpoint",
    "spark-variant-stable-feature-checkpoint",
    "spark-shredded-variant-preview-delta",
    "unshredded-variant",
}
SUBSET = [
    "basic-dv-with-checkpoint",  # deletion vector files next to the data
    "cdf-table",  # partitions and _change_data
    "cdf-table-with-cdc-and-dvs",
    "v2-checkpoints-parquet-with-sidecars",
    "table-with-dv-small",
]
ALL = os.environ.get("DELTASPARK_VACUUM_ALL_TABLES", "") == "1"
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _tables() -> list[str]:
    root = conformance_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root else SUBSET


def _z85_uuid(text: str) -> str:
    """An independent Z85 decoding of a 20-character UUID (the protocol's `u` DV file names)."""
    value = 0
    out = b""
    for i, ch in enumerate(text):
        value = value * 85 + _Z85.index(ch)
        if i % 5 == 4:
            out += value.to_bytes(4, "big")
            value = 0
    return str(uuid.UUID(bytes=out))


def _hidden(name: str, partition_columns: list[str]) -> bool:
    if not name.startswith(("_", ".")):
        return False
    if name.startswith(("_delta_index", "_change_data")):
        return False
    return not any(name.startswith(c + "=") for c in partition_columns)


def _relative(path: str, root: Path) -> str | None:
    """A log path (URI, relative or absolute) as a path relative to `root`; None outside it."""
    decoded = unquote(path)
    if decoded.startswith("file:"):
        decoded = "/" + decoded[len("file:") :].lstrip("/")
    if decoded.startswith("/"):
        return os.path.relpath(decoded, root) if decoded.startswith(str(root) + "/") else None
    return decoded


def _dv_file(dv: dict | None, root: Path) -> str | None:
    if not dv or dv.get("storageType") not in ("u", "p"):
        return None
    if dv["storageType"] == "p":
        return _relative(dv["pathOrInlineDv"], root)
    text = dv["pathOrInlineDv"]
    prefix, encoded = text[:-20], text[-20:]
    name = f"deletion_vector_{_z85_uuid(encoded)}.bin"
    return f"{prefix}/{name}" if prefix else name


def expected_candidates(root: Path, cutoff_ms: int) -> set[str]:
    """The rules, in plain Python, over the copy on disk and an independent replay of its log."""
    state = replay(str(root))
    partition_columns = list(state.metadata.get("partitionColumns") or [])
    kept: set[str] = set()
    for action in state.files.values():
        kept |= {
            p for p in (_relative(action["path"], root), _dv_file(action.get("deletionVector"), root)) if p
        }
    for action in state.tombstones.values():
        if (action.get("deletionTimestamp") or 0) >= cutoff_ms:
            kept |= {
                p
                for p in (_relative(action["path"], root), _dv_file(action.get("deletionVector"), root))
                if p
            }
    files, dirs = set(), set()
    for directory, subdirs, names in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        subdirs[:] = [
            d
            for d in subdirs
            if not _hidden(d, partition_columns) and not (rel_dir == "." and d == "metadata")
        ]
        for d in subdirs:
            dirs.add(os.path.normpath(os.path.join(rel_dir, d)))
        for name in names:
            if not _hidden(name, partition_columns):
                files.add(os.path.normpath(os.path.join(rel_dir, name)))
    candidates = {f for f in files if f not in kept}  # every file is 30 days old
    staying = (files - candidates) | kept
    blocked = {os.path.dirname(p) for p in staying}
    blocked = {a for p in blocked for a in _ancestors_and_self(p)}
    return candidates | {d for d in dirs if d not in blocked}


def _ancestors_and_self(path: str) -> set[str]:
    out = set()
    while path and path != ".":
        out.add(path)
        path = os.path.dirname(path)
    return out


def delta_rs_differences(rs: set[str], ours: set[str], root: Path) -> set[str]:
    """delta-rs's full-vacuum candidates without where it is documented to differ from delta-spark:
    it does not protect live deletion vector files (those deltaspark keeps), tests only the first
    path component for hidden names, and lists expired tombstones without checking they exist."""

    def nested_hidden(path: str) -> bool:
        return any(part.startswith((".", "_")) for part in path.split("/")[1:])

    def live_dv(path: str) -> bool:
        return path.rsplit("/", 1)[-1].startswith("deletion_vector_") and path not in ours

    return {p for p in rs if not live_dv(p) and not nested_hidden(p) and (root / p).is_file()}


@pytest.mark.one_suite("4.x")  # the rules run on 3.5 in tests/test_vacuum.py; CI time is scarce
@pytest.mark.parametrize("name", _tables())
def test_conformance_table_vacuum_candidates(spark, conformance, tmp_path, name):
    if name not in SUBSET and not ALL:
        pytest.skip("not in the CI subset; DELTASPARK_VACUUM_ALL_TABLES=1 vacuums every table")
    root = tmp_path / name
    shutil.copytree(conformance / name, root)
    for directory, _, names in os.walk(root):
        if "_delta_log" not in Path(directory).relative_to(root).parts:
            for n in names:
                os.utime(os.path.join(directory, n), (OLD_S, OLD_S))
    if name in NOT_TABLES:
        with pytest.raises(TableNotFoundError):
            DeltaTable.forPath(spark, str(root)).vacuum(dryRun=True)
        return
    table = DeltaTable.forPath(spark, str(root))
    if name in DELTASPARK_REFUSES or (name in VARIANT and PYSPARK_VERSION < (4, 0)):
        with pytest.raises(UnsupportedFeatureError, match=DELTASPARK_REFUSES.get(name, "ariant")):
            table.vacuum(dryRun=True)
        return
    started_ms = int(time.time() * 1000)
    prefix = f"file:{root}/"
    ours = {r["path"][len(prefix) :]: r["isDir"] for r in table.vacuum(dryRun=True).collect()}
    retention = table.snapshot().configuration.get("delta.deletedFileRetentionDuration")
    assert retention in (None, "interval 1 week", "interval 7 days"), "the cutoff below assumes 7 days"
    expected = expected_candidates(root, started_ms - 7 * DAY_MS)
    assert set(ours) == expected

    import deltalake

    try:
        rs = deltalake.DeltaTable(str(root)).vacuum(dry_run=True, full=True, enforce_retention_duration=True)
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden: the rules above still held
        pytest.xfail(f"delta-rs cannot vacuum {name}: {type(exc).__name__}: {str(exc)[:200]}")
    rs_relative = {_relative(p, root) or p for p in rs}
    our_files = {p for p, is_dir in ours.items() if not is_dir}
    assert delta_rs_differences(rs_relative, our_files, root) == our_files
