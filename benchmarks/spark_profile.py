"""Where deltaspark's time goes: a summary of a Spark event log (`run.py --event-log DIR`).

The workers tag their jobs with a job group per phase (`protocol_metadata`, `replay`, `toDF`,
`checkpoint`); this prints, per application and job group, each job's wall time and its stages
(tasks, seconds, input read, shuffle written/read, peak execution memory) - the evidence for what
to change in the engine.

Usage: `python -m benchmarks.spark_profile /tmp/deltaspark-bench/events/1m [--group replay]`
"""

from __future__ import annotations

import argparse
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

MB = 1e6


def _metric(accumulables: list[dict[str, Any]], name: str) -> float:
    for acc in accumulables:
        if acc.get("Name") == name:
            try:
                return float(acc.get("Value") or 0)
            except (TypeError, ValueError):
                return 0.0
    return 0.0


def _lines(path: Path) -> Iterator[str]:
    """Event lines of a plain or zstd-compressed event log file (Spark 4 compresses by default)."""
    if path.suffix == ".zstd":
        with pa.CompressedInputStream(pa.OSFile(str(path)), "zstd") as stream:
            yield from io.TextIOWrapper(stream, encoding="utf-8")  # type: ignore[arg-type]
    else:
        with path.open() as handle:
            yield from handle


def _event_files(root: Path) -> list[Path]:
    """Event log files under `root`: plain files, or Spark's rolling `eventlog_v2_*` directories."""
    if root.is_file():
        return [root]
    found = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            found += sorted(p for p in entry.iterdir() if p.name.startswith("events_"))
        elif not entry.name.startswith("."):
            found.append(entry)
    return found


def summarize(path: Path) -> dict[str, Any]:
    """Jobs (with group and stages) of one event log file."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    stages: dict[int, dict[str, Any]] = {}
    app = path.name
    for line in _lines(path):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app = event.get("App ID", app)
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            job = {
                "id": event["Job ID"],
                "group": props.get("spark.jobGroup.id", ""),
                "start": event["Submission Time"],
                "stages": [],
            }
            jobs[event["Job ID"]] = job
            for stage_id in event.get("Stage IDs", []):
                stage_job[stage_id] = event["Job ID"]
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            acc = info.get("Accumulables", [])
            stages[info["Stage ID"]] = {
                "stage": info["Stage ID"],
                "name": info.get("Stage Name", "")[:60],
                "tasks": info.get("Number of Tasks"),
                "seconds": round((info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000, 2),
                "input_mb": round(_metric(acc, "internal.metrics.input.bytesRead") / MB, 1),
                "shuffle_write_mb": round(
                    _metric(acc, "internal.metrics.shuffle.write.bytesWritten") / MB, 1
                ),
                "shuffle_read_mb": round(
                    (
                        _metric(acc, "internal.metrics.shuffle.read.remoteBytesRead")
                        + _metric(acc, "internal.metrics.shuffle.read.localBytesRead")
                    )
                    / MB,
                    1,
                ),
                "peak_exec_mem_mb": round(_metric(acc, "internal.metrics.peakExecutionMemory") / MB, 1),
                "gc_seconds": round(_metric(acc, "internal.metrics.jvmGCTime") / 1000, 1),
            }
    for stage_id, stage in sorted(stages.items()):
        if stage_id in stage_job and stage_job[stage_id] in jobs:
            jobs[stage_job[stage_id]]["stages"].append(stage)
    for job in jobs.values():
        job["seconds"] = round((job.get("end", job["start"]) - job["start"]) / 1000, 2)
    return {"app": app, "jobs": sorted(jobs.values(), key=lambda j: j["id"])}


def render(summary: dict[str, Any], group: str | None) -> str:
    lines = [f"## {summary['app']}"]
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job in summary["jobs"]:
        by_group[job["group"]].append(job)
    for name, jobs in by_group.items():
        if group and name != group:
            continue
        lines.append(f"- group `{name or '-'}`: {len(jobs)} jobs, {sum(j['seconds'] for j in jobs):.1f} s")
        for job in jobs:
            lines.append(f"  - job {job['id']}: {job['seconds']} s")
            for s in job["stages"]:
                shuffle = f"shuffle w {s['shuffle_write_mb']} MB / r {s['shuffle_read_mb']} MB"
                lines.append(
                    f"    - stage {s['stage']} `{s['name']}`: {s['tasks']} tasks, {s['seconds']} s, "
                    f"in {s['input_mb']} MB, {shuffle}, "
                    f"peak exec mem {s['peak_exec_mem_mb']} MB, GC {s['gc_seconds']} s"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Summarize Spark event logs written by the benchmark.")
    parser.add_argument("path", help="an event log file or a directory of them")
    parser.add_argument("--group", help="only this job group (replay, protocol_metadata, toDF, checkpoint)")
    args = parser.parse_args(argv)
    for path in _event_files(Path(args.path)):
        print(render(summarize(path), args.group))


if __name__ == "__main__":
    main()
