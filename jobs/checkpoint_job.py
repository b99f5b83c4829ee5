"""spark-submit entry point: the scheduled checkpoint and metadata-cleanup job over many Delta tables.

    spark-submit jobs/checkpoint_job.py s3a://bucket/orders s3a://bucket/events --output summary.json
    spark-submit jobs/checkpoint_job.py --paths-file tables.txt --output s3a://bucket/ops/summary.json

For each table: when it has at least `delta.checkpointInterval` (default 10) commits since its last
checkpoint, write a checkpoint of its latest version (a distributed write); then clean up its log
(files older than `delta.logRetentionDuration`, default 30 days, that no retained version needs).
One failing table does not stop the others. A summary table is printed and a JSON summary written
(`--output`, a local path or any Hadoop path such as s3a://...). The exit code is 1 if any table
failed. Only the driver needs deltaspark installed (or shipped with `--py-files`): executors run
plain DataFrame operations. The job itself lives in `deltaspark.operations.maintenance_job`, so the
same code also runs as the `deltaspark-checkpoint-job` console script or a Databricks Python wheel
task. `--optimize` compacts each table first; `--vacuum` vacuums it last.
"""

from __future__ import annotations

import sys

from deltaspark.operations.maintenance_job import build_parser, main, maintain_table

__all__ = ["build_parser", "main", "maintain_table"]

if __name__ == "__main__":
    sys.exit(main())
