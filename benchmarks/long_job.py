"""A long job in one session: the scheduled jobs over many small tables, the time per table first
against last, and what the JVM's code cache and the driver's memory do meanwhile.

A scheduled job runs for hours over hundreds of tables in one Spark session; each table's work
plans new queries, whose generated code the JIT compiles into the JVM's code cache. If anything
grows with the tables done (a cache, a broadcast, an accumulator, listener state) or the code
cache fills (`CodeCache is full. Compiler has been disabled`), the later tables take longer than
the first. This runs the checkpoint job (checkpoint, log cleanup, vacuum) and then the audit job
(`--level full`, each table's findings appended to a findings table) over `--tables` copies of a
small table (400 rows, 4 partitions, deletion vectors, 5 commits), in one session with Spark's
defaults, and reports each job's seconds per table for the first and the last 20 tables, with the
code cache's use and the driver JVM's heap after each job.

    python -m benchmarks.long_job --tables 200 --out benchmarks/results/long-job.json
    python -m benchmarks.long_job --tables 200 --code-cache 512m  # the driver's code cache size
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EDGE = 20  # tables compared at each end


def _session(code_cache: str | None) -> Any:
    """`local[2]` with Spark's defaults, as `benchmarks/small.py` starts its default session."""
    from benchmarks.small import _start

    confs = {"spark.driver.extraJavaOptions": f"-XX:ReservedCodeCacheSize={code_cache}"} if code_cache else {}
    return _start("local[2]", confs)[0]


def _template(spark: Any, path: Path) -> None:
    import deltaspark
    from deltaspark import DeltaTable

    columns = ("id", "id % 4 AS p", "CAST(id AS STRING) AS s")
    properties = {"delta.enableDeletionVectors": "true"}
    deltaspark.write(
        spark.range(0, 400, numPartitions=2).selectExpr(*columns),
        str(path),
        partitionBy=["p"],
        properties=properties,
    )
    for i in range(3):
        deltaspark.write(spark.range(400 + 10 * i, 410 + 10 * i).selectExpr(*columns), str(path))
    DeltaTable.forPath(spark, str(path)).delete("id < 30")


def _jvm_state(spark: Any) -> dict[str, Any]:
    """The driver JVM's code cache (used / max, MiB, all its pools) and heap used (MiB)."""
    jvm = spark.sparkContext._jvm
    management = jvm.java.lang.management.ManagementFactory
    used = peak = limit = 0
    for pool in management.getMemoryPoolMXBeans():
        name = pool.getName()
        if "CodeHeap" in name or "Code Cache" in name:
            used += pool.getUsage().getUsed()
            peak += pool.getPeakUsage().getUsed()
            limit += max(pool.getUsage().getMax(), 0)
    heap = management.getMemoryMXBean().getHeapMemoryUsage().getUsed()
    mib = 1024 * 1024
    return {
        "codeCacheUsedMiB": round(used / mib, 1),
        "codeCachePeakMiB": round(peak / mib, 1),
        "codeCacheMaxMiB": round(limit / mib, 1),
        "heapUsedMiB": round(heap / mib, 1),
    }


def _ends(seconds: list[float]) -> dict[str, Any]:
    first, last = seconds[:EDGE], seconds[-EDGE:]
    return {
        "tables": len(seconds),
        "first20_median_s": round(statistics.median(first), 3),
        "last20_median_s": round(statistics.median(last), 3),
        "last_over_first": round(statistics.median(last) / statistics.median(first), 2),
        "total_s": round(sum(seconds), 1),
    }


def _run_job(main: Any, argv: list[str], spark: Any, output: Path) -> list[dict[str, Any]]:
    with contextlib.redirect_stdout(io.StringIO()):  # each job prints a line per table
        main([*argv, "--output", str(output)], spark=spark)
    return json.loads(output.read_text())["tables"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument(
        "--code-cache", default=None, help="the driver's -XX:ReservedCodeCacheSize (e.g. 512m)"
    )
    parser.add_argument("--jobs", default="checkpoint,audit", help="which jobs to run, in order")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from deltaspark.audit.job import main as audit_job
    from deltaspark.operations.maintenance_job import main as checkpoint_job

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltaspark-long-job-"))
    started = time.perf_counter()
    spark = _session(args.code_cache)
    template = workdir / "template"
    _template(spark, template)
    paths = []
    for i in range(args.tables):
        copy = workdir / f"t{i:04d}"
        shutil.copytree(template, copy)
        paths.append(str(copy))
    listing = workdir / "tables.txt"
    listing.write_text("\n".join(paths) + "\n")
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "spark": spark.version,
        "codeCacheOption": args.code_cache,
        "jvmAtStart": _jvm_state(spark),
        "jobs": {},
    }
    jobs = {
        "checkpoint": (checkpoint_job, ["--paths-file", str(listing), "--interval", "1", "--vacuum"]),
        "audit": (
            audit_job,
            ["--paths-file", str(listing), "--level", "full", "--findings", str(workdir / "findings")],
        ),
    }
    for name in args.jobs.split(","):
        job, job_args = jobs[name]
        job_started = time.perf_counter()
        tables = _run_job(job, job_args, spark, workdir / f"{name}.json")
        failed = [t for t in tables if t["status"] not in ("ok", "passed")]
        seconds = [float(t["seconds"]) for t in tables if "seconds" in t]
        if failed or len(seconds) != args.tables:
            print(f"{name}: {len(failed)} table(s) failed: {failed[:1]}", file=sys.stderr)
            return 1
        report["jobs"][name] = {
            **_ends(seconds),
            "wall_s": round(time.perf_counter() - job_started, 1),
            "perTable_s": seconds,
            "jvmAfter": _jvm_state(spark),
        }
        summary = {k: v for k, v in report["jobs"][name].items() if k != "perTable_s"}
        print(f"{name}: {json.dumps(summary)}", flush=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
