"""The runner: one generated table per scale, every engine measured on it, each in its own process.

For each scale it generates the table (under `--workdir`, deleted afterwards unless `--keep`), then
runs, one process each: the pyarrow decode floor, Spark alone (the same log read and reduced to the
newest action per file with plain Spark, `worker_spark`: what any Spark replay must pay), delta-rs
(load + file list, `create_checkpoint`) and deltaspark (replay to a file count, `toDF` planning,
`checkpoint()`), each with one cold run
and `--repeat` warm runs. It checks every engine found the generated file count, prints a markdown
table (median warm seconds, cold seconds, peak memory, ratios to delta-rs and to the floor), and
writes every figure to `--out` as JSON.

    python -m benchmarks.run --scale 1m --scale 10m --scale 100m --out benchmarks/results.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import failed_runs
from benchmarks.generate import GeneratedTable, LogSpec, generate
from benchmarks.procmon import run_monitored
from benchmarks.report import markdown

GIB = 1024**3


@dataclass(frozen=True)
class Scale:
    """A named size: what to generate and how to run Spark on it."""

    name: str
    spec: LogSpec
    driver_memory: str = "8g"
    repeat: int = 3
    touch_data_files: bool = False  # Spark's scan needs them to plan `toDF` below maxDriverFiles


SCALES = {
    "smoke": Scale("smoke", LogSpec(files=300, commits=5), "1g", 1, True),
    "1m": Scale("1m", LogSpec(files=1_000_000, commits=100), "8g", 5, True),
    "10m": Scale("10m", LogSpec(files=10_000_000, commits=100, checkpoint=True), "8g", 3),
    "100m": Scale("100m", LogSpec(files=100_000_000, commits=100, checkpoint=True), "8g", 1),
}

# (engine, operation) in the order they run; checkpoints last (each run's files are removed again).
RUNS = [
    ("floor", "replay"),
    ("spark", "replay"),
    ("delta-rs", "replay"),
    ("deltaspark", "replay"),
    ("deltaspark", "todf"),
    ("delta-rs", "checkpoint"),
    ("deltaspark", "checkpoint"),
]
WORKERS = {
    "floor": "benchmarks.worker_floor",
    "spark": "benchmarks.worker_spark",
    "delta-rs": "benchmarks.worker_deltars",
    "deltaspark": "benchmarks.worker_deltaspark",
}


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def versions() -> dict[str, str]:
    import deltalake
    import pyarrow
    import pyspark

    return {
        "pyspark": pyspark.__version__,
        "deltalake": deltalake.__version__,
        "pyarrow": pyarrow.__version__,
    }


def planned_runs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(engine, operations) per worker process; with `--shared-session` deltaspark's operations share
    one process (and one JVM start), which is quicker but mixes their memory peaks."""
    runs: list[tuple[str, list[str]]] = []
    for engine, op in RUNS:
        if engine not in args.engines or op not in args.ops or f"{engine}:{op}" in args.skip:
            continue
        shared = next((ops for e, ops in runs if e == engine), None)
        if engine == "deltaspark" and args.shared_session and shared is not None:
            shared.append(op)
        else:
            runs.append((engine, [op]))
    return runs


