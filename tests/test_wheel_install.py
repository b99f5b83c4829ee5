"""The built wheel, installed with only its declared dependencies, reads what the dev environment
reads.

A fresh virtual environment gets the wheel and nothing else (pip resolves its runtime
dependencies; the pyspark version is pinned to the one under test), then reads the deletion vector
tables (decoded in Spark's Python workers) and one data-bearing conformance table per feature in
a Spark session of its own. Row counts are compared with the independent derivation
(`tests/reference_rows.py`). A dependency the code needs but the wheel does not declare fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import CONNECT, REPO, conformance_root
from tests.reference_rows import reference_rows
from tests.suites import SPARK_35_TABLES
from tests.test_read import DATA_TABLES

DV_TABLES = ["basic-dv-no-checkpoint", "basic-dv-with-checkpoint", "table-with-dv-small", "with-short-dv"]
# The deletion vector tables and one table per feature (`tests/suites.py`): a missing dependency
# fails on the first table whose code needs it (the suite reads every table in the dev environment).
TABLES = sorted(set(DV_TABLES) | (SPARK_35_TABLES & set(DATA_TABLES)))

READER = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession
    import deltaspark
    from deltaspark import DeltaTable

    assert "site-packages" in deltaspark.__file__, deltaspark.__file__  # the wheel, not the checkout
    root, names = sys.argv[1], sys.argv[2:]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    counts = {}
    for name in names:
        try:
            counts[name] = DeltaTable.forPath(spark, os.path.join(root, name)).toDF().count()
        except Exception as exc:
            counts[name] = f"{type(exc).__name__}: {str(exc)[:2000]}"
    print("COUNTS " + json.dumps(counts))
    """
)


# Nothing of the checkout may leak into the fresh environment (a PYTHONPATH holding the checkout
# would make pip believe deltaspark is installed already).
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PIP_USER")}


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", CLEAN_ENV)
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(command)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.skipif(CONNECT, reason="runs in the classic suite")
# Once, with pyspark 3.5, whose extras constrain the resolution most (numpy < 2, so pyarrow < 26);
# the 4.x suite's venv resolves the same declared dependencies with the newest pyspark.
@pytest.mark.one_suite("3.5")
def test_wheel_with_declared_dependencies_reads_the_conformance_tables(tmp_path: Path) -> None:
    conformance = conformance_root()
    if conformance is None:
        pytest.skip("conformance tables not found (set DELTASPARK_CONFORMANCE_TABLES)")
    assert set(DV_TABLES) <= set(DATA_TABLES)

    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(REPO)],
        timeout=900,
    )
    (wheel,) = dist.glob("deltaspark-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel), f"pyspark=={version('pyspark')}"],
        timeout=1800,
    )
    installed = _run([str(python), "-m", "pip", "list", "--format=json"], timeout=300).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert not names & {"pytest", "deltalake", "chispa"}, "test dependencies leaked into the runtime install"

    script = tmp_path / "read_tables.py"
    script.write_text(READER)
    # Spark's Python workers run this venv's interpreter, as a user's job would configure them.
    env = {**CLEAN_ENV, "PYSPARK_PYTHON": str(python)}
    proc = _run([str(python), str(script), str(conformance), *TABLES], cwd=tmp_path, env=env, timeout=1800)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("COUNTS "))
    counts = json.loads(line[len("COUNTS ") :])

    expected = {name: len(reference_rows(str(conformance / name))) for name in TABLES}
    assert counts == expected
