"""Launches the `connect`-marked tests on a Spark Connect session, in a process of their own.

pyspark chooses classic or Connect column functions per process, so the Connect run cannot share
this process. The child starts `SparkSession.builder.remote("local[2]")` (see conftest.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from deltaspark.spark_compat import PYSPARK_VERSION
from tests.conftest import CONNECT, REPO

MIN_CONNECT_TESTS = 20


@pytest.mark.skipif(CONNECT, reason="this test launches the Connect run")
@pytest.mark.skipif(
    PYSPARK_VERSION < (4, 0),
    reason="pyspark 3.5 starts a local Spark Connect server only with the spark-connect JAR, which is "
    "not on PyPI (the 4.x suite runs the Connect tests)",
)
def test_connect_marked_tests_pass_on_spark_connect():
    env = {**os.environ, "DELTASPARK_TEST_CONNECT": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "connect",
            str(REPO / "tests"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= MIN_CONNECT_TESTS, summary
    assert "skipped" not in summary and "failed" not in summary, summary
