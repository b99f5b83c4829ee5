"""One engine on a generated Iceberg table, in a process of its own (see `benchmarks/iceberg.py`).

- `plan`: deltaspark `IcebergTable.forPath` + `snapshot().files().count()` (manifest list and
  manifests decoded on the executors; live data and delete files); pyiceberg
  `StaticTable.from_metadata` + `scan().plan_files()` (manifests decoded in this process; data files
  with their delete files matched);
- `count`: deltaspark `snapshot().count()` (record counts less deletion vectors and position
  deletes); pyiceberg `scan().count()` (record counts, and the files with deletes read with them).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import Timer, measure_and_emit, repeat


def deltaspark_run(spark: Any, table: str, op: str) -> tuple[Timer, dict[str, Any]]:
    from deltaspark.iceberg import IcebergTable

    timer = Timer()
    with timer.phase("metadata"):
        snapshot = IcebergTable.forPath(spark, table).snapshot()
    with timer.phase(op):
        facts = {"files": snapshot.files().count()} if op == "plan" else {"rows": snapshot.count()}
    return timer, facts


def pyiceberg_run(metadata_location: str, op: str) -> tuple[Timer, dict[str, Any]]:
    from pyiceberg.table import StaticTable

    timer = Timer()
    with timer.phase("metadata"):
        table = StaticTable.from_metadata(metadata_location)
    with timer.phase(op):
        if op == "plan":
            tasks = list(table.scan().plan_files())
            facts = {"files": len(tasks) + len({d.file_path for t in tasks for d in t.delete_files})}
        else:
            facts = {"rows": table.scan().count()}
    return timer, facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["deltaspark", "pyiceberg"], required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--metadata", required=True, help="the metadata JSON (pyiceberg needs it named)")
    parser.add_argument("--op", choices=["plan", "count"], required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--conf", action="append", default=[])
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"engine": args.engine, "op": args.op}

    def measure() -> dict[str, Any]:
        if args.engine == "pyiceberg":
            return repeat(lambda: pyiceberg_run(args.metadata, args.op), args.repeat)
        from benchmarks.worker_deltaspark import jvm_heap_peak, start_session

        started = time.perf_counter()
        spark = start_session(args.driver_memory, args.conf, None)
        session = round(time.perf_counter() - started, 3)
        measured = repeat(lambda: deltaspark_run(spark, args.table, args.op), args.repeat)
        measured |= {"session_start": session, "jvm_heap_peak": jvm_heap_peak(spark)}
        spark.stop()
        return measured

    measure_and_emit(result, measure)


if __name__ == "__main__":
    main()
