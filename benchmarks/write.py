"""Writes, side by side: deltaspark, Spark's own parquet writer on the same DataFrame, and delta-rs.

Measured in one run, on the same data (a parquet source of `--rows` rows, 4 columns: `id` long,
`value` double, `name` string, `part` int with 100 values), each engine in a process of its own:

- `bulk`: a new table (or directory) from the whole source, unpartitioned and partitioned by
  `part`: deltaspark `write(df, path)` (statistics and every check included) and Spark's
  `df.write.parquet(path)` in the same session, alternating (and alternating which goes first),
  `--bulk-repeat` times each; delta-rs
  `write_deltalake` of the source read by pyarrow (the read is part of its time, as Spark's is).
- `small append`: 10 rows appended to a table partitioned by `part` (10 files per append; `small
  append unpartitioned`: one file into a table without partitions), warm
  (after `--warmup` untimed appends), `--repeat` times: deltaspark `write(rows, path)` and Spark's
  `rows.write.mode("append").partitionBy("part").parquet(path)`, with the
  Spark jobs one append runs; delta-rs `write_deltalake(mode="append")` of the same 10 rows.
- `first write`: 10 rows written by the first call of a new session (its start not counted), by
  deltaspark and by Spark's own writer, each in a new process.
- `small commits`: commits without data on the small-append table, warm: `setProperties` and a
  partition-only `delete` of a partitioned table (a whole partition's files removed unread).

Ratios are against Spark's own write in the same run (the target: bulk <= 1.2x, small append
<= 2x and <= 1 s). A loaded machine moves the seconds, less so the ratios.

    python -m benchmarks.write --rows 5000000 --out benchmarks/results/write.json
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

PARTITIONS = 100


def _session() -> Any:
    from benchmarks.worker_deltaspark import start_session

    return start_session("4g", ["spark.sql.shuffle.partitions=4"], None)


def _rows_expr() -> list[str]:
    return [
        "id",
        "cast(id as double) * 1.5 as value",
        "concat('name-', cast(id % 100000 as string)) as name",
        f"cast(id % {PARTITIONS} as int) as part",
    ]


def _setup(workdir: Path, rows: int) -> None:
    spark = _session()
    spark.range(rows).selectExpr(*_rows_expr()).write.parquet(str(workdir / "source"))
    emit({"status": "ok"})


def _timed(func: Any) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _jobs(spark: Any, group: str, func: Any) -> tuple[float, int]:
    context = spark.sparkContext
    context.setJobGroup(group, group)
    seconds = _timed(func)
    return seconds, len(context.statusTracker().getJobIdsForGroup(group))


def _summary(seconds: list[float], jobs: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runs": [round(s, 3) for s in seconds],
        "median": round(statistics.median(seconds), 3),
    }
    if jobs:
        out["jobs"] = jobs[-1]
    return out


def _spark_worker(workdir: Path, rows: int, bulk_repeat: int, repeat: int, warmup: int) -> dict[str, Any]:
    """deltaspark and Spark's own writer, alternating in one session."""
    import deltaspark
    from deltaspark import DeltaTable

    spark = _session()
    source = spark.read.parquet(str(workdir / "source"))
    out = workdir / "spark-out"
    result: dict[str, Any] = {}
    for name, partition in (("bulk unpartitioned", None), ("bulk partitioned", ["part"])):
        ours, theirs = [], []
        for i in range(bulk_repeat):
            target = out / f"{name.replace(' ', '-')}-{i}"
            spark_write = lambda t=target, p=partition: (  # noqa: E731
                source.write.partitionBy(*p) if p else source.write
            ).parquet(str(t / "spark"))
            our_write = lambda t=target, p=partition: deltaspark.write(  # noqa: E731
                source, str(t / "delta"), partitionBy=p
            )
            if i % 2 == 0:  # alternate who goes first: the second one finds the source warmer
                theirs.append(_timed(spark_write))
                ours.append(_timed(our_write))
            else:
                ours.append(_timed(our_write))
                theirs.append(_timed(spark_write))
            count = DeltaTable.forPath(spark, str(target / "delta")).toDF().count()
            if count != rows:
                raise AssertionError(f"{name}: deltaspark wrote {count} rows, expected {rows}")
            shutil.rmtree(target, ignore_errors=True)
        result[name] = {"deltaspark": _summary(ours), "spark": _summary(theirs)}

    small = spark.range(10).selectExpr(*_rows_expr())
    small.count()
    for case, layout in (("small append", ["part"]), ("small append unpartitioned", [])):
        table, plain = str(out / f"small-delta{len(layout)}"), str(out / f"small-parquet{len(layout)}")
        deltaspark.write(small, table, partitionBy=layout or None)
        # Spark's append lays the rows out as the table does (partitioned by `part`: 10 files).
        small.write.partitionBy(*layout).parquet(plain)
        spark_append = lambda p=plain, k=layout: small.write.mode("append").partitionBy(*k).parquet(p)  # noqa: E731
        for _ in range(warmup):
            deltaspark.write(small, table)
            spark_append()
        ours, theirs, jobs, plain_jobs = [], [], [], []
        for i in range(repeat):
            s, j = _jobs(spark, f"spark-{case}-{i}", spark_append)
            theirs.append(s)
            plain_jobs.append(j)
            s, j = _jobs(spark, f"ours-{case}-{i}", lambda t=table: deltaspark.write(small, t))
            ours.append(s)
            jobs.append(j)
        result[case] = {"deltaspark": _summary(ours, jobs), "spark": _summary(theirs, plain_jobs)}
    table = str(out / "small-delta1")

    dt_ = DeltaTable.forPath(spark, table)
    props, deletes, prop_jobs, delete_jobs = [], [], [], []
    for i in range(warmup + repeat):
        s, j = _jobs(
            spark,
            f"props-{i}",
            lambda i=i: dt_.setProperties({"delta.logRetentionDuration": f"interval {30 + i} days"}),
        )
        if i >= warmup:
            props.append(s)
            prop_jobs.append(j)
    for i in range(repeat):
        s, j = _jobs(spark, f"delete-{i}", lambda i=i: dt_.delete(f"part = {i}"))
        deletes.append(s)
        delete_jobs.append(j)
    result["setProperties"] = {"deltaspark": _summary(props, prop_jobs)}
    result["partition delete"] = {"deltaspark": _summary(deletes, delete_jobs)}
    shutil.rmtree(out, ignore_errors=True)
    return result


