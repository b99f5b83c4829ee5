"""OPTIMIZE benchmark: deltaspark and delta-rs compacting and Z-ordering copies of the same tables,
each engine in its own monitored process, beside plain Spark doing the same work without a log.

    .venv/bin/python -m benchmarks.optimize --out benchmarks/results/x.json

Tables (written once by Spark):

- `small-files`: `--small-rows` rows in 100 partitions, 200 files each (20,000 small files);
  compaction: deltaspark `executeCompaction()`, delta-rs `optimize.compact()`;
- `random`: `--rows` rows of two uniformly random integer columns `x`, `y` (and a payload) in 200
  files of random rows; Z-order by (x, y) into about 200 files: deltaspark `executeZOrderBy`
  with `maxFileSize` = the table's bytes / 200, delta-rs `optimize.z_order` with that
  `target_size`.

For each run: seconds of the call (the first call of a process, then the better of two more on
fresh copies in the same process for deltaspark: `warm_seconds`, as plain Spark's figure is the
better of two; one call varies by up to 2.5 s on a 2-core machine), files and bytes before and
after, peak memory of the process tree. After a Z-order, the fraction of files a point lookup
and a 1% range filter on each column would read (the files whose min/max statistics admit the
value), averaged over 50 probes, from each table's own log. `spark_plain_seconds`: in the
deltaspark process, the same rewrite as plain Spark at its best (the directory read as parquet,
small files packed into few tasks, repartitioned, written; no log, no statistics).
Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.procmon import emit, monitored_record, run_monitored

CASES = ("compact", "zorder")
TABLES = {"compact": "small-files", "zorder": "random"}


def _session(driver_memory: str) -> Any:
    from benchmarks.worker_deltaspark import start_session

    return start_session(driver_memory, ["spark.sql.shuffle.partitions=8"], None)


def generate(workdir: Path, rows: int, small_rows: int, driver_memory: str) -> None:
    spark = _session(driver_memory)
    from pyspark.sql import functions as F

    from deltaspark.table import write

    small = workdir / "small-files"
    shutil.rmtree(small, ignore_errors=True)
    frame = spark.range(small_rows).select(
        "id", (F.col("id") % 100).cast("int").alias("p"), F.sha1(F.col("id").cast("string")).alias("payload")
    )
    write(frame.repartition(200), str(small), partitionBy=["p"])  # each task: one file per partition
    rand = workdir / "random"
    shutil.rmtree(rand, ignore_errors=True)
    frame = spark.range(rows).select(
        "id",
        (F.rand(1) * 1_000_000_000).cast("long").alias("x"),
        (F.rand(2) * 1_000_000_000).cast("long").alias("y"),
        F.sha1(F.col("id").cast("string")).alias("payload"),
    )
    write(frame.repartition(200), str(rand))
    spark.stop()


def _fresh_copy(workdir: Path, table: str, name: str) -> Path:
    copy = workdir / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(workdir / table, copy)
    return copy


def _live(path: Path) -> list[dict[str, Any]]:
    import deltalake
    import pyarrow as pa

    return pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()


def layout(path: Path) -> dict[str, Any]:
    """Files and bytes of the table's current version, and for a table with `x` and `y` the
    fraction of files each probe would read."""
    files = _live(path)
    out: dict[str, Any] = {"files": len(files), "bytes": sum(f["size_bytes"] for f in files)}
    if files and "min.x" in files[0]:
        rng = random.Random(11)
        for column in ("x", "y"):
            points = [rng.randrange(1_000_000_000) for _ in range(50)]
            hit = [sum(f[f"min.{column}"] <= v <= f[f"max.{column}"] for f in files) for v in points]
            width = 10_000_000  # 1% of the domain
            ranges = [
                sum(f[f"min.{column}"] <= v + width and f[f"max.{column}"] >= v for f in files)
                for v in points
            ]
            out[f"point_{column}"] = round(sum(hit) / len(hit) / len(files), 4)
            out[f"range_{column}"] = round(sum(ranges) / len(ranges) / len(files), 4)
    return out


def _target_size(workdir: Path) -> int:
    return layout(workdir / "random")["bytes"] // 200 + 1


def deltaspark_worker(workdir: Path, case: str, driver_memory: str) -> None:
    start = time.perf_counter()
    spark = _session(driver_memory)
    session = time.perf_counter() - start
    from deltaspark import DeltaTable

    if case == "zorder":
        size = _target_size(workdir)
        spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(size))

    def run(name: str) -> dict[str, Any]:
        table = _fresh_copy(workdir, TABLES[case], name)
        builder = DeltaTable.forPath(spark, str(table)).optimize()
        began = time.perf_counter()
        if case == "zorder":
            metrics = builder.executeZOrderBy("x", "y").first()["metrics"]
        else:
            metrics = builder.executeCompaction().first()["metrics"]
        seconds = round(time.perf_counter() - began, 2)
        return {
            "seconds": seconds,
            "files_removed": metrics["numFilesRemoved"],
            "files_added": metrics["numFilesAdded"],
            "bytes_written": metrics["filesAdded"]["totalSize"],
            "after": layout(table),
        }

    cold = run("deltaspark-a")
    warm = [run(name)["seconds"] for name in ("deltaspark-b", "deltaspark-c")]
    plain = [spark_plain(spark, workdir, case) for _ in range(2)]
    emit(
        {
            "session_seconds": round(session, 2),
            **cold,
            "warm_seconds": min(warm),
            "warm_runs": warm,
            "spark_plain_seconds": min(plain),
            "spark_plain_runs": plain,
        }
    )


def spark_plain(spark: Any, workdir: Path, case: str) -> float:
    """The same rewrite with plain Spark at its best: the table's directory read as parquet (every
    file of these one-version tables is live; `_delta_log` is skipped by Spark) for the
    compaction, whose partition directories Spark discovers; the Z-order's files by list (they lie
    in one write's directory, which partition discovery would take for a partition); small files
    packed into few tasks (`openCostInBytes` 8 KiB), repartitioned and written; no log, no
    statistics."""
    from pyspark.sql import functions as F

    source = workdir / TABLES[case]
    out = workdir / "spark-plain"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    spark.conf.set("spark.sql.files.openCostInBytes", "8192")
    try:
        if case == "zorder":
            rows = spark.read.parquet(*[str(source / f["path"]) for f in _live(source)])
            laid = rows.repartitionByRange(200, "x", "y").sortWithinPartitions("x", "y")
            laid.write.parquet(str(out))
        else:
            rows = spark.read.parquet(str(source))
            rows.repartition(100, F.col("p")).write.partitionBy("p").parquet(str(out))
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")
    return round(time.perf_counter() - began, 2)


def delta_rs_worker(workdir: Path, case: str) -> None:
    import deltalake

    table = _fresh_copy(workdir, TABLES[case], "delta-rs")
    size = _target_size(workdir) if case == "zorder" else None
    began = time.perf_counter()
    optimizer = deltalake.DeltaTable(str(table)).optimize
    metrics = optimizer.z_order(["x", "y"], target_size=size) if case == "zorder" else optimizer.compact()
    seconds = round(time.perf_counter() - began, 2)
    added = metrics.get("filesAdded") or "{}"
    emit(
        {
            "seconds": seconds,
            "files_removed": metrics.get("numFilesRemoved"),
            "files_added": metrics.get("numFilesAdded"),
            "bytes_written": (json.loads(added) if isinstance(added, str) else added).get("totalSize"),
            "after": layout(table),
        }
    )


def _run(engine: str, case: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.optimize", "--worker", engine, case, "--workdir", args.workdir]
    outcome = run_monitored(cmd + ["--driver-memory", args.driver_memory], args.timeout, 20 * 1024**3)
    return monitored_record(outcome, engine=engine, case=case)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small-rows", type=int, default=2_000_000)
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench/optimize")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out")
    parser.add_argument("--reuse", action="store_true", help="keep the tables of a previous run")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    if args.worker:
        engine, case = args.worker
        if engine == "deltaspark":
            deltaspark_worker(workdir, case, args.driver_memory)
        else:
            delta_rs_worker(workdir, case)
        return 0
    workdir.mkdir(parents=True, exist_ok=True)
    if not (args.reuse and (workdir / "random" / "_delta_log").is_dir()):
        start = time.perf_counter()
        generate(workdir, args.rows, args.small_rows, args.driver_memory)
        print(f"generated the tables in {time.perf_counter() - start:.0f} s", flush=True)
    before = {case: layout(workdir / TABLES[case]) for case in CASES}
    runs = []
    for case in args.cases.split(","):
        for engine in ("deltaspark", "delta-rs"):
            runs.append(_run(engine, case, args))
            print(json.dumps(runs[-1]), flush=True)
    result = {"rows": args.rows, "small_rows": args.small_rows, "before": before, "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
