"""Iceberg planning and counting: deltaspark and pyiceberg side by side on generated tables.

For each scale one table is generated (`benchmarks/iceberg_generate.py`: manifests for every data
file, real files only where deletes apply), then each engine runs each operation in a monitored
process of its own: one cold run and `--repeat` warm runs. Every answer is checked against what the
generator wrote (live files, rows after deletes).

    python -m benchmarks.iceberg --scale 1m --scale 10m --out benchmarks/results/iceberg.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.common import failed_runs
from benchmarks.iceberg_generate import GeneratedIceberg, IcebergSpec, generate_iceberg
from benchmarks.procmon import run_monitored
from benchmarks.report import _files, _gib, _ratio, _seconds
from benchmarks.run import GIB, machine

SCALES = {
    "smoke": (IcebergSpec(files=3_000, delete_every=50), 1),
    "1m": (IcebergSpec(files=1_000_000), 3),
    "10m": (IcebergSpec(files=10_000_000), 0),
}
OPS = ["plan", "count"]
LABELS = {"plan": "planning: live files", "count": "row count with position deletes"}


def versions() -> dict[str, str]:
    import pyarrow
    import pyiceberg
    import pyspark

    return {
        "pyspark": pyspark.__version__,
        "pyiceberg": pyiceberg.__version__,
        "pyarrow": pyarrow.__version__,
    }


def run_scale(name: str, spec: IcebergSpec, repeat: int, args: argparse.Namespace) -> dict[str, Any]:
    table = Path(args.workdir) / f"iceberg-{name}-v{spec.format_version}"
    described = Path(f"{table}.json")
    if args.reuse and described.exists():
        generated = GeneratedIceberg(**json.loads(described.read_text()))
    else:
        shutil.rmtree(table, ignore_errors=True)
        print(f"[{name}] generating {spec}", flush=True)
        generated = generate_iceberg(table, spec)
        described.write_text(json.dumps(asdict(generated)))
        print(
            f"[{name}] generated in {generated.seconds}s, {generated.metadata_bytes / 1e6:.0f} MB of metadata"
        )
    report: dict[str, Any] = {"scale": name, "repeat": repeat, "table": asdict(generated), "runs": []}
    repo = Path(__file__).resolve().parent.parent
    env = {"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(repo)}
    expected = {
        "plan": ("files", generated.files + generated.delete_files),
        "count": ("rows", generated.rows),
    }
    try:
        for op in args.ops:
            for engine in args.engines:
                cmd = [
                    sys.executable, "-m", "benchmarks.worker_iceberg", "--engine", engine, "--op", op,
                    "--table", generated.path, "--metadata", generated.metadata_location,
                    "--repeat", str(repeat), "--driver-memory", args.driver_memory,
                ]  # fmt: skip
                for conf in args.conf:
                    cmd += ["--conf", conf]
                print(f"[{name}] {engine} {op} ...", flush=True)
                log = str(Path(args.workdir) / f"iceberg-{name}-{engine}-{op}.log")
                outcome = run_monitored(cmd, args.timeout, int(args.mem_cap_gib * GIB), env, log_path=log)
                result = next(iter(outcome.results), {})
                run = {
                    "engine": engine,
                    "op": op,
                    "status": outcome.killed or result.get("status", "crashed"),
                    "peak_tree_rss": max(outcome.peak_tree_rss, result.get("python_peak_rss") or 0),
                    "process_seconds": round(outcome.seconds, 1),
                    **{k: v for k, v in result.items() if k not in ("engine", "op", "status")},
                }
                key, value = expected[op]
                got = (result.get("facts") or {}).get(key)
                run["answer_matches"] = got == value if got is not None else None
                if run["status"] != "ok":
                    run["stderr_tail"] = outcome.stderr_tail
                shown = run.get("median") or (run.get("cold") or {}).get("total")
                print(f"[{name}] {engine} {op}: {run['status']} {shown}s, {key} {got} (expected {value})")
                report["runs"].append(run)
    finally:
        if not args.keep:
            shutil.rmtree(table, ignore_errors=True)
            described.unlink(missing_ok=True)
    return report


def _time(run: dict[str, Any]) -> float | None:
    if run["status"] != "ok":
        return None
    return run.get("median") if run.get("median") is not None else (run.get("cold") or {}).get("total")


def markdown(results: dict[str, Any]) -> str:
    m, v = results["machine"], results["versions"]
    lines = [
        f"Measured {results['started']} on {m['cpus']} cores, {m['memory_gib']} GiB RAM; pyspark "
        f"{v['pyspark']}, pyiceberg {v['pyiceberg']}, pyarrow {v['pyarrow']}. Seconds: median of the warm "
        "runs (the cold run when there were none); cold: Spark session start + first run for deltaspark. "
        "Peak RSS: the whole process tree.",
        "",
        "| data files | metadata | engine | operation | warm s | cold s | peak RSS GiB | ÷ pyiceberg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scale in results["scales"]:
        table, runs = scale["table"], scale["runs"]
        for run in runs:
            theirs = next((r for r in runs if r["engine"] == "pyiceberg" and r["op"] == run["op"]), None)
            ratio = _ratio(_time(run), _time(theirs)) if run["engine"] == "deltaspark" and theirs else "—"
            status = (
                "" if run["status"] == "ok" else f" ({run['status']} after {run['process_seconds']:.0f} s)"
            )
            if run.get("answer_matches") is False:
                status += " (WRONG answer)"
            cold = (run.get("cold") or {}).get("total")
            cold_text = _seconds(cold)
            if cold is not None and "session_start" in run:
                cold_text = f"{_seconds(run['session_start'])} + {cold_text}"
            lines.append(
                f"| {_files(table['files'])} | {table['metadata_bytes'] / 1e6:.0f} MB, "
                f"{table['delete_files']} delete files | {run['engine']} | {LABELS[run['op']]}{status} "
                f"| {_seconds(_time(run))} | {cold_text} | {_gib(run.get('peak_tree_rss'))} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", action="append", choices=sorted(SCALES), help="repeatable; default 1m")
    parser.add_argument("--format-version", type=int, choices=[2, 3], default=2, help="3: deletion vectors")
    parser.add_argument("--repeat", type=int, help="warm runs (overrides the scale's)")
    parser.add_argument("--engines", default="deltaspark,pyiceberg")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v for deltaspark")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per worker process")
    parser.add_argument("--mem-cap-gib", type=float, default=16.0, help="kill a worker tree above this")
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="use a table kept by an earlier --keep run")
    parser.add_argument("--out", help="write all figures here as JSON")
    args = parser.parse_args(argv)
    args.engines, args.ops = args.engines.split(","), args.ops.split(",")
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "scales": [],
    }
    for name in args.scale or ["1m"]:
        spec, repeat = SCALES[name]
        spec = replace(spec, format_version=args.format_version)
        results["scales"].append(
            run_scale(name, spec, args.repeat if args.repeat is not None else repeat, args)
        )
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(markdown(results))
    bad = failed_runs(results, "answer_matches")
    if bad:
        print(f"FAILED: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
