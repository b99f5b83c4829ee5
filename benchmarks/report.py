"""The results as markdown: one row per scale, engine and operation, then deltaspark's phases.

Usage: `python -m benchmarks.report results.json` re-renders a saved run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

GIB = 1024**3


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _gib(value: int | None) -> str:
    return "—" if not value else f"{value / GIB:.2f}"


def _files(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n:,}"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"{a / b:.2f}"


def _find(runs: list[dict[str, Any]], engine: str, op: str) -> dict[str, Any] | None:
    return next((r for r in runs if r["engine"] == engine and r["op"] == op), None)


def _median(run: dict[str, Any] | None) -> float | None:
    return run.get("median") if run and run["status"] == "ok" else None


def _cold(run: dict[str, Any]) -> str:
    cold = (run.get("cold") or {}).get("total")
    if cold is None:
        return "—"
    if "session_start" in run:
        return f"{_seconds(run['session_start'])} + {_seconds(cold)}"
    return _seconds(cold)


LABELS = {
    "replay": "snapshot replay → file count",
    "todf": "`toDF` planning",
    "checkpoint": "checkpoint write",
}


SPECIAL_LABELS = {
    "floor": "pyarrow decode of the log",
    "spark": "Spark alone: read, newest per file, count (no deltaspark)",
}


def rows(scale: dict[str, Any]) -> list[str]:
    runs = scale["runs"]
    table = scale["table"]
    commits = table["json_commits"]
    shape = (
        f"checkpoint + {commits} commits" if table["checkpoint_version"] is not None else f"{commits} commits"
    )
    size = table["log_bytes"]
    source = f"{shape}, {size / 1e9:.2g} GB" if size >= 1e9 else f"{shape}, {size / 1e6:.3g} MB"
    out = []
    for run in runs:
        engine, op = run["engine"], run["op"]
        median = _median(run)
        vs_rs = vs_floor = "—"
        if engine in ("deltaspark", "spark") and op in ("replay", "checkpoint"):
            vs_rs = _ratio(median, _median(_find(runs, "delta-rs", op)))
        if op == "replay" and engine != "floor":
            vs_floor = _ratio(median, _median(_find(runs, "floor", "replay")))
        status = "" if run["status"] == "ok" else f" ({run['status']})"
        if run["status"] in ("memory cap", "timeout"):
            status = f" ({run['status']} after {run['process_seconds']:.0f} s)"
        if run.get("files_match") is False:
            status += " (WRONG file count)"
        label = SPECIAL_LABELS.get(engine) or LABELS[op]
        out.append(
            f"| {_files(table['live_files'])} | {source} | {engine} | {label}{status} | {_seconds(median)} "
            f"| {_cold(run)} | {_gib(run.get('peak_tree_rss'))} | {_gib(run.get('jvm_heap_peak'))} "
            f"| {vs_rs} | {vs_floor} |"
        )
    return out


def phase_rows(scale: dict[str, Any]) -> list[str]:
    out = []
    for run in scale["runs"]:
        phases = run.get("median_phases")
        if run["engine"] == "deltaspark" and phases:
            text = ", ".join(f"{k} {_seconds(v)}" for k, v in phases.items())
            out.append(f"| {_files(scale['table']['live_files'])} | {run['op']} | {text} |")
    return out


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    v = results["versions"]
    lines = [
        f"Measured {results['started']} on {m['cpus']} cores, {m['memory_gib']} GiB RAM ({m['platform']}); "
        f"pyspark {v['pyspark']}, deltalake {v['deltalake']}, pyarrow {v['pyarrow']}. "
        "Seconds: median of the warm runs; cold: Spark session start + first run for deltaspark, first "
        "run otherwise. Peak RSS: the whole process tree (Python + JVM). Ratios are of warm medians.",
        "",
        "| files | log | engine | operation | warm s | cold s | peak RSS GiB | JVM heap peak GiB "
        "| ÷ delta-rs | ÷ floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scale in results["scales"]:
        lines += rows(scale)
    phases = [row for scale in results["scales"] for row in phase_rows(scale)]
    if phases:
        lines += ["", "deltaspark, median seconds per phase:", ""]
        lines += ["| files | operation | phases |", "|---|---|---|"]
        lines += phases
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        print(markdown(json.load(handle)))
