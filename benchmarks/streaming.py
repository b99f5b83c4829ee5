"""Spark's own faces: `format("delta")` batch reads, a stream's catch-up, the streaming sink.

    .venv/bin/python -m benchmarks.streaming --out benchmarks/results/x.json

One process, one `local[2]` session (8 shuffle partitions), each figure the best of `--repeat`
warm runs after a first one:

- `batch`: a full scan of a `--rows`-row table of 100 files into Spark's `noop` sink, four ways:
  `spark.read.format("delta")` (deltaspark's Python data source), `DeltaTable.toDF()` and
  `spark.read.parquet` of the same files (Spark alone, no log); and a bare Python data source
  reading the same files with pyarrow in as many tasks as `format("delta")` plans (the floor of
  any reader built on Spark's Python data sources).
- `skipping`: the same table read with a filter one file's statistics can hold (`id` in 1% of the
  range), by `format("delta")` with Spark 4.1's filter pushdown on, by `DeltaTable.toDF(filter)`
  and by `spark.read.parquet` of every file with the filter (Spark's own row-group statistics,
  no log): seconds, and what each planned (`format("delta")`: its input partitions, a file each
  when few files are left; the others: their input files).
- `catch-up`: a table of `--commits` commits of one file each, read from the start by a stream
  with `Trigger.AvailableNow` and `maxFilesPerTrigger=100`, into the `noop` sink; against Spark's
  own file stream source over the same parquet files (same trigger and limit). Per-batch latency is
  the query's own `durationMs.triggerExecution` of each batch.
- `sink`: `--batches` micro-batches of 10,000 rows (a file stream over parquet files of 10,000 rows,
  one file per batch) written by `deltaspark.writeStream` (one commit per batch) and by Spark's own
  parquet file sink: seconds per batch.
- `planning`: the memory the planning process holds for logs of `--plan-files / 10` and
  `--plan-files` files with a checkpoint, and `--plan-files` files in JSON commits only (logs
  written here, without data files): the peak RSS of fresh Python processes planning a batch read
  (`table_state.load`, every live file) and a stream's first two batches of its initial snapshot,
  beside that of the same process importing only.

Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _session(extra: list[str]) -> Any:
    from benchmarks.worker_deltaspark import start_session

    return start_session(
        "4g",
        ["spark.sql.shuffle.partitions=8", "spark.sql.streaming.numRecentProgressUpdates=1000", *extra],
        None,
    )


def _best(run: Any, repeat: int) -> tuple[float, float]:
    """(first, best of `repeat` after it) seconds of `run()`."""
    times = []
    for _ in range(repeat + 1):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return round(times[0], 3), round(min(times[1:]), 3)


def batch(spark: Any, workdir: Path, rows: int, repeat: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import deltaspark
    from deltaspark import DeltaTable

    path = workdir / "batch"
    if not (path / "_delta_log").exists():
        table = spark.range(rows).select(
            "id",
            (F.col("id") * 0.5).alias("v"),
            F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
        )
        deltaspark.write(table.repartitionByRange(100, "id"), str(path))
    files = DeltaTable.forPath(spark, str(path)).toDF().inputFiles()

    def noop(df: Any) -> Any:
        return lambda: df.write.format("noop").mode("overwrite").save()

    from deltaspark.datasource.batch import file_partitions
    from deltaspark.datasource.table_state import load
    from deltaspark.spark_compat import file_splitting

    # as format("delta") plans them, planned here so that no Spark call warms its first run
    tasks = len(file_partitions(load(str(path)), file_splitting(spark)))
    floor = _bare_python_source(spark, files, tasks)
    out: dict[str, Any] = {"rows": rows, "files": len(files), "format_delta_tasks": tasks}
    for name, frame in (
        ("format_delta", lambda: spark.read.format("delta").load(str(path))),
        ("todf", lambda: DeltaTable.forPath(spark, str(path)).toDF()),
        ("spark_parquet", lambda: spark.read.parquet(*files)),
        ("bare_python_source", lambda: spark.read.format(floor).load()),
    ):
        first, best = _best(lambda frame=frame: noop(frame())(), repeat)
        out[name] = {"first_seconds": first, "seconds": best}
    out["ratio_to_todf"] = round(out["format_delta"]["seconds"] / out["todf"]["seconds"], 2)
    out["ratio_to_parquet"] = round(out["format_delta"]["seconds"] / out["spark_parquet"]["seconds"], 2)
    out["ratio_to_bare_python_source"] = round(
        out["format_delta"]["seconds"] / out["bare_python_source"]["seconds"], 2
    )
    out["bare_python_source_to_todf"] = round(
        out["bare_python_source"]["seconds"] / out["todf"]["seconds"], 2
    )
    return out


def _bare_python_source(spark: Any, files: list[str], tasks: int) -> str:
    """Registers, and names, the least a Python data source can do to read the same files: the
    same number of tasks, each `pyarrow.parquet.read_table` of its files cast to the schema and
    yielded as Arrow batches (no log, no column plan, no deletion vectors): the floor of any
    reader built on Spark's Python data sources. Defined here so that Spark ships it by value."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Files(InputPartition):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

    class Reader(DataSourceReader):
        def partitions(self) -> list[Files]:
            count = len(files)
            return [Files(files[i * count // tasks : (i + 1) * count // tasks]) for i in range(tasks)]

        def read(self, partition: Files):  # noqa: ANN202
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("name", pa.string())])
            for path in partition.paths:
                yield from pq.read_table(path.removeprefix("file:")).cast(schema).to_batches()

    class Bare(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bare_python_parquet"

        def schema(self) -> str:
            return "id bigint, v double, name string"

        def reader(self, schema: Any) -> Reader:
            return Reader()

    spark.dataSource.register(Bare)
    return Bare.name()


def skipping(spark: Any, workdir: Path, repeat: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import deltaspark
    from deltaspark import DeltaTable
    from deltaspark.datasource.registration import PUSHDOWN_CONF

    path = workdir / "batch"  # written by `batch`, ids in order over 100 files
    table = DeltaTable.forPath(spark, str(path)).toDF()
    files, rows = table.inputFiles(), table.count()  # as `batch` wrote it (its --rows)
    condition = F.col("id").between(rows // 2, rows // 2 + rows // 100 - 1)
    out: dict[str, Any] = {"rows": rows, "files": len(files), "filter": "id in 1% of the range"}
    spark.conf.set(PUSHDOWN_CONF, "true")
    deltaspark.register(spark)
    try:
        for name, frame in (
            ("format_delta", lambda: spark.read.format("delta").load(str(path)).where(condition)),
            ("todf", lambda: DeltaTable.forPath(spark, str(path)).toDF(condition)),
            ("spark_parquet", lambda: spark.read.parquet(*files).where(condition)),
        ):
            assert frame().count() == rows // 100, name
            first, best = _best(
                lambda frame=frame: frame().write.format("noop").mode("overwrite").save(), repeat
            )
            planned = frame().rdd.getNumPartitions() if name == "format_delta" else len(frame().inputFiles())
            out[name] = {"first_seconds": first, "seconds": best, "planned": planned}
    finally:
        spark.conf.set(PUSHDOWN_CONF, "false")
        deltaspark.register(spark)
    out["ratio_to_todf"] = round(out["format_delta"]["seconds"] / out["todf"]["seconds"], 2)
    return out


def _table_head(now: int) -> list[dict[str, Any]]:
    """The protocol and metaData of a new table of one `id long` column, written by hand."""
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
        "partitionColumns": [],
        "configuration": {},
        "createdTime": now,
    }
    return [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": metadata}]


def _many_commits(spark: Any, path: Path, commits: int, rows_per_file: int) -> None:
    """A table of `commits` commits after its first, each adding one data file (the data written by
    Spark once, the log by hand: one `add` per commit, as a stream of small appends leaves it)."""
    if (path / "_delta_log").exists():
        return
    data = path / "data"
    spark.range(commits * rows_per_file).repartition(commits).write.parquet(str(data))
    parts = sorted(p for p in data.iterdir() if p.name.endswith(".parquet"))
    log = path / "_delta_log"
    log.mkdir(parents=True)
    now = int(time.time() * 1000)
    first = [{"commitInfo": {"timestamp": now, "operation": "CREATE TABLE"}}, *_table_head(now)]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in first) + "\n")
    for version, part in enumerate(parts, 1):
        add = {
            "path": f"data/{part.name}",
            "partitionValues": {},
            "size": part.stat().st_size,
            "modificationTime": now + version,
            "dataChange": True,
            "stats": json.dumps({"numRecords": rows_per_file}),
        }
        actions = [{"commitInfo": {"timestamp": now + version, "operation": "WRITE"}}, {"add": add}]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def _stream_seconds(spark: Any, reader: Any, checkpoint: Path) -> tuple[float, list[int], int]:
    shutil.rmtree(checkpoint, ignore_errors=True)
    started = time.perf_counter()
    query = (
        reader.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    latencies = [int(p["durationMs"].get("triggerExecution", 0)) for p in progress]
    return round(seconds, 3), latencies, sum(p["numInputRows"] for p in progress)


def catch_up(spark: Any, workdir: Path, commits: int, repeat: int) -> dict[str, Any]:
    path = workdir / "commits"
    _many_commits(spark, path, commits, 1000)
    out: dict[str, Any] = {"commits": commits, "maxFilesPerTrigger": 100}
    runs = {
        "format_delta": lambda: (
            spark.readStream.format("delta").option("maxFilesPerTrigger", 100).load(str(path))
        ),
        "spark_file_stream": lambda: (
            spark.readStream.schema("id long").option("maxFilesPerTrigger", 100).parquet(str(path / "data"))
        ),
    }
    for name, reader in runs.items():
        best = None
        for _ in range(repeat + 1):
            seconds, latencies, rows = _stream_seconds(spark, reader(), workdir / f"cp-{name}")
            assert rows == commits * 1000, (name, rows)
            if best is None or seconds < best[0]:
                best = (seconds, latencies)
        assert best is not None
        out[name] = {
            "seconds": best[0],
            "batches": len(best[1]),
            "batch_ms_median": statistics.median(best[1]) if best[1] else None,
            "batch_ms_max": max(best[1]) if best[1] else None,
        }
    out["ratio"] = round(out["format_delta"]["seconds"] / out["spark_file_stream"]["seconds"], 2)
    return out


def sink(spark: Any, workdir: Path, batches: int) -> dict[str, Any]:
    import deltaspark

    source = workdir / "sink-source"
    if not source.exists():
        spark.range(batches * 10_000).repartition(batches).write.parquet(str(source))
    out: dict[str, Any] = {"batches": batches, "rows_per_batch": 10_000}

    def stream() -> Any:
        return spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(source))

    for name in ("deltaspark", "spark_parquet_sink", "foreach_batch_parquet"):
        target, checkpoint = workdir / f"sink-{name}", workdir / f"sink-cp-{name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(checkpoint, ignore_errors=True)
        started = time.perf_counter()
        if name == "deltaspark":
            query = deltaspark.writeStream(
                stream(), str(target), checkpointLocation=str(checkpoint), trigger={"availableNow": True}
            )
        elif name == "foreach_batch_parquet":
            # What any sink written in Python pays: Spark calls back into Python once per batch,
            # which then appends the batch as parquet (no log, not exactly once).
            def append(batch: Any, _: int, to: str = str(target)) -> None:
                batch.write.mode("append").parquet(to)

            query = (
                stream()
                .writeStream.foreachBatch(append)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
        else:
            query = (
                stream()
                .writeStream.format("parquet")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start(str(target))
            )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        assert len(progress) == batches, (name, len(progress))
        latencies = [int(p["durationMs"].get("triggerExecution", 0)) for p in progress]
        out[name] = {
            "seconds": round(seconds, 3),
            "per_batch_seconds": round(seconds / batches, 3),
            "batch_ms_median": statistics.median(latencies),
        }
    out["ratio_per_batch"] = round(out["deltaspark"]["seconds"] / out["spark_parquet_sink"]["seconds"], 2)
    out["ratio_to_foreach_batch"] = round(
        out["deltaspark"]["seconds"] / out["foreach_batch_parquet"]["seconds"], 2
    )
    return out


PLANNING_PROBE = """
import json, sys, time
from deltaspark.datasource.source import DeltaDataSource
from deltaspark.datasource.table_state import load
path, mode = sys.argv[1], sys.argv[2]
def rss():  # this process's peak (VmHWM; ru_maxrss keeps the parent's peak across exec)
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) // 1024
base, started, out = rss(), time.perf_counter(), {}
if mode == "batch":  # what format("delta")'s batch planning holds: every live file
    out["files"] = len(load(path).files)
elif mode == "stream":  # a stream's first two batches of its initial snapshot, 1,000 files each
    from pyspark.sql.streaming.datasource import ReadMaxFiles
    source = DeltaDataSource({"path": path})
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxFiles(1000))
    out["files"] = sum(len(p.files) for p in reader.partitions(start, end))
    out["first_batch_s"] = round(time.perf_counter() - started, 2)
    later = reader.latestOffset(end, ReadMaxFiles(1000))
    reader.partitions(end, later)
    out["end"] = (later["reservoirVersion"], later["index"])
out.update(seconds=round(time.perf_counter() - started, 2), base_mb=base, peak_rss_mb=rss())
print(json.dumps(out))
"""


def _json_log(workdir: Path, files: int) -> Path:
    """A log of `files` adds, a JSON commit per 10,000 (no checkpoint)."""
    path = workdir / f"plan-{files}"
    log = path / "_delta_log"
    if not log.exists():
        log.mkdir(parents=True)
        now = int(time.time() * 1000)
        head = _table_head(now)
        per_commit = 10_000
        for version in range(files // per_commit):
            lines = [json.dumps(a) for a in head] if version == 0 else []
            for i in range(per_commit):
                n = version * per_commit + i
                add = {
                    "path": f"part-{n:07d}-{uuid.uuid4()}.parquet",
                    "partitionValues": {},
                    "size": 1000,
                    "modificationTime": now + n,
                    "dataChange": True,
                    "stats": json.dumps({"numRecords": 10, "minValues": {"id": n}, "maxValues": {"id": n}}),
                }
                lines.append(json.dumps({"add": add}))
            (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    return path


def _checkpointed_log(workdir: Path, files: int) -> Path:
    """`files` live files: a classic checkpoint, then 10 commits of 1,000 adds each (`generate`)."""
    from benchmarks.generate import LogSpec, generate

    path = workdir / f"plan-checkpoint-{files}"
    if not (path / "_delta_log").exists():
        generate(path, LogSpec(files=files, commits=10, checkpoint=True, tail_files_per_commit=1000))
    return path


def planning(spark: Any, workdir: Path, files: int) -> dict[str, Any]:
    """Peak RSS of fresh processes planning a read of logs of `files / 10` and `files` files: a
    batch read's plan (every live file held) and a stream's first two batches of its initial
    snapshot (`load_in_stream_order`), on checkpointed logs and on a log of JSON commits only."""
    logs = {
        f"checkpoint + 10 commits, {files // 10:,} files": _checkpointed_log(workdir, files // 10),
        f"checkpoint + 10 commits, {files:,} files": _checkpointed_log(workdir, files),
        f"{files // 10_000} JSON commits, {files:,} files": _json_log(workdir, files),
    }
    out: dict[str, Any] = {}
    for name, path in logs.items():
        out[name] = {}
        for mode in ("import", "batch", "stream"):
            done = subprocess.run(
                [sys.executable, "-c", PLANNING_PROBE, str(path), mode],
                capture_output=True,
                text=True,
                check=True,
            )
            out[name][mode] = json.loads(done.stdout.splitlines()[-1])
        for mode in ("batch", "stream"):
            out[name][mode]["held_mb"] = out[name][mode]["peak_rss_mb"] - out[name]["import"]["peak_rss_mb"]
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--plan-files", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cases", default="batch,skipping,catch-up,sink,planning")
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench/streaming")
    parser.add_argument("--out")
    parser.add_argument("--conf", action="append", default=[], help="key=value, more session settings")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = _session(args.conf)
    import deltaspark

    deltaspark.register(spark)
    import pyspark

    result: dict[str, Any] = {
        "pyspark": pyspark.__version__,
        "session": ", ".join(["local[2], 8 shuffle partitions", *args.conf]),
    }
    cases = args.cases.split(",")
    if "batch" in cases:
        result["batch"] = batch(spark, workdir, args.rows, args.repeat)
        print(json.dumps(result["batch"]), flush=True)
    if "skipping" in cases:
        result["skipping"] = skipping(spark, workdir, args.repeat)
        print(json.dumps(result["skipping"]), flush=True)
    if "catch-up" in cases:
        result["catch_up"] = catch_up(spark, workdir, args.commits, args.repeat)
        print(json.dumps(result["catch_up"]), flush=True)
    if "sink" in cases:
        result["sink"] = sink(spark, workdir, args.batches)
        print(json.dumps(result["sink"]), flush=True)
    if "planning" in cases:
        result["planning"] = planning(spark, workdir, args.plan_files)
        print(json.dumps(result["planning"]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
