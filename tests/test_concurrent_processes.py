"""Several processes, each with its own Spark session, committing to one table at once; and writers
killed with SIGKILL part-way through a commit.

Whatever the interleaving: every commit that reports success is in the log exactly once, every
failure is a named conflict, no log file is overwritten, versions are contiguous, and the final
state equals replaying the landed commits in version order (checked by deltaspark and delta-rs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltaspark import DeltaTable
from deltaspark.table import write

REPO = Path(__file__).resolve().parent.parent
CONFLICTS = {
    "ConcurrentAppendError",
    "ConcurrentDeleteReadError",
    "ConcurrentDeleteDeleteError",
    "MetadataChangedError",
}


def _start(table: Path, worker: int, ops: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.concurrent_writer", str(table), str(worker), ops],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _outcomes(workers: list[subprocess.Popen]) -> list[dict]:
    """Each worker's per-operation JSON lines, once all have finished (each must exit 0)."""
    results = []
    for proc in workers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results += [json.loads(line) for line in out.splitlines() if '"op"' in line]
    return results


def _commits(table: Path) -> dict[int, list[dict]]:
    out = {}
    for path in sorted((table / "_delta_log").glob("*.json")):
        out[int(path.name[:20])] = [json.loads(line) for line in path.read_text().splitlines()]
    return out


# Three processes racing on the file system (each a Spark session of its own, ~2 minutes): run in the
# 3.5 suite, which has the time (the 4.x suite runs the cluster run); the conflict rules themselves
# run in process on both suites (tests/test_transactions.py).
@pytest.mark.one_suite("3.5")
def test_processes_committing_at_once(spark, tmp_path):
    table = tmp_path / "t"
    write(
        spark.createDataFrame([(0, "x"), (1, "y"), (2, "y")], "id long, p string"),
        str(table),
        partitionBy=["p"],
        properties={"delta.enableDeletionVectors": "true"},
    )
    # Each kind of commit races: appends, a partition overwrite, two deletes of the same files, a property.
    plans = ["append:x,delete:y", "overwrite:x,delete:y", "prop,append:x"]
    results = _outcomes([_start(table, i + 1, plan) for i, plan in enumerate(plans)])
    assert len(results) == 6
    failed = [r for r in results if r["error"]]
    assert {r["error"] for r in failed} <= CONFLICTS, failed
    # A blind append conflicts only with a concurrent metadata change (the "prop" operation).
    assert all(r["error"] == "MetadataChangedError" for r in failed if r["op"].startswith("append"))
    landed = {r["version"]: r for r in results if not r["error"] and r["version"] is not None}
    commits = _commits(table)
    assert sorted(commits) == list(range(len(commits))) == [0, *sorted(landed)]
    for actions in commits.values():  # one commit per file, none overwritten
        assert sum("commitInfo" in a for a in actions) == 1
    txn_ids = [a["commitInfo"]["txnId"] for acts in commits.values() for a in acts if "commitInfo" in a]
    assert len(set(txn_ids)) == len(txn_ids)

    # WriteSerializable: a row written by a landed commit is gone exactly when a later landed
    # overwrite of its partition, or delete of its partition's even ids, had read it (its
    # readVersion reaches the row's commit).
    read_version = {v: acts[0]["commitInfo"].get("readVersion") for v, acts in commits.items()}
    written = [(0, (0, "x")), (0, (1, "y")), (0, (2, "y"))]
    written += [
        (v, (r["id"], r["op"].partition(":")[2]))
        for v, r in landed.items()
        if r["op"].startswith(("append", "overwrite"))
    ]
    removals = [
        (v, *r["op"].split(":")) for v, r in landed.items() if r["op"].startswith(("overwrite", "delete"))
    ]

    def removed(version: int, row: tuple) -> bool:
        return any(
            v > version
            and p == row[1]
            and read_version[v] >= version
            and (kind == "overwrite" or row[0] % 2 == 0)
            for v, kind, p in removals
        )

    rows = {row for version, row in written if not removed(version, row)}
    ours = {tuple(row) for row in DeltaTable.forPath(spark, str(table)).toDF().select("id", "p").collect()}
    assert ours == rows
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    result = QueryBuilder().register("t", RsTable(str(table))).execute("SELECT id, p FROM t").read_all()
    theirs = {(row["id"], row["p"]) for row in pa.table(result).to_pylist()}
    assert theirs == rows
    print("outcomes:", sorted(((r["op"], r["version"], r["error"]) for r in results), key=repr))


