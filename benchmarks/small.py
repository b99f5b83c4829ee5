"""Small tables, the notebook's everyday case: how long one `count()` of a small table takes.

Three tables of 10 rows each, written by deltaspark: `plain` (5 appends), `partitioned` (5 appends,
2 partitions) and `dv` (5 appends, then a DELETE that writes a deletion vector). For each table a
new process starts a Spark session (timed apart: `session`), reads the table once (`cold`: the
first answer of a new session), `--warmup` times untimed (a notebook's JIT has settled after a few
dozen queries) and then `--repeat` times (`warm`), each read being
`DeltaTable.forPath(spark, path).toDF().count()` with the Spark jobs it ran counted. Then, on a copy
of `plain`, `after_commit` appends one row and reads again (only the read is timed), `--repeat`
times: a notebook that writes and reads; the copy reaches version 10, where the append writes a
checkpoint, so one of these reads starts from a new checkpoint. delta-rs
(`DeltaTable(path).to_pyarrow_table().num_rows`) runs the same reads, cold and warm, in a process of
its own (deltalake 1.6.6 reads no deletion vectors: `dv` is reported as not supported). And `spark`,
the floor of any Spark reader: plain Spark reading the same table's data files with no log at all
(`spark.read.parquet(*files).count()`, deletion vectors not applied), cold and warm, in a new
session. Every count is checked against the rows written (the rows in the files, for `spark`).

    python -m benchmarks.small --repeat 7 --out benchmarks/results/small.json
"""

from __future__ import annotations

import argparse
import datetime as dt
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

from benchmarks.procmon import emit, run_monitored

TABLES = {"plain": 10, "partitioned": 10, "dv": 9}  # rows each table reads
AFTER_COMMIT = "plain-commits"  # a copy of `plain` that the after-commit reads append to
COMMITS = 5
WRITTEN_ROWS = 2 * COMMITS  # rows in each table's data files (the DELETE of `dv` writes a vector)


def _session() -> Any:
    from benchmarks.worker_deltaspark import start_session

    return start_session("2g", ["spark.sql.shuffle.partitions=4"], None)


def _setup(workdir: Path) -> None:
    """Write the tables (in a process of its own, so the readers start cold)."""
    import deltaspark
    from deltaspark import DeltaTable

    spark = _session()
    for name in TABLES:
        path = str(workdir / name)
        if name == "dv":
            DeltaTable.create(spark).location(path).addColumn("id", "long").addColumn("p", "long").property(
                "delta.enableDeletionVectors", "true"
            ).execute()
        for i in range(COMMITS):
            rows = spark.range(2 * i, 2 * i + 2).selectExpr("id", "id % 2 as p").coalesce(1)
            deltaspark.write(rows, path, partitionBy=["p"] if name == "partitioned" else None)
        if name == "dv":
            DeltaTable.forPath(spark, path).delete("id = 3")
    shutil.copytree(workdir / "plain", workdir / AFTER_COMMIT)
    emit({"status": "ok"})


def _deltaspark(table: str, expected: int, repeat: int, warmup: int, after_commit: bool) -> dict[str, Any]:
    started = time.perf_counter()
    spark = _session()
    session = time.perf_counter() - started
    import deltaspark
    from deltaspark import DeltaTable

    context = spark.sparkContext

    def read(group: str) -> tuple[float, int]:
        context.setJobGroup(group, group)
        start = time.perf_counter()
        count = DeltaTable.forPath(spark, table).toDF().count()
        seconds = time.perf_counter() - start
        if count != expected:
            raise AssertionError(f"{table}: counted {count} rows, expected {expected}")
        return seconds, len(context.statusTracker().getJobIdsForGroup(group))

    cold, cold_jobs = read("cold")
    for i in range(warmup):
        read(f"warmup{i}")
    warm = [read(f"warm{i}") for i in range(repeat)]
    result: dict[str, Any] = {
        "session": round(session, 3),
        "cold": round(cold, 3),
        "cold_jobs": cold_jobs,
        "warm": [round(s, 4) for s, _ in warm],
        "median": round(statistics.median(s for s, _ in warm), 4) if warm else None,
        "jobs": warm[-1][1] if warm else None,
    }
    if after_commit:
        reads = []
        for i in range(repeat):
            deltaspark.write(spark.range(100 + i, 101 + i).selectExpr("id", "id % 2 as p"), table)
            expected += 1
            reads.append(read(f"after{i}"))
        result["after_commit"] = [round(s, 4) for s, _ in reads]
        result["after_commit_median"] = round(statistics.median(s for s, _ in reads), 4)
        result["after_commit_jobs"] = reads[-1][1]
    return result


