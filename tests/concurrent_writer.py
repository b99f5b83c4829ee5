"""A writer process for tests/test_concurrent_processes.py: its own Spark session, a few commits.

Usage: python -m tests.concurrent_writer TABLE WORKER OPS   (OPS like "append:x,overwrite:x,delete:y,prop")
Prints one JSON line per operation: {"op", "version" or null, "error" (exception class) or null};
`delete:p` deletes the even ids of partition p (version null when nothing matched); `merge:p`
deletes ids 0 and 2 of partition p and inserts those absent and the op's id (version null);
`optimize:p` compacts partition p (its "id" is the number of files it rewrote).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    table, worker, ops = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from deltaspark import DeltaSparkError, DeltaTable
    from deltaspark.table import write

    print(json.dumps({"ready": worker}), flush=True)
    for n, op in enumerate(ops):
        kind, _, partition = op.partition(":")
        row_id = worker * 1000 + n
        try:
            if kind == "append":
                df = spark.createDataFrame([(row_id, partition)], "id long, p string")
                result = write(df, table)
            elif kind == "overwrite":
                df = spark.createDataFrame([(row_id, partition)], "id long, p string")
                result = write(df, table, mode="overwrite", replaceWhere=f"p = '{partition}'")
            elif kind == "merge":
                # partition p: delete ids 0 and 2 where present, insert them (and this op's id) where not
                source = spark.createDataFrame(
                    [(0, partition), (2, partition), (row_id, partition)], "id long, p string"
                )
                condition = f"t.id = s.id AND t.p = '{partition}'"
                dt = DeltaTable.forPath(spark, table)
                dt.alias("t").merge(
                    source.alias("s"), condition
                ).whenMatchedDelete().whenNotMatchedInsertAll().execute()
                result = None
            elif kind == "optimize":
                dt = DeltaTable.forPath(spark, table)
                metrics = dt.optimize().where(f"p = '{partition}'").executeCompaction().first()["metrics"]
                result = None
                row_id = metrics["numFilesRemoved"]  # reported in the "id" field
            elif kind == "delete":
                result = DeltaTable.forPath(spark, table).delete(f"p = '{partition}' AND id % 2 = 0")
            else:
                result = DeltaTable.forPath(spark, table).setProperties({f"app.worker{worker}": str(n)})
            version = result.version if result is not None else None
            print(json.dumps({"op": op, "id": row_id, "version": version, "error": None}), flush=True)
        except DeltaSparkError as exc:
            print(
                json.dumps({"op": op, "id": row_id, "version": None, "error": type(exc).__name__}), flush=True
            )
    spark.stop()


if __name__ == "__main__":
    main()
