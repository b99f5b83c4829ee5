"""spark-submit entry point for the command line: any `deltaspark` command, on spark-submit's cluster.

    spark-submit --master spark://host:7077 --py-files deltaspark.zip jobs/deltaspark_cli.py audit s3a://bucket/orders
    spark-submit --master yarn jobs/deltaspark_cli.py vacuum s3a://bucket/orders --delete --json

The commands, options and exit codes are those of `deltaspark` (`deltaspark.cli`); see there.
"""

from __future__ import annotations

import sys

from deltaspark.cli import main

if __name__ == "__main__":
    sys.exit(main())