def data_files(table: str) -> list[str]:
    """The table's parquet data files, found without its log (every file is live: appends only)."""
    root = Path(table)
    return sorted(str(p) for p in root.rglob("*.parquet") if "_delta_log" not in p.relative_to(root).parts)


def _spark(table: str, repeat: int, warmup: int) -> dict[str, Any]:
    """Plain Spark, no Delta: the same data files read by path, the first query of a new session."""
    started = time.perf_counter()
    spark = _session()
    session = time.perf_counter() - started
    files = data_files(table)
    expected = WRITTEN_ROWS

    def read() -> float:
        start = time.perf_counter()
        count = spark.read.parquet(*files).count()
        seconds = time.perf_counter() - start
        if count != expected:
            raise AssertionError(f"{table}: Spark counted {count} rows in its files, expected {expected}")
        return seconds

    cold = read()
    for _ in range(warmup):
        read()
    warm = [read() for _ in range(repeat)]
    return {
        "session": round(session, 3),
        "cold": round(cold, 3),
        "warm": [round(s, 4) for s in warm],
        "median": round(statistics.median(warm), 4) if warm else None,
    }


def _deltars(table: str, expected: int, repeat: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    def read() -> float:
        start = time.perf_counter()
        count = DeltaTable(table).to_pyarrow_table().num_rows
        seconds = time.perf_counter() - start
        if count != expected:
            raise AssertionError(f"{table}: delta-rs counted {count} rows, expected {expected}")
        return seconds

    cold = read()
    warm = [read() for _ in range(repeat)]
    return {
        "cold": round(cold, 4),
        "warm": [round(s, 4) for s in warm],
        "median": round(statistics.median(warm), 4),
    }


def _worker(args: argparse.Namespace) -> None:
    if args.worker == "setup":
        _setup(Path(args.table))
        return
    try:
        if args.worker == "deltaspark":
            result = _deltaspark(args.table, args.expected, args.repeat, args.warmup, args.after_commit)
        elif args.worker == "spark":
            result = _spark(args.table, args.repeat, args.warmup)
        else:
            result = _deltars(args.table, args.expected, args.repeat)
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the runner goes on
        result = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    emit(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--worker", choices=["setup", "deltaspark", "deltars", "spark"], help=argparse.SUPPRESS
    )
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--expected", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--after-commit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltaspark-small-"))
    me = [sys.executable, "-m", "benchmarks.small"]
    setup = run_monitored(
        [*me, "--worker", "setup", "--table", str(workdir)], timeout=900, mem_cap_bytes=8 * 1024**3
    )
    if not setup.results:
        print(setup.stderr_tail, file=sys.stderr)
        return 1
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "repeat": args.repeat,
        "runs": {},
    }
    failed = False
    runs = [(engine, name) for name in TABLES for engine in ("deltaspark", "deltars", "spark")]
    for engine, name in [*runs, ("deltaspark", AFTER_COMMIT)]:
        rows = TABLES.get(name, TABLES["plain"])
        cmd = [*me, "--worker", engine, "--table", str(workdir / name), "--expected", str(rows)]
        cmd += ["--repeat", str(args.repeat), "--warmup", str(args.warmup)]
        if name == AFTER_COMMIT:
            cmd.append("--after-commit")
        outcome = run_monitored(cmd, timeout=900, mem_cap_bytes=8 * 1024**3)
        entry = (
            outcome.results[-1] if outcome.results else {"status": "crashed", "error": outcome.stderr_tail}
        )
        entry["peak_tree_rss"] = outcome.peak_tree_rss
        if engine == "deltars" and "not yet supported by the deltalake reader" in str(entry.get("error")):
            entry["status"] = "not supported"
        report["runs"][f"{engine}/{name}"] = entry
        failed |= entry.get("status") not in ("ok", "not supported")
        after = entry.get("after_commit_median")
        print(
            f"{engine:10s} {name:13s} session {entry.get('session', '-')} s  cold {entry.get('cold')} s  "
            f"warm median {entry.get('median')} s  jobs {entry.get('jobs', '-')}"
            + (f"  after a commit {after} s" if after is not None else "")
            + (f"  {entry.get('status')}: {entry.get('error')}" if entry.get("status") != "ok" else ""),
            flush=True,
        )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
