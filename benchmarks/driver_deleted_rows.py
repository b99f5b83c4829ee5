"""Where a read's deleted rows are best decoded: on the driver, or in tasks.

    .venv/bin/python -m benchmarks.driver_deleted_rows --out benchmarks/results/x.json

A read of few files may decode its deletion vectors on the driver (`read/scan.py`,
`spark.deltaspark.read.driverDeletedRows`): no Python worker, no job, but the deleted rows then
travel in the query's plan as a local relation of (file, row) pairs. For each count of rows already
deleted, a fresh `--rows`-row table of 20 files with deletion vectors gets one DELETE (the rows
already deleted), then a second DELETE of as many rows and a `toDF().count()` are timed, with the
driver route allowed (`driverDeletedRows` above the count) and off (`0`): seconds, best of
`--repeat` rounds after a first one. One process, `local[2]`, Spark's defaults otherwise (200
shuffle partitions, as a user's session). Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def _round(spark: Any, path: Path, rows: int, modulus: int, limit: int) -> tuple[float, float]:
    from pyspark.sql import functions as F

    import deltaspark
    from deltaspark import DeltaTable

    spark.conf.set("spark.deltaspark.read.driverDeletedRows", str(limit))
    shutil.rmtree(path, ignore_errors=True)
    table = spark.range(0, rows, 1, 20).withColumn("v", F.col("id") * 2)
    deltaspark.write(table, str(path), properties={"delta.enableDeletionVectors": "true"})
    DeltaTable.forPath(spark, str(path)).delete(f"id % {modulus} = 3")
    started = time.perf_counter()
    DeltaTable.forPath(spark, str(path)).delete(f"id % {modulus} = 4")
    delete = time.perf_counter() - started
    started = time.perf_counter()
    DeltaTable.forPath(spark, str(path)).toDF().count()
    return delete, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--moduli", default="100,30,10", help="every n-th row deleted, per case")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workdir", default="/tmp/deltaspark-bench/driver-deleted-rows")
    parser.add_argument("--out")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from benchmarks.worker_deltaspark import start_session

    spark = start_session("4g", [], None)
    path = Path(args.workdir) / "t"
    cases = []
    for modulus in [int(m) for m in args.moduli.split(",")]:
        deleted = args.rows // modulus
        case: dict[str, Any] = {"rows_deleted_before": deleted}
        for side, limit in (("driver", deleted + 1), ("tasks", 0)):
            runs = [_round(spark, path, args.rows, modulus, limit) for _ in range(args.repeat + 1)][1:]
            case[side] = {
                "delete_seconds": round(min(r[0] for r in runs), 2),
                "count_seconds": round(min(r[1] for r in runs), 2),
            }
        print(json.dumps(case), flush=True)
        cases.append(case)
    import pyspark

    result = {"pyspark": pyspark.__version__, "session": "local[2], Spark's defaults", "rows": args.rows}
    result["cases"] = cases
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