@pytest.mark.one_suite("3.5")
def test_merges_of_disjoint_partitions_and_appends_racing(spark, tmp_path):
    """Two processes, each merging into its own partition and then appending to it: every merge
    reads only its partition's files within its key range, so nothing conflicts in any order."""
    table = tmp_path / "t"
    write(
        spark.createDataFrame([(0, "x"), (1, "y"), (2, "y")], "id long, p string"),
        str(table),
        partitionBy=["p"],
        properties={"delta.enableDeletionVectors": "true"},
    )
    results = _outcomes([_start(table, 1, "merge:x,append:x"), _start(table, 2, "merge:y,append:y")])
    assert [r for r in results if r["error"]] == []
    commits = _commits(table)
    assert sorted(commits) == list(range(5))
    operations = sorted(acts[0]["commitInfo"]["operation"] for acts in commits.values())
    assert operations == ["MERGE", "MERGE", "WRITE", "WRITE", "WRITE"]
    rows = {tuple(r) for r in DeltaTable.forPath(spark, str(table)).toDF().select("id", "p").collect()}
    assert rows == {(1, "y"), (2, "x"), (1000, "x"), (1001, "x"), (0, "y"), (2000, "y"), (2001, "y")}


@pytest.mark.one_suite("3.5")
def test_optimize_racing_appends_and_a_delete(spark, tmp_path):
    """OPTIMIZE runs at snapshot isolation: appends racing it always commit; of a delete and an
    OPTIMIZE of the same files, the one that commits second fails with a named conflict when the
    first removed files it read, else applies on top. Every row is accounted for either way."""
    table = tmp_path / "t"
    write(spark.createDataFrame([(0, "x"), (1, "x")], "id long, p string"), str(table), partitionBy=["p"])
    write(spark.createDataFrame([(2, "x"), (3, "x")], "id long, p string"), str(table))
    results = _outcomes(
        [_start(table, 1, "optimize:x,append:x,optimize:x"), _start(table, 2, "append:x,append:x,delete:x")]
    )
    errors = [r for r in results if r["error"]]
    assert all(r["op"] in ("optimize:x", "delete:x") for r in errors), errors
    assert all(r["error"] == "ConcurrentDeleteReadError" for r in errors), errors
    commits = _commits(table)
    assert sorted(commits) == list(range(len(commits)))
    optimized = [v for v, acts in commits.items() if acts[0]["commitInfo"]["operation"] == "OPTIMIZE"]
    assert len(optimized) == 2 - sum(r["op"] == "optimize:x" for r in errors)
    for version in optimized:
        assert all(a.get("add", a.get("remove", {})).get("dataChange") is False for a in commits[version][1:])
    rows = sorted(r[0] for r in DeltaTable.forPath(spark, str(table)).toDF().collect())
    if any(r["op"] == "delete:x" for r in errors):
        assert rows == [0, 1, 2, 3, 1001, 2000, 2001]
    else:
        assert rows == [1, 3, 1001, 2001]  # the delete removed every even id


@pytest.mark.one_suite("4.x")  # crash safety: put-if-absent and renames, not the Spark version
@pytest.mark.parametrize("delay", [1.0, 3.0])  # early in a commit, and after some have landed
def test_a_writer_killed_mid_commit_leaves_a_readable_table(spark, tmp_path, delay):
    table = tmp_path / "t"
    write(spark.createDataFrame([(0, "x")], "id long, p string"), str(table), partitionBy=["p"])
    proc = _start(table, 1, "append:x,append:x,append:x,append:x")
    assert proc.stdout is not None
    assert '"ready"' in proc.stdout.readline()  # the session is up: commits are under way
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    commits = _commits(table)
    latest = max(commits)
    assert sorted(commits) == list(range(latest + 1))
    for actions in commits.values():  # never a half-written commit
        assert sum("commitInfo" in a for a in actions) == 1
    visible = (table / "_delta_log").iterdir()
    assert all(
        p.name.startswith(".") or p.name[:20].isdigit() or p.name == "_last_checkpoint" for p in visible
    )
    snapshot = DeltaTable.forPath(spark, str(table)).snapshot()
    assert snapshot.version == latest
    assert snapshot.toDF().count() == latest + 1  # each landed append added exactly one row


@pytest.mark.one_suite("4.x")  # crash safety: put-if-absent and renames, not the Spark version
def test_a_writer_killed_during_deletion_vector_deletes(spark, tmp_path):
    from tests.reference_rows import reference_rows
    from tests.writer_rules import check_table

    table = tmp_path / "t"
    write(
        spark.createDataFrame([(i, "x") for i in range(6)], "id long, p string").coalesce(1),
        str(table),
        partitionBy=["p"],
        properties={"delta.enableDeletionVectors": "true"},
    )
    proc = _start(table, 1, "delete:x,append:x,delete:x,append:x,delete:x")
    assert proc.stdout is not None
    assert '"ready"' in proc.stdout.readline()
    time.sleep(3.0)  # part-way through the deletes (DV files staged, decoded, committed)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    commits = _commits(table)
    assert sorted(commits) == list(range(max(commits) + 1))
    check_table(table)  # every referenced DV exists, with its framing, CRC and cardinality
    ours = sorted(r[0] for r in DeltaTable.forPath(spark, str(table)).toDF().select("id").collect())
    assert ours == sorted(r["id"] for r in reference_rows(str(table)))
    assert all(i % 2 for i in ours if i < 6) or max(commits) == 0  # a landed delete took the even ids
    assert all(p.name.startswith((".", "_")) or p.suffix in (".bin",) or p.is_dir() for p in table.iterdir())
