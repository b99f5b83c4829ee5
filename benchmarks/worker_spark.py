"""Spark alone: the least any replay written as Spark DataFrame transforms must do.

The same segment as the floor (`worker_floor.segment`: the checkpoint `_last_checkpoint` names and
the JSON commits after it) read with plain Spark, no deltaspark code: the checkpoint's and commits'
`add`/`remove` with only the fields a replay keys on (Spark's JSON source still parses whole lines),
the version from each file's name, the newest action per (path, deletion vector), the adds
counted (`replay_run` has the plans). No protocol or metadata, no validation, no path
canonicalization: what deltaspark adds on top of this is its own cost, what this costs is Spark's.
The first run of the session is its cold run (JIT, class loading, code generation).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import Timer, own_peak_rss, repeat
from benchmarks.procmon import emit
from benchmarks.worker_deltaspark import jvm_heap_peak, start_session
from benchmarks.worker_floor import segment

_DV = "struct<storageType:string,pathOrInlineDv:string,offset:int>"
_ACTIONS = f"add struct<path:string,deletionVector:{_DV}>, remove struct<path:string,deletionVector:{_DV}>"


def _keyed(actions: Any, version: Any) -> Any:
    """`path`, `dv` (the deletion vector's identity) and `newest` (version, is_add) per file action."""
    from pyspark.sql import functions as F

    dv = F.coalesce(F.col("add.deletionVector"), F.col("remove.deletionVector"))
    dv_id = F.concat_ws("|", dv.storageType, dv.pathOrInlineDv, dv.offset.cast("string"))
    return actions.where(F.col("add").isNotNull() | F.col("remove").isNotNull()).select(
        F.coalesce(F.col("add.path"), F.col("remove.path")).alias("path"),
        dv_id.alias("dv"),
        F.struct(version.alias("v"), F.col("add").isNotNull().alias("is_add")).alias("newest"),
    )


def replay_run(spark: Any, table: str) -> tuple[Timer, dict[str, Any]]:
    """JSON only: one aggregation keeps the newest action per file. Checkpoint + commits: only the
    commits are aggregated; the checkpoint's rows stream through a broadcast anti-join against them
    (no shuffle of the checkpoint), the best plain-Spark plan for a short tail on a big checkpoint."""
    from pyspark.sql import functions as F

    timer = Timer()
    with timer.phase("replay"):
        checkpoints, commits = segment(table)
        newest = None
        if commits:
            version = F.regexp_extract(F.col("_metadata.file_name"), r"^(\d{20})\.", 1).cast("long")
            rows = _keyed(spark.read.schema(_ACTIONS).json(list(map(str, commits))), version)
            newest = rows.groupBy("path", "dv").agg(F.max("newest").alias("newest"))
        files = 0
        if checkpoints:
            rows = _keyed(spark.read.schema(_ACTIONS).parquet(*map(str, checkpoints)), F.lit(-1))
            if newest is not None:
                rows = rows.join(F.broadcast(newest.select("path", "dv")), ["path", "dv"], "left_anti")
            files += rows.where("newest.is_add").count()
        if newest is not None:
            files += newest.where("newest.is_add").count()
    last = commits[-1] if commits else checkpoints[0]
    return timer, {"files": files, "version": int(last.name[:20])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--op", default="replay")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    spark = start_session(args.driver_memory, [], None)
    result: dict[str, Any] = {
        "engine": "spark",
        "op": "replay",
        "session_start": round(time.perf_counter() - started, 3),
    }
    try:
        result.update(repeat(lambda: replay_run(spark, args.table), args.repeat))
        result["status"] = "ok"
    except Exception as exc:  # reported, not raised: the runner prints what failed and goes on
        result["status"] = "error"
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:500] if str(exc) else ''}"
    result["jvm_heap_peak"] = jvm_heap_peak(spark)
    result["python_peak_rss"] = own_peak_rss()
    emit(result)
    spark.stop()


if __name__ == "__main__":
    main()
