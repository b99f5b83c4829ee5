"""The scheduled job that keeps Delta tables readable as Iceberg: `toIceberg` on each table.

Run it with spark-submit (`jobs/sync_iceberg.py`), as the `deltaspark-iceberg-sync-job` console
script, or call `main(argv, spark=spark)`:

    spark-submit jobs/sync_iceberg.py s3a://bucket/orders s3a://bucket/events --output sync.json
    deltaspark-iceberg-sync-job --paths-file tables.txt --format-version 3

For each table, the Iceberg metadata under `<table>/metadata/` is brought to the latest Delta
version: nothing is written when it is current; otherwise the conversion is incremental from the
version it last recorded, or full when it must be (see `DeltaTable.toIceberg`). Before each commit
the new metadata's file, row and deleted-row counts are checked against the Delta snapshot.
The format is `--format-version`, or by default the one the table's Iceberg metadata already has,
else 3 when the table has row tracking (which format 3 needs) and 2 otherwise. One failing table
does not stop the others; a summary table is printed, a JSON summary written with `--output`, and
the exit code is 1 if any table failed. Schedule it like the checkpoint job.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from deltaspark.conversion.to_iceberg import to_iceberg
from deltaspark.errors import IcebergTableNotFoundError
from deltaspark.features import row_tracking
from deltaspark.iceberg import table_metadata
from deltaspark.log.paths import normalize_root
from deltaspark.maintenance.job_io import add_common_arguments, each_table, finish_job, start_job
from deltaspark.snapshot import Snapshot, load_version
from deltaspark.storage import storage_for


def chosen_format(snapshot: Snapshot, requested: str) -> int:
    """`requested` ("2", "3" or "auto") as a format version for this table."""
    if requested != "auto":
        return int(requested)
    try:
        return table_metadata.load(normalize_root(snapshot.tableRoot), None, None).format_version
    except IcebergTableNotFoundError:
        return 3 if row_tracking.is_enabled(snapshot.protocol, snapshot.metadata) else 2


def sync_table(spark, path: str, args: argparse.Namespace) -> dict[str, Any]:  # noqa: ANN001
    """Convert `path` to Iceberg if it changed since the last conversion; the facts for the summary."""
    started = time.time()
    snapshot = load_version(spark, storage_for(spark), path)
    format_version = chosen_format(snapshot, args.format_version)
    done = to_iceberg(spark, storage_for(spark), snapshot, format_version)
    return {
        "deltaVersion": done.delta_version,
        "formatVersion": format_version,
        "mode": "incremental" if done.incremental else ("full" if done.written else "current"),
        "icebergSnapshotId": done.snapshot_id,
        "metadataLocation": done.metadata_location,
        "dataFiles": done.data_files if done.written else None,
        "deletionVectors": done.deletion_vectors if done.written else None,
        "seconds": round(time.time() - started, 2),
    }


def _print_summary(results: list[dict[str, Any]]) -> None:
    width = max(len("table"), *(len(r["path"]) for r in results))
    print(f"{'table'.ljust(width)}  status  version  format  mode         data files  vectors  seconds")
    for r in results:
        if r["status"] != "ok":
            print(f"{r['path'].ljust(width)}  FAILED  {r['error'].splitlines()[0]}")
            continue
        files = "-" if r["dataFiles"] is None else str(r["dataFiles"])
        vectors = "-" if r["deletionVectors"] is None else str(r["deletionVectors"])
        print(
            f"{r['path'].ljust(width)}  ok      {r['deltaVersion']:>7}  {r['formatVersion']:>6}  "
            f"{r['mode']:<11}  {files:>10}  {vectors:>7}  {r['seconds']:>7}"
        )
    failed = sum(r["status"] != "ok" for r in results)
    print(f"{len(results)} table(s): {len(results) - failed} ok, {failed} failed")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sync_iceberg", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser, "Delta table")
    parser.add_argument(
        "--format-version",
        choices=["2", "3", "auto"],
        default="auto",
        help="Iceberg format (default: the existing metadata's; else 3 with row tracking, else 2)",
    )
    return parser


def main(argv: Sequence[str] | None = None, spark=None) -> int:  # noqa: ANN001
    args, paths, spark = start_job(build_parser(), argv, spark, "deltaspark-iceberg-sync-job")
    started = time.time()
    results = each_table(spark, paths, lambda path, _table: sync_table(spark, path, args))
    _print_summary(results)
    return finish_job(spark, args.output, results, started)
