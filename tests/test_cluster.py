"""Part of the suite on a real Spark standalone cluster, and the jobs and the CLI through spark-submit.

A master and two workers (one core each) start from the installed pyspark (`tests/standalone.py`),
so every task runs in an executor JVM of its own, with Python workers of its own: nothing a task
needs can come from the driver's memory. deltaspark is not installed in the Python those workers
run: it reaches them as a zip of the package, as a user ships it (`addPyFile`, `--py-files`). The
tests in `CLUSTER_TESTS` run again in a child pytest whose session is the cluster's
(`DELTASPARK_TEST_MASTER`, see conftest.py) in the pyspark 4.x suite; the 3.5 suite submits the
maintenance jobs to the cluster instead. Each run stops the cluster, with every process it started,
when it ends.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import deltaspark
from deltaspark import DeltaTable
from tests.conftest import CLUSTER_MASTER, CONNECT, REPO
from tests.standalone import Cluster, standalone_cluster
from tests.test_checkpoint_job import _checkpoints as checkpoints_of
from tests.test_checkpoint_job import _table as checkpoint_table

# One test per capability, each reaching the executors in its own way: Spark's replay and readers,
# deletion vectors decoded and written in Python workers, files deleted by tasks, Iceberg manifests
# read and written there, a table's storage settings carried to the tasks. (Reads through Spark's
# own scans - column mapping, row tracking, partition values - run alike on any master; the suite
# checks them in local mode.) The executor-side code is the same on both Spark versions, so the
# cluster run is the 4.x suite's; the 3.5 suite's spark-submit test below runs the checkpoint and
# audit jobs on the cluster's executors (deletion vectors read there too), the package shipped as a
# zip.
CLUSTER_TESTS = {
    "the shipped package": [
        "tests/test_cluster.py::test_executors_import_deltaspark_from_the_shipped_zip",
    ],
    "reads: deletion vectors": [
        "tests/test_read.py::test_deletion_vectors_inline_relative_and_absolute[spark]",
    ],
    "writes": [
        "tests/test_writes.py::test_partition_values_of_every_type_round_trip",
    ],
    "delete, update, merge": [
        # rows read, DV files staged and rows rewritten by the executors
        "tests/test_delete_with_deletion_vectors.py::test_deletes_and_updates_through_the_distributed_reader",
        "tests/test_merge.py::test_each_clause_kind_on_both_paths",
        # the kept source's blocks live in the executors: lost there, the merge starts over
        "tests/test_merge.py::test_a_merge_whose_kept_source_loses_rows_starts_over",
    ],
    "iceberg: manifests and deletes read by tasks": [
        "tests/test_iceberg_read.py::test_rows_the_source_project_expects"
        "[impala-iceberg_v2_delete_both_eq_and_pos-None-columns8-expected8]",
    ],
    "optimize": [
        "tests/test_optimize.py::test_zorder_makes_point_lookups_skip_files_on_each_column",
    ],
    "vacuum": [
        "tests/test_vacuum.py::test_full_vacuum_deletes_exactly_what_the_rules_say",
    ],
    "an object store reached with the session's S3A settings (the tasks get them with the job)": [
        "tests/test_object_store.py::test_a_table_s_files_are_listed_and_deleted_by_tasks_in_s3",
        "tests/test_object_store.py::test_format_delta_reads_and_streams_a_table_in_s3_with_the_session_s_settings",
    ],
}

pytestmark = pytest.mark.skipif(CONNECT, reason="a classic session's test (the Connect run has its own)")


def _worker_python(folder: Path) -> Path:
    """A Python for the workers with this interpreter's packages (pyarrow, pyroaring, pandas)
    but without deltaspark: a venv whose path file names this interpreter's site-packages folder,
    whose own path files (the editable install of deltaspark) are therefore not run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "driver-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _package_zip(path: Path) -> Path:
    """deltaspark's modules as a zip, as a wheel of it holds them."""
    root = Path(deltaspark.__file__).parent
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for module in sorted(root.rglob("*.py")):
            archive.write(module, module.relative_to(root.parent).as_posix())
    return path


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("shipped")
    python = _worker_python(work / "worker-venv")
    probe = "import pyarrow, pyroaring\ntry:\n    import deltaspark\nexcept ImportError:\n    print('absent')"
    check = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=work)
    assert check.returncode == 0 and check.stdout.strip() == "absent", check.stdout + check.stderr
    return {"python": python, "zip": _package_zip(work / "deltaspark.zip")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, shipped) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("standalone")
    with standalone_cluster(work, workers=2, python=str(shipped["python"])) as started:
        yield started


@pytest.mark.skipif(CLUSTER_MASTER is None, reason="runs in the cluster run, which the test below launches")
def test_executors_import_deltaspark_from_the_shipped_zip(spark):
    """Every executor's Python finds deltaspark in the zip the session shipped, not installed."""
    found = (
        spark.sparkContext.parallelize(range(8), 8)
        .map(lambda _: (__import__("socket").gethostname(), __import__("deltaspark").__file__))
        .collect()
    )
    assert all(".zip" in path for _, path in found), found