def worker_command(engine: str, op: str, table: str, scale: Scale, args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", WORKERS[engine], "--table", table, "--repeat", str(scale.repeat)]
    if engine != "floor":
        cmd += ["--op", op]
    if engine in ("spark", "deltaspark"):
        cmd += ["--driver-memory", scale.driver_memory]
    if engine == "deltaspark":
        for conf in args.conf:
            cmd += ["--conf", conf]
        if args.event_log:
            cmd += ["--event-log", str(Path(args.event_log) / scale.name)]
        if args.explain and "replay" in op:
            cmd.append("--explain")
    return cmd


def run_scale(scale: Scale, args: argparse.Namespace) -> dict[str, Any]:
    table = str(Path(args.workdir) / f"table-{scale.name}")
    described = Path(f"{table}.json")  # what was generated, for --reuse
    if args.reuse and described.exists() and Path(table).is_dir():
        generated = GeneratedTable(**json.loads(described.read_text()))
        print(f"[{scale.name}] reusing {table}", flush=True)
    else:
        print(f"[{scale.name}] generating {scale.spec}", flush=True)
        generated = generate(table, scale.spec, touch=scale.touch_data_files)
        described.write_text(json.dumps(asdict(generated)))
        print(
            f"[{scale.name}] generated in {generated.seconds:.1f}s: {generated.log_bytes / 1e6:.1f} MB of log"
        )
    report: dict[str, Any] = {
        "scale": scale.name,
        "driver_memory": scale.driver_memory,
        "repeat": scale.repeat,
        "table": asdict(generated),
        "runs": [],
        "started": dt.datetime.now().isoformat(timespec="seconds"),
    }
    repo = Path(__file__).resolve().parent.parent
    env = {"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(repo)}
    try:
        for engine, ops in planned_runs(args):
            cmd = worker_command(engine, ",".join(ops), table, scale, args)
            print(f"[{scale.name}] {engine} {','.join(ops)} ...", flush=True)
            log_path = str(Path(args.workdir) / f"{scale.name}-{engine}-{'-'.join(ops)}.log")
            outcome = run_monitored(cmd, args.timeout, int(args.mem_cap_gib * GIB), env, log_path=log_path)
            for op in ops:
                run = summarize(engine, op, outcome, generated.live_files, generated.version)
                seconds = run.get("median")
                shown = f"{seconds}s" if seconds is not None else f"after {run.get('process_seconds')}s"
                print(f"[{scale.name}] {engine} {op}: {run['status']} {shown}", flush=True)
                report["runs"].append(run)
    finally:
        report["finished"] = dt.datetime.now().isoformat(timespec="seconds")
        if not args.keep:
            shutil.rmtree(table, ignore_errors=True)
            described.unlink(missing_ok=True)
    return report


def summarize(engine: str, op: str, outcome: Any, live_files: int, version: int) -> dict[str, Any]:
    """One engine/operation: its figures, and whether it found what the generator wrote."""
    result = next((r for r in outcome.results if r.get("op") == op), {})
    run: dict[str, Any] = {
        "engine": engine,
        "op": op,
        "status": result.get("status", "crashed"),
        # a short-lived process may end between two samples: its own high-water mark then counts
        "peak_tree_rss": max(outcome.peak_tree_rss, result.get("python_peak_rss") or 0),
        "peak_python_rss": max(outcome.peak_root_rss, result.get("python_peak_rss") or 0),
        "peak_jvm_rss": outcome.peak_jvm_rss,
        "process_seconds": round(outcome.seconds, 2),
        **{k: v for k, v in result.items() if k not in ("engine", "op", "status")},
    }
    if outcome.killed:
        run["status"] = outcome.killed
    elif outcome.returncode != 0 and run["status"] == "ok":
        run["status"] = f"exit {outcome.returncode}"
    if run["status"] not in ("ok", "not available"):
        run["stderr_tail"] = outcome.stderr_tail
    facts = result.get("facts") or {}
    if "files" in facts:
        run["files_match"] = facts["files"] == live_files and facts.get("version") == version
    if op == "checkpoint" and facts.get("numOfAddFiles") is not None:
        run["files_match"] = facts["numOfAddFiles"] == live_files
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", action="append", choices=sorted(SCALES), help="repeatable; default 1m")
    parser.add_argument("--files", type=int, help="a custom scale instead: live files")
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--checkpoint", action="store_true", help="custom scale: checkpoint + JSON tail")
    parser.add_argument("--dv-fraction", type=float, default=0.0)
    parser.add_argument("--touch-data-files", action="store_true", help="custom scale: empty data files")
    parser.add_argument(
        "--checksum", action="store_true", help="tables get the latest version's .crc, as delta-spark writes"
    )
    parser.add_argument("--repeat", type=int, help="warm runs (overrides the scale's)")
    parser.add_argument("--driver-memory", help="spark.driver.memory (overrides the scale's)")
    parser.add_argument("--engines", default="floor,spark,delta-rs,deltaspark")
    parser.add_argument("--ops", default="replay,todf,checkpoint")
    parser.add_argument("--skip", action="append", default=[], help="ENGINE:OP to leave out (repeatable)")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v for deltaspark")
    parser.add_argument("--shared-session", action="store_true", help="deltaspark ops in one process")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per worker process")
    parser.add_argument("--mem-cap-gib", type=float, default=20.0, help="kill a worker tree above this")
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench")
    parser.add_argument("--keep", action="store_true", help="keep the generated tables")
    parser.add_argument("--reuse", action="store_true", help="use a table kept by an earlier --keep run")
    parser.add_argument("--event-log", help="write Spark event logs here (per scale) for profiling")
    parser.add_argument("--explain", action="store_true", help="record deltaspark's replay plan")
    parser.add_argument("--out", help="write all figures here as JSON")
    parser.add_argument("--markdown", help="write the results table here")
    args = parser.parse_args(argv)
    args.engines = args.engines.split(",")
    args.ops = args.ops.split(",")

    if args.files:
        spec = LogSpec(args.files, args.commits, checkpoint=args.checkpoint, dv_fraction=args.dv_fraction)
        scales = [Scale(f"custom-{args.files}", spec, "8g", 3, args.touch_data_files)]
    else:
        scales = [SCALES[name] for name in (args.scale or ["1m"])]
    if args.checksum:
        scales = [replace(s, name=f"{s.name}-crc", spec=replace(s.spec, checksum=True)) for s in scales]
    if args.repeat is not None:
        scales = [replace(s, repeat=args.repeat) for s in scales]
    if args.driver_memory:
        scales = [replace(s, driver_memory=args.driver_memory) for s in scales]
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "scales": [],
    }
    start = time.perf_counter()
    for scale in scales:
        results["scales"].append(run_scale(scale, args))
        if args.out:  # after every scale, so a long run that is stopped keeps what it measured
            Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    results["seconds"] = round(time.perf_counter() - start, 1)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    table = markdown(results)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    bad = failed_runs(results, "files_match")
    if bad:
        print(f"FAILED: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
