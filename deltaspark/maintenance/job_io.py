"""What the scheduled jobs share: the tables they were given, and where their JSON summary goes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from deltaspark.storage import HadoopStorage


def table_paths(args: argparse.Namespace) -> list[str]:
    paths = list(args.paths)
    if args.paths_file:
        with open(args.paths_file, encoding="utf-8") as fh:
            paths += [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
    return paths


def write_summary(spark, location: str, document: dict[str, Any]) -> None:  # noqa: ANN001
    text = json.dumps(document, indent=2, default=str)
    if "://" in location or location.startswith(("s3a:", "s3:", "gs:", "abfss:", "hdfs:", "dbfs:")):
        HadoopStorage(spark).write_text(location, text, overwrite=True)
    else:
        with open(location, "w", encoding="utf-8") as fh:
            fh.write(text)
