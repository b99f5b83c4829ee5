"""spark-submit entry point: audit many Delta tables in one Spark application.

    spark-submit jobs/describe_tables.py s3a://bucket/orders s3a://bucket/events --output audit.json
    spark-submit jobs/describe_tables.py --paths-file tables.txt

For each table: version, commit time, protocol, features, partition columns, live files and bytes,
unexpired tombstones, and the log segment (checkpoint version, JSON files on top). One failing
table does not stop the others; the exit code is 1 if any table failed. Only the driver needs
deltaspark installed: the work runs as plain DataFrame operations, no Python UDFs on executors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any


def _paths(args: argparse.Namespace) -> list[str]:
    paths = list(args.paths)
    if args.paths_file:
        with open(args.paths_file, encoding="utf-8") as fh:
            paths += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    return paths


def audit_table(spark, path: str) -> dict[str, Any]:  # noqa: ANN001
    from deltaspark import DeltaTable
    from deltaspark.cli import describe_table

    started = time.time()
    snapshot = DeltaTable.forPath(spark, path).snapshot()
    facts = describe_table(snapshot)
    facts.pop("schema")
    facts["numTombstones"] = snapshot.tombstones().count()
    facts["seconds"] = round(time.time() - started, 2)
    return facts


def main(argv: Sequence[str] | None = None, spark=None) -> int:  # noqa: ANN001
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("paths", nargs="*", help="table paths")
    parser.add_argument("--paths-file", help="a file with one table path per line")
    parser.add_argument("--output", help="write the JSON summary here (local path)")
    args = parser.parse_args(argv)
    paths = _paths(args)
    if not paths:
        parser.error("give table paths or --paths-file")
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("deltaspark-describe-tables").getOrCreate()

    results = []
    for path in paths:
        try:
            results.append({"path": path, "status": "ok", **audit_table(spark, path)})
        except Exception as exc:  # one broken table must not stop the audit of the others
            results.append({"path": path, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})

    width = max(len(r["path"]) for r in results)
    print(f"{'table'.ljust(width)}  status  version  files        bytes  features")
    for r in results:
        if r["status"] == "ok":
            counts = f"{r['version']:>7}  {r['numFiles']:>5,}  {r['sizeInBytes']:>11,}"
            print(f"{r['path'].ljust(width)}  ok      {counts}  {','.join(r['tableFeatures'])}")
        else:
            print(f"{r['path'].ljust(width)}  FAILED  {r['error'].splitlines()[0]}")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            json.dump({"tables": results}, fh, indent=2, default=str)
    return 1 if any(r["status"] != "ok" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
