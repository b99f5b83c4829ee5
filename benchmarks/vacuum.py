"""Vacuum benchmark: a dry run and a delete over a generated table with a placeholder for every data
file it ever had, deltaspark and delta-rs side by side, each in its own monitored process.

    .venv/bin/python -m benchmarks.vacuum --files 1000000 --out benchmarks/results/x.json

The generated log's tombstones carry the generation time as `deletionTimestamp`, so both engines
vacuum with a zero retention (deltaspark: the retention check off; delta-rs:
`enforce_retention_duration=False`, `full=True`). Every removed file has a placeholder on disk,
so each delete run deletes them all; they are re-created, and the log put back as generated,
before the other engine's delete: each delete starts from the same 100 JSON commits (the first
one's `VACUUM START` is version 100, where both engines' post-commit hooks write a checkpoint,
and delta-rs's then expires the old commits). A dry run is timed twice in one process: `seconds`
is the first call of a fresh process (a scheduled job), `warm_seconds` the second (a notebook, a
job vacuuming many tables). The engines agree on the candidates (delta-rs's list is compared with
deltaspark's). A third engine, `spark`, is the floor: the dry run's data work done by plain Spark in
a fresh process (`SPARK_FLOOR`), its first and second runs timed the same way, so that what a new
JVM and new Python workers cost is shown apart from what deltaspark adds. `--dry-only` skips the
deletes. Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchmarks.generate import LogSpec, generate, plan_batches, write_placeholders
from benchmarks.procmon import emit, monitored_record, run_monitored
from benchmarks.worker_deltaspark import start_session


def placeholders(root: Path, spec: LogSpec, removed_only: bool = False) -> int:
    """A sparse placeholder of its logged size for every data file the log ever added (or only the
    removed ones)."""
    import numpy as np

    batches, tombstones = plan_batches(spec)
    removed = [np.arange(0, tombstones, dtype=np.int64)]
    removed += [np.arange(b.remove_start, b.remove_start + b.remove_count, dtype=np.int64) for b in batches]
    chunks = removed if removed_only else [np.arange(0, max(b.add_start + b.add_count for b in batches))]
    return write_placeholders(root, spec, chunks)


RETENTION_CHECK_OFF = "spark.databricks.delta.retentionDurationCheck.enabled=false"  # zero retention


def deltaspark_worker(path: str, dry_run: bool, driver_memory: str) -> None:
    start = time.perf_counter()
    from pyspark.sql import functions as F

    spark = start_session(driver_memory, [RETENTION_CHECK_OFF], None)
    session = time.perf_counter() - start
    from deltaspark import DeltaTable

    start = time.perf_counter()
    result = DeltaTable.forPath(spark, path).vacuum(retentionHours=0, dryRun=dry_run)
    seconds = time.perf_counter() - start
    files = result.where(~F.col("isDir"))
    facts = {"candidates": files.count()}
    if dry_run:
        start = time.perf_counter()
        DeltaTable.forPath(spark, path).vacuum(retentionHours=0, dryRun=True)
        facts["warm_seconds"] = round(time.perf_counter() - start, 2)
    if not dry_run:
        facts["deleted"] = files.where("deleted").count()
    paths = sorted(r["path"] for r in files.select("path").collect())
    emit({"session_seconds": round(session, 2), "seconds": round(seconds, 2), **facts, "paths": paths})


SPARK_FLOOR = """The floor: the dry run's data work in plain Spark, no deltaspark code. The table's
directories listed in Python tasks with `pyarrow.fs` (as deltaspark lists, four directories a task),
the JSON commits read as text, each file action's path taken from its line, the newest action per
path kept, and the listed files that no live add names counted. No protocol, no path
canonicalization, no deletion vectors, no hidden-file rules, no tombstone retention."""


def spark_floor_worker(path: str, driver_memory: str) -> None:
    start = time.perf_counter()
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    spark = start_session(driver_memory, [], None)
    session = time.perf_counter() - start

    def run() -> int:
        root = Path(path)
        directories = [str(p) for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")]

        def walk(batches):  # noqa: ANN001, ANN202 - Arrow batches in and out
            import pyarrow as pa
            import pyarrow.fs as pafs

            fs = pafs.LocalFileSystem()
            for batch in batches:
                for directory in batch.column("directory").to_pylist():
                    infos = fs.get_file_info(pafs.FileSelector(directory, recursive=True))
                    paths = [i.path[len(path) + 1 :] for i in infos if i.type == pafs.FileType.File]
                    yield pa.record_batch([pa.array(paths, pa.string())], names=["path"])

        listed = (
            spark.createDataFrame([(d,) for d in directories], "directory string")
            .repartition(max(1, len(directories) // 4))
            .mapInArrow(walk, "path string")
        )
        commits = sorted(str(p) for p in (root / "_delta_log").glob("*.json"))
        lines = spark.read.text(commits).where(
            F.col("value").startswith('{"add"') | F.col("value").startswith('{"remove"')
        )
        actions = lines.select(
            F.regexp_extract(F.input_file_name(), r"(\d{20})\.json$", 1).cast("long").alias("version"),
            F.col("value").startswith('{"add"').alias("is_add"),
            F.coalesce(
                F.get_json_object("value", "$.add.path"), F.get_json_object("value", "$.remove.path")
            ).alias("path"),
        )
        newest = actions.withColumn(
            "rank", F.row_number().over(Window.partitionBy("path").orderBy(F.desc("version"), "is_add"))
        )
        live = newest.where((F.col("rank") == 1) & F.col("is_add")).select("path")
        return listed.join(live, "path", "left_anti").count()

    start = time.perf_counter()
    candidates = run()
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    run()
    warm = time.perf_counter() - start
    emit(
        {
            "session_seconds": round(session, 2),
            "seconds": round(seconds, 2),
            "warm_seconds": round(warm, 2),
            "candidates": candidates,
        }
    )


def delta_rs_worker(path: str, dry_run: bool) -> None:
    import deltalake

    def run() -> list[str]:
        return deltalake.DeltaTable(path).vacuum(
            retention_hours=0, dry_run=dry_run, enforce_retention_duration=False, full=True
        )

    start = time.perf_counter()
    files = run()
    seconds = time.perf_counter() - start
    facts = {}
    if dry_run:
        start = time.perf_counter()
        run()
        facts["warm_seconds"] = round(time.perf_counter() - start, 2)
    emit({"seconds": round(seconds, 2), **facts, "candidates": len(files), "paths": sorted(files)})


def _run(engine: str, path: Path, dry_run: bool, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.vacuum",
        "--worker",
        engine,
        str(path),
        "dry" if dry_run else "delete",
    ]
    outcome = run_monitored(cmd + ["--driver-memory", args.driver_memory], args.timeout, 20 * 1024**3)
    return monitored_record(outcome, engine=engine, dryRun=dry_run)


def _relative(paths: list[str], root: Path) -> set[str]:
    prefixes = (f"file:{root}/", f"{root}/", f"file://{root}/")
    out = set()
    for p in paths:
        for prefix in prefixes:
            if p.startswith(prefix):
                p = p[len(prefix) :]
                break
        out.add(p)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out")
    parser.add_argument("--dry-only", action="store_true", help="dry runs only (no deletes)")
    parser.add_argument("--worker", nargs=3, metavar=("ENGINE", "PATH", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        engine, path, mode = args.worker
        if engine == "deltaspark":
            deltaspark_worker(path, mode == "dry", args.driver_memory)
        elif engine == "spark":
            spark_floor_worker(path, args.driver_memory)
        else:
            delta_rs_worker(path, mode == "dry")
        return 0
    spec = LogSpec(files=args.files, commits=args.commits)
    path = Path(args.workdir) / f"vacuum-{args.files}"
    generated = generate(path, spec)
    start = time.perf_counter()
    made = placeholders(path, spec)
    seconds = time.perf_counter() - start
    print(f"generated {path} in {generated.seconds} s; {made} placeholders in {seconds:.0f} s", flush=True)
    generated_log = Path(args.workdir) / f"vacuum-{args.files}-log"
    shutil.rmtree(generated_log, ignore_errors=True)
    shutil.copytree(path / "_delta_log", generated_log)
    runs = [_run("deltaspark", path, True, args), _run("delta-rs", path, True, args)]
    ours, theirs = (_relative(r.get("paths", []), path) for r in runs)
    agree = ours == theirs
    runs.append(_run("spark", path, True, args))
    agree = agree and runs[-1].get("candidates") == len(ours)
    for engine in () if args.dry_only else ("deltaspark", "delta-rs"):
        shutil.rmtree(path / "_delta_log")
        shutil.copytree(generated_log, path / "_delta_log")
        placeholders(path, spec, removed_only=True)
        runs.append(_run(engine, path, False, args))
        written = set(os.listdir(path / "_delta_log")) - set(os.listdir(generated_log))
        runs[-1]["log_written"] = sorted(written)
    shutil.rmtree(generated_log)
    for run in runs:
        run.pop("paths", None)
    result = {
        "table": {"files": args.files, "commits": args.commits, "removed_files": len(ours)},
        "spark_floor": SPARK_FLOOR,
        "same_candidates": agree,
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if agree and all(r.get("candidates") is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
