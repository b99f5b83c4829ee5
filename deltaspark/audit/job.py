"""The scheduled audit job over many Delta tables.

Run it with spark-submit (`jobs/audit_job.py`), as the `deltaspark-audit-job` console script /
Databricks Python wheel task, or call `main(argv, spark=spark)`:

    spark-submit jobs/audit_job.py s3a://bucket/orders s3a://bucket/events --findings s3a://bucket/ops/audit
    deltaspark-audit-job --paths-file tables.txt --level quick --output summary.json

Each table is audited (`DeltaTable.audit`); one table that cannot be audited (not a table, no
access) is recorded as failed and does not stop the others. Every finding of every table, with the
table's path and the run's id and time, is appended to the Delta table `--findings` through
deltaspark's transaction path, so runs accumulate and can be queried. A summary is printed and
written as JSON (`--output`, a local or Hadoop path). The exit code is 1 when any table failed an
audit (an `error` finding) or could not be audited.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F

from deltaspark.audit.audit import LEVELS, audit_table
from deltaspark.errors import TableNotFoundError
from deltaspark.maintenance.job_io import add_common_arguments, each_table, start_job, write_summary
from deltaspark.operations.write import write
from deltaspark.snapshot import load_version
from deltaspark.storage import storage_for

log = logging.getLogger(__name__)


def _append_findings(spark, location: str, findings: Any) -> int:  # noqa: ANN001
    """Append one table's findings to the Delta table at `location` (created on first use), as soon
    as its audit is done: a long job holds no table's findings after it, and what it found is kept
    even if a later table stops the job. Returns the rows appended (no commit for none)."""
    rows = findings.count()  # the audit's findings are cached: no second evaluation
    if not rows:
        return 0
    storage = storage_for(spark)
    try:
        snapshot = load_version(spark, storage, location)
    except TableNotFoundError:
        snapshot = None
    write(spark, storage, location, snapshot, findings.coalesce(1), "append")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="audit_job", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--level", choices=LEVELS, default="full", help="quick: the log only (default: full)")
    parser.add_argument("--findings", help="append every finding to this Delta table (path)")
    return parser


def main(argv: Sequence[str] | None = None, spark=None) -> int:  # noqa: ANN001
    args, paths, spark = start_job(build_parser(), argv, spark, "deltaspark-audit-job")
    storage = storage_for(spark)
    run_id, run_at = str(uuid.uuid4()), dt.datetime.now(dt.timezone.utc)
    started = time.time()

    def audit_one(path: str, table: str) -> dict[str, Any]:
        report = audit_table(spark, storage, path, args.level)
        print(report.text(limit=10), flush=True)
        try:
            summary = {"status": "passed" if report.passed else "failed", **report.summary}
            if args.findings:
                found = report.findings.select(
                    F.lit(run_id).alias("runId"),
                    F.lit(run_at).cast("timestamp").alias("auditedAt"),
                    F.lit(table).alias("table"),
                    F.lit(report.version).cast("long").alias("tableVersion"),
                    "*",
                )
                summary["findingsAppended"] = _append_findings(spark, args.findings, found)
            return summary
        finally:  # what the audit cached is done with: a long job must not keep it
            report.unpersist()

    # a table that cannot be audited (missing, unreadable) is an "error", not a "failed" audit
    results = each_table(spark, paths, audit_one, error_status="error")
    document = {
        "runId": run_id,
        "auditedAt": run_at.isoformat(),
        "level": args.level,
        "tables": results,
        "passed": sum(r["status"] == "passed" for r in results),
        "failed": sum(r["status"] == "failed" for r in results),
        "errors": sum(r["status"] == "error" for r in results),
        "seconds": round(time.time() - started, 2),
    }
    print(
        f"audited {len(results)} table(s): {document['passed']} passed, {document['failed']} failed, "
        f"{document['errors']} could not be audited"
    )
    if args.output:
        write_summary(spark, args.output, document)
    return 0 if document["passed"] == len(results) else 1