@pytest.mark.one_suite("4.x")  # the 3.5 suite submits the jobs to the cluster (below)
@pytest.mark.skipif(CLUSTER_MASTER is not None, reason="the cluster run itself")
def test_the_cluster_part_of_the_suite_passes_on_a_standalone_cluster(cluster, shipped):
    ids = [i for group in CLUSTER_TESTS.values() for i in group]
    env = {
        **os.environ,
        "DELTASPARK_TEST_MASTER": cluster.url,
        "DELTASPARK_TEST_PY_FILES": str(shipped["zip"]),
        "PYSPARK_PYTHON": str(shipped["python"]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *ids],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    output = proc.stdout.strip()
    summary = output.splitlines()[-1] if output else ""
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    assert "skipped" not in summary and "failed" not in summary and "error" not in summary, summary
    # Each id ran (a parametrized one as several tests); the executors were the workers' own.
    assert len(re.findall(r"^\S+ call +tests/", output, re.M)) >= len(ids), output[-4000:]
    executors = cluster.executor_dirs()
    assert len({p.parent.name for p in executors}) >= 2, executors
    print(summary)


def _table(spark, path: Path, dvs: bool) -> str:
    """A small partitioned table with a delete (a deletion vector when `dvs`) and a few commits."""
    columns = ("id", "id % 4 AS p", "CAST(id AS STRING) AS s")
    properties = {"delta.enableDeletionVectors": "true"} if dvs else {}
    rows = spark.range(0, 400, numPartitions=2).selectExpr(*columns)
    deltaspark.write(rows, str(path), partitionBy=["p"], properties=properties)
    for i in range(3):
        deltaspark.write(spark.range(400 + 10 * i, 410 + 10 * i).selectExpr(*columns), str(path))
    DeltaTable.forPath(spark, str(path)).delete("id < 30")
    return str(path)


# In the 3.5 suite (Databricks LTS and EMR 7.x submit with Spark 3.5): the 4.x suite runs the
# cluster run.
@pytest.mark.one_suite("3.5")
@pytest.mark.skipif(CLUSTER_MASTER is not None, reason="the cluster run itself")
def test_the_maintenance_jobs_run_through_spark_submit_with_the_package_shipped(
    spark, cluster, shipped, tmp_path
):
    """The scheduled maintenance jobs (checkpoint and log cleanup; audit), submitted to the cluster
    with `--py-files`: neither the driver's Python nor the workers' has deltaspark installed. (The
    Iceberg sync job and the command line are the same entry-point shape, run in process by
    `test_iceberg_sync_job.py` and `test_cli.py`: each application submitted costs a minute of CI.)"""
    before = {p.parent.parent.name for p in cluster.executor_dirs()}
    tables = [_table(spark, tmp_path / "dv", True), _table(spark, tmp_path / "cow", False)]
    listing = tmp_path / "tables.txt"
    listing.write_text("\n".join(tables) + "\n")
    env = {**cluster.env, "PYSPARK_DRIVER_PYTHON": str(shipped["python"])}
    env.pop("PYTHONPATH", None)

    def submit(script: str, *args: str) -> subprocess.CompletedProcess:
        command = [
            str(cluster.spark_home / "bin" / "spark-submit"),
            "--master",
            cluster.url,
            "--py-files",
            str(shipped["zip"]),
            "--conf",
            "spark.executor.memory=640m",
            "--conf",
            "spark.cores.max=1",  # one executor: an application's start-up is most of its time
            "--conf",
            "spark.ui.enabled=false",
            str(REPO / "jobs" / script),
            *args,
        ]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert proc.returncode == 0, script + "\n" + proc.stdout[-3000:] + proc.stderr[-5000:]
        return proc

    # The checkpoint job: due tables (classic and V2) checkpointed and their old commits cleaned up,
    # a fresh one left alone.
    due, v2, fresh = (
        checkpoint_table(tmp_path / n, c, v2=n == "v2") for n, c in (("due", 10), ("v2", 10), ("fresh", 2))
    )
    due_list = tmp_path / "due.txt"
    due_list.write_text("\n".join([due.path, v2.path, fresh.path, *tables]) + "\n")
    proc = submit(
        "checkpoint_job.py",
        "--interval",
        "4",
        "--paths-file",
        str(due_list),
        "--output",
        str(tmp_path / "ckpt.json"),
    )
    assert "5 table(s): 5 ok, 0 failed" in proc.stdout, proc.stdout[-3000:]
    done = {
        Path(t["path"]).name: t["checkpoint"]
        for t in json.loads((tmp_path / "ckpt.json").read_text())["tables"]
    }
    assert (done["due"]["kind"], done["v2"]["kind"], done["fresh"]) == ("classic", "v2", None), done
    assert (done["dv"]["version"], done["cow"]["version"]) == (4, 4), done
    for log, kind in ((due, "classic"), (v2, "uuid")):
        snapshot = DeltaTable.forPath(spark, log.path).snapshot()
        assert snapshot.version == 9 and snapshot.segment.checkpoint.version == 9
        assert snapshot.segment.checkpoint.kind.value == kind and snapshot.segment.tail_files == ()
        assert snapshot.summary()["numFiles"] == 10
        assert [n for n in os.listdir(log.log) if re.fullmatch(r"\d{20}\.json", n)] == [f"{9:020d}.json"]
    assert checkpoints_of(fresh) == []

    submit("audit_job.py", "--paths-file", str(listing), "--output", str(tmp_path / "audit.json"))
    audits = json.loads((tmp_path / "audit.json").read_text())
    assert [a["status"] for a in audits["tables"]] == ["passed", "passed"], audits

    # Every application ran its tasks on the workers' executors.
    applications = {p.parent.parent.name for p in cluster.executor_dirs()}
    assert len(applications - before) == 2, applications  # the two jobs
