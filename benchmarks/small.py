"""Small work in a user's own session: the everyday operations on a 1,000-row table, one by one.

A notebook user's sequence on a table of 1,000 rows partitioned 4 ways (`p = id % 4`), written in
five commits of 200 rows: `create`, `append` x4, `count`, `delete` of 20 rows, `update` of one
row, `merge` of 100 source rows (50 updated, 50 inserted), `optimize` (compaction), `checkpoint`,
`vacuum` dry run, `history`, `audit` (full). Each operation is timed on its own, with the Spark
jobs, stages and tasks it ran (a job group per operation, read back from Spark's status tracker).

The sequence runs `--passes` times in one session (4), each pass on a new table: the first pass is
what a fresh session pays (JIT, class loading, Python workers); the warm figure of an operation is
the median of the later passes. Sessions
(`--sessions`), each a process of its own:

- `tuned`: `local[2]` with 8 shuffle partitions, as the tests run;
- `default`: `local[2]` with Spark's defaults (200 shuffle partitions, adaptive execution as shipped);
- `cluster`: `local-cluster[2,1,1024]` with Spark's defaults: two executor JVMs beside the driver,
  as on a cluster (Python workers, serialized tasks, shuffles between JVMs);
- `standalone` (with `--master spark://host:port`): a running standalone cluster.

Beside each session, **plain Spark does the same data work without a log** (`floor`, same session
settings): writes the same rows, counts them, finds the files holding the deleted / updated rows
and rewrites them, full-outer-joins the table with the merge source and rewrites it, compacts each
partition into one file, reads the commits' JSON and writes it as one parquet file (checkpoint),
lists the table's files (vacuum), reads the commit infos (history), and lists every file and reads
every row and log line (audit) - the least any engine built on Spark jobs pays. And **delta-rs**
(`deltalake`) runs the operations it has, in a process of its own. Every answer is checked (the
rows left after each change, the merge's and delete's counts).

    python -m benchmarks.small --out benchmarks/results/small.json
    python -m benchmarks.small --sessions default --engines deltaspark  # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.procmon import emit, run_monitored

ROWS = 1000
WRITES = 5  # create + 4 appends, 200 rows each
OPERATIONS = [
    "create",
    "append1",
    "append2",
    "append3",
    "append4",
    "count",
    "delete",
    "update",
    "merge",
    "optimize",
    "checkpoint",
    "vacuum",
    "history",
    "audit",
]
SESSIONS = {
    "tuned": ("local[2]", {"spark.sql.shuffle.partitions": "8"}),
    "default": ("local[2]", {}),
    "cluster": ("local-cluster[2,1,1024]", {}),
}
ENGINES = ("deltaspark", "floor", "deltars")
DELETED = 20  # rows with id < 20
MERGED = 100  # source ids 950..1049: 50 updates, 50 inserts
AFTER = ROWS - DELETED + MERGED // 2  # rows at the end


def _rows(spark: Any, start: int, end: int) -> Any:
    return spark.range(start, end).selectExpr(
        "id", "cast(id % 4 as int) as p", "id * 2 as v", "cast(id as string) as s"
    )


def _source(spark: Any) -> Any:
    return spark.range(950, 950 + MERGED).selectExpr(
        "id", "cast(id % 4 as int) as p", "id * 3 as v", "cast(id as string) as s"
    )


class _Jobs:
    """The Spark jobs, stages and tasks one operation ran (its job group in the status tracker)."""

    def __init__(self, spark: Any) -> None:
        self.context = spark.sparkContext
        self.tracker = self.context.statusTracker()
        self.counter = 0

    def measure(self, work: Callable[[], Any]) -> tuple[float, dict[str, int], Any]:
        self.counter += 1
        group = f"small-{self.counter}"
        self.context.setJobGroup(group, group)
        started = time.perf_counter()
        answer = work()
        seconds = time.perf_counter() - started
        self.context.setJobGroup("", "")
        jobs = self.tracker.getJobIdsForGroup(group)
        stages = tasks = 0
        for job in jobs:
            info = self.tracker.getJobInfo(job)
            for stage_id in info.stageIds if info else ():
                stage = self.tracker.getStageInfo(stage_id)
                if stage is not None and stage.numCompletedTasks:  # skipped stages ran nothing
                    stages += 1
                    tasks += stage.numCompletedTasks
        return seconds, {"jobs": len(jobs), "stages": stages, "tasks": tasks}, answer


def _start(master: str, confs: dict[str, str]) -> tuple[Any, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    builder = SparkSession.builder.master(master).appName("deltaspark-small")
    builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    for key, value in confs.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.perf_counter() - started


def _check(what: str, got: Any, expected: Any) -> None:
    if got != expected:
        raise AssertionError(f"{what}: got {got}, expected {expected}")


def _deltaspark_pass(spark: Any, path: str) -> dict[str, Callable[[], Any]]:
    import deltaspark
    from deltaspark import DeltaTable

    def table() -> Any:
        return DeltaTable.forPath(spark, path)

    def merge() -> Any:
        merged = table().alias("t").merge(_source(spark).alias("s"), "t.id = s.id")
        metrics = merged.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        return metrics

    steps: dict[str, Callable[[], Any]] = {
        "create": lambda: deltaspark.write(_rows(spark, 0, 200), path, partitionBy=["p"])
    }
    for i in range(1, WRITES):
        steps[f"append{i}"] = lambda i=i: deltaspark.write(_rows(spark, 200 * i, 200 * (i + 1)), path)
    steps.update(
        count=lambda: _check("count", table().toDF().count(), ROWS),
        delete=lambda: _check(
            "deleted", table().delete(f"id < {DELETED}").metrics["numDeletedRows"], DELETED
        ),
        update=lambda: _check(
            "updated", table().update("id = 500", {"v": "v + 1"}).metrics["numUpdatedRows"], 1
        ),
        merge=merge,
        optimize=lambda: table().optimize().executeCompaction().collect(),
        checkpoint=lambda: table().checkpoint(),
        vacuum=lambda: table().vacuum(dryRun=True),
        history=lambda: _check("history", len(table().history().collect()), WRITES + 4),
        audit=lambda: _check("audit passed", table().audit().passed, True),
    )
    return steps


def _deltaspark_answer(spark: Any, path: str) -> None:
    from deltaspark import DeltaTable

    _check("rows after the sequence", DeltaTable.forPath(spark, path).toDF().count(), AFTER)


def _data_files(path: str) -> list[str]:
    return sorted(
        f for f in glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True) if "_delta_log" not in f
    )


def _floor_pass(spark: Any, path: str) -> dict[str, Callable[[], Any]]:
    """Plain Spark doing each operation's data work on a plain parquet directory, no log."""
    from pyspark.sql import functions as F

    log_dir = os.path.join(path + "-log")
    os.makedirs(log_dir, exist_ok=True)
    state = {"n": 0}

    def commit(operation: str) -> None:
        """What a writer records (a commit's JSON line), so that checkpoint and history have a log."""
        state["n"] += 1
        line = {"commitInfo": {"operation": operation, "timestamp": int(time.time() * 1000)}}
        Path(log_dir, f"{state['n']:020d}.json").write_text(json.dumps(line) + "\n")

    def write(frame: Any, mode: str, operation: str) -> None:
        frame.write.mode(mode).partitionBy("p").parquet(path)
        commit(operation)

    def rewrite(condition: str, change: Callable[[Any], Any], operation: str) -> None:
        """The files holding a matching row, read, changed and written again (the rest stay)."""
        touched = [
            r[0]
            for r in spark.read.parquet(path)
            .where(condition)
            .select(F.input_file_name())
            .distinct()
            .collect()
        ]
        rows = spark.read.option("basePath", path).parquet(*touched)
        change(rows).write.mode("append").partitionBy("p").parquet(path + "-new")
        commit(operation)

    def merge() -> None:
        target = spark.read.parquet(path).alias("t")
        source = _source(spark).alias("s")
        joined = target.join(source, F.col("t.id") == F.col("s.id"), "full_outer")
        columns = [F.coalesce(F.col(f"s.{c}"), F.col(f"t.{c}")).alias(c) for c in ("id", "v", "s", "p")]
        joined.select(*columns).write.mode("overwrite").partitionBy("p").parquet(path + "-merged")
        commit("MERGE")

    def optimize() -> None:
        spark.read.parquet(path).repartition("p").write.mode("overwrite").partitionBy("p").parquet(
            path + "-compacted"
        )
        commit("OPTIMIZE")

    def checkpoint() -> None:
        spark.read.json(log_dir).coalesce(1).write.mode("overwrite").parquet(path + "-checkpoint")

    def listing() -> int:
        return spark.read.format("binaryFile").load(path + "/*/*.parquet").select("path", "length").count()

    def audit() -> None:
        listing()
        spark.read.parquet(path).count()
        spark.read.json(log_dir).count()

    steps: dict[str, Callable[[], Any]] = {
        "create": lambda: write(_rows(spark, 0, 200), "errorifexists", "WRITE"),
    }
    for i in range(1, WRITES):
        steps[f"append{i}"] = lambda i=i: write(_rows(spark, 200 * i, 200 * (i + 1)), "append", "WRITE")
    steps.update(
        count=lambda: _check("count", spark.read.parquet(path).count(), ROWS),
        delete=lambda: rewrite(f"id < {DELETED}", lambda rows: rows.where(f"NOT (id < {DELETED})"), "DELETE"),
        update=lambda: rewrite(
            "id = 500", lambda rows: rows.withColumn("v", F.expr("IF(id = 500, v + 1, v)")), "UPDATE"
        ),
        merge=merge,
        optimize=optimize,
        checkpoint=checkpoint,
        vacuum=listing,
        history=lambda: spark.read.json(log_dir).select("commitInfo").collect(),
        audit=audit,
    )
    return steps