def _first_worker(engine: str, workdir: Path) -> dict[str, Any]:
    """The first write of a new session (10 rows to a new table or directory), the session's start
    not counted: what a notebook's first append costs."""
    spark = _session()
    small = spark.range(10).selectExpr(*_rows_expr())
    target = workdir / f"first-{engine}"
    if engine == "deltaspark":
        import deltaspark

        first = _timed(lambda: deltaspark.write(small, str(target)))
    else:
        first = _timed(lambda: small.write.parquet(str(target)))
    shutil.rmtree(target, ignore_errors=True)
    return {"first write": {engine: {"runs": [round(first, 3)], "median": round(first, 3)}}}


def _deltars_worker(workdir: Path, rows: int, bulk_repeat: int, repeat: int, warmup: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable, write_deltalake

    out = workdir / "deltars-out"
    result: dict[str, Any] = {}
    for name, partition in (("bulk unpartitioned", None), ("bulk partitioned", ["part"])):
        seconds = []
        for i in range(bulk_repeat):
            target = out / f"{name.replace(' ', '-')}-{i}"

            def write(t: Path = target, p: list[str] | None = partition) -> None:
                data = ds.dataset(str(workdir / "source"), format="parquet").to_table()
                write_deltalake(str(t), data, partition_by=p)

            seconds.append(_timed(write))
            count = DeltaTable(str(target)).to_pyarrow_table(columns=["id"]).num_rows
            if count != rows:
                raise AssertionError(f"{name}: delta-rs wrote {count} rows, expected {rows}")
            shutil.rmtree(target, ignore_errors=True)
        result[name] = {"deltars": _summary(seconds)}
    ids = pa.array(range(10), pa.int64())
    small = pa.table(
        {
            "id": ids,
            "value": pa.array([i * 1.5 for i in range(10)]),
            "name": pa.array([f"name-{i}" for i in range(10)]),
            "part": pa.array([i % PARTITIONS for i in range(10)], pa.int32()),
        }
    )
    for case, layout in (("small append", ["part"]), ("small append unpartitioned", None)):
        table = str(out / f"small-{case.replace(' ', '-')}")
        write_deltalake(table, small, partition_by=layout)
        for _ in range(warmup):
            write_deltalake(table, small, mode="append")
        seconds = [_timed(lambda t=table: write_deltalake(t, small, mode="append")) for _ in range(repeat)]
        result[case] = {"deltars": _summary(seconds)}
    shutil.rmtree(out, ignore_errors=True)
    return result


def _merge(report: dict[str, Any], part: dict[str, Any]) -> None:
    for case, engines in part.items():
        report["cases"].setdefault(case, {}).update(engines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--bulk-repeat", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None)
    workers = ["setup", "spark", "deltars", "first-deltaspark", "first-spark"]
    parser.add_argument("--worker", choices=workers, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltaspark-write-"))
    if args.worker:
        if args.worker == "setup":
            _setup(workdir, args.rows)
            return 0
        try:
            if args.worker.startswith("first-"):
                cases = _first_worker(args.worker[len("first-") :], workdir)
            else:
                worker = _spark_worker if args.worker == "spark" else _deltars_worker
                cases = worker(workdir, args.rows, args.bulk_repeat, args.repeat, args.warmup)
            result = {"status": "ok", "cases": cases}
        except Exception as exc:  # noqa: BLE001 - reported, not raised: the runner goes on
            result = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        emit(result)
        return 0

    me = [sys.executable, "-m", "benchmarks.write", "--workdir", str(workdir), "--rows", str(args.rows)]
    me += ["--bulk-repeat", str(args.bulk_repeat), "--repeat", str(args.repeat), "--warmup", str(args.warmup)]
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": args.rows,
        "cases": {},
    }
    failed = False
    try:
        setup = run_monitored([*me, "--worker", "setup"], timeout=1800, mem_cap_bytes=12 * 1024**3)
        if not setup.results:
            print(setup.stderr_tail, file=sys.stderr)
            return 1
        for engine in ("first-spark", "first-deltaspark", "spark", "deltars"):
            outcome = run_monitored([*me, "--worker", engine], timeout=3600, mem_cap_bytes=16 * 1024**3)
            entry = (
                outcome.results[-1]
                if outcome.results
                else {"status": "crashed", "error": outcome.stderr_tail}
            )
            if entry.get("status") != "ok":
                failed = True
                print(f"{engine}: {entry.get('status')}: {entry.get('error')}", file=sys.stderr)
                continue
            _merge(report, entry["cases"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for case, engines in report["cases"].items():
        spark = engines.get("spark", {}).get("median")
        ours = engines.get("deltaspark", {}).get("median")
        ratio = f"  deltaspark/spark {ours / spark:.2f}x" if spark and ours else ""
        cells = "  ".join(
            f"{engine} {value['median']} s" + (f" ({value['jobs']} jobs)" if "jobs" in value else "")
            for engine, value in engines.items()
        )
        print(f"{case:20s} {cells}{ratio}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
