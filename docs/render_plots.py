"""Render the benchmark plots of docs/benchmarks.md from the JSON files in benchmarks/results/.

    .venv/bin/python docs/render_plots.py

writes docs/img/*.png (committed). Each plot compares deltaspark with delta-rs and plain Spark on one
benchmark, from one run's JSON file; the tables of docs/benchmarks.md give every figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img"

COLORS = {
    "deltaspark": "#1f77b4",
    "deltaspark, deletion vectors": "#6baed6",
    "plain Spark": "#ff7f0e",
    "delta-rs": "#2ca02c",
    "pyarrow decode floor": "#9a9a9a",
}


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def bars(
    path: Path,
    title: str,
    groups: list[str],
    series: dict[str, list[float | None]],
    ylabel: str = "seconds",
    log: bool = False,
    missing: str = "not run",
) -> None:
    """Grouped bars, one group per case, one bar per engine; a missing value is labelled."""
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    width = 0.8 / len(series)
    top = max(v for values in series.values() for v in values if v is not None)
    for i, (engine, values) in enumerate(series.items()):
        for g, value in enumerate(values):
            x = g + (i - (len(series) - 1) / 2) * width
            if value is None:
                ax.text(
                    x, 0.01 if log else top * 0.02, missing, rotation=90, ha="center", va="bottom", fontsize=7
                )
                continue
            ax.bar(x, value, width, color=COLORS[engine])
            ax.text(x, value, f"{value:.3g}", ha="center", va="bottom", fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[e]) for e in series]
    ax.legend(handles, list(series), fontsize=8, frameon=False)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel + (" (log scale)" if log else ""))
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, top * 1.15)
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def replay() -> None:
    """Replay to a file count, warm medians: 2026-11-26-spark-floor-{1m,10m,100m}.json."""
    engines = {
        "deltaspark": "deltaspark",
        "delta-rs": "delta-rs",
        "spark": "plain Spark",
        "floor": "pyarrow decode floor",
    }
    scales = ["1m", "10m", "100m"]
    series: dict[str, list[float | None]] = {label: [] for label in engines.values()}
    for scale in scales:
        runs = {
            r["engine"]: r
            for s in load(f"2026-11-26-spark-floor-{scale}.json")["scales"]
            for r in s["runs"]
            if r["op"] == "replay" and r["status"] == "ok"
        }
        for engine, label in engines.items():
            series[label].append(runs[engine]["median"] if engine in runs else None)
    bars(
        OUT / "replay.png",
        "Replay to a file count, warm median (2026-11-26; delta-rs runs out of memory at 100M)",
        [
            "1M files, 100 JSON commits",
            "10M files, checkpoint + 100 commits",
            "100M files, checkpoint + 100 commits",
        ],
        series,
    )


def writes() -> None:
    """Writes, medians: 2026-11-27-write-5m-footers.json (pyspark 4.x)."""
    cases = {
        "bulk unpartitioned": "5M rows,\nunpartitioned",
        "bulk partitioned": "5M rows,\n100 partitions",
        "small append": "append 10 rows,\npartitioned",
        "small append unpartitioned": "append 10 rows,\nunpartitioned",
    }
    engines = {"deltaspark": "deltaspark", "spark": "plain Spark", "deltars": "delta-rs"}
    data = load("2026-11-27-write-5m-footers.json")["cases"]
    series = {label: [data[c].get(e, {}).get("median") for c in cases] for e, label in engines.items()}
    bars(
        OUT / "writes.png", "Writes, median (2026-11-27, pyspark 4.x)", list(cases.values()), series, log=True
    )


def merge() -> None:
    """MERGE into a 10M-row table: 2026-11-28-merge-10m.json."""
    cases = {
        "upsert": "upsert of 100k rows",
        "delete": "delete-only, 100k keys",
        "insert": "insert-only, 1M keys",
        "unique-keys": "update of 1M keys",
    }
    runs = {(r["engine"], r["case"]): r for r in load("2026-11-28-merge-10m.json")["runs"]}
    series = {
        "deltaspark": [runs["deltaspark", c]["warm_seconds"] for c in cases],
        "deltaspark, deletion vectors": [runs["deltaspark", c]["with_dvs"]["seconds"] for c in cases],
        "plain Spark": [runs["deltaspark", c]["spark_plain_seconds"] for c in cases],
        "delta-rs": [runs["delta-rs", c]["seconds"] for c in cases],
    }
    bars(
        OUT / "merge.png",
        "MERGE into a 10M-row table (2026-11-28; deltaspark warm)",
        list(cases.values()),
        series,
    )


def optimize() -> None:
    """OPTIMIZE: 2026-11-28-optimize.json."""
    cases = {"compact": "compaction: 20,000 small files into 100", "zorder": "Z-order of 10M rows, 200 files"}
    runs = {(r["engine"], r["case"]): r for r in load("2026-11-28-optimize.json")["runs"]}
    series = {
        "deltaspark": [runs["deltaspark", c]["warm_seconds"] for c in cases],
        "plain Spark": [runs["deltaspark", c]["spark_plain_seconds"] for c in cases],
        "delta-rs": [runs["delta-rs", c]["seconds"] for c in cases],
    }
    bars(OUT / "optimize.png", "OPTIMIZE (2026-11-28; deltaspark warm)", list(cases.values()), series)


PLOTS = [replay, writes, merge, optimize]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        plot()
        print(OUT / f"{plot.__name__}.png")


if __name__ == "__main__":
    main()
