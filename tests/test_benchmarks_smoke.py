"""A tiny pass of the benchmark harness (`benchmarks/`), so that it keeps working.

Nothing is timed here. The generator's tables are checked against deltaspark and delta-rs (the
generator's correctness check), and the runner is run end to end as a subprocess on a few hundred
files with no warm repetitions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.generate import LogSpec, generate
from benchmarks.small import OPERATIONS as SMALL_OPERATIONS
from deltaspark import DeltaTable

REPO = Path(__file__).resolve().parent.parent

deltalake = pytest.importorskip("deltalake")

# The runners that start several Spark processes each (1-2.5 minutes apiece in CI) run when asked:
# CI time is the suite's scarcest resource, and they check the benchmark tooling, not deltaspark.
RUNNER_SMOKES = os.environ.get("DELTASPARK_RUNNER_SMOKES", "") == "1"
heavy_runner = pytest.mark.skipif(
    not RUNNER_SMOKES, reason="a multi-process benchmark runner: DELTASPARK_RUNNER_SMOKES=1 runs it"
)

SPECS = [
    LogSpec(files=240, commits=4, partitions=7, dv_fraction=0.1),
    LogSpec(files=260, commits=5, partitions=0, dv_fraction=0.1, checkpoint=True, tail_files_per_commit=12),
]


@pytest.mark.parametrize("spec", SPECS, ids=["json-only", "checkpoint-and-tail"])
def test_generated_logs_read_the_same_in_both_engines(spark, tmp_path, spec):
    table = generate(tmp_path / "table", spec)
    snapshot = DeltaTable.forPath(spark, table.path).snapshot()
    files = snapshot.files()
    rs = deltalake.DeltaTable(table.path)

    assert snapshot.version == rs.version() == table.version
    assert files.count() == rs.get_add_actions().num_rows == table.live_files
    assert files.where("deletionVector is not null").count() > 0
    assert snapshot.tombstones().count() > 0
    rs_paths = sorted(str(p) for p in _column(rs.get_add_actions(), "path"))
    assert sorted(r["path"] for r in files.select("path").collect()) == rs_paths


@pytest.mark.parametrize("spec", SPECS, ids=["json-only", "checkpoint-and-tail"])
def test_spark_alone_finds_the_live_files_the_generator_wrote(spark, tmp_path, spec):
    """The `spark` engine's plain-Spark replay (aggregation, or broadcast anti-join on a checkpoint)."""
    from benchmarks.worker_spark import replay_run

    table = generate(tmp_path / "table", spec)
    _, facts = replay_run(spark, table.path)
    assert facts == {"files": table.live_files, "version": table.version}


def _column(table, name: str) -> list:
    import pyarrow as pa

    return pa.table(table).column(name).to_pylist()


@pytest.mark.one_suite("4.x")  # the runner in a process of its own; the logs are read on both suites
@heavy_runner  # its own Spark process, and delta-rs and plain Spark in processes of their own
def test_runner_smoke(tmp_path):
    out = tmp_path / "results.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.run",
        "--scale",
        "smoke",
        "--repeat",
        "0",
        "--shared-session",
        "--skip",
        "deltaspark:checkpoint",  # its fixed Spark cost would double this test; delta-rs's covers the op
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    results = json.loads(out.read_text())
    (scale,) = results["scales"]
    runs = {(r["engine"], r["op"]): r for r in scale["runs"]}
    assert set(runs) == {
        ("floor", "replay"),
        ("spark", "replay"),
        ("delta-rs", "replay"),
        ("deltaspark", "replay"),
        ("deltaspark", "todf"),
        ("delta-rs", "checkpoint"),
    }
    assert all(r["status"] == "ok" for r in runs.values()), runs
    assert all(runs[engine, "replay"]["files_match"] for engine in ("spark", "delta-rs", "deltaspark"))
    assert all(r["cold"]["total"] > 0 and r["peak_tree_rss"] > 0 for r in runs.values())
    assert runs["delta-rs", "checkpoint"]["facts"]["written"]  # it wrote a checkpoint, then undid it
    assert "| deltaspark | snapshot replay" in done.stdout
    assert not (tmp_path / "work" / "table-smoke").exists()


