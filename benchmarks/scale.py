"""Scale model: replay, checkpoint, vacuum and audit of generated tables of 1M, 10M and 100M files on a
standalone Spark cluster with one and with two executors; the cost per file, the speed-up per
executor, and what the driver and the executors hold.

    .venv/bin/python -m benchmarks.scale --sizes 1m,10m,100m --executors 1,2 \\
        --out benchmarks/results/2026-11-29-scale.json

Per size one table is generated (`benchmarks.generate`: a classic checkpoint plus 100 JSON commits;
stats, 100 partitions, 5% of each commit's files removed) with an inventory of every data file it
ever had (parquet, the `vacuum(inventory=...)` schema: no data files are written, 100M of them
would not fit a disk's inodes). Per executor count a standalone master and that many workers (one
core, `--executor-memory` each) are started from the installed pyspark; one driver process runs,
in one session:

- replay: `DeltaTable.forPath` + `snapshot()` + `files().count()` (checked against the generator);
- checkpoint: `checkpoint()`, then the log is put back as generated;
- vacuum: a dry run with zero retention over the inventory (candidates counted and checked: every
  removed file);
- audit: `audit(level="quick")` (the log checks: versions, checkpoint against the replay).

At 1M files each operation runs twice and the second (warm) run is reported, the first kept as
`cold_seconds`; at 10M and 100M (and the smoke size) once, after the 1M runs warmed nothing (each
size is a new driver process): their figures include the JVM's warm-up, a few seconds.

Recorded per operation: seconds, the Spark jobs, tasks and shuffle bytes it ran (Spark's REST
API), the driver JVM's heap peak (its pools' peaks, reset before each operation), the driver
process tree's peak RSS, and each executor's peak RSS (the executor JVM and its Python workers,
sampled here). The machine has 2 cores: with two executors the driver and both executors share
them, so the speed-up measured is a lower bound of a cluster's. `--model` prints the model fitted
to a results file. Nothing here runs in CI (`tests/test_benchmarks_smoke.py` runs a tiny size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

SIZES = {"smoke": 3_000, "1m": 1_000_000, "10m": 10_000_000, "100m": 100_000_000}
OPS = ("replay", "checkpoint", "vacuum", "audit")


# ---- the table and its inventory ------------------------------------------------------------------
def prepare(workdir: Path, size: str, reuse: bool) -> dict[str, Any]:
    """Generate the table (or reuse one kept earlier) and its inventory; what a reader must find."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from benchmarks.generate import BASE_TIME_MS, LogSpec, file_paths, file_sizes, generate, plan_batches

    files = SIZES[size]
    spec = LogSpec(files=files, commits=100, checkpoint=True, tail_files_per_commit=min(1000, files // 200))
    table, inventory = workdir / f"table-{size}", workdir / f"inventory-{size}"
    facts_file = workdir / f"facts-{size}.json"
    if reuse and facts_file.exists():
        return json.loads(facts_file.read_text())
    generated = generate(table, spec)
    batches, _ = plan_batches(spec)
    ever = max(b.add_start + b.add_count for b in batches)  # every file index the log ever added
    shutil.rmtree(inventory, ignore_errors=True)
    inventory.mkdir(parents=True)
    start = time.perf_counter()
    root = f"file:{table}"
    schema = pa.schema(
        [
            ("path", pa.string()),
            ("length", pa.int64()),
            ("isDir", pa.bool_()),
            ("modificationTime", pa.int64()),
        ]
    )
    chunk = 5_000_000
    for part, first in enumerate(range(0, ever, chunk)):
        idx = np.arange(first, min(first + chunk, ever), dtype=np.int64)
        paths = pc.binary_join_element_wise(root, file_paths(idx, spec), "/")
        columns = [
            paths,
            pa.array(file_sizes(idx), pa.int64()),
            pa.array(np.zeros(len(idx), dtype=bool)),
            pa.array(np.full(len(idx), BASE_TIME_MS, dtype=np.int64)),
        ]
        pq.write_table(pa.Table.from_arrays(columns, schema=schema), inventory / f"part-{part:05d}.parquet")
    facts = {
        "size": size,
        "table": str(table),
        "inventory": str(inventory),
        "generated": {**generated.__dict__},
        "inventory_files": ever,
        "inventory_seconds": round(time.perf_counter() - start, 1),
        "removed_files": ever - generated.live_files,
    }
    facts_file.write_text(json.dumps(facts, default=str))
    return facts


# ---- the driver process ----------------------------------------------------------------------------
def _stage_totals(spark: Any) -> dict[str, int]:
    """Jobs, tasks and shuffle bytes of the application so far (Spark's REST API on the driver)."""
    sc = spark.sparkContext
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path, timeout=60) as response:
            return json.load(response)

    jobs = get("/jobs")
    stages = get("/stages?status=complete")
    return {
        "jobs": len(jobs),
        "tasks": sum(s.get("numCompleteTasks", 0) for s in stages),
        "shuffle_write_bytes": sum(s.get("shuffleWriteBytes", 0) for s in stages),
        "input_bytes": sum(s.get("inputBytes", 0) for s in stages),
    }


def driver(args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession

    from benchmarks.common import LogState
    from benchmarks.procmon import emit
    from benchmarks.worker_deltaspark import jvm_heap_peak
    from deltaspark import DeltaTable

    facts = json.loads(Path(args.facts).read_text())
    spark = (
        SparkSession.builder.master(args.master)
        .appName(f"deltaspark-scale-{facts['size']}")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.executor.memory", args.executor_memory)
        .config("spark.executor.cores", "1")
        .config("spark.ui.port", "0")  # the REST API counts the jobs, tasks and shuffle bytes
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    table = facts["table"]
    live = facts["generated"]["live_files"]
    results: dict[str, Any] = {"executors": spark.sparkContext.defaultParallelism}

    def run(op: str, body: Any) -> None:
        """`body` timed; twice at 1M files (the first, cold, is kept as `cold_seconds`)."""
        cold = None
        for _ in range(2 if 500_000 <= live < 5_000_000 else 1):
            before = _stage_totals(spark)
            jvm_heap_peak(spark, reset=True)
            started = time.time()
            answer = body()
            ended = time.time()
            after = _stage_totals(spark)
            results[op] = {
                "seconds": round(ended - started, 2),
                "cold_seconds": cold,
                "started": started,
                "ended": ended,
                "driver_heap_peak": jvm_heap_peak(spark),
                **{k: after[k] - before[k] for k in after},
                **answer,
            }
            cold = results[op]["seconds"] if cold is None else cold
        print(f"{facts['size']} {op}: {results[op]['seconds']} s", file=sys.stderr, flush=True)

    def replay() -> dict[str, Any]:
        files = DeltaTable.forPath(spark, table).snapshot().files().count()
        assert files == live, (files, live)
        return {"files": files}

    def checkpoint() -> dict[str, Any]:
        state = LogState(table)
        try:
            DeltaTable.forPath(spark, table).checkpoint()
            return {"written": len(state.new_files())}
        finally:
            state.restore()

    def vacuum() -> dict[str, Any]:
        inventory = spark.read.parquet(facts["inventory"])
        plan = DeltaTable.forPath(spark, table).vacuum(retentionHours=0, dryRun=True, inventory=inventory)
        candidates = plan.count()
        assert candidates == facts["removed_files"], (candidates, facts["removed_files"])
        return {"candidates": candidates}

    def audit() -> dict[str, Any]:
        report = DeltaTable.forPath(spark, table).audit(level="quick")
        errors = report.findings.where("severity = 'error'").count()
        assert errors == 0, report.findings.where("severity = 'error'").limit(5).collect()
        return {"errors": errors}

    for op, body in zip(OPS, (replay, checkpoint, vacuum, audit), strict=True):
        if op in args.ops:
            run(op, body)
    spark.stop()
    emit(results)


# ---- the executors' memory -------------------------------------------------------------------------
class ExecutorSampler(threading.Thread):
    """Samples the RSS of each executor (its JVM plus its Python workers) every `poll` seconds."""

    def __init__(self, poll: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.poll, self.samples, self.stopped = poll, [], threading.Event()

    def run(self) -> None:
        import psutil

        while not self.stopped.is_set():
            now, per_executor = time.time(), []
            for proc in psutil.process_iter(["cmdline"]):
                try:
                    if "CoarseGrainedExecutorBackend" not in " ".join(proc.info["cmdline"] or []):
                        continue
                    tree = [proc, *proc.children(recursive=True)]
                    per_executor.append(sum(p.memory_info().rss for p in tree))
                except psutil.Error:
                    continue
            self.samples.append((now, per_executor))
            self.stopped.wait(self.poll)

    def peak(self, start: float, end: float) -> int:
        """The largest executor RSS sampled from `start` to `end`, counting the last sample before
        `start` (what the executors held as the operation began): an operation shorter than the
        poll, such as a small checkpoint written on the driver, may have no sample of its own."""
        inside = [max(s, default=0) for t, s in self.samples if start <= t <= end]
        before = [max(s, default=0) for t, s in self.samples if t < start][-1:]
        return max(inside + before, default=0)


def measure(facts: dict[str, Any], executors: int, args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.procmon import run_monitored
    from tests.standalone import standalone_cluster

    work = Path(args.workdir) / f"cluster-{facts['size']}-{executors}"
    shutil.rmtree(work, ignore_errors=True)
    facts_file = Path(args.workdir) / f"facts-{facts['size']}.json"
    with standalone_cluster(work, workers=executors, cores=1, memory=args.executor_memory) as cluster:
        sampler = ExecutorSampler()
        sampler.start()
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.scale",
            "--driver",
            str(facts_file),
            "--master",
            cluster.url,
            "--driver-memory",
            args.driver_memory,
            "--executor-memory",
            args.executor_memory,
            "--ops",
            ",".join(args.ops),
        ]
        outcome = run_monitored(cmd, args.timeout, int(args.mem_cap_gib * 1024**3), env=cluster.env)
        sampler.stopped.set()
        sampler.join()
    if not outcome.results:
        return {
            "executors": executors,
            "failed": outcome.killed or "no result",
            "stderr": outcome.stderr_tail,
        }
    ops = outcome.results[0]
    for op in OPS:
        if op in ops:
            ops[op]["executor_peak_rss"] = sampler.peak(ops[op]["started"], ops[op]["ended"])
    return {
        "executors": executors,
        "driver_tree_peak_rss": outcome.peak_tree_rss,
        "driver_jvm_peak_rss": outcome.peak_jvm_rss,
        "process_seconds": round(outcome.seconds, 1),
        "ops": {op: ops[op] for op in OPS if op in ops},
    }


# ---- the model -------------------------------------------------------------------------------------
def model(
    results: dict[str, Any], target_files: int = 1_000_000_000, target_executors: int = 50
) -> dict[str, Any]:
    """Per operation, from the one-executor runs: time = a + b x files, fitted through the two
    largest sizes run (a: the driver's fixed part; b: seconds per file on one executor core); where
    100M was run, the line through 1M and 10M is checked against it. For `target_files` on
    `target_executors` the per-file work is divided by the executors (`ideal`: every stage has at
    least as many tasks as executors) and, as a bound, by the parallel efficiency measured here
    (Amdahl's law on the two-executor speed-up at the largest size both ran; on this 2-core machine
    the driver and both executors share two cores, so it understates a cluster's). Shuffle and
    input bytes per file, the driver's heap and the executors' memory at each size are reported
    for the extrapolation of memory."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for size in results["sizes"]:
        for run in size["runs"]:
            if "ops" in run:
                runs[(size["size"], run["executors"])] = run["ops"]
    out: dict[str, Any] = {"target_files": target_files, "target_executors": target_executors}
    for op in OPS:
        sizes = [size for size in SIZES if op in runs.get((size, 1), {}) and size != "smoke"]
        if len(sizes) < 2:
            continue
        small, large = sizes[-2], sizes[-1]  # the slope between the two largest (the JIT's warm-up
        t_small, t_large = runs[(small, 1)][op]["seconds"], runs[(large, 1)][op]["seconds"]  # fades)
        b = (t_large - t_small) / (SIZES[large] - SIZES[small])
        a = t_small - b * SIZES[small]
        row: dict[str, Any] = {
            "fitted_on": [small, large],
            "fixed_seconds": round(a, 1),
            "seconds_per_million_files_per_executor": round(b * 1e6, 2),
            "shuffle_bytes_per_file": round(runs[(large, 1)][op]["shuffle_write_bytes"] / SIZES[large], 1),
            "input_bytes_per_file": round(runs[(large, 1)][op]["input_bytes"] / SIZES[large], 1),
            "driver_heap_peak_gib": {
                size: round(runs[(size, 1)][op]["driver_heap_peak"] / 1024**3, 2) for size in sizes
            },
            "executor_peak_rss_gib": {
                size: round(runs[(size, 1)][op].get("executor_peak_rss", 0) / 1024**3, 2) for size in sizes
            },
        }
        if len(sizes) == 3:  # the line through 1M and 10M, against 100M measured
            t1, t10 = runs[(sizes[0], 1)][op]["seconds"], runs[(sizes[1], 1)][op]["seconds"]
            slope = (t10 - t1) / (SIZES[sizes[1]] - SIZES[sizes[0]])
            row["predicted_100m_from_1m_10m"] = round(t1 + slope * (SIZES[sizes[2]] - SIZES[sizes[0]]), 1)
            row["measured_100m_seconds"] = t_large
        largest = max(
            (s for s in SIZES if op in runs.get((s, 1), {}) and op in runs.get((s, 2), {})),
            key=lambda s: SIZES[s],
            default=None,
        )
        parallel = 1.0
        if largest:
            t1, t2 = runs[(largest, 1)][op]["seconds"], runs[(largest, 2)][op]["seconds"]
            parallel = min(1.0, max(0.0, 2 * (1 - t2 / t1)))  # Amdahl: t2 = t1 x (serial + parallel / 2)
            row["speedup_two_executors"] = {"size": largest, "value": round(t1 / t2, 2)}
            row["parallel_fraction_measured"] = round(parallel, 2)
        work = b * target_files
        row["modelled_seconds_ideal"] = round(a + work / target_executors, 1)
        row["modelled_seconds_measured_efficiency"] = round(
            a + work * ((1 - parallel) + parallel / target_executors), 1
        )
        row["modelled_shuffle_gib"] = round(row["shuffle_bytes_per_file"] * target_files / 1024**3, 1)
        row["modelled_input_gib"] = round(row["input_bytes_per_file"] * target_files / 1024**3, 1)
        out[op] = row
    return out


def merge(files: list[str]) -> dict[str, Any]:
    """Several runs' results as one: a size per file, an executor count per file, or operations
    run on their own (their figures join the run of the same size and executors)."""
    merged: dict[str, Any] = {}
    for path in files:
        results = json.loads(Path(path).read_text())
        if not merged:
            merged = {**results, "sizes": []}
        for size in results["sizes"]:
            same = next((s for s in merged["sizes"] if s["size"] == size["size"]), None)
            if same is None:
                merged["sizes"].append(size)
                continue
            for run in size["runs"]:
                twin = next((r for r in same["runs"] if r["executors"] == run["executors"]), None)
                if twin is None or "ops" not in twin or "ops" not in run:
                    same["runs"].append(run)
                else:  # another operation of the same size and executors, run on its own
                    twin["ops"].update(run["ops"])
    merged["model"] = model(merged)
    return merged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1m,10m")
    parser.add_argument("--executors", default="1,2")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--executor-memory", default="6g")
    parser.add_argument("--workdir", default="/tmp/deltaspark-scale")
    parser.add_argument("--reuse", action="store_true", help="use the tables a previous run generated")
    parser.add_argument("--keep", action="store_true", help="keep the generated tables")
    parser.add_argument("--timeout", type=float, default=5400)
    parser.add_argument("--mem-cap-gib", type=float, default=20.0)
    parser.add_argument("--out")
    parser.add_argument("--model", help="print the model of a results file and exit")
    parser.add_argument("--merge", nargs="+", help="merge these results files into --out, with the model")
    parser.add_argument("--driver", help=argparse.SUPPRESS)  # internal: run the driver process
    parser.add_argument("--master", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.ops = [op for op in args.ops.split(",") if op]
    if args.driver:
        args.facts = args.driver
        driver(args)
        return
    if args.merge:
        merged = merge(args.merge)
        Path(args.out).write_text(json.dumps(merged, indent=1, default=str))
        print(json.dumps(merged["model"], indent=2))
        return
    if args.model:
        print(json.dumps(model(json.loads(Path(args.model).read_text())), indent=2))
        return
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "settings": {"driver_memory": args.driver_memory, "executor_memory": args.executor_memory},
        "sizes": [],
    }
    for size in args.sizes.split(","):
        facts = prepare(workdir, size, args.reuse)
        print(f"{size}: table ready ({facts['generated']['seconds']} s)", file=sys.stderr, flush=True)
        runs = [measure(facts, int(e), args) for e in args.executors.split(",")]
        results["sizes"].append({"size": size, "facts": facts, "runs": runs})
        if not args.keep:
            shutil.rmtree(facts["table"], ignore_errors=True)
            shutil.rmtree(facts["inventory"], ignore_errors=True)
            (workdir / f"facts-{size}.json").unlink(missing_ok=True)
        results["model"] = model(results)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps(results["model"], indent=2))


if __name__ == "__main__":
    main()
