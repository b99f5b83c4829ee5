"""deltaspark in a process of its own, with its own local Spark JVM.

The session is created once (its start-up is the cold start, reported apart); the first run of an
operation is cold too (JIT, class loading), then `--repeat` warm runs are timed phase by phase:

- `replay`: `forPath` (list `_delta_log`), `snapshot()` (the protocol/metadata job), `files().count()`
  (the replay job);
- `todf`: `snapshot().toDF()` and its physical plan (collects the paths when the table has at most
  `spark.deltaspark.read.maxDriverFiles` files; no data is read);
- `checkpoint`: `DeltaTable.checkpoint()` when this version of deltaspark has it; the log is put
  back after each run so every run writes the same checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from benchmarks.common import LogState, Timer, own_peak_rss, repeat
from benchmarks.procmon import emit


def start_session(driver_memory: str, confs: list[str], event_log: str | None) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("deltaspark-benchmark")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if event_log:
        os.makedirs(event_log, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", event_log)
    for conf in confs:
        key, _, value = conf.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jvm_heap_peak(spark: Any, reset: bool = False) -> int:
    """Peak bytes used across the JVM's heap pools since start, or since the last `reset` (driver
    and local executors share it); `reset` starts the pools' peaks again after reading them."""
    jvm = spark.sparkContext._jvm
    pools = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    heap = jvm.java.lang.management.MemoryType.HEAP
    peak = 0
    for pool in pools:
        if pool.getType().equals(heap):
            peak += int(pool.getPeakUsage().getUsed())
            if reset:
                pool.resetPeakUsage()
    return peak


def _job_group(spark: Any, name: str) -> None:
    spark.sparkContext.setJobGroup(name, name)


def replay_run(spark: Any, table: str) -> tuple[Timer, dict[str, Any]]:
    from deltaspark import DeltaTable

    timer = Timer()
    with timer.phase("listing"):
        dt = DeltaTable.forPath(spark, table)
    with timer.phase("protocol_metadata"):
        _job_group(spark, "protocol_metadata")
        snap = dt.snapshot()
    with timer.phase("replay"):
        _job_group(spark, "replay")
        files = snap.files().count()
    return timer, {"version": snap.version, "files": files}


def todf_run(spark: Any, table: str) -> tuple[Timer, dict[str, Any]]:
    from deltaspark import DeltaTable

    timer = Timer()
    with timer.phase("snapshot"):
        snap = DeltaTable.forPath(spark, table).snapshot()
    with timer.phase("toDF"):
        _job_group(spark, "toDF")
        df = snap.toDF()
        df._jdf.queryExecution().executedPlan()
    return timer, {"version": snap.version, "columns": len(df.columns)}


def checkpoint_run(spark: Any, table: str, state: LogState) -> tuple[Timer, dict[str, Any]]:
    from deltaspark import DeltaTable

    timer = Timer()
    try:
        with timer.phase("checkpoint"):
            _job_group(spark, "checkpoint")
            result = DeltaTable.forPath(spark, table).checkpoint()
        facts = {"numOfAddFiles": getattr(result, "numOfAddFiles", None), "written": state.new_files()}
    finally:
        state.restore()
    return timer, facts


def run_op(spark: Any, op: str, args: argparse.Namespace) -> dict[str, Any]:
    from deltaspark import DeltaTable

    result: dict[str, Any] = {"engine": "deltaspark", "op": op}
    try:
        if op == "replay":
            result.update(repeat(lambda: replay_run(spark, args.table), args.repeat))
            if args.explain:
                snap = DeltaTable.forPath(spark, args.table).snapshot()
                plan = snap.files().groupBy().count()._jdf.queryExecution().executedPlan()
                result["plan"] = plan.toString()
        elif op == "todf":
            result.update(repeat(lambda: todf_run(spark, args.table), args.repeat))
        elif not hasattr(DeltaTable, "checkpoint"):
            result["status"] = "not available"
        else:
            state = LogState(args.table)
            result.update(repeat(lambda: checkpoint_run(spark, args.table, state), args.repeat))
        result.setdefault("status", "ok")
    except Exception as exc:  # reported, not raised: the runner prints what failed and goes on
        result["status"] = "error"
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:500] if str(exc) else ''}"
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--op", required=True, help="replay, todf, checkpoint; comma-separated: one session")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--event-log")
    parser.add_argument("--explain", action="store_true", help="include the replay's physical plan")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    spark = start_session(args.driver_memory, args.conf, args.event_log)
    session_seconds = round(time.perf_counter() - started, 3)
    for op in args.op.split(","):
        result = run_op(spark, op, args)
        result["session_start"] = session_seconds
        try:
            result["jvm_heap_peak"] = jvm_heap_peak(spark)
        except Exception:  # the JVM may be gone after an OutOfMemoryError
            result["jvm_heap_peak"] = None
        result["python_peak_rss"] = own_peak_rss()
        emit(result)
    spark.stop()


if __name__ == "__main__":
    main()