@pytest.mark.one_suite("4.x")  # the runner in processes of its own; the generated tables are checked
# against pyiceberg and toDF on both suites (test_iceberg_count.py)
@heavy_runner
def test_iceberg_runner_smoke(tmp_path):
    out = tmp_path / "results.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.iceberg",
        "--scale",
        "smoke",
        "--repeat",
        "0",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--driver-memory",
        "1g",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (scale,) = json.loads(out.read_text())["scales"]
    runs = {(r["engine"], r["op"]): r for r in scale["runs"]}
    assert set(runs) == {(e, op) for e in ("deltaspark", "pyiceberg") for op in ("plan", "count")}
    assert all(r["status"] == "ok" and r["answer_matches"] for r in runs.values()), runs
    assert "| deltaspark | row count with position deletes" in done.stdout
    assert not (tmp_path / "work" / "iceberg-smoke-v2").exists()


# two processes with a Spark session each, and delta-rs: about two minutes, in the shorter suite
@pytest.mark.one_suite("3.5")
@heavy_runner
def test_small_work_runner_smoke(tmp_path):
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "benchmarks.small", "--sessions", "tuned", "--passes", "2"]
    command += ["--workdir", str(tmp_path / "work"), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"deltaspark/tuned", "floor/tuned", "deltars"}
    assert all(r["status"] == "ok" for r in runs.values()), runs
    ours = runs["deltaspark/tuned"]["passes"]
    assert len(ours) == 2 and set(ours[1]) == set(SMALL_OPERATIONS)
    assert ours[1]["history"]["jobs"] == 0 and ours[1]["checkpoint"]["jobs"] <= 1
    assert set(runs["deltars"]["passes"][1]) == set(SMALL_OPERATIONS) - {"audit"}
    assert "tuned (session start" in done.stdout and "floor 1st" in done.stdout


@pytest.mark.one_suite("3.5")  # five processes with tiny data: about two minutes (the 4.x suite is longer)
@heavy_runner
def test_write_runner_smoke(tmp_path):
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "benchmarks.write", "--rows", "2000", "--bulk-repeat", "1"]
    command += ["--repeat", "1", "--warmup", "0", "--workdir", str(tmp_path / "work"), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cases = json.loads(out.read_text())["cases"]
    for bulk in ("bulk unpartitioned", "bulk partitioned"):
        assert set(cases[bulk]) == {"deltaspark", "spark", "deltars"}, cases
    for small in ("small append", "small append unpartitioned"):
        assert set(cases[small]) == {"deltaspark", "spark", "deltars"}
        assert cases[small]["deltaspark"]["jobs"] == 1  # the parquet write (8, then 4, before)
    assert set(cases["first write"]) == {"deltaspark", "spark"}
    assert cases["setProperties"]["deltaspark"]["median"] > 0


@pytest.mark.one_suite("3.5")  # a standalone cluster of one executor and a driver process: about a minute
@heavy_runner
def test_scale_runner_smoke(tmp_path):
    """`benchmarks/scale.py` end to end on 3,000 files: a table and its inventory generated, a
    standalone cluster started, every operation run and checked by the driver process, the jobs,
    tasks and memory read, the cluster stopped."""
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "benchmarks.scale", "--sizes", "smoke", "--executors", "1"]
    command += ["--executor-memory", "1g", "--driver-memory", "1g", "--workdir", str(tmp_path / "w")]
    command += ["--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"]
    (run,) = size["runs"]
    assert run["executors"] == 1 and set(run["ops"]) == {"replay", "checkpoint", "vacuum", "audit"}, run
    ops = run["ops"]
    assert ops["replay"]["files"] == size["facts"]["generated"]["live_files"]
    assert ops["vacuum"]["candidates"] == size["facts"]["removed_files"] > 0
    assert ops["checkpoint"]["written"] >= 1 and ops["audit"]["errors"] == 0
    # The smoke's 3,000-file state is within the driver replay's bounds: its checkpoint is written
    # on the driver, without a job (larger sizes write it with Spark jobs on the executors).
    assert ops["checkpoint"]["jobs"] == 0, ops["checkpoint"]
    for name, op in ops.items():
        assert op["jobs"] > 0 or name == "checkpoint", op
        assert op["executor_peak_rss"] > 0 and op["driver_heap_peak"] > 0, op
    assert not (tmp_path / "w" / "table-smoke").exists()  # not kept without --keep
