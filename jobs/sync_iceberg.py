"""spark-submit entry point: keep many Delta tables readable as Iceberg (their Iceberg metadata
brought to the latest Delta version, incrementally where it can be).

    spark-submit jobs/sync_iceberg.py s3a://bucket/orders s3a://bucket/events --output sync.json
    spark-submit jobs/sync_iceberg.py --paths-file tables.txt --format-version 3

The job lives in `deltaspark.conversion.sync_job`, so the same code also runs as the
`deltaspark-iceberg-sync-job` console script or a Databricks Python wheel task.
"""

from __future__ import annotations

import sys

from deltaspark.conversion.sync_job import build_parser, main, sync_table

__all__ = ["build_parser", "main", "sync_table"]

if __name__ == "__main__":
    sys.exit(main())
