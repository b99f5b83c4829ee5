"""The scheduled checkpoint and metadata-cleanup job over many Delta tables.

Run it with spark-submit (`jobs/checkpoint_job.py`), as the `deltaspark-checkpoint-job` console
script / Databricks Python wheel task entry point, or call `main(argv, spark=spark)`:

    spark-submit jobs/checkpoint_job.py s3a://bucket/orders s3a://bucket/events --output summary.json
    deltaspark-checkpoint-job --paths-file tables.txt --output s3a://bucket/ops/summary.json

For each table: when it has at least `delta.checkpointInterval` (default 10) commits since its last
checkpoint, write a checkpoint of its latest version (a distributed write); then clean up its log
(files older than `delta.logRetentionDuration`, default 30 days, that no retained version needs);
with `--optimize`, first compact it (OPTIMIZE: small files bin-packed, files with many deleted
rows rewritten, a clustered table's new files clustered; `deltaspark.operations.optimize`), so that
the checkpoint written next already lists the compacted files; with `--vacuum` (or
`--vacuum-lite`), vacuum it last (`deltaspark.maintenance.vacuum`).
One failing table does not stop the others. A summary table is printed and a JSON summary written
(`--output`, a local path or any Hadoop path such as s3a://...). The exit code is 1 if any table
failed. Only the driver needs deltaspark installed: executors run plain DataFrame operations.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F

from deltaspark.maintenance.checkpoint_writer import protected_before_version, write_checkpoint
from deltaspark.maintenance.job_io import add_common_arguments, each_table, finish_job, start_job
from deltaspark.maintenance.log_cleanup import cleanup_log
from deltaspark.maintenance.vacuum import vacuum
from deltaspark.operations.optimize.execute import optimize
from deltaspark.snapshot import load_version
from deltaspark.storage import storage_for

DEFAULT_CHECKPOINT_INTERVAL = 10


def maintain_table(spark, path: str, args: argparse.Namespace) -> dict[str, Any]:  # noqa: ANN001
    """Checkpoint `path` if it is due, then clean up its log; the facts for the summary."""
    started = time.time()
    storage = storage_for(spark)
    snapshot = load_version(spark, storage, path)
    optimized = None
    if args.optimize:
        outcome = optimize(spark, storage, path, snapshot)
        m = outcome.metrics
        optimized = {
            "version": outcome.commit.version if outcome.commit is not None else None,
            "filesRemoved": m["numFilesRemoved"],
            "filesAdded": m["numFilesAdded"],
            "bytesRemoved": m["filesRemoved"]["totalSize"],
            "bytesAdded": m["filesAdded"]["totalSize"],
        }
        if outcome.commit is not None:
            snapshot = load_version(spark, storage, path)
    interval = args.interval or int(
        snapshot.configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL)
    )
    last = snapshot.segment.checkpoint.version if snapshot.segment.checkpoint else None
    since = snapshot.version - (last if last is not None else -1)
    facts: dict[str, Any] = {
        "version": snapshot.version,
        "lastCheckpoint": last,
        "commitsSinceCheckpoint": since,
        "checkpointInterval": interval,
        "optimize": optimized,
        "checkpoint": None,
        "cleanup": None,
        "vacuum": None,
    }
    if since >= interval:
        result = write_checkpoint(snapshot, args.actions_per_part, None, protected_before_version(snapshot))
        facts["checkpoint"] = result.asDict()
    if not args.no_cleanup:
        facts["cleanup"] = cleanup_log(storage, path, dry_run=args.dry_run_cleanup).asDict()
    if args.vacuum or args.vacuum_lite:
        outcome = vacuum(spark, storage, path, args.vacuum_retain_hours, lite=args.vacuum_lite)
        totals = outcome.agg(
            F.count(F.lit(1)).alias("candidates"),
            F.sum(F.col("deleted").cast("int")).alias("deleted"),
            F.sum(F.when(F.col("deleted"), F.col("size"))).alias("deletedBytes"),
        ).first()
        facts["vacuum"] = {k: int(v or 0) for k, v in totals.asDict().items()}
    facts["seconds"] = round(time.time() - started, 2)
    return facts


def _print_summary(results: list[dict[str, Any]]) -> None:
    width = max(len("table"), *(len(r["path"]) for r in results))
    print(
        f"{'table'.ljust(width)}  status   version  since  optimized  checkpoint              "
        "cleaned  vacuumed  seconds"
    )
    for r in results:
        if r["status"] != "ok":
            print(f"{r['path'].ljust(width)}  FAILED   {r['error'].splitlines()[0]}")
            continue
        cp = r["checkpoint"]
        written = f"{cp['kind']} @{cp['version']} ({cp['numOfAddFiles']} files)" if cp else "not due"
        cleanup = r["cleanup"]
        cleaned = "-" if cleanup is None else str(cleanup["numFiles"])
        vacuumed = "-" if r.get("vacuum") is None else str(r["vacuum"]["deleted"])
        opt = r.get("optimize")
        optimized = "-" if opt is None else f"{opt['filesRemoved']}->{opt['filesAdded']}"
        print(
            f"{r['path'].ljust(width)}  ok       {r['version']:>7}  {r['commitsSinceCheckpoint']:>5}  "
            f"{optimized:>9}  {written:<22}  {cleaned:>7}  {vacuumed:>8}  {r['seconds']:>7}"
        )
    for r in results:
        for warning in (r.get("cleanup") or {}).get("warnings") or []:
            print(f"warning: {r['path']}: {warning}")
    failed = sum(r["status"] != "ok" for r in results)
    print(f"{len(results)} table(s): {len(results) - failed} ok, {failed} failed")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="checkpoint_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--interval", type=int, help="checkpoint after this many commits (default: delta.checkpointInterval)"
    )
    parser.add_argument("--actions-per-part", type=int, help="file actions per checkpoint part or sidecar")
    parser.add_argument("--no-cleanup", action="store_true", help="only checkpoint; keep every log file")
    parser.add_argument("--dry-run-cleanup", action="store_true", help="list expired log files, delete none")
    parser.add_argument(
        "--optimize",
        action="store_true",
        help="first compact each table (OPTIMIZE; clusters clustered tables)",
    )
    parser.add_argument(
        "--vacuum", action="store_true", help="then vacuum each table (deletes data files past retention)"
    )
    parser.add_argument("--vacuum-lite", action="store_true", help="vacuum LITE: candidates from the log")
    parser.add_argument("--vacuum-retain-hours", type=float, help="vacuum retention (default: the table's)")
    return parser


def main(argv: Sequence[str] | None = None, spark=None) -> int:  # noqa: ANN001
    args, paths, spark = start_job(build_parser(), argv, spark, "deltaspark-checkpoint-job")
    started = time.time()
    results = each_table(spark, paths, lambda path, _table: maintain_table(spark, path, args))
    _print_summary(results)
    return finish_job(spark, args.output, results, started)