def _spark_worker(engine: str, session: str, master: str, workdir: str, passes: int) -> dict[str, Any]:
    master = master if session == "standalone" else SESSIONS[session][0]
    confs = {} if session == "standalone" else SESSIONS[session][1]
    spark, started = _start(master, confs)
    jobs = _Jobs(spark)
    result: dict[str, Any] = {"session_start": round(started, 2), "spark": spark.version, "passes": []}
    for n in range(passes):
        path = os.path.join(workdir, f"{engine}-{session}-{n}")
        steps = _deltaspark_pass(spark, path) if engine == "deltaspark" else _floor_pass(spark, path)
        ops: dict[str, Any] = {}
        for name in OPERATIONS:
            seconds, counts, _ = jobs.measure(steps[name])
            ops[name] = {"seconds": round(seconds, 3), **counts}
        if engine == "deltaspark":
            _deltaspark_answer(spark, path)
        result["passes"].append(ops)
    spark.stop()
    return result


def _deltars_pass(path: str) -> dict[str, Callable[[], Any]]:
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    def rows(start: int, end: int, factor: int = 2) -> pa.Table:
        ids = pa.array(range(start, end), pa.int64())
        return pa.table(
            {
                "id": ids,
                "p": pc.cast(pc.bit_wise_and(ids, 3), pa.int32()),
                "v": pc.multiply(ids, factor),
                "s": pc.cast(ids, pa.string()),
            }
        )

    def merge() -> None:
        source = rows(950, 950 + MERGED, factor=3)
        merged = DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        merged.when_matched_update_all().when_not_matched_insert_all().execute()

    def deleted() -> int:
        return DeltaTable(path).delete(f"id < {DELETED}")["num_deleted_rows"]

    steps: dict[str, Callable[[], Any]] = {
        "create": lambda: write_deltalake(path, rows(0, 200), partition_by=["p"]),
    }
    for i in range(1, WRITES):
        steps[f"append{i}"] = lambda i=i: write_deltalake(path, rows(200 * i, 200 * (i + 1)), mode="append")
    steps.update(
        count=lambda: _check("count", DeltaTable(path).to_pyarrow_table().num_rows, ROWS),
        delete=lambda: _check("deleted", deleted(), DELETED),
        update=lambda: DeltaTable(path).update(predicate="id = 500", updates={"v": "v + 1"}),
        merge=merge,
        optimize=lambda: DeltaTable(path).optimize.compact(),
        checkpoint=lambda: DeltaTable(path).create_checkpoint(),
        vacuum=lambda: DeltaTable(path).vacuum(dry_run=True),
        history=lambda: DeltaTable(path).history(),
    )
    return steps


