"""spark-submit entry point: audit many Delta tables, append the findings to a Delta table.

    spark-submit jobs/audit_job.py s3a://bucket/orders s3a://bucket/events --findings s3a://bucket/ops/audit
    spark-submit jobs/audit_job.py --paths-file tables.txt --level quick --output summary.json

The job lives in `deltaspark.audit.job` (also the `deltaspark-audit-job` console script); see there.
"""

from __future__ import annotations

import sys

from deltaspark.audit.job import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
