"""Audit benchmark: a full audit of a generated table, timed per check, with the peak memory of the
worker's process tree (Python driver, Spark JVM, Python workers).

    .venv/bin/python -m benchmarks.audit --files 1000000 --commits 100 --touch --out benchmarks/results/x.json
    .venv/bin/python -m benchmarks.audit --files 10000000 --commits 100 --checkpoint --level quick

`--touch` writes a sparse placeholder of the logged size for every live data file, so that the
existence check and the orphan listing have real files to list and join. Placeholders are not
parquet and carry no deletion vector bytes, so `files.footers` and `files.deletion_vectors` are
left out (on real tables they open every file: that measures the storage, not deltaspark).
Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.generate import LogSpec, generate, live_indices, plan_batches, write_placeholders
from benchmarks.procmon import emit, run_monitored
from benchmarks.worker_deltaspark import start_session

# Placeholders are empty files: footers and DV bytes cannot be checked on them.
PLACEHOLDER_CHECKS = [
    "log.",
    "files.exist",
    "files.statistics",
    "files.partition_values",
    "files.change_data",
    "hygiene.",
]


def placeholders(root: Path, spec: LogSpec) -> int:
    """A sparse placeholder of its logged size for every live data file."""
    batches, _ = plan_batches(spec)
    return write_placeholders(root, spec, live_indices(batches))


def worker(path: str, level: str, checks: list[str] | None, driver_memory: str) -> None:
    """One audit in this process (its own Spark session), its figures emitted for the parent."""
    start = time.perf_counter()
    spark = start_session(driver_memory, [], None)
    session = time.perf_counter() - start
    from deltaspark import DeltaTable

    start = time.perf_counter()
    report = DeltaTable.forPath(spark, path).audit(level, checks=checks, timed=True)
    seconds = time.perf_counter() - start
    emit(
        {
            "session_seconds": round(session, 2),
            "audit_seconds": round(seconds, 2),
            "passed": report.passed,
            "checks": [
                {k: c[k] for k in ("check", "status", "errors", "warnings", "infos", "seconds")}
                for c in report.checks
            ],
            "metrics": report.metrics,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--touch", action="store_true", help="placeholder data files (existence, orphans)")
    parser.add_argument("--level", choices=["quick", "full"], default="full")
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench")
    parser.add_argument("--reuse", action="store_true", help="audit the table left by an earlier run")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out", help="write the figures here as JSON")
    parser.add_argument("--worker", nargs=3, metavar=("PATH", "LEVEL", "CHECKS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        path, level, checks = args.worker
        worker(path, level, checks.split(",") if checks != "-" else None, args.driver_memory)
        return 0
    path = (
        Path(args.workdir)
        / f"audit-{args.files}{'-ck' if args.checkpoint else ''}{'-touched' if args.touch else ''}"
    )
    generated = None
    if not (args.reuse and path.exists()):
        spec = LogSpec(files=args.files, commits=args.commits, checkpoint=args.checkpoint)
        generated = generate(path, spec)
        print(f"generated {path} in {generated.seconds} s", flush=True)
        if args.touch:
            start = time.perf_counter()
            print(
                f"{placeholders(path, spec)} sparse placeholders in {time.perf_counter() - start:.0f} s",
                flush=True,
            )
    checks = ",".join(PLACEHOLDER_CHECKS) if args.level == "full" else "-"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.audit",
        "--driver-memory",
        args.driver_memory,
        "--worker",
        str(path),
        args.level,
        checks,
    ]
    outcome = run_monitored(cmd, args.timeout, 20 * 1024**3)
    result = {
        "table": {
            "files": args.files,
            "commits": args.commits,
            "checkpoint": args.checkpoint,
            "placeholders": args.touch,
        },
        "generate_seconds": generated.seconds if generated else None,
        "level": args.level,
        "checks": checks,
        "process_seconds": round(outcome.seconds, 2),
        "peak_tree_rss_gib": round(outcome.peak_tree_rss / 1024**3, 2),
        "peak_jvm_rss_gib": round(outcome.peak_jvm_rss / 1024**3, 2),
        "killed": outcome.killed,
        "returncode": outcome.returncode,
        **(outcome.results[0] if outcome.results else {"stderr": outcome.stderr_tail}),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if outcome.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