def _deltars_worker(workdir: str, passes: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    result: dict[str, Any] = {"passes": []}
    for n in range(passes):
        path = os.path.join(workdir, f"deltars-{n}")
        steps = _deltars_pass(path)
        ops = {}
        for name in OPERATIONS:
            if name in steps:  # delta-rs has no audit
                started = time.perf_counter()
                steps[name]()
                ops[name] = {"seconds": round(time.perf_counter() - started, 4)}
        _check("rows after the sequence", DeltaTable(path).to_pyarrow_table().num_rows, AFTER)
        result["passes"].append(ops)
    return result


def _worker(args: argparse.Namespace) -> None:
    try:
        if args.worker == "deltars":
            result = _deltars_worker(args.workdir, args.passes)
        else:
            result = _spark_worker(args.worker, args.session, args.master, args.workdir, args.passes)
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the runner goes on
        result = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    emit(result)


def _warm(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Each operation's warm figure: the median of the passes after the first (its jobs and tasks
    from the same pass as that time)."""
    later = passes[1:] or passes
    out = {}
    for name in passes[0]:
        runs = sorted((p[name] for p in later if name in p), key=lambda r: r["seconds"])
        out[name] = runs[len(runs) // 2] if runs else {}
    return out


def _table(report: dict[str, Any]) -> str:
    """Each session's warm (last pass) and first-pass seconds, jobs and tasks, beside the floor."""
    lines = []
    deltars = report["runs"].get("deltars", {})
    rs = _warm(deltars["passes"]) if deltars.get("status") == "ok" else {}
    for session in report["sessions"]:
        ours = report["runs"].get(f"deltaspark/{session}", {})
        floor = report["runs"].get(f"floor/{session}", {})
        if ours.get("status") != "ok":
            lines.append(f"{session}: deltaspark {ours.get('status')}: {ours.get('error')}")
            continue
        first, warm = ours["passes"][0], _warm(ours["passes"])
        floor_warm = _warm(floor["passes"]) if floor.get("status") == "ok" else {}
        lines.append(f"\n{session} (session start {ours['session_start']} s, Spark {ours['spark']})")
        floor_first = floor["passes"][0] if floor.get("status") == "ok" else {}
        lines.append(
            f"{'operation':12s} {'warm s':>8s} {'1st s':>8s} {'jobs':>5s} {'tasks':>6s} {'floor s':>8s} "
            f"{'ratio':>6s} {'floor 1st':>9s} {'delta-rs s':>10s}"
        )
        for name in OPERATIONS:
            w, f = warm[name], first[name]
            base = floor_warm.get(name, {}).get("seconds")
            ratio = f"{w['seconds'] / base:.1f}x" if base else "-"
            r = rs.get(name, {}).get("seconds")
            cold = floor_first.get(name, {}).get("seconds")
            lines.append(
                f"{name:12s} {w['seconds']:8.2f} {f['seconds']:8.2f} {w['jobs']:5d} {w['tasks']:6d} "
                f"{base if base is not None else '-':>8} {ratio:>6s} {cold if cold is not None else '-':>9} "
                f"{r if r is not None else '-':>10}"
            )

        def total(figures: dict[str, Any]) -> str:
            return f"{sum(figures[n]['seconds'] for n in OPERATIONS):8.2f}" if figures else "-"

        lines.append(
            f"{'all':12s} {total(warm)} {total(first)} {'':5s} {'':6s} {total(floor_warm)} {'':6s} "
            f"{total(floor_first):>9s}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", default="tuned,default,cluster")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--master", default=None, help="spark://host:port, for the standalone session")
    parser.add_argument("--passes", type=int, default=4, help="the first pass, then warm ones (median)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--session", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0

    sessions = [s for s in args.sessions.split(",") if s]
    if args.master:
        sessions.append("standalone")
    engines = [e for e in args.engines.split(",") if e]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="deltaspark-small-"))
    me = [sys.executable, "-m", "benchmarks.small", "--passes", str(args.passes)]
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": ROWS,
        "passes": args.passes,
        "sessions": sessions,
        "runs": {},
    }
    runs = [(e, s) for s in sessions for e in engines if e != "deltars"]
    if "deltars" in engines:
        runs.append(("deltars", None))
    failed = False
    for engine, session in runs:
        key = engine if session is None else f"{engine}/{session}"
        here = workdir / key.replace("/", "-")
        here.mkdir(parents=True, exist_ok=True)
        command = [*me, "--worker", engine, "--workdir", str(here)]
        if session is not None:
            command += ["--session", session, "--master", args.master or ""]
        outcome = run_monitored(command, timeout=1800, mem_cap_bytes=10 * 1024**3)
        entry = (
            outcome.results[-1] if outcome.results else {"status": "crashed", "error": outcome.stderr_tail}
        )
        entry["peak_tree_rss"] = outcome.peak_tree_rss
        report["runs"][key] = entry
        failed |= entry.get("status") != "ok"
        print(
            f"{key}: {entry.get('status')}"
            + (f" {entry.get('error')}" if entry.get("status") != "ok" else ""),
            flush=True,
        )
        shutil.rmtree(here, ignore_errors=True)
    print(_table(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
